"""interrupts_deferred: a Ctrl-C inside the block is handled as it exits; a second one at once."""

import os
import signal

import pytest

from rlkit.api import interrupts_deferred


def test_a_ctrl_c_inside_the_block_is_raised_after_the_block_has_finished():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("after the signal")  # still runs: the interrupt is held
    assert done == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def test_a_second_ctrl_c_inside_the_block_is_raised_at_once():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            done.append("not reached")
    assert done == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_installed_handler_gets_the_held_interrupt_and_no_interrupt_means_no_call():
    calls = []
    previous = signal.signal(signal.SIGINT, lambda s, f: calls.append(s))
    try:
        with interrupts_deferred():
            pass
        assert calls == []
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            assert calls == []
        assert calls == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_blocks_own_error_goes_on_and_the_handler_is_put_back():
    with pytest.raises(ValueError, match="lost its peers"):
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            raise ValueError("lost its peers")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_nested_blocks_act_as_one():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                done.append("inner")
            done.append("outer")
    assert done == ["inner", "outer"]
    with pytest.raises(KeyboardInterrupt):  # and two Ctrl-Cs still act at once
        with interrupts_deferred():
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGINT)
                done.append("not reached")
    assert done == ["inner", "outer"]


def test_an_ignored_sigint_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)

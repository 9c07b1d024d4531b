"""Ctrl-C (SIGINT to the process the user started) during a run of each landed communicator: a
checkpoint is on disk, the exit code is 1, and no process of the run is alive 10 s later."""

import os
import signal
import subprocess
import sys
import time

import pytest

from rlkit.testing import processes_of_run, wait_for_log_rows


@pytest.mark.parametrize("recipe", ["a2c-cartpole-local", "a2c-cartpole-allreduce", "a2c-cartpole-gossip",
                                    "a2c-cartpole-queues"])
def test_ctrl_c_checkpoints_and_stops_every_process(recipe, tmp_path):
    run_dir = tmp_path / "stop"
    proc = subprocess.Popen([sys.executable, "-m", "rlkit.cli", "run", recipe, "trainer.progress_bar=false",
                             "logging.backends=[csv]", f"logging.root={tmp_path}", "logging.run_name=stop",
                             "algo.stop_at_score=null"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, WANDB_MODE="offline"))
    try:
        wait_for_log_rows(run_dir, 5)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    stopped_s = time.monotonic() - sent
    assert proc.returncode == 1
    assert (run_dir / "checkpoints" / "interrupted.ckpt").is_file()
    if recipe == "a2c-cartpole-gossip":  # only learner 0 got the SIGINT: it passes the stop on to
        for r in (1, 2, 3):              # the others, and each writes its own checkpoint
            assert (run_dir / "checkpoints" / f"learner{r}" / "interrupted.ckpt").is_file(), r
    assert stopped_s < 30, f"the run took {stopped_s:.0f} s to stop after Ctrl-C"
    while processes_of_run(run_dir) and time.monotonic() - sent < 10:
        time.sleep(0.2)
    assert not processes_of_run(run_dir), "a process of the run outlived Ctrl-C by 10 s"


def _start(cmd, tmp_path):
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, WANDB_MODE="offline"), cwd=tmp_path)


def _args(tmp_path):
    return ["trainer.progress_bar=false", "logging.backends=[csv]", f"logging.root={tmp_path}",
            "logging.run_name=stop", "algo.stop_at_score=null", "env.vectorization=async"]


def test_sigterm_checkpoints_and_stops_like_ctrl_c(tmp_path):
    run_dir = tmp_path / "stop"
    proc = _start([sys.executable, "-m", "rlkit.cli", "run", "a2c-cartpole-local", *_args(tmp_path)], tmp_path)
    try:
        wait_for_log_rows(run_dir, 5)
        assert processes_of_run(run_dir) != [proc.pid], "async env workers expected"
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-2000:]
    assert (run_dir / "checkpoints" / "interrupted.ckpt").is_file()
    while processes_of_run(run_dir) and time.monotonic() - sent < 10:
        time.sleep(0.2)
    assert not processes_of_run(run_dir)


# A run whose shutdown hangs (a plugin's learner_end sleeps): the second Ctrl-C must not wait for it.
SLOW_SHUTDOWN = '''
import sys, time
from rlkit.manager import build_plugin_manager
from rlkit.plugin import hookimpl
from rlkit.run import train


class SlowShutdown:
    @hookimpl
    def rlkit_learner_end(self, run, module):
        print("slow shutdown", file=sys.stderr, flush=True)
        time.sleep(300)


if __name__ == "__main__":
    manager = build_plugin_manager()
    manager.pm.register(SlowShutdown())
    train("a2c-cartpole-local", sys.argv[1:], manager)
'''


def test_a_second_ctrl_c_exits_at_once_and_leaves_no_process(tmp_path):
    run_dir = tmp_path / "stop"
    script = tmp_path / "slow_shutdown.py"
    script.write_text(SLOW_SHUTDOWN)
    proc = _start([sys.executable, str(script), *_args(tmp_path)], tmp_path)
    try:
        wait_for_log_rows(run_dir, 5)
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 60
        while not (run_dir / "checkpoints" / "interrupted.ckpt").is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # now inside the slow shutdown
        assert proc.poll() is None, "the first Ctrl-C should still be shutting down"
        proc.send_signal(signal.SIGINT)
        second = time.monotonic()
        _, err = proc.communicate(timeout=30)
        waited = time.monotonic() - second
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "slow shutdown" in err and "second interrupt" in err, err[-2000:]
    assert proc.returncode == 130 and waited < 5, (proc.returncode, waited)
    time.sleep(0.5)
    assert not processes_of_run(run_dir), "an env worker outlived the second Ctrl-C"

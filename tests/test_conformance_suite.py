"""The conformance suite tests itself: its leak check and its Ctrl-C check fail on a communicator
that leaves a process behind (a fake installed plugin, written against rlkit.api only, whose
learner starts a `sleep` outside the run's environment, as a careless plugin might)."""

import os
import signal

import pytest

from rlkit.infra.processes import start_time
from rlkit.testing import CommunicatorConformance
from test_plugins import install_fake, site  # noqa: F401  (the fixture)

LEAKY = '''
import os
import subprocess
from dataclasses import dataclass

from rlkit.api import CommunicatorSpec, hookimpl


@dataclass
class Options:
    pass


class Leaky:
    def __init__(self, options, recipe):
        pass

    @hookimpl
    def rlkit_learner_start(self, run, module):
        if os.environ.get("LEAKY_OFF"):
            return
        # a helper it never stops, without the run's environment (so only a process-tree record sees it)
        sleeper = subprocess.Popen(["sleep", "900"], env={"PATH": os.environ.get("PATH", "")})
        with open(os.environ["LEAKY_PIDS"], "a") as fh:
            fh.write(f"{sleeper.pid}\\n")


@hookimpl
def rlkit_communicators():
    return [CommunicatorSpec(name="leaky", factory=Leaky, options_schema=Options, summary="leaks a process")]
'''


class LeakyConformance(CommunicatorConformance):
    communicator = "leaky"


@pytest.fixture
def leaky(site, tmp_path):  # noqa: F811
    install_fake(site, "fake-leaky", "fake_rlkit_leaky", LEAKY, "leaky")
    pids = tmp_path / "leaked.pids"
    suite = LeakyConformance()
    suite.env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
                 "LEAKY_PIDS": str(pids)}
    yield suite, pids
    for pid in (int(p) for p in pids.read_text().split()) if pids.exists() else ():
        if start_time(pid) is not None:
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_the_leak_check_fails_on_a_leaking_communicator(leaky, tmp_path):
    suite, pids = leaky
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(AssertionError, match="processes of the run outlived it"):
        suite.test_cli_run_exits_cleanly_and_leaves_no_process(run_dir)
    assert pids.read_text().split(), "the leaky plugin never started its helper: the test proved nothing"


@pytest.mark.slow
def test_the_ctrl_c_check_fails_on_a_leaking_communicator(leaky, tmp_path):
    suite, pids = leaky
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with pytest.raises(AssertionError, match="processes of the run outlived it"):
        suite.test_ctrl_c_checkpoints_then_resume_finishes_and_no_process_is_left(run_dir)
    assert pids.read_text().split()


def test_control_the_same_plugin_without_its_helper_passes(leaky, tmp_path):
    """The failures above come from the leaked process, not from running a fake installed plugin."""
    suite, pids = leaky
    suite.env["LEAKY_OFF"] = "1"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    suite.test_cli_run_exits_cleanly_and_leaves_no_process(run_dir)
    assert not pids.exists()

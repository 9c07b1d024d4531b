"""Signals during a run beyond the conformance suite's Ctrl-C test (which every communicator runs:
rlkit/testing/): SIGTERM, a terminal's Ctrl-C to an async-env run, a second Ctrl-C, a terminal's
Ctrl-C to every gossip learner, the launcher's grace before SIGKILL, and Ctrl-C before training
starts."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from rlkit.infra.processes import snapshot_tree, still_alive
from rlkit.testing import assert_checkpoint_of_a_trained_learner, processes_of_run, wait_for_log_rows


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
        tree = snapshot_tree(proc.pid)
        assert len(tree) >= 1 + 8, f"async env workers (8 envs) expected below the run: {tree}"
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err[-2000:]
    assert f"continue with: rlkit resume {run_dir}" in err, err[-2000:]
    assert_checkpoint_of_a_trained_learner(run_dir / "checkpoints" / "interrupted.ckpt")
    while (still_alive(tree) or processes_of_run(run_dir)) and time.monotonic() - sent < 10:
        time.sleep(0.2)
    assert not still_alive(tree) and not processes_of_run(run_dir), "a process of the run outlived SIGTERM by 10 s"


@pytest.mark.slow
def test_a_terminal_ctrl_c_to_an_async_env_run_is_one_line_and_exit_code_1(tmp_path):
    """A terminal's Ctrl-C is SIGINT to the whole process group, the async env workers included:
    the run still writes interrupted.ckpt and ends with the resume line and exit code 1 (not 130),
    with no worker traceback, and nothing is left. Before the workers ignored it, 2 runs in 5 ended
    with code 130 and gymnasium tracebacks; and until the process building the envs was told apart
    from its workers, it ignored the Ctrl-C itself and trained on: three runs here."""
    for attempt in range(3):
        run_dir = tmp_path / f"stop{attempt}"
        args = [a.replace("logging.run_name=stop", f"logging.run_name=stop{attempt}") for a in _args(tmp_path)]
        proc = subprocess.Popen([sys.executable, "-m", "rlkit.cli", "run", "a2c-cartpole-local", *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                                env=dict(os.environ, WANDB_MODE="offline"), start_new_session=True)
        try:
            wait_for_log_rows(run_dir, 3)
            tree = snapshot_tree(proc.pid)
            assert len(tree) >= 1 + 8, f"async env workers (8 envs) expected below the run: {tree}"
            os.killpg(proc.pid, signal.SIGINT)
            sent = time.monotonic()
            _, err = proc.communicate(timeout=60)
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 1, (attempt, err[-3000:])
        # 0.3 s, or 2.4 where the stop cut a step's results off (ENV_CLOSE_TIMEOUT_S), on a busy host
        assert took < 10, f"the run took {took:.1f} s to stop after Ctrl-C"
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, (attempt, err[-3000:])
        (line,) = err.strip().splitlines()  # one line: where it stopped, the checkpoint, how to go on
        assert line.endswith(f"wrote {run_dir / 'checkpoints' / 'interrupted.ckpt'}; continue with: rlkit resume {run_dir}"), \
            (attempt, err[-3000:])
        assert_checkpoint_of_a_trained_learner(run_dir / "checkpoints" / "interrupted.ckpt")
        while (still_alive(tree) or processes_of_run(run_dir)) and time.monotonic() - sent < 10:
            time.sleep(0.2)
        assert not still_alive(tree) and not processes_of_run(run_dir), "a process of the run outlived Ctrl-C by 10 s"


# A run whose shutdown hangs (a plugin's learner_end sleeps): the second Ctrl-C must not wait for it.
SLOW_SHUTDOWN = '''
import sys, time
from rlkit.hooks.manager import build_plugin_manager
from rlkit.hooks.records import hookimpl
from rlkit.training.run import train


def slow(*args):
    print("slow shutdown", file=sys.stderr, flush=True)
    time.sleep(300)


class SlowLearnerEnd:  # inside Lightning's exception handling
    @hookimpl
    def rlkit_learner_end(self, run, module):
        slow()


class SlowUnconfigure:  # after Lightning's teardown has put its signal handlers back
    @hookimpl
    def rlkit_unconfigure(self, run, error):
        slow()


if __name__ == "__main__":
    manager = build_plugin_manager()
    manager.pm.register(globals()[sys.argv[1]]())
    train("a2c-cartpole-local", sys.argv[2:], manager)
'''


@pytest.mark.parametrize("slow_part", ["SlowLearnerEnd", "SlowUnconfigure"])
def test_a_second_ctrl_c_exits_at_once_and_leaves_no_process(slow_part, tmp_path):
    run_dir = tmp_path / "stop"
    script = tmp_path / "slow_shutdown.py"
    script.write_text(SLOW_SHUTDOWN)
    proc = _start([sys.executable, str(script), slow_part, *_args(tmp_path)], tmp_path)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        wait_for_log_rows(run_dir, 5)
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 60
        while not any("slow shutdown" in line for line in lines) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # now inside the slow shutdown
        assert proc.poll() is None, "the first Ctrl-C should still be shutting down"
        proc.send_signal(signal.SIGINT)
        second = time.monotonic()
        proc.wait(timeout=30)
        waited = time.monotonic() - second
        reader.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = "".join(lines)
    assert "slow shutdown" in err and "second interrupt" in err, err[-2000:]
    assert proc.returncode == 130 and waited < 5, (proc.returncode, waited)
    time.sleep(0.5)
    assert not processes_of_run(run_dir), "an env worker outlived the second Ctrl-C"


@pytest.mark.slow
def test_terminal_ctrl_c_to_every_gossip_learner_lets_each_finish_its_checkpoint(tmp_path):
    """A terminal's Ctrl-C reaches every process of the foreground group: each learner stops on its
    own SIGINT (and the launcher's SIGTERM), and none is SIGKILLed while writing its checkpoint."""
    from rlkit.training.checkpoints import load_checkpoint

    run_dir = tmp_path / "stop"
    proc = subprocess.Popen([sys.executable, "-m", "rlkit.cli", "run", "a2c-cartpole-gossip", "trainer.progress_bar=false",
                             "logging.backends=[csv]", f"logging.root={tmp_path}", "logging.run_name=stop",
                             "algo.stop_at_score=null"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=dict(os.environ, WANDB_MODE="offline"))
    try:
        wait_for_log_rows(run_dir, 5)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, err[-2000:]
    assert "exited with code" not in err and "killed" not in err, err[-2000:]
    for sub in ("", "learner1/", "learner2/", "learner3/"):
        assert load_checkpoint(run_dir / "checkpoints" / f"{sub}interrupted.ckpt")["global_step"] > 0, sub


def test_launcher_gives_learners_their_grace_before_sigkill():
    """Lightning SIGKILLs the launched processes right after the launcher's own Ctrl-C shutdown;
    a learner still writing its checkpoint (here: 1.5 s to exit after SIGTERM) must get to finish."""
    from lightning.fabric.plugins.environments import LightningEnvironment

    from rlkit.training.launchers import IndependentLauncher

    slow = "import signal, sys, time\n" \
           "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(1.5), sys.exit(0)))\n" \
           "print('ready', flush=True)\ntime.sleep(60)\n"
    launcher = IndependentLauncher(LightningEnvironment(), 3, 1, grace_s=20)
    launcher.procs = [subprocess.Popen([sys.executable, "-c", slow], stdout=subprocess.PIPE, text=True)
                      for _ in range(2)]
    try:
        for p in launcher.procs:
            assert p.stdout.readline().strip() == "ready"
            p.send_signal(signal.SIGTERM)
        launcher.kill(signal.SIGKILL)
        assert [p.wait(5) for p in launcher.procs] == [0, 0]
    finally:
        for p in launcher.procs:
            if p.poll() is None:
                p.kill()


# Ctrl-C while a resumed run is still setting up (its rollout source is being made): the checkpoint
# it resumes from is the state to keep, so no interrupted.ckpt is written over it.
EARLY_CTRL_C = '''
import sys
from rlkit.hooks.manager import build_plugin_manager
from rlkit.hooks.records import hookimpl
from rlkit.training.run import resume


class CtrlCInSetup:
    @hookimpl
    def rlkit_make_rollout_source(self, run, module):
        raise KeyboardInterrupt


if __name__ == "__main__":
    manager = build_plugin_manager()
    manager.pm.register(CtrlCInSetup())
    resume(sys.argv[1], ["trainer.progress_bar=false"], manager)
'''


@pytest.mark.slow
def test_ctrl_c_before_training_starts_keeps_the_checkpoint_it_resumes_from(tmp_path):
    from rlkit.training.checkpoints import load_checkpoint

    run_dir = tmp_path / "stop"
    subprocess.run([sys.executable, "-m", "rlkit.cli", "run", "a2c-cartpole-local", *_args(tmp_path),
                    "algo.total_steps=4000"], check=True, capture_output=True, env=dict(os.environ, WANDB_MODE="offline"))
    last = run_dir / "checkpoints" / "last.ckpt"
    saved = load_checkpoint(last)["global_step"]
    (run_dir / "checkpoints" / "interrupted.ckpt").write_bytes(last.read_bytes())  # a good one from before
    script = tmp_path / "early.py"
    script.write_text(EARLY_CTRL_C)
    out = subprocess.run([sys.executable, str(script), str(run_dir)], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, WANDB_MODE="offline"))
    assert out.returncode == 1, out.stderr[-2000:]
    assert "training had not started: no checkpoint written" in out.stderr, out.stderr[-2000:]
    assert load_checkpoint(run_dir / "checkpoints" / "interrupted.ckpt")["global_step"] == saved > 0

"""W&B's service process is a process of the run too: the leak checks see it, on a run that ends and
on one stopped with Ctrl-C (logging.backends' default includes wandb, offline unless the user opts in)."""

import signal
import time
from pathlib import Path

import pytest

from rlkit.infra.processes import snapshot_tree
from rlkit.testing import WatchedRun, assert_checkpoint_of_a_trained_learner, assert_no_leak, wait_for_log_rows


def _wandb_service(pids) -> list[int]:
    found = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"wandb" in cmdline:
            found.append(pid)
    return found


def _args(tmp_path, name, *extra):
    return ["run", "a2c-cartpole-local", "trainer.progress_bar=false", "logging.backends=[csv,wandb]",
            f"logging.root={tmp_path}", f"logging.run_name={name}", "trainer.log_every_n_updates=10", *extra]


def _wait_for_service(run: WatchedRun, timeout_s: float = 120.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and run.proc.poll() is None:
        service = _wandb_service(snapshot_tree(run.proc.pid))
        if service:
            return service
        time.sleep(0.2)
    raise AssertionError("no W&B service process appeared below the run")


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["end", "ctrl_c"])
def test_the_wandb_service_is_gone_when_the_run_is(tmp_path, stop):
    run_dir = tmp_path / stop
    budget = "algo.total_steps=4000000" if stop == "ctrl_c" else "algo.total_steps=8000"
    run = WatchedRun(_args(tmp_path, stop, budget, "algo.stop_at_score=null"), tmp_path)
    try:
        service = _wait_for_service(run)  # the check below has something to see
        if stop == "ctrl_c":
            wait_for_log_rows(run_dir, 3)
            run.proc.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=300)
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert run.proc.returncode == (1 if stop == "ctrl_c" else 0), err[-3000:]
    if stop == "ctrl_c":
        assert_checkpoint_of_a_trained_learner(run_dir / "checkpoints" / "interrupted.ckpt")
    assert set(service) <= set(run.tree), (service, run.tree)
    assert_no_leak(run.tree, run_dir)
    assert list((run_dir / "wandb").glob("offline-run-*/run-*.wandb")), "the W&B run was written"

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
    assert proc.returncode == 1
    assert (run_dir / "checkpoints" / "interrupted.ckpt").is_file()
    while processes_of_run(run_dir) and time.monotonic() - sent < 10:
        time.sleep(0.2)
    assert not processes_of_run(run_dir), "a process of the run outlived Ctrl-C by 10 s"

"""W&B's start-up inside a run: wandb.init does not import W&B's launch package where no launch-job
input can have been staged (0.3 s of every run's start, rlkit/training/trainer.py), and staged inputs are
still applied where they can exist."""

import glob
import json
import os
import subprocess
import sys

from rlkit.testing import read_wandb_history

RUN = """
import json, sys
from rlkit.training.run import train
result = train("a2c-cartpole-local", ["algo.total_steps=400", "trainer.progress_bar=false",
               "trainer.log_every_n_updates=5", "logging.root=" + sys.argv[1], "logging.run_name=w",
               "logging.backends=[csv,wandb]"])
print(json.dumps({"launch": "wandb.sdk.launch" in sys.modules, "updates": result.updates}))
"""


def test_a_run_logs_to_wandb_without_importing_wandbs_launch_package(tmp_path):
    proc = subprocess.run([sys.executable, "-c", RUN, str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "WANDB_MODE": "offline"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"launch": False, "updates": 10}, out
    (run_file,) = glob.glob(str(tmp_path / "w" / "wandb" / "offline-run-*" / "run-*.wandb"))
    history = read_wandb_history(run_file)
    assert history and history[-1]["agent_steps"] == 400


def test_staged_launch_inputs_are_still_applied_where_they_can_exist(monkeypatch):
    from wandb.sdk.wandb_run import Run

    from rlkit.training import trainer
    applied = []
    monkeypatch.setattr(Run, "_detect_and_apply_job_inputs", lambda self: applied.append(self))
    trainer._skip_unstaged_launch_inputs()
    trainer._skip_unstaged_launch_inputs()  # applying it twice wraps once
    patched = Run._detect_and_apply_job_inputs
    assert patched.rlkit_wrapped and patched.rlkit_original is not patched
    monkeypatch.delitem(sys.modules, trainer.LAUNCH_INPUTS, raising=False)
    patched("run-a")
    assert applied == []  # the module that stages inputs was never loaded: nothing to apply
    monkeypatch.setitem(sys.modules, trainer.LAUNCH_INPUTS, object())
    patched("run-b")
    assert applied == ["run-b"]  # W&B's own check runs as it wrote it

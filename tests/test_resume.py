"""Resume: a CartPole run killed with SIGKILL continues from its newest checkpoint with the same
update counter, agent steps, optimizer state, parameters and random state, and goes on to solve."""

import copy
import os
import signal
import subprocess
import sys
import time

import torch

from rlkit.manager import build_plugin_manager
from rlkit.plugin import hookimpl
from rlkit.run import resume


class Snapshot:
    """Records the learner's state when training (re)starts."""

    @hookimpl
    def rlkit_learner_start(self, run, module):
        self.step, self.agent_steps = module.trainer.global_step, module.agent_steps
        self.params = {k: v.detach().clone() for k, v in module.state_dict().items()}
        self.optimizer = copy.deepcopy(module.trainer.optimizers[0].state_dict())  # it holds live tensors
        self.torch_rng = torch.get_rng_state()


def test_killed_run_resumes_exactly_and_solves(tmp_path):
    run_dir = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "rlkit.cli", "run", "a2c-cartpole-local", "trainer.progress_bar=false",
                             "logging.backends=[csv,wandb]", f"logging.root={tmp_path}", "logging.run_name=r",
                             "checkpoint.every_steps=20000", "algo.stop_at_score=null"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, WANDB_MODE="offline"))
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len(list((run_dir / "checkpoints").glob("update-*.ckpt"))) < 2:
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (run_dir / "checkpoints" / "last.ckpt").exists(), "the run was not cut short"
    newest = max((run_dir / "checkpoints").glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    saved = torch.load(newest, map_location="cpu", weights_only=True)

    snap, manager = Snapshot(), build_plugin_manager()
    manager.pm.register(snap, name="snapshot")
    result = resume(run_dir, ["algo.stop_at_score=475", "trainer.progress_bar=false"], manager)

    assert snap.step == saved["global_step"] > 0
    assert snap.agent_steps == saved["rlkit"]["agent_steps"] == 40 * saved["global_step"]
    for k, v in saved["state_dict"].items():
        assert torch.equal(snap.params[k], v), k
    assert torch.equal(snap.torch_rng, saved["rlkit"]["rng"]["torch"]), "the random stream goes on"
    opt = saved["optimizer_states"][0]
    for i, state in opt["state"].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(snap.optimizer["state"][i][name]), torch.as_tensor(value)), name
    assert result.solved and result.score_mean >= 475, result
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and len({p.name.rsplit("-", 1)[1] for p in runs}) == 1, "one W&B run id, continued"

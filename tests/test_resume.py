"""Resume: a CartPole run killed with SIGKILL continues from its newest checkpoint with the same
update counter, agent steps, optimizer state, parameters and random state, and trains on to its budget.
The newest checkpoint is the one trained furthest, whatever the files' modification times say."""

import copy
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from rlkit.hooks.manager import build_plugin_manager
from rlkit.hooks.records import hookimpl
from rlkit.learner import rng
from rlkit.training.run import resume


class Snapshot:
    """Records the learner's state when training (re)starts."""

    @hookimpl
    def rlkit_learner_start(self, run, module):
        self.step, self.agent_steps = module.trainer.global_step, module.agent_steps
        self.params = {k: v.detach().clone() for k, v in module.state_dict().items()}
        self.optimizer = copy.deepcopy(module.trainer.optimizers[0].state_dict())  # it holds live tensors
        self.rng = rng.capture()  # torch, numpy and Python random as they are when training goes on


@pytest.mark.slow
def test_killed_run_resumes_the_state_of_its_newest_checkpoint(tmp_path):
    """Parameters, optimizer, counters and random streams are the checkpoint's when training goes on.
    Not a bit-exact continuation: the resumed run's envs start afresh with other seeds."""
    run_dir = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "rlkit.cli", "run", "a2c-cartpole-local", "trainer.progress_bar=false",
                             "logging.backends=[csv,wandb]", f"logging.root={tmp_path}", "logging.run_name=r",
                             "checkpoint.every_steps=10000", "algo.stop_at_score=null"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_own_wandb_service())
    try:
        deadline = time.monotonic() + 300  # two checkpoints: 20k agent steps (minutes on 2 busy cores)
        while time.monotonic() < deadline and len(list((run_dir / "checkpoints").glob("update-*.ckpt"))) < 2:
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (run_dir / "checkpoints" / "last.ckpt").exists(), "the run was not cut short"
    assert len(list((run_dir / "checkpoints").glob("update-*.ckpt"))) >= 2, "no two checkpoints within 300 s"
    ckpts = {p: torch.load(p, map_location="cpu", weights_only=True) for p in (run_dir / "checkpoints").glob("*.ckpt")}
    newest = max(ckpts, key=lambda p: ckpts[p]["global_step"])
    saved = ckpts[newest]
    # The folder is copied (fresh mtimes), and the oldest checkpoint touched last: resume still
    # takes the furthest-trained one, by its stored update counter.
    copied = tmp_path / "copy"
    shutil.copytree(run_dir, copied, copy_function=shutil.copy)
    oldest = min(ckpts, key=lambda p: ckpts[p]["global_step"])
    assert oldest != newest
    later = time.time() + 60
    os.utime(copied / "checkpoints" / oldest.name, (later, later))
    run_dir = copied

    snap, manager = Snapshot(), build_plugin_manager()
    manager.pm.register(snap, name="snapshot")
    budget = saved["rlkit"]["agent_steps"] + 4000
    result = resume(run_dir, [f"algo.total_steps={budget}", "trainer.progress_bar=false"], manager)

    assert snap.step == saved["global_step"] > 0
    assert snap.agent_steps == saved["rlkit"]["agent_steps"] == 40 * saved["global_step"]
    for k, v in saved["state_dict"].items():
        assert torch.equal(snap.params[k], v), k
    # every CPU random stream goes on where it stopped (numpy and Python random are never seeded by
    # rlkit: a fresh process starts them from OS entropy, so a stream not restored differs)
    want = saved["rlkit"]["rng"]
    assert torch.equal(snap.rng["torch"], want["torch"]), "the torch random stream goes on"
    got_np, want_np = snap.rng["numpy"], want["numpy"]
    assert torch.equal(got_np["keys"], want_np["keys"]), "the numpy random stream goes on"
    assert {k: got_np[k] for k in ("kind", "pos", "has_gauss", "cached")} == \
        {k: want_np[k] for k in ("kind", "pos", "has_gauss", "cached")}
    assert snap.rng["python"] == want["python"], "the Python random stream goes on"
    opt = saved["optimizer_states"][0]
    for i, state in opt["state"].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(snap.optimizer["state"][i][name]), torch.as_tensor(value)), name
    assert (result.agent_steps, result.updates) == (budget, saved["global_step"] + 100), result  # it went on to the budget
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and len({p.name.rsplit("-", 1)[1] for p in runs}) == 1, "one W&B run id, continued"


def test_newest_first_orders_by_stored_update_not_mtime(tmp_path):
    from rlkit.training.checkpoints import newest_first

    paths = []
    for i, step in enumerate([30, 10, 20]):
        path = tmp_path / f"c{step}.ckpt"
        torch.save({"global_step": step, "state_dict": {"w": torch.zeros(3)}}, path)
        os.utime(path, (1000 + i, 1000 + i))  # mtimes say c20 > c10 > c30
        paths.append(path)
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes(b"not a checkpoint")
    assert [p.name for p in newest_first([*paths, broken])] == ["c30.ckpt", "c20.ckpt", "c10.ckpt", "broken.ckpt"]


def _own_wandb_service() -> dict:
    """The run's environment without this process's W&B service: an in-process W&B run earlier in
    this pytest process put WANDB_SERVICE in os.environ, and a child inheriting it registers its
    run id there; killed, it leaves the id "in use" for the resume below (seen on an xdist worker)."""
    return {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"} | {"WANDB_MODE": "offline"}

"""Independent (gossip) learners resume their own parameters: each learner's checkpoint holds
parameters of its own (learner r > 0 under checkpoints/learner<r>/), and on `rlkit resume` each
learner starts training from exactly those, not from learner 0's (Lightning restores the module
before the strategy's set-up, so a broadcast there would overwrite every learner with rank 0's)."""

import json
import subprocess
import sys

import pytest
import torch

from rlkit.testing import plugin_env, processes_of_run

# An rlkit plugin found through its entry point in every learner process: it saves the learner's
# model parameters as they are when training (re)starts, after the checkpoint has been restored.
DUMP_PLUGIN = '''
import os, torch
from rlkit.hooks.records import hookimpl

@hookimpl
def rlkit_learner_start(run, module):
    path = os.path.join(os.environ["RLKIT_TEST_DUMP"], f"start-rank{module.global_rank}.pt")
    torch.save({k: v.detach().cpu().clone() for k, v in module.model.state_dict().items()}, path)
'''

BASE = ["trainer.progress_bar=false", "logging.backends=[csv]", "algo.stop_at_score=null",
        "checkpoint.every_steps=1000000"]
STEPS_PER_UPDATE = 4 * 2 * 5  # summed over learners: 4 learners x 2 envs x 5 steps


@pytest.mark.slow
def test_gossip_learners_resume_their_own_parameters_not_learner_0s(tmp_path):
    run_dir = tmp_path / "g"
    first = subprocess.run([sys.executable, "-m", "rlkit.cli", "run", "a2c-cartpole-gossip", *BASE,
                            f"logging.root={tmp_path}", "logging.run_name=g", f"algo.total_steps={150 * STEPS_PER_UPDATE}"],
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    ckpts = run_dir / "checkpoints"
    own = {0: ckpts / "last.ckpt", **{r: ckpts / f"learner{r}" / "last.ckpt" for r in (1, 2, 3)}}
    saved = {}
    for r, path in own.items():
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        assert ckpt["rlkit"]["learner"] == r
        saved[r] = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items()}
    # the learners' parameters really differ (gossip mixes them, it does not make them equal)
    for r in (1, 2, 3):
        assert any(not torch.equal(saved[r][k], saved[0][k]) for k in saved[0]), f"learner {r} equals learner 0"

    dumps = tmp_path / "dumps"
    dumps.mkdir()
    env = plugin_env(tmp_path, "rlkit_test_start_dump", DUMP_PLUGIN, RLKIT_TEST_DUMP=str(dumps))
    second = subprocess.run([sys.executable, "-m", "rlkit.cli", "resume", str(run_dir),
                             f"algo.total_steps={160 * STEPS_PER_UPDATE}"], capture_output=True, text=True, timeout=300, env=env)
    assert second.returncode == 0, second.stderr[-3000:]
    for r in (0, 1, 2, 3):
        start = torch.load(dumps / f"start-rank{r}.pt", weights_only=True)
        assert start.keys() == saved[r].keys()
        for name, value in start.items():
            got = "learner 0's" if r and torch.equal(value, saved[0][name]) else "other"
            assert torch.equal(value, saved[r][name]), f"learner {r} resumed {name} not from its own checkpoint ({got})"
    result = json.loads((run_dir / "result.json").read_text())
    assert [x["learner"] for x in result["learners"]] == [0, 1, 2, 3], result
    assert not processes_of_run(run_dir)

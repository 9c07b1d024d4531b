"""The order of the run hooks in each learner process of a multi-learner run (2 learners,
synchronous and independent), pinned by a recording plugin installed the way a third party's is:
each process writes the hooks it called, in order, to its own file."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlkit.testing import plugin_env

pytestmark = pytest.mark.slow

RECORDER = '''
import os
from pathlib import Path
from rlkit.api import hookimpl

def record(run, name, module=None):
    rank = module.global_rank if module is not None else 0 if run.launcher else int(os.environ["LOCAL_RANK"])
    with open(Path(os.environ["RLKIT_TEST_HOOKS"]) / f"learner{rank}-{os.getpid()}.txt", "a") as fh:
        fh.write(name + "\\n")

@hookimpl(tryfirst=True)
def rlkit_learner_layout(run):
    record(run, "layout")

@hookimpl(tryfirst=True)
def rlkit_configure(run):
    record(run, "configure")

@hookimpl(tryfirst=True)
def rlkit_make_rollout_source(run, module):
    record(run, "rollout_source", module)

@hookimpl(tryfirst=True)
def rlkit_learner_start(run, module):
    record(run, "start", module)

@hookimpl(tryfirst=True)
def rlkit_sync_gradients(run, module):
    record(run, "sync", module)

@hookimpl(tryfirst=True)
def rlkit_after_optimizer_step(run, module, update):
    record(run, f"step{update}", module)

@hookimpl(tryfirst=True)
def rlkit_metrics(run, module):
    record(run, "metrics", module)
    return {}

@hookimpl(tryfirst=True)
def rlkit_state_dict(run, module):
    record(run, "state", module)
    return {}

@hookimpl(tryfirst=True)
def rlkit_train_end(run, module):
    record(run, "train_end", module)

@hookimpl(tryfirst=True)
def rlkit_learner_end(run, module):
    record(run, "end", module)

@hookimpl(tryfirst=True)
def rlkit_unconfigure(run, error):
    record(run, "unconfigure" if error is None else "unconfigure-after-error")
'''

SET_UP = ["layout", "configure", "rollout_source", "start"]
# 4 updates (CartPole, 2 learners x 8 envs x 5 steps = 80 agent steps each), metrics at updates 1, 2 and 4
UPDATES = (["sync", "step1", "metrics", "sync", "step2", "metrics", "sync", "step3", "sync", "step4", "metrics"])


# at the end Lightning builds last.ckpt's contents on every learner (of synchronous learners only
# learner 0 writes it; an independent learner writes its own)
END = ["train_end", "state", "end", "unconfigure"]


@pytest.mark.parametrize("recipe", ["a2c-cartpole-allreduce", "a2c-cartpole-gossip"])
def test_each_learner_calls_the_run_hooks_in_order(tmp_path, recipe):
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    env = plugin_env(tmp_path, "rlkit_test_hook_order", RECORDER, RLKIT_TEST_HOOKS=str(hooks), WANDB_MODE="offline")
    out = subprocess.run([sys.executable, "-m", "rlkit.cli", "run", recipe, "placement.learners=2", "trainer.devices=2",
                          "env.num_envs=8", "algo.rollout_len=5", "algo.total_steps=320", "algo.stop_at_score=null",
                          "trainer.log_every_n_updates=2", "trainer.progress_bar=false", "logging.backends=[csv]",
                          "checkpoint.every_steps=1000000", f"logging.root={tmp_path}", "logging.run_name=order"],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    # one file per process: the launching process supervises the learners and trains nothing
    # (rlkit.training.supervisor), so it calls only the launching process's hooks
    calls = sorted(f.read_text().split() for f in hooks.glob("*.txt"))
    learners = [c for c in calls if "start" in c]
    assert len(learners) == 2 and all(c == SET_UP + UPDATES + END for c in learners), calls
    others = [c for c in calls if "start" not in c]
    assert others == [["layout", "configure", "unconfigure"]], calls

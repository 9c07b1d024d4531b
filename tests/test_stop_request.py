"""A plugin's `module.request_stop(reason)` ends the run for every learner: synchronous learners
after the same update (the request travels with the shared scores), independent ones through the
run's store. The plugin is a fake installed distribution that imports only rlkit.api, selected by
name in a real multi-process run."""

import csv
import json
import os
import subprocess
import sys

import pytest
from test_plugins import install_fake, site  # noqa: F401  (the fixture)

STOPPER = '''
from dataclasses import dataclass

from rlkit.api import CommunicatorSpec, LearnerLayout, Topology, hookimpl, opt


@dataclass
class Options:
    topology: str = opt("synchronous", "learner topology", choices=("synchronous", "independent"))
    rank: int = opt(1, "the learner that asks", ge=0)
    at: int = opt(5, "the update it asks at", ge=1)


class Stopper:
    def __init__(self, options, recipe):
        self.options = options

    @hookimpl
    def rlkit_learner_layout(self, run):
        return LearnerLayout(Topology(self.options.topology), timeout_s=60)

    @hookimpl
    def rlkit_after_optimizer_step(self, run, module, update):
        if module.global_rank == self.options.rank and update == self.options.at:
            module.request_stop(f"asked at update {update}")


@hookimpl
def rlkit_communicators():
    return [CommunicatorSpec(name="stopper", factory=Stopper, options_schema=Options, summary="stops the run")]
'''

BUDGET = 400_000  # agent steps: 2 learners x 8 envs x 5 steps = 80 per update of both -> 5,000 updates each


def run_stopper(site, tmp_path, topology: str):  # noqa: F811
    install_fake(site, "fake-stopper", "fake_rlkit_stopper", STOPPER, "stopper")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
               WANDB_MODE="offline")
    cmd = [sys.executable, "-m", "rlkit.cli", "run", "a2c-cartpole-local", "communication.name=stopper",
           f"communication.options.topology={topology}", "placement.learners=2", "trainer.devices=2",
           f"algo.total_steps={BUDGET}", "algo.stop_at_score=null", "trainer.log_every_n_updates=1",
           "trainer.progress_bar=false", "logging.backends=[csv]", f"logging.root={tmp_path}",
           "logging.run_name=stop", "trainer.torch_threads=1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr.count("rlkit: learner 1 stops the run: asked at update 5") == 1, out.stderr[-3000:]
    run_dir = tmp_path / "stop"
    last = {r: max(int(float(row["step"])) for row in csv.DictReader(open(run_dir / "csv" / f"learner{r}.csv")))
            for r in (0, 1)}
    return json.loads((run_dir / "result.json").read_text()), last


@pytest.mark.slow
def test_synchronous_learners_all_stop_after_the_update_one_asked_at(site, tmp_path):  # noqa: F811
    result, last = run_stopper(site, tmp_path, "synchronous")
    assert result["updates"] == 5
    assert last == {0: 5, 1: 5}  # neither learner ran on into a collective the other never joined


@pytest.mark.slow
def test_independent_learners_stop_soon_after_one_asks(site, tmp_path):  # noqa: F811
    result, last = run_stopper(site, tmp_path, "independent")
    assert last[1] == 5
    assert 0 < last[0] < 5_000 / 2, last  # learner 0 saw it through the store, far before its budget
    assert result["updates"] == last[0]

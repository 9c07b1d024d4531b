"""rlkit's conformance suite for communicators, run against ``localsgd`` (needs the plugin installed:
the first test finds it through its entry point). Includes short real runs of two learner processes."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
import yaml

testing = pytest.importorskip("rlkit.testing")

pytestmark = pytest.mark.slow

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "a2c-cartpole-localsgd.yaml"
K = yaml.safe_load(RECIPE.read_text())["communication"]["options"]["k"]


class TestLocalSGDConformance(testing.CommunicatorConformance):
    communicator = "localsgd"
    recipe = str(RECIPE)  # a path: the CLI runs start in a temporary folder
    in_process = False  # Lightning launches the learner processes by re-running the CLI
    # (read by the newer conformance suite; harmless to an older one)
    learners = 2
    own_optimizer_state = True  # each learner's RMSprop state is its own (LearnerLayout.own_optimizer_state)
    learner_killed = "recovers"  # synchronous: the supervisor restarts every learner from the newest checkpoint
    kill_overrides = ("communication.options.timeout_s=30",)

    def check_run(self, result) -> None:
        # learner 0's metrics: the average count at each logged update, k updates apart
        with open(result.run_dir / "csv" / "metrics.csv", newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("localsgd/averages")]
        assert rows and all(float(r["localsgd/averages"]) == int(r["step"]) // K for r in rows), rows
        # last.ckpt: one more average at the end unless the last update was one
        ckpt = torch.load(result.run_dir / "checkpoints" / "last.ckpt", weights_only=False)
        updates = ckpt["global_step"]
        assert ckpt["rlkit"]["plugins"]["localsgd"]["averages"] == updates // K + (updates % K != 0)

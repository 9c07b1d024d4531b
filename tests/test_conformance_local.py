"""The conformance suite (rlkit/testing.py) on the built-in communicators. Every communicator,
built-in or third-party, runs the same suite; the protocol-specific checks are in check_run."""

import csv

import pytest

from rlkit.testing import CommunicatorConformance


def metric_rows(result, name: str = "metrics.csv") -> list[dict]:
    return list(csv.DictReader((result.run_dir / "csv" / name).open()))


def column(rows: list[dict], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key)]


class TestLocalConformance(CommunicatorConformance):
    communicator = "local"

    def check_run(self, result) -> None:
        assert not (result.run_dir / "csv" / "learner0.csv").exists()  # one learner: one log


@pytest.mark.slow
class TestAllreduceConformance(CommunicatorConformance):
    communicator = "allreduce"
    recipe = "a2c-cartpole-allreduce"
    in_process = False
    learners = 2
    learner_killed = "fails"

    def check_run(self, result) -> None:
        rows = metric_rows(result)
        assert column(rows, "comm/world_size") and set(column(rows, "comm/world_size")) == {2.0}
        assert all(ms > 0 for ms in column(rows, "comm/allreduce_ms"))  # every logged update all-reduced
        for r in (0, 1):  # each learner logged its own rows
            assert column(metric_rows(result, f"learner{r}.csv"), "loss/value")


@pytest.mark.slow
class TestGossipConformance(CommunicatorConformance):
    communicator = "gossip"
    recipe = "a2c-cartpole-gossip"
    overrides = ("placement.learners=2", "trainer.devices=2")
    in_process = False
    learners = 2
    independent_checkpoints = True
    learner_killed = "continues"
    kill_overrides = ("communication.options.peer_timeout_s=5",)

    def check_run(self, result) -> None:
        rows = metric_rows(result)
        mixed = column(rows, "gossip/mixed")
        assert mixed and mixed[-1] > 0, "learner 0 mixed no peer message"
        assert column(rows, "consensus/dist_max"), "no consensus distance was measured"


@pytest.mark.slow
class TestQueuesConformance(CommunicatorConformance):
    communicator = "queues"
    recipe = "a2c-cartpole-queues"

    def check_run(self, result) -> None:
        rows = metric_rows(result)
        assert max(column(rows, "queues/pps")) > 0 and max(column(rows, "queues/tps")) > 0

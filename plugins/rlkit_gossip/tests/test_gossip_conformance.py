"""The conformance suite on `gossip` (GALA): 2 independent learners; a killed learner (learner 0 too) is restarted and rejoins."""

import pytest

from rlkit.testing import CommunicatorConformance, metric_column


@pytest.mark.slow
class TestGossipConformance(CommunicatorConformance):
    communicator = "gossip"
    recipe = "a2c-cartpole-gossip"
    overrides = ("placement.learners=2", "trainer.devices=2")
    in_process = False
    learners = 2
    independent_checkpoints = True
    learner_killed = "recovers"
    kill_overrides = ("communication.options.peer_timeout_s=5",)

    def check_run(self, result) -> None:
        mixed = metric_column(result.run_dir, "gossip/mixed")
        assert mixed and mixed[-1] > 0, "learner 0 mixed no peer message"
        assert metric_column(result.run_dir, "consensus/dist_max"), "no consensus distance was measured"

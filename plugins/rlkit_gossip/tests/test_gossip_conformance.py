"""The conformance suite on `gossip` (GALA): 2 independent learners; a killed learner (learner 0, then
learner 1, in one run) is restarted from its own checkpoint and rejoins the graph."""

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

    def check_killed_run(self, result, err) -> None:
        """Each dead learner rejoined the graph at the update it resumed, its peer took it back, learner
        0 logged 1 live learner then 2 again, learner 1's own log has no update twice, and the run's
        shared memory is gone."""
        from rlkit_gossip.transports import shm_root

        for victim in (0, 1):
            (line,) = [x for x in err.splitlines() if x.startswith(f"rlkit: learner {victim} restarted (life 2) from its")]
            at = int(line.rsplit("(update ", 1)[1].rstrip(")").replace(",", ""))
            assert f"gossip: learner {victim} rejoined the graph at update {at:,}" in err, err[-3000:]
            assert f"took learner {victim} back into the graph" in err, err[-3000:]
        live = metric_column(result.run_dir, "gossip/live_learners")
        assert 1.0 in live and 2.0 in live[live.index(1.0):], live
        steps = metric_column(result.run_dir, "step", "learner1.csv")
        assert steps == sorted(set(steps)) and steps[-1] > 0, steps
        assert not shm_root(str(result.run_dir.resolve())).exists()

    def check_run(self, result) -> None:
        mixed = metric_column(result.run_dir, "gossip/mixed")
        assert mixed and mixed[-1] > 0, "learner 0 mixed no peer message"
        assert metric_column(result.run_dir, "consensus/dist_max"), "no consensus distance was measured"

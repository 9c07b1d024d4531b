"""The conformance suite on `allreduce`: 2 learner processes, gradients averaged every update."""

import pytest

from rlkit.testing import CommunicatorConformance, metric_column


@pytest.mark.slow
class TestAllreduceConformance(CommunicatorConformance):
    communicator = "allreduce"
    recipe = "a2c-cartpole-allreduce"
    in_process = False
    learners = 2
    learner_killed = "recovers"

    def check_run(self, result) -> None:
        world = metric_column(result.run_dir, "comm/world_size")
        assert world and set(world) == {2.0}
        assert all(ms > 0 for ms in metric_column(result.run_dir, "comm/allreduce_ms"))  # every logged update all-reduced
        for r in (0, 1):  # each learner logged its own rows
            assert metric_column(result.run_dir, "loss/value", f"learner{r}.csv")

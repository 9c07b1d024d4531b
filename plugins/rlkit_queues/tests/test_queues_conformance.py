"""The conformance suite on `queues` (GA3C): one learner, actor processes, batched predictors."""

import pytest

from rlkit.testing import CommunicatorConformance, metric_column


@pytest.mark.slow
class TestQueuesConformance(CommunicatorConformance):
    communicator = "queues"
    recipe = "a2c-cartpole-queues"

    def check_run(self, result) -> None:
        for rate in ("queues/pps", "queues/tps"):  # predictions and trainings per second
            assert max(metric_column(result.run_dir, rate)) > 0, rate

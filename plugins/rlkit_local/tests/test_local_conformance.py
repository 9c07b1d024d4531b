"""The conformance suite on the built-in `local` communicator (one learner)."""

from rlkit.testing import CommunicatorConformance


class TestLocalConformance(CommunicatorConformance):
    communicator = "local"

    def check_run(self, result) -> None:
        assert not (result.run_dir / "csv" / "learner0.csv").exists()  # one learner: one log

"""rlkit's conformance suite for communicators, run against ``lookahead`` (needs the plugin installed:
the first test finds it through its entry point). Includes a short real training run."""

from __future__ import annotations

import csv

import pytest

testing = pytest.importorskip("rlkit.testing")

pytestmark = pytest.mark.slow


class TestLookaheadConformance(testing.CommunicatorConformance):
    communicator = "lookahead"

    def check_run(self, result) -> None:
        rows = list(csv.DictReader((result.run_dir / "csv" / "metrics.csv").open()))
        syncs = [float(r["lookahead/syncs"]) for r in rows if r.get("lookahead/syncs")]
        assert syncs and syncs[-1] > 0

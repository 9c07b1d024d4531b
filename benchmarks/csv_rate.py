"""A run's steady agent steps/s from its CSV logs, for scripts/gpu-check.

    python benchmarks/csv_rate.py RUN_DIR/csv       prints "SPS FPS" (frames = 4 x agent steps, Atari)

The median of the ``sps`` column after the first two logged rows (start-up and warm-up). A
multi-learner run's ``learner<r>.csv`` files each hold that learner's own rate times the number of
learners (the summed estimate), so the run's rate is the sum of each learner's median over the count.
Exit 1 when a log has fewer than three rows with a rate.
"""

from __future__ import annotations

import csv
import glob
import statistics
import sys


def steady_sps(folder: str) -> float | None:
    files = sorted(glob.glob(f"{folder}/learner*.csv")) or [f"{folder}/metrics.csv"]
    total = 0.0
    for path in files:
        with open(path, newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("sps")]
        if len(rows) < 3:
            return None
        total += statistics.median(float(r["sps"]) for r in rows[2:]) / len(files)
    return total


if __name__ == "__main__":
    sps = steady_sps(sys.argv[1])
    if sps is None:
        sys.exit(1)
    print(f"{sps:,.0f} {4 * sps:,.0f}")

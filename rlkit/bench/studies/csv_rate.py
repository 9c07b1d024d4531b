"""A run's steady agent steps/s from its CSV logs, for scripts/gpu-check.

    python -m rlkit.bench.studies.csv_rate RUN_DIR/csv       prints "SPS FPS" (frames = 4 x agent steps, Atari)

The rule is `rlkit bench`'s (rlkit.bench.peers): the median of the logged ``sps`` windows that start
after the first 20% of the run's updates. A multi-learner run's ``learner<r>.csv`` files each hold
that learner's own rate times the number of learners (the summed estimate), so the run's rate is
the sum of each learner's median over the count. Exit 1 when a log has no window past warm-up.
"""

from __future__ import annotations

import csv
import glob
import sys

from rlkit.bench.peers import steady_sps as steady_of_windows
from rlkit.bench.peers import windows_from_csv_rows


def steady_sps(folder: str) -> float | None:
    files = sorted(glob.glob(f"{folder}/learner*.csv")) or [f"{folder}/metrics.csv"]
    total = 0.0
    for path in files:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))  # windows_from_csv_rows skips rows without a rate
        # in update units a window's rate is the row's sps itself: no steps-per-update needed
        windows = windows_from_csv_rows(rows, 1)
        sps = steady_of_windows(windows, 1, windows[-1][0])
        if sps is None:
            return None
        total += sps / len(files)
    return total


if __name__ == "__main__":
    sps = steady_sps(sys.argv[1])
    if sps is None:
        sys.exit(1)
    print(f"{sps:,.0f} {4 * sps:,.0f}")

"""scripts/gpu-check where it cannot run (no CUDA device: one line, exit 2, nothing written) and the
rate it reports for a multi-learner run (rlkit/bench/studies/csv_rate.py). The GPU sections themselves run
only on a CUDA host (tests/test_cuda.py is one of them)."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

from rlkit.bench.studies.csv_rate import steady_sps


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a CUDA device")
def test_without_a_cuda_device_it_says_why_in_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "gc"
    env = dict(os.environ, PYTHON=sys.executable, GPU_CHECK_WHEELS=str(tmp_path / "none"))
    r = subprocess.run([str(ROOT / "scripts/gpu-check"), str(out)], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-check: no python with a CUDA device"), r.stderr
    assert sys.executable in lines[0] and "nothing was run" in lines[0]
    assert not out.exists()


def write(path: Path, rates: list[float]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["step", "sps", "score_mean"])
        for i, r in enumerate(rates):
            w.writerow([i * 100, r, ""])
            w.writerow([i * 100 + 1, "", -20])  # a row without a rate


def test_a_multi_learner_rate_sums_each_learners_own_rate(tmp_path):
    # each learner logs its own rate x 4 (the summed estimate); warm-up rows 0-1 are left out
    for r, own in enumerate([100, 110, 120, 130]):
        write(tmp_path / f"learner{r}.csv", [1.0, 2.0] + [4 * own] * 3 + [4 * own + 40])
    assert steady_sps(str(tmp_path)) == pytest.approx(100 + 110 + 120 + 130)


def test_one_learner_reads_metrics_csv_and_too_short_a_log_gives_none(tmp_path):
    write(tmp_path / "metrics.csv", [5.0, 5.0, 900.0, 1000.0, 1100.0])
    assert steady_sps(str(tmp_path)) == pytest.approx(1000.0)
    write(tmp_path / "metrics.csv", [5.0, 900.0])
    assert steady_sps(str(tmp_path)) is None
    r = subprocess.run([sys.executable, str(ROOT / "rlkit/bench/studies/csv_rate.py"), str(tmp_path)], capture_output=True)
    assert r.returncode == 1

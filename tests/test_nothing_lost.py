"""A full disk or a damaged metrics row does not lose a run's work: one line names the file and
what failed, every checkpoint left is whole, and ``rlkit resume`` continues from the newest with
the whole metrics log (a damaged row named and skipped, the rest kept)."""

import csv
import os
import subprocess
import sys

import pytest
import torch

RUN = [sys.executable, "-m", "rlkit.cli"]
QUIET = ["trainer.progress_bar=false", "logging.backends=[csv]", "algo.stop_at_score=null", "logging.run_name=r"]


def _cli(*args, timeout=300):
    return subprocess.run([*RUN, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, WANDB_MODE="offline"))


def _steps(run_dir):
    with open(run_dir / "csv" / "metrics.csv", newline="") as fh:
        return [int(r["step"]) for r in csv.DictReader(fh)]


def _logged(last: int, every: int = 20) -> list[int]:
    """The updates a run logs at: the first, then every ``every``-th."""
    return [1, *range(every, last + 1, every)]


@pytest.mark.slow
def test_a_full_disk_stops_the_run_with_one_line_and_resume_finishes_it(small_fs):
    disk = small_fs(600)  # eight CartPole checkpoints (65 KB each) and the log fit, the ninth does not
    run_dir = disk.path / "r"
    full = _cli("run", "a2c-cartpole-local", *QUIET, f"logging.root={disk.path}", "algo.total_steps=80000",
                "checkpoint.every_steps=4000", "checkpoint.keep=-1")
    assert full.returncode == 1, full.stderr[-2000:]
    lines = full.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rlkit: run failed: cannot write {run_dir}/"), full.stderr[-2000:]
    assert lines[0].endswith("No space left on device")
    ckpts = sorted(run_dir.glob("checkpoints/*.ckpt"), key=lambda p: int(p.stem.split("-")[1]))
    saved = [torch.load(p, weights_only=True)["global_step"] for p in ckpts]  # each one whole
    assert saved == [100 * (i + 1) for i in range(len(saved))] and 2 <= len(saved) < 20  # stopped early
    assert not list(run_dir.rglob(".*.tmp"))

    disk.resize(8192)  # the user frees room
    resumed = _cli("resume", str(run_dir), "trainer.progress_bar=false")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"continuing from {ckpts[-1]} (update {saved[-1]:,})" in resumed.stderr
    assert "after 80,000 agent steps" in resumed.stdout
    assert _steps(run_dir) == _logged(2000)  # every update's row once: none lost, none twice


@pytest.mark.slow
def test_a_damaged_metrics_row_is_named_skipped_and_the_log_kept_on_resume(tmp_path):
    run_dir = tmp_path / "r"
    first = _cli("run", "a2c-cartpole-local", *QUIET, f"logging.root={tmp_path}", "algo.total_steps=16000",
                 "checkpoint.every_steps=8000")
    assert first.returncode == 0, first.stderr[-2000:]
    path = run_dir / "csv" / "metrics.csv"
    lines = path.read_bytes().split(b"\r\n")
    lines[4] = lines[4][:10] + b"\x00" * 40  # line 5, the row of update 60: what a crash or a full disk leaves
    path.write_bytes(b"\r\n".join(lines))
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"")  # a kill while it was written

    again = _cli("resume", str(run_dir), "algo.total_steps=24000", "trainer.progress_bar=false")
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"rlkit: {path} line 5: damaged row skipped" in again.stderr
    assert f"rlkit: resume: skipping {run_dir / 'checkpoints' / 'last.ckpt'}: not a readable torch checkpoint" in again.stderr
    assert f"continuing from {run_dir / 'checkpoints' / 'update-400.ckpt'} (update 400)" in again.stderr
    assert _steps(run_dir) == [s for s in _logged(600) if s != 60]

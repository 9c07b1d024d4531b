"""The progress bar counts the run's updates against its total, also after a resume (Lightning's
own counts the current epoch's batches, which restart at 0 on resume, and titles a run without
epochs "Epoch 0/-2")."""

import re
import subprocess
import sys

import pytest

BASE = ["logging.backends=[csv]", "algo.stop_at_score=null", "checkpoint.every_steps=800"]


def rlkit(*args, cwd):
    out = subprocess.run([sys.executable, "-m", "rlkit.cli", *args], capture_output=True, text=True, cwd=cwd,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout + out.stderr


def counts(text: str) -> list[tuple[int, int]]:
    return [(int(a.replace(",", "")), int(b.replace(",", ""))) for a, b in re.findall(r"(\d[\d,]*)/(\d[\d,]*)", text)]


@pytest.mark.slow
def test_the_bar_counts_updates_of_the_whole_run_also_after_resume(tmp_path):
    # a2c-cartpole-local: 8 envs x 5 steps = 40 agent steps per update
    first = rlkit("run", "a2c-cartpole-local", "algo.total_steps=1600", f"logging.root={tmp_path}",
                  "logging.run_name=r", *BASE, cwd=tmp_path)
    assert "updates" in first and "Epoch" not in first, first[-2000:]
    assert (40, 40) in counts(first), first[-2000:]
    second = rlkit("resume", str(tmp_path / "r"), "algo.total_steps=3200", cwd=tmp_path)
    assert "updates" in second and "Epoch" not in second, second[-2000:]
    assert (80, 80) in counts(second), second[-2000:]
    assert not any(done > total for done, total in counts(second)), second[-2000:]

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


def test_the_bar_draws_at_most_ten_times_a_second_and_always_the_last_update(monkeypatch):
    from types import SimpleNamespace

    from lightning.pytorch.callbacks import RichProgressBar

    from rlkit.training.trainer import UpdatesProgressBar

    drawn = []
    monkeypatch.setattr(RichProgressBar, "on_train_batch_end", lambda self, t, m, o, b, i: drawn.append(i + 1))
    bar = UpdatesProgressBar(leave=True)
    assert bar.refresh_rate == 10  # rich's redraws per second (Lightning's default: 100)
    trainer = SimpleNamespace(global_step=0, max_steps=1000)
    for step in range(1, 1001):  # a thousand updates in well under a second
        trainer.global_step = step
        bar.on_train_batch_end(trainer, None, None, None, step - 1)
    assert drawn[0] == 1 and drawn[-1] == 1000, drawn
    assert len(drawn) <= 3, drawn


def test_the_bar_shows_the_last_update_where_a_run_stops_early_or_is_stopped(monkeypatch):
    from types import SimpleNamespace

    from lightning.pytorch.callbacks import RichProgressBar

    from rlkit.training.trainer import UpdatesProgressBar

    shown = []
    monkeypatch.setattr(RichProgressBar, "on_train_epoch_end", lambda self, t, m: None)
    monkeypatch.setattr(RichProgressBar, "on_exception", lambda self, t, m, e: None)
    bar = UpdatesProgressBar()
    monkeypatch.setattr(bar, "_update", lambda task, current, **kw: shown.append(current))
    bar.on_train_epoch_end(SimpleNamespace(global_step=6426, max_steps=7500), None)  # a target reached
    bar.on_exception(SimpleNamespace(global_step=7000, max_steps=7500), None, KeyboardInterrupt())
    assert shown == [6426, 7000]

"""Real training runs: CartPole learns; real Pong runs through AtariVectorEnv and logs everything."""

import csv
import glob
import subprocess
import sys

import pytest
import torch

from rlkit.checkpoints import load_checkpoint
from rlkit.evaluate import evaluate
from rlkit.run import train
from rlkit.testing import read_wandb_history


@pytest.mark.slow
def test_cartpole_a2c_solves_within_300k_steps(tmp_path):
    result = train("a2c-cartpole-local", ["trainer.progress_bar=false", "logging.backends=[csv]",
                                          f"logging.root={tmp_path}", "logging.run_name=solve"])
    assert result.solved, result.summary("CartPole-v1")
    assert result.score_mean >= 475 and result.episodes_in_mean == 20
    assert result.agent_steps <= 300_000


REQUIRED = {"episode/score", "episode/length", "agent_steps", "frames", "sps", "fps", "loss/total",
            "loss/policy", "loss/value", "loss/entropy", "grad_norm", "lr"}


@pytest.mark.slow
def test_pong_runs_logs_csv_and_wandb_and_checkpoint_evaluates(tmp_path):
    # 4 envs x 1200 agent steps each: an untrained agent's Pong game ends after ~800 agent steps.
    result = train("a2c-pong-local", ["algo.total_steps=4800", "env.num_envs=4", "trainer.progress_bar=false",
                                      "trainer.log_every_n_updates=10", f"logging.root={tmp_path}",
                                      "logging.run_name=pong", "logging.backends=[csv,wandb]"])
    assert result.agent_steps == 4800 and result.frames == 4 * 4800
    with open(result.run_dir / "csv" / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert REQUIRED <= set(rows[0]), set(rows[0])
    scores = [float(r["episode/score"]) for r in rows if r["episode/score"]]
    assert scores and all(-21 <= s <= 21 for s in scores), "raw Pong scores lie in [-21, 21]"
    (run_file,) = glob.glob(str(result.run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    history = read_wandb_history(run_file)
    keys = set().union(*history)
    assert REQUIRED <= keys, REQUIRED - keys
    assert history[-1]["agent_steps"] == 4800

    ckpt = result.run_dir / "checkpoints" / "last.ckpt"
    state = load_checkpoint(ckpt)
    assert state["rlkit"]["agent_steps"] == 4800
    report = evaluate(str(ckpt), episodes=1, gif=str(tmp_path / "pong.gif"))
    assert len(report.scores) == 1 and -21 <= report.scores[0] <= 21
    assert (tmp_path / "pong.gif").stat().st_size > 1000


@pytest.mark.slow
def test_continuous_actions_gaussian_head(tmp_path):
    result = train("a2c-cartpole-local", ["env.id=Pendulum-v1", "env.num_envs=4", "algo.total_steps=2000",
                                          "algo.stop_at_score=null", "trainer.progress_bar=false",
                                          "logging.backends=[csv]", f"logging.root={tmp_path}"])
    assert result.agent_steps == 2000 and result.score_mean is not None  # Pendulum truncates at 200 steps


def test_crafted_pickle_checkpoint_is_refused(tmp_path):
    payload = tmp_path / "evil.ckpt"
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    torch.save({"state_dict": {}, "x": Evil()}, payload)
    out = subprocess.run([sys.executable, "-m", "rlkit.cli", "evaluate", str(payload)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "refused by weights-only loading" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not marker.exists()

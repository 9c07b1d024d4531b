"""Real training runs: CartPole learns; real Pong runs through AtariVectorEnv and logs everything;
scores are raw game scores while the learner trains on clipped rewards (SpaceInvaders)."""

import csv
import glob
import subprocess
import sys

import numpy as np
import pytest
import torch

from rlkit.commands.evaluate import evaluate
from rlkit.hooks.records import hookimpl
from rlkit.testing import read_wandb_history
from rlkit.training.checkpoints import load_checkpoint
from rlkit.training.run import train


@pytest.mark.slow
def test_cartpole_a2c_solves_within_300k_steps(tmp_path):
    result = train("a2c-cartpole-local", ["trainer.progress_bar=false", "logging.backends=[csv]",
                                          f"logging.root={tmp_path}", "logging.run_name=solve"])
    assert result.solved, result.summary("CartPole-v1")
    assert result.score_mean >= 475 and result.episodes_in_mean == 20
    # stop_at_score ended it, strictly before the recipe's budget (300k) ran out: a run that used
    # the whole budget did not solve "within" it, whatever its last window says
    assert result.agent_steps < 300_000, result.summary("CartPole-v1")
    assert result.agent_steps == result.updates * 8 * 5  # whole updates of 8 envs x 5 steps


REQUIRED = {"episode/score", "episode/length", "agent_steps", "frames", "sps", "fps", "loss/total",
            "loss/policy", "loss/value", "loss/entropy", "grad_norm", "lr"}


@pytest.mark.slow
def test_pong_runs_logs_csv_and_wandb_and_checkpoint_evaluates(tmp_path):
    # 4 envs x 1200 agent steps each: an untrained agent's Pong game ends after ~800 agent steps.
    # A budget of 4790 is not a whole number of updates: whole updates of 4 envs x 5 steps = 20
    # agent steps until the budget is covered, ceil(4790 / 20) = 240 updates = 4800 agent steps.
    result = train("a2c-pong-local", ["algo.total_steps=4790", "env.num_envs=4", "trainer.progress_bar=false",
                                      "trainer.log_every_n_updates=10", f"logging.root={tmp_path}",
                                      "logging.run_name=pong", "logging.backends=[csv,wandb]"])
    assert (result.updates, result.agent_steps, result.frames) == (240, 4800, 4 * 4800), result
    with open(result.run_dir / "csv" / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert REQUIRED <= set(rows[0]), set(rows[0])
    scores = [float(r["episode/score"]) for r in rows if r["episode/score"]]
    # (a bound only: Pong's rewards are +-1, so raw and clipped scores agree; raw scores are
    # tested on SpaceInvaders below)
    assert scores and all(-21 <= s <= 21 for s in scores), "Pong scores lie in [-21, 21]"
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


class ClipWitness:
    """Records, next to the run, what the env paid (raw rewards, through the env's own step) and
    what the learner learned on (the batches' rewards), per episode, and the run's score window."""

    def __init__(self):
        self.raw_rewards: set[float] = set()
        self.learn_rewards: set[float] = set()
        self.raw_sums: list[float] = []  # per finished episode, in the order they ended
        self.learned_sums: list[float] = []
        self.window: list[float] = []

    @hookimpl
    def rlkit_make_rollout_source(self, run, module):
        from rlkit.learner.rollout import LocalRollout

        source = LocalRollout(run.recipe, module.model, module.device, module.env_seed())
        n = source.env.num_envs
        raw, learned = np.zeros(n), np.zeros(n)
        env_step, collect = source.env.step, source.collect

        def step(actions):
            out = env_step(actions)
            reward, done = out[1], np.logical_or(out[2], out[3])
            raw[:] += reward
            self.raw_rewards |= set(reward.tolist())
            self.raw_sums += raw[done].tolist()
            raw[done] = 0
            return out

        def collect_batch():
            batch = collect()
            for rewards, dones in zip(batch.rewards.numpy(), batch.dones.numpy().astype(bool)):
                learned[:] += rewards
                self.learn_rewards |= set(rewards.tolist())
                self.learned_sums += learned[dones].tolist()
                learned[dones] = 0
            return batch

        source.env.step, source.collect = step, collect_batch
        return source

    @hookimpl
    def rlkit_learner_end(self, run, module):
        self.window = list(module.recent_scores)


def test_scores_are_raw_game_scores_while_the_learner_learns_clipped_rewards(tmp_path):
    """SpaceInvaders pays 5..30 per invader (200 for the mothership), so a game's raw score is not
    the count of its rewards: scores computed from the clipped (sign) rewards would equal the
    learned sums below and fail. An untrained agent's game ends after ~300-700 agent steps."""
    from rlkit.hooks.manager import build_plugin_manager

    witness, manager = ClipWitness(), build_plugin_manager()
    manager.pm.register(witness, name="clip-witness")
    # 4 envs x 700 steps = 140 updates, the last one logged (every 10); a tiny MLP on 16x16 frames,
    # since only the scores matter here (the Nature CNN would take minutes on 2 cores)
    result = train("a2c-pong-local", ["env.id=ALE/SpaceInvaders-v5", "env.num_envs=4", "env.atari.episodic_life=false",
                                      "env.atari.size=16", "env.atari.stack=1", "model.kind=mlp", "model.hidden=[32]",
                                      "algo.clip_rewards=true", "algo.total_steps=2800", "algo.score_window=100",
                                      "trainer.log_every_n_updates=10", "trainer.torch_threads=1",
                                      "trainer.progress_bar=false", "logging.backends=[csv]",
                                      f"logging.root={tmp_path}", "logging.run_name=si"], manager)
    assert result.updates == 140
    assert witness.learn_rewards <= {-1.0, 0.0, 1.0}, witness.learn_rewards  # the learner saw sign(reward)
    assert witness.raw_rewards - {-1.0, 0.0, 1.0}, witness.raw_rewards  # the game paid more than +-1
    raw, learned = witness.raw_sums, witness.learned_sums
    assert raw and len(raw) == len(learned), (raw, learned)
    assert any(r != c for r, c in zip(raw, learned)), (raw, learned)  # the two really tell apart
    # what the run reports: its score window, its mean, and the log's per-interval means
    assert witness.window == raw, (witness.window, raw, learned)
    assert result.episodes_in_mean == len(raw) and result.score_mean == pytest.approx(sum(raw) / len(raw))
    assert all(s % 5 == 0 for s in witness.window), witness.window  # every SpaceInvaders reward is a multiple of 5
    with open(result.run_dir / "csv" / "metrics.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("episode/count")]
    logged = sum(float(r["episode/score"]) * float(r["episode/count"]) for r in rows)
    assert sum(float(r["episode/count"]) for r in rows) == len(raw)
    assert logged == pytest.approx(sum(raw)) and logged != pytest.approx(sum(learned)), (logged, raw, learned)


@pytest.mark.slow
def test_continuous_actions_gaussian_head(tmp_path):
    result = train("a2c-cartpole-local", ["env.id=Pendulum-v1", "env.num_envs=4", "algo.total_steps=1990",
                                          "algo.stop_at_score=null", "trainer.progress_bar=false",
                                          "logging.backends=[csv]", f"logging.root={tmp_path}"])
    # ceil(1990 / (4 envs x 5 steps)) = 100 updates = 2000 agent steps
    assert (result.updates, result.agent_steps) == (100, 2000), result
    assert result.score_mean is not None  # Pendulum truncates at 200 steps


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

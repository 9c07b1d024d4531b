"""`rlkit evaluate CKPT env.key=value`: the checkpoint's policy played in a changed env (e.g. without
the sticky actions it learned with), and nothing but env.* may change."""

import subprocess
import sys

import pytest
import torch

from rlkit.commands.evaluate import evaluate
from rlkit.config.recipes import load_recipe, to_container
from rlkit.infra.errors import UserError
from rlkit.learner.envs import env_spaces
from rlkit.learner.models import ActorCritic

# a tiny CNN on Breakout (short random games): the test is about which env is played, not the network
TINY = ["env.id=ALE/Breakout-v5", "env.num_envs=2", "model.cnn_channels=[2,2,2]", "model.cnn_hidden=8",
        "env.atari.num_threads=1"]


def _checkpoint(tmp_path, sticky: float):
    cfg = load_recipe("a2c-pong-local", [*TINY, f"env.atari.repeat_action_probability={sticky}"])
    torch.manual_seed(0)  # the same weights in every checkpoint
    model = ActorCritic(*env_spaces(cfg.env), cfg.model)
    path = tmp_path / f"sticky-{sticky}.ckpt"
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}, "global_step": 0,
                "hyper_parameters": {"recipe": to_container(cfg)}, "rlkit": {"agent_steps": 0}}, path)
    return str(path)


def _games(path, overrides=()):
    torch.manual_seed(1)
    report = evaluate(path, episodes=1, overrides=list(overrides))
    return report.scores, report.lengths, report


def test_an_env_override_plays_the_env_it_names(tmp_path):
    sticky, plain = _checkpoint(tmp_path, 0.25), _checkpoint(tmp_path, 0.0)
    unsticked = _games(sticky, ["env.atari.repeat_action_probability=0"])
    # the sticky checkpoint played without sticky actions is the plain checkpoint's games, exactly
    assert unsticked[:2] == _games(plain)[:2]
    # and not the games it plays in its own env (same weights, same seeds)
    assert unsticked[:2] != _games(sticky)[:2]
    assert "env changed: env.atari.repeat_action_probability=0" in unsticked[2].summary()


def test_only_env_keys_may_change(tmp_path):
    path = _checkpoint(tmp_path, 0.0)
    with pytest.raises(UserError, match="algo.lr=0.1"):
        evaluate(path, episodes=1, overrides=["algo.lr=0.1"])
    out = subprocess.run([sys.executable, "-m", "rlkit.cli", "evaluate", path, "--episodes", "1", "model.kind=mlp"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "model.kind=mlp" in out.stderr and "env.*" in out.stderr


def test_the_summary_counts_episodes_in_words():
    from rlkit.commands.evaluate import EvalReport

    one = EvalReport("CartPole-v1", [12.0], [12], 400).summary()
    assert one.startswith("CartPole-v1: 1 episode, raw score mean 12.0,"), one
    two = EvalReport("CartPole-v1", [10.0, 20.0], [10, 20], 400).summary()
    assert two.startswith("CartPole-v1: 2 episodes, raw score mean 15.0, median 15.0, min 10.0, max 20.0"), two

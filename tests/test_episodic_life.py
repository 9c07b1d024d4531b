"""Episodic life (the GALA game recipes, as DeepMind's wrapper): a life lost ends the *learning*
episode, but the scores a run reports and `rlkit evaluate` are whole games, raw, the same as with
episodic life off."""

import pytest
import torch

from rlkit.commands.evaluate import evaluate
from rlkit.config.recipes import load_recipe, to_container
from rlkit.learner.envs import env_spaces
from rlkit.learner.models import ActorCritic
from rlkit.learner.rollout import LocalRollout

# a tiny CNN: the test is about the envs and the score keeping, not the network
BREAKOUT = ["env.id=ALE/Breakout-v5", "env.num_envs=2", "model.cnn_channels=[2,2,2]", "model.cnn_hidden=8",
            "env.atari.num_threads=1"]


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: on a busy machine more only wait for each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _play(episodic_life: bool, collects: int = 150):
    cfg = load_recipe("a2c-pong-local", [*BREAKOUT, f"env.atari.episodic_life={str(episodic_life).lower()}"])
    torch.manual_seed(0)
    source = LocalRollout(cfg, ActorCritic(*env_spaces(cfg.env), cfg.model), torch.device("cpu"), seed=0)
    scores, lengths, dones = [], [], 0
    try:
        for _ in range(collects):
            batch = source.collect()
            scores += batch.scores
            lengths += batch.lengths
            dones += int(batch.dones.sum())
    finally:
        source.close()
    return scores, lengths, dones


def test_reported_scores_are_whole_games_with_episodic_life():
    """Same seeds, same actions: episodic life changes the learning episodes (one per life) and
    nothing of what is reported (each game's raw score and its length in agent steps)."""
    life_scores, life_lengths, life_dones = _play(True)
    game_scores, game_lengths, game_dones = _play(False)
    assert len(game_scores) >= 4
    assert (life_scores, life_lengths) == (game_scores, game_lengths)
    assert game_dones == len(game_scores)  # without episodic life a done is a game over
    # Breakout: 5 lives per game, each ends a learning episode; the 2 games still going have lost at most 4 each
    assert 5 * len(game_scores) <= life_dones <= 5 * len(game_scores) + 2 * 4


def test_evaluate_plays_whole_games_from_an_episodic_life_checkpoint(tmp_path):
    reports = {}
    for episodic in (True, False):
        cfg = load_recipe("a2c-pong-local", [*BREAKOUT, f"env.atari.episodic_life={str(episodic).lower()}"])
        torch.manual_seed(0)
        model = ActorCritic(*env_spaces(cfg.env), cfg.model)
        path = tmp_path / f"episodic-{episodic}.ckpt"
        torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}, "global_step": 0,
                    "hyper_parameters": {"recipe": to_container(cfg)}, "rlkit": {"agent_steps": 0}}, path)
        torch.manual_seed(1)
        reports[episodic] = evaluate(str(path), episodes=2)
    assert len(reports[True].scores) == 2
    assert (reports[True].scores, reports[True].lengths) == (reports[False].scores, reports[False].lengths)

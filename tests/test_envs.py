import numpy as np
import pytest
import torch

from rlkit.config.recipes import load_recipe
from rlkit.learner.envs import atari_game, env_spaces, make_vector_env
from rlkit.learner.models import ActorCritic
from rlkit.learner.rollout import LocalRollout


def test_atari_ids_map_to_ale_roms():
    assert atari_game("ALE/SpaceInvaders-v5") == "space_invaders"
    assert atari_game("ALE/Pong-v5") == "pong"


def test_atari_observations_stay_uint8_and_are_preprocessed():
    cfg = load_recipe("a2c-pong-local", ["env.num_envs=2"])
    env = make_vector_env(cfg.env, seed=0)
    obs, _ = env.reset(seed=0)
    env.close()
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8


def test_truncation_is_bootstrapped_not_treated_as_terminal():
    cfg = load_recipe("a2c-cartpole-local", ["env.num_envs=1", "env.kwargs.max_episode_steps=3"])
    model = ActorCritic(*env_spaces(cfg.env), cfg.model)
    with torch.no_grad():
        model.value_head.bias.fill_(10.0)  # V(s) ~ 10 everywhere
    source = LocalRollout(cfg, model, torch.device("cpu"), seed=0)
    batch = source.collect()  # 5 steps: the episode is cut at step 3 (index 2)
    source.close()
    assert batch.dones[2, 0] == 1.0
    assert batch.rewards[2, 0].item() == pytest.approx(1.0 + 0.99 * 10.0, abs=1.0)
    assert batch.rewards[1, 0].item() == 1.0


def test_closing_an_async_env_interrupted_mid_step_never_hangs(monkeypatch):
    """Ctrl-C inside an async step can leave the workers' results half read; gymnasium's plain
    close() would then wait for the rest for ever. close_envs gives up and terminates the workers."""
    import threading

    import gymnasium as gym
    import numpy as np

    import rlkit.learner.envs as envs

    monkeypatch.setattr(envs, "ENV_CLOSE_TIMEOUT_S", 1.0)
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="async")
    env.reset(seed=0)
    env.step_async(np.zeros(2, dtype=np.int64))
    env.unwrapped.parent_pipes[0].recv()  # one worker's result read, then the "interrupt"
    closer = threading.Thread(target=envs.close_envs, args=(env,), daemon=True)
    closer.start()
    closer.join(20)
    assert not closer.is_alive(), "close hung on the half-read step"
    assert not any(p.is_alive() for p in env.unwrapped.processes)

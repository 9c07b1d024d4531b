"""Rollouts: the learner's own vectorised envs, stepped with its live parameters.

A rollout source is any iterable of :class:`Batch`; :class:`LocalRollout` is the default one.
Observations stay in their env dtype (uint8 for Atari) until the network.
"""

from __future__ import annotations

import numpy as np
import torch

from rlkit.config.schema import RunConfig
from rlkit.infra.errors import RunFailed
from rlkit.hooks.batch import Batch
from rlkit.learner.envs import EnvStart, close_envs, is_atari, make_vector_env
from rlkit.learner.models import ActorCritic


class EpisodeTracker:
    """Raw (unclipped) episode scores and lengths per env."""

    def __init__(self, num_envs: int):
        self.score = np.zeros(num_envs, dtype=np.float64)
        self.length = np.zeros(num_envs, dtype=np.int64)

    def step(self, rewards: np.ndarray, done: np.ndarray) -> tuple[list[float], list[int]]:
        self.score += rewards
        self.length += 1
        ended = np.flatnonzero(done)
        scores, lengths = self.score[ended].tolist(), self.length[ended].tolist()
        self.score[ended] = 0.0
        self.length[ended] = 0
        return scores, lengths


class ScoreKeeper:
    """Raw game scores of vectorised envs. With Atari life episodes a lost life is a ``done`` for
    learning but the game goes on; the game is over when the lives count jumps back up (a reset)."""

    def __init__(self, num_envs: int, env_cfg):
        self.tracker = EpisodeTracker(num_envs)
        self.life_episodes = is_atari(env_cfg.id) and env_cfg.atari.episodic_life
        self.lives = None

    def step(self, reward: np.ndarray, done: np.ndarray, truncated: np.ndarray,
             info: dict) -> tuple[list[float], list[int]]:
        """(scores, lengths) of the games that ended with this step."""
        return self.tracker.step(reward, self._game_over(done, truncated, info))

    def _game_over(self, done: np.ndarray, truncated: np.ndarray, info: dict) -> np.ndarray:
        if not self.life_episodes:
            return done
        lives = info["lives"]
        over = truncated | (done & (lives >= (lives if self.lives is None else self.lives)))
        self.lives = lives.copy()
        return over


class LocalRollout:
    """Steps ``env.num_envs`` envs for ``algo.rollout_len`` steps per batch, forever. ``started``:
    the recipe's envs already built and resetting (:class:`rlkit.learner.envs.EnvStart`), taken only where
    they were reset with ``seed``."""

    def __init__(self, recipe: RunConfig, model: ActorCritic, device: torch.device, seed: int,
                 started: EnvStart | None = None):
        self.recipe, self.model, self.device = recipe, model, device
        if started is not None and started.seed == seed:
            self.env, obs = started.take()
        else:
            self.env = make_vector_env(recipe.env, seed)
            obs, _ = self.env.reset(seed=seed)
        self.obs = torch.as_tensor(obs, device=device)
        self.keeper = ScoreKeeper(self.env.num_envs, recipe.env)
        self.action_shape = (self.env.num_envs, *(self.env.single_action_space.shape or ()))
        self.action_dtype = torch.long if model.discrete else torch.float32

    def __iter__(self):
        while True:
            yield self.collect()

    def collect(self) -> Batch:
        T, N = self.recipe.algo.rollout_len, self.env.num_envs
        obs_buf = torch.empty((T + 1, N, *self.obs.shape[1:]), dtype=self.obs.dtype, device=self.device)
        actions_buf = torch.empty((T, *self.action_shape), dtype=self.action_dtype, device=self.device)
        rewards = np.empty((T, N), dtype=np.float32)
        dones = np.empty((T, N), dtype=np.float32)
        scores, lengths = [], []
        obs_buf[0] = self.obs
        for t in range(T):
            try:
                actions, _ = self.model.act(obs_buf[t])
            except RuntimeError:  # e.g. sampling from NaN probabilities: say so if the env caused it
                _raise_if_nonfinite(obs_buf[t])
                raise
            actions_buf[t] = actions
            obs, reward, terminated, truncated, info = self.env.step(self.model.env_actions(actions))
            done = np.logical_or(terminated, truncated)
            ended_scores, ended_lengths = self.keeper.step(reward, done, truncated, info)
            scores += ended_scores
            lengths += ended_lengths
            learn_reward = np.sign(reward) if self.recipe.algo.clip_rewards else reward
            rewards[t] = self._bootstrap_truncated(learn_reward, terminated, truncated, info)
            dones[t] = done
            obs_buf[t + 1] = torch.from_numpy(obs)
        self.obs = obs_buf[T]
        return Batch(obs_buf, actions_buf, torch.from_numpy(rewards).to(self.device),
                     torch.from_numpy(dones).to(self.device), T * N, scores, lengths)

    def _bootstrap_truncated(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                             info: dict) -> np.ndarray:
        """A time limit is not a terminal state: add gamma * V(final obs) to the last reward."""
        cut = np.flatnonzero(np.logical_and(truncated, np.logical_not(terminated)))
        if cut.size == 0 or "final_obs" not in info:
            return reward
        final = np.stack([info["final_obs"][i] for i in cut])
        _, v = self.model.act(torch.as_tensor(final, device=self.device))
        reward = reward.astype(np.float64, copy=True)
        reward[cut] += self.recipe.algo.gamma * v.cpu().numpy()
        return reward

    def close(self) -> None:
        # Let go of the env too: ALE's vector env stops its C++ threads only when it is freed, and
        # the trainer that holds this source may outlive the run (rlkit/infra/startup.py freezes it).
        env, self.env = self.env, None
        if env is not None:
            close_envs(env)


def _raise_if_nonfinite(obs: torch.Tensor) -> None:
    """A policy cannot act on a NaN/inf observation (a discrete one fails to sample): name the env
    that returned it instead of the sampler's error."""
    if obs.is_floating_point():
        bad = ~torch.isfinite(obs.reshape(obs.shape[0], -1)).all(dim=1)
        if bool(bad.any()):
            envs = [int(i) for i in bad.nonzero().flatten()]
            raise RunFailed(f"env {envs[0]} returned a non-finite observation (NaN/inf; {len(envs)} of {obs.shape[0]} "
                            "envs this step): the policy cannot act on it; the last good checkpoint is kept")

"""Rollouts: the learner's own vectorised envs, stepped with its live parameters.

A rollout source is any iterable of :class:`Batch`; :class:`LocalRollout` is the default one.
Observations stay in their env dtype (uint8 for Atari) until the network.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from rlkit.config import RunConfig
from rlkit.envs import make_vector_env
from rlkit.models import ActorCritic


@dataclass
class Batch:
    """``rollout_len`` steps of ``num_envs`` envs; time-major tensors [T, N, ...]."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor  # what the learner learns on (clipped if the recipe says so)
    dones: torch.Tensor
    last_obs: torch.Tensor  # s_T [N, ...]: its value, from the training pass, is the bootstrap
    steps: int  # agent steps in this batch
    scores: list = field(default_factory=list)  # raw scores of episodes that ended in the batch
    lengths: list = field(default_factory=list)


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


class LocalRollout:
    """Steps ``env.num_envs`` envs for ``algo.rollout_len`` steps per batch, forever."""

    def __init__(self, recipe: RunConfig, model: ActorCritic, device: torch.device, seed: int):
        self.recipe, self.model, self.device = recipe, model, device
        self.env = make_vector_env(recipe.env, seed)
        obs, _ = self.env.reset(seed=seed)
        self.obs = torch.as_tensor(obs, device=device)
        self.tracker = EpisodeTracker(self.env.num_envs)
        T, N = recipe.algo.rollout_len, self.env.num_envs
        self.buf_obs = torch.empty((T, N, *self.obs.shape[1:]), dtype=self.obs.dtype, device=device)
        action_shape = self.env.single_action_space.shape or ()
        self.buf_actions = torch.empty((T, N, *action_shape), device=device,
                                       dtype=torch.long if model.discrete else torch.float32)

    def __iter__(self):
        while True:
            yield self.collect()

    def collect(self) -> Batch:
        T, N = self.buf_obs.shape[:2]
        rewards = torch.empty((T, N), device=self.device)
        dones = torch.empty((T, N), device=self.device)
        scores, lengths = [], []
        for t in range(T):
            self.buf_obs[t] = self.obs
            actions, _ = self.model.act(self.obs)
            self.buf_actions[t] = actions
            obs, reward, terminated, truncated, info = self.env.step(self.model.env_actions(actions))
            done = np.logical_or(terminated, truncated)
            ended_scores, ended_lengths = self.tracker.step(reward, done)
            scores += ended_scores
            lengths += ended_lengths
            learn_reward = np.sign(reward) if self.recipe.algo.clip_rewards else reward
            learn_reward = self._bootstrap_truncated(learn_reward, terminated, truncated, info)
            rewards[t] = torch.as_tensor(learn_reward, dtype=torch.float32, device=self.device)
            dones[t] = torch.as_tensor(done, dtype=torch.float32, device=self.device)
            self.obs = torch.as_tensor(obs, device=self.device)
        return Batch(self.buf_obs.clone(), self.buf_actions.clone(), rewards, dones, self.obs.clone(),
                     T * N, scores, lengths)

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
        self.env.close()

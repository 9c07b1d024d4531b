"""``rlkit evaluate CKPT``: play N episodes with a checkpoint's policy and report raw scores."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from rlkit.infra.errors import UserError
from rlkit.infra.startup import end_startup
from rlkit.learner.envs import close_envs, env_spaces, is_atari, make_vector_env
from rlkit.learner.group import total_agent_steps
from rlkit.learner.models import ActorCritic
from rlkit.learner.rollout import EpisodeTracker
from rlkit.training.checkpoints import load_checkpoint, recipe_of


@dataclass
class EvalReport:
    env_id: str
    scores: list[float]
    lengths: list[int]
    checkpoint_steps: int
    gif: str | None = None
    env_changes: tuple[str, ...] = ()

    def summary(self) -> str:
        s = self.scores
        episodes = f"{len(s)} episode{'' if len(s) == 1 else 's'}"
        text = (f"{self.env_id}: {episodes}, raw score mean {statistics.mean(s):.1f}, median "
                f"{statistics.median(s):.1f}, min {min(s):.1f}, max {max(s):.1f} "
                f"(checkpoint at {self.checkpoint_steps:,} agent steps)")
        if self.env_changes:
            text += f"; env changed: {' '.join(self.env_changes)}"
        return text + (f"; GIF in {self.gif}" if self.gif else "")


def evaluate(checkpoint: str, episodes: int, greedy: bool = False, seed: int = 12345,
             gif: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> EvalReport:
    """Play ``episodes`` whole games with the checkpoint's policy. ``overrides`` (``env.*`` keys only,
    e.g. ``env.atari.repeat_action_probability=0``) change the env it plays in: the network and its
    weights are the checkpoint's, so nothing else may change."""
    try:
        ckpt = load_checkpoint(checkpoint)
        recipe = recipe_of(ckpt, _env_only(overrides))
        # Evaluation plays whole games: no life-loss episodes.
        env_cfg = replace(recipe.env, num_envs=min(episodes, 8), atari=replace(recipe.env.atari, episodic_life=False))
        model = ActorCritic(*env_spaces(env_cfg), recipe.model)
        model.load_state_dict({k.removeprefix("model."): v for k, v in ckpt["state_dict"].items()})
        model.eval()
    finally:  # set-up is done (or failed): freeze its heap, collect again (rlkit/infra/startup.py)
        end_startup()
    scores, lengths, frames = _play(model, env_cfg, episodes, greedy, seed, want_frames=gif is not None)
    steps = total_agent_steps(int(ckpt.get("rlkit", {}).get("agent_steps", 0)), recipe.placement.learners)
    if gif:
        gif = _write_gif(frames, gif) if frames else _render_gif(model, recipe.env, greedy, seed, gif)
    return EvalReport(recipe.env.id, scores, lengths, steps, gif, tuple(overrides))


def _env_only(overrides) -> list[str]:
    for item in overrides:
        if not item.startswith("env."):
            raise UserError(f"evaluate: override '{item}' is not allowed; only env.* keys may change "
                            "(e.g. env.atari.repeat_action_probability=0): the network is the checkpoint's")
    return list(overrides)


def _quotas(episodes: int, num_envs: int) -> np.ndarray:
    """Episodes each env must finish: a fixed quota avoids over-counting short episodes."""
    return np.array([episodes // num_envs + (i < episodes % num_envs) for i in range(num_envs)])


def _play(model: ActorCritic, env_cfg, episodes: int, greedy: bool, seed: int, want_frames: bool):
    env = make_vector_env(env_cfg, seed)
    try:
        obs, _ = env.reset(seed=seed)
        quota = _quotas(episodes, env.num_envs)
        done_count = np.zeros(env.num_envs, dtype=int)
        tracker = EpisodeTracker(env.num_envs)
        scores, lengths, frames = [], [], []
        while (done_count < quota).any():
            actions, _ = model.act(torch.as_tensor(obs), greedy=greedy)
            obs, reward, terminated, truncated, _ = env.step(model.env_actions(actions))
            if want_frames and is_atari(env_cfg.id) and done_count[0] == 0:
                frames.append(obs[0][-1])
            ended = np.logical_or(terminated, truncated)
            for i, (score, length) in zip(np.flatnonzero(ended), zip(*tracker.step(reward, ended))):
                if done_count[i] < quota[i]:
                    scores.append(score)
                    lengths.append(length)
                done_count[i] += 1
        return scores, lengths, frames
    finally:
        close_envs(env)


def _render_gif(model: ActorCritic, env_cfg, greedy: bool, seed: int, path: str) -> str:
    import gymnasium as gym

    from rlkit.learner.envs import register_env_family

    register_env_family(env_cfg.id)
    env = gym.make(env_cfg.id, render_mode="rgb_array", **dict(env_cfg.kwargs))
    try:
        obs, _ = env.reset(seed=seed)
        try:
            frames, done = [env.render()], False
        except gym.error.DependencyNotInstalled as exc:
            raise UserError(f"--gif: rendering {env_cfg.id} needs an extra package: {exc}") from None
        while not done and len(frames) < 5000:
            action, _ = model.act(torch.as_tensor(obs).unsqueeze(0), greedy=greedy)
            obs, _, terminated, truncated, _ = env.step(model.env_actions(action)[0])
            frames.append(env.render())
            done = terminated or truncated
        return _write_gif(frames, path)
    finally:
        env.close()


def _gif_frame(frame) -> np.ndarray:
    """uint8 pixels, at least ~160 pixels across: MinAtar renders its 10x10 grid as floats in [0, 1],
    one pixel per cell."""
    a = np.asarray(frame)
    if a.dtype != np.uint8:
        a = (np.clip(a, 0.0, 1.0) * 255).astype(np.uint8)
    scale = max(1, 160 // max(a.shape[:2]))
    return a.repeat(scale, axis=0).repeat(scale, axis=1)


def _write_gif(frames: list, path: str) -> str:
    from PIL import Image

    images = [Image.fromarray(_gif_frame(f)) for f in frames[::2]]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    images[0].save(path, save_all=True, append_images=images[1:], duration=40, loop=0)
    return path

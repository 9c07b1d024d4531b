"""Stable-Baselines3's A2C for ``rlkit bench``: the same game and env count as the recipe, SB3's own
env stack and policy, its hyper-parameters set to the recipe's where SB3 has them.

- Atari: ``make_atari_env("<Game>NoFrameskip-v4")`` (SB3's AtariWrapper: no-op starts, frame skip 4
  with max-pooling, 84x84 grey, rewards clipped as the recipe says, no life-loss episodes unless the
  recipe asks) and ``VecFrameStack``; ``CnnPolicy`` is the same Nature CNN.
- MinAtar: SB3 has no network for it; its features extractor is rlkit's MinAtar network.
- Anything else: ``make_vec_env`` and ``MlpPolicy`` (SB3's default: separate 64-64 tanh bodies).

Needs the optional extra: ``pip install -e .[bench]``.

    python -m rlkit.bench.sb3 a2c-pong-local --steps 40000
"""

from __future__ import annotations

import time

import torch


def sb3_a2c(cfg, steps: int, device: str = "cpu", seed: int = 0) -> dict:
    """SB3's A2C for ``steps`` agent steps; the time after each update (rollout + train)."""
    from stable_baselines3 import A2C
    from stable_baselines3.common.callbacks import BaseCallback

    a = cfg.algo
    env, policy, policy_kwargs = _env_and_policy(cfg, seed)
    if a.optimizer == "rmsprop_tf":
        from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

        policy_kwargs.update(optimizer_class=RMSpropTFLike, optimizer_kwargs=dict(alpha=a.alpha, eps=a.eps))
    elif a.optimizer == "rmsprop":
        policy_kwargs.update(optimizer_kwargs=dict(alpha=a.alpha, eps=a.eps, weight_decay=0))
    model = A2C(policy, env, learning_rate=a.lr, n_steps=a.rollout_len, gamma=a.gamma,
                gae_lambda=1.0 if a.gae_lambda is None else a.gae_lambda, ent_coef=a.entropy_coef,
                vf_coef=a.value_coef, max_grad_norm=a.max_grad_norm or float("inf"), rms_prop_eps=a.eps,
                use_rms_prop=a.optimizer != "adam", normalize_advantage=a.normalize_advantages,
                policy_kwargs=policy_kwargs, seed=seed, device=device)

    class Clock(BaseCallback):
        def __init__(self):
            super().__init__()
            self.times: list[float] = []

        def _on_rollout_start(self) -> None:  # the previous rollout's update is done
            self.times.append(time.perf_counter())

        def _on_step(self) -> bool:
            return True

    clock = Clock()
    model.learn(total_timesteps=steps, callback=clock)
    clock.times.append(time.perf_counter())
    env.close()
    return {"agent_steps": int(model.num_timesteps), "update_times": clock.times[1:]}


def _env_and_policy(cfg, seed: int):
    from stable_baselines3.common.env_util import make_atari_env, make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack

    from rlkit.learner.envs import ATARI_PREFIX, is_atari, register_env_family

    n = cfg.env.num_envs
    if is_atari(cfg.env.id):
        import ale_py
        import gymnasium as gym

        gym.register_envs(ale_py)
        at = cfg.env.atari
        game = cfg.env.id[len(ATARI_PREFIX):].split("-")[0]  # ALE/Pong-v5 -> Pong
        env = make_atari_env(f"{game}NoFrameskip-v4", n_envs=n, seed=seed, wrapper_kwargs=dict(
            noop_max=at.noop_max, frame_skip=at.frameskip, screen_size=at.size,
            terminal_on_life_loss=at.episodic_life, clip_reward=cfg.algo.clip_rewards,
            action_repeat_probability=at.repeat_action_probability))
        return VecFrameStack(env, n_stack=at.stack), "CnnPolicy", {}
    register_env_family(cfg.env.id)
    env = make_vec_env(cfg.env.id, n_envs=n, seed=seed, env_kwargs=dict(cfg.env.kwargs))
    if cfg.model.kind == "minatar_cnn":
        return env, "MlpPolicy", dict(features_extractor_class=_minatar_extractor(), net_arch=[])
    return env, "MlpPolicy", {}


def _minatar_extractor():
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    from rlkit.learner.models import MinAtarCNN

    class MinAtarFeatures(BaseFeaturesExtractor):
        def __init__(self, observation_space):
            net = MinAtarCNN(tuple(observation_space.shape))
            super().__init__(observation_space, net.out_dim)
            self.net = net

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.net(obs)

    return MinAtarFeatures


def main() -> None:
    from rlkit.bench.reference import contender_main

    contender_main(sb3_a2c)


if __name__ == "__main__":
    main()

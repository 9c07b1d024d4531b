"""The reference A2C loop of ``rlkit bench``: the ceiling rlkit is measured against.

Written for the benchmark as a user would write it by hand, with no Lightning and no plugins: the
recipe's env (rlkit's vector env, so the same AtariVectorEnv or gymnasium env), the recipe's network
class and hyper-parameters, its optimizer; n-step returns, one backward per rollout. It treats a
time-limit truncation as terminal (rlkit bootstraps it), which does not change its speed.

    python -m rlkit.bench.reference a2c-pong-local --steps 40000
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch
from torch.distributions import Categorical

from rlkit.learner.envs import make_vector_env
from rlkit.learner.models import ActorCritic
from rlkit.learner.optim import make_optimizer


def a2c(cfg, steps: int, device: str = "cpu", seed: int = 0) -> dict:
    """Train for ``steps`` agent steps; the time after each update and the scores of ended episodes."""
    a, T = cfg.algo, cfg.algo.rollout_len
    if a.gae_lambda is not None or a.normalize_advantages or a.loss_reduction != "mean" or a.log_prob_floor:
        raise ValueError("the reference loop is plain A2C: n-step returns, mean losses, no advantage normalisation")
    torch.manual_seed(seed)
    env = make_vector_env(cfg.env, seed)
    bf16 = torch.bfloat16 if cfg.trainer.precision == "bf16-mixed" else None
    model = ActorCritic(env.single_observation_space, env.single_action_space, cfg.model, bf16).to(device)
    opt = make_optimizer(model.parameters(), a)
    obs = torch.as_tensor(env.reset(seed=seed)[0], device=device)
    N = env.num_envs
    score, scores, times = np.zeros(N), [], []
    for _ in range(-(-steps // (T * N))):
        obs_buf, act_buf, rew_buf, done_buf = [], [], [], []
        for _ in range(T):
            with torch.no_grad():
                logits, _ = model(obs)
            action = Categorical(logits=logits).sample()
            next_obs, reward, terminated, truncated, _ = env.step(action.cpu().numpy())
            done = terminated | truncated
            score += reward
            scores += score[done].tolist()
            score[done] = 0.0
            obs_buf.append(obs)
            act_buf.append(action)
            rew_buf.append(torch.as_tensor(np.sign(reward) if a.clip_rewards else reward, dtype=torch.float32))
            done_buf.append(torch.as_tensor(done, dtype=torch.float32))
            obs = torch.as_tensor(next_obs, device=device)
        with torch.no_grad():
            _, ret = model(obs)
        returns = []
        for t in reversed(range(T)):
            ret = rew_buf[t].to(device) + a.gamma * ret * (1.0 - done_buf[t].to(device))
            returns.insert(0, ret)
        logits, values = model(torch.cat(obs_buf))
        dist = Categorical(logits=logits)
        returns = torch.cat(returns)
        advantages = (returns - values).detach()
        loss = (-(advantages * dist.log_prob(torch.cat(act_buf))).mean()
                + a.value_coef * (returns - values).pow(2).mean() - a.entropy_coef * dist.entropy().mean())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.max_grad_norm or float("inf"))
        opt.step()
        times.append(time.perf_counter())
    env.close()
    return {"agent_steps": len(times) * T * N, "update_times": times, "scores": scores}


def contender_main(run, *, recipe_allocator: bool = False) -> None:
    """A benchmark contender's command line: RECIPE [overrides] --steps N [--device D]; prints
    ``run(cfg, steps, device, seed)`` as JSON. Shared by the reference loop and SB3's.
    ``recipe_allocator``: treat freed memory as an rlkit learner does (``trainer.reuse_freed_memory``),
    so that the reference loop stays a ceiling for rlkit; SB3 runs as its users run it."""
    from rlkit.config.recipes import load_recipe
    from rlkit.infra.memory import keep_freed_memory

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("recipe")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    cfg = load_recipe(a.recipe, a.overrides)
    if recipe_allocator and cfg.trainer.reuse_freed_memory:
        keep_freed_memory()
    torch.set_num_threads(cfg.trainer.torch_threads or os.cpu_count() or 1)  # as rlkit sets one learner's
    print(json.dumps(run(cfg, a.steps, a.device, cfg.seed)))


def main() -> None:
    contender_main(a2c, recipe_allocator=True)


if __name__ == "__main__":
    main()

"""A2C math as pure functions on tensors shaped [T, N] (time, environment).

``dones[t]`` is 1 when the episode ended at step t, so nothing is bootstrapped across it.
``last_value`` [N] is the value estimate of the observation after the last step.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch


def nstep_returns(rewards: torch.Tensor, dones: torch.Tensor, last_value: torch.Tensor,
                  gamma: float) -> torch.Tensor:
    """R_t = r_t + gamma * (1 - done_t) * R_{t+1}, with R_T = V(s_T)."""
    returns = torch.empty_like(rewards)
    running = last_value
    for t in reversed(range(rewards.shape[0])):
        running = rewards[t] + gamma * (1.0 - dones[t]) * running
        returns[t] = running
    return returns


def gae_advantages(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor,
                   last_value: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """Generalised advantage estimation: A_t = delta_t + gamma * lam * (1 - done_t) * A_{t+1}."""
    advantages = torch.empty_like(rewards)
    running = torch.zeros_like(last_value)
    next_value = last_value
    for t in reversed(range(rewards.shape[0])):
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * not_done * next_value - values[t]
        running = delta + gamma * lam * not_done * running
        advantages[t] = running
        next_value = values[t]
    return advantages


def returns_and_advantages(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor,
                           last_value: torch.Tensor, gamma: float,
                           gae_lambda: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Value targets and advantages: n-step returns when ``gae_lambda`` is None, else GAE."""
    if gae_lambda is None:
        returns = nstep_returns(rewards, dones, last_value, gamma)
        return returns, returns - values
    advantages = gae_advantages(rewards, values, dones, last_value, gamma, gae_lambda)
    return advantages + values, advantages


class A2CLoss(NamedTuple):
    total: torch.Tensor
    policy: torch.Tensor
    value: torch.Tensor
    entropy: torch.Tensor


def a2c_loss(log_probs: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor,
             returns: torch.Tensor, advantages: torch.Tensor, value_coef: float,
             entropy_coef: float, reduction: str = "mean") -> A2CLoss:
    """Policy gradient with a fixed advantage, squared-error value loss, entropy bonus.

    total = -mean(A * log pi) + value_coef * mean((R - V)^2) - entropy_coef * mean(H)
    (the 0.5 of the usual squared error is left to ``value_coef``, as in OpenAI baselines).
    ``reduction="sum"`` sums each term over the batch instead, as GA3C does: the gradient is then
    batch-size times larger, and the size of a trainer's batch weighs its update.
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction: {reduction!r}; use 'mean' or 'sum'")
    reduce = torch.sum if reduction == "sum" else torch.mean
    policy = -reduce(advantages.detach() * log_probs)
    value = reduce((returns.detach() - values).pow(2))
    ent = reduce(entropy)
    total = policy + value_coef * value - entropy_coef * ent
    return A2CLoss(total, policy, value, ent)


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """1 - Var(R - V) / Var(R): 1 for a critic that predicts the returns, 0 for one that predicts
    their mean (or ignores the state), negative for a worse one; nan when the returns are constant."""
    var = torch.var(returns, unbiased=False)
    if not bool(var > 0):
        return float("nan")
    return float(1.0 - torch.var(returns - values, unbiased=False) / var)


def update_size(before: list[torch.Tensor], after: list[torch.Tensor], lr: float) -> dict[str, float]:
    """How far one optimizer step moved the parameters: ``optim/update_ratio`` = |dtheta| / |theta|
    (about 1e-3 is the usual healthy order) and ``optim/step_per_lr`` = rms(dtheta) / lr, the step
    per weight in units of the learning rate (about 1 for PyTorch's RMSprop in steady state, far
    below 1 when an optimizer's eps dominates the gradients' root mean square)."""
    delta = torch.cat([(a.detach().float() - b.float()).reshape(-1) for a, b in zip(after, before)])
    norm = torch.cat([a.detach().float().reshape(-1) for a in after]).norm()
    rms = delta.norm() / math.sqrt(max(1, delta.numel()))
    return {"optim/update_ratio": float(delta.norm() / norm.clamp_min(1e-12)), "optim/step_per_lr": float(rms / lr)}


def floored_log_prob(probs: torch.Tensor, actions: torch.Tensor, floor: float) -> torch.Tensor:
    """log(max(pi(a|s), floor)), GA3C's guard against policy lag driving pi to zero."""
    chosen = probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    return torch.log(chosen.clamp_min(floor))


def normalize(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    return (x - x.mean()) / (x.std() + eps)

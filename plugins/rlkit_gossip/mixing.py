"""Pure functions: one gossip mixing step.

A message is ``(numerator, weight)``. Uniform (GALA as the paper codes it): a learner sends its
parameters with weight 1 and averages what it received with its own, ``x <- (x + sum x_j)/(1+n)``
(1/(k+1) each when all k in-peers' messages are there). Push-sum: a learner with weight w that
sends to k peers keeps ``w/(k+1)`` and sends ``(x w/(k+1), w/(k+1))`` to each; the receiver adds
numerators and weights and de-biases ``x = z / w``. Push-sum conserves the sum of the numerators
(the average) on any graph and whichever messages were skipped; uniform does only on regular
graphs with no skipped messages.
"""

from __future__ import annotations

import torch


def uniform_message(params: torch.Tensor) -> tuple[torch.Tensor, float]:
    return params, 1.0


def uniform_mix(params: torch.Tensor, messages: list[tuple[torch.Tensor, float]]) -> torch.Tensor:
    if not messages:
        return params
    total = params.clone()
    for numerator, weight in messages:
        total += numerator / weight
    return total / (1 + len(messages))


def push_sum_split(params: torch.Tensor, weight: float, k: int) -> tuple[float, tuple[torch.Tensor, float]]:
    """Sending to k peers: (the weight kept, the message each peer gets)."""
    share = weight / (k + 1)
    return share, (params * share, share)


def push_sum_mix(params: torch.Tensor, kept_weight: float,
                 messages: list[tuple[torch.Tensor, float]]) -> tuple[torch.Tensor, float]:
    """(de-biased parameters, new weight) after adding the messages to what was kept."""
    z = params * kept_weight
    w = kept_weight
    for numerator, weight in messages:
        z += numerator
        w += weight
    return z / w, w

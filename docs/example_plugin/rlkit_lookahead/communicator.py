"""The ``lookahead`` communicator: one learner whose optimizer is wrapped in Lookahead.

Lookahead (Zhang et al. 2019, "Lookahead Optimizer: k steps forward, 1 step back") keeps a second
copy of the parameters, the slow weights. The inner optimizer moves the fast weights (the module's
parameters) as usual; every ``k`` steps the slow weights take a step of size ``alpha`` towards the
fast weights and the fast weights restart from there.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from rlkit.api import hookimpl


def lookahead_update(slow: Sequence[torch.Tensor], fast: Sequence[torch.Tensor], alpha: float) -> None:
    """One Lookahead sync, in place: slow <- slow + alpha * (fast - slow), then fast <- slow."""
    with torch.no_grad():
        for s, f in zip(slow, fast, strict=True):
            s += alpha * (f - s)
            f.copy_(s)


class LookaheadCommunicator:
    """Single learner (like ``local``); Lookahead is applied after each optimizer step."""

    def __init__(self, options, recipe):
        self.options = options
        self.recipe = recipe
        self.slow: list[torch.Tensor] | None = None
        self.syncs = 0

    @hookimpl
    def rlkit_after_optimizer_step(self, run, module, update: int) -> None:
        fast = list(module.parameters())
        slow = self._slow_weights(fast)
        if update % self.options.k == 0:
            lookahead_update(slow, fast, self.options.alpha)
            self.syncs += 1

    @hookimpl
    def rlkit_metrics(self, run, module) -> Mapping[str, float]:
        return {"lookahead/syncs": float(self.syncs)}

    @hookimpl
    def rlkit_state_dict(self, run, module) -> Mapping[str, Any]:
        slow = [s.detach().cpu().clone() for s in self.slow] if self.slow is not None else []
        return {"lookahead": {"slow": slow, "syncs": self.syncs}}

    @hookimpl
    def rlkit_load_state_dict(self, run, module, state: Mapping[str, Any]) -> None:
        mine = state.get("lookahead")
        if not mine:
            return
        self.syncs = int(mine.get("syncs", 0))
        self.slow = [t.clone() for t in mine.get("slow", [])] or None

    def _slow_weights(self, fast: list[torch.Tensor]) -> list[torch.Tensor]:
        # Taken on the first call, i.e. from the parameters after the first update: no earlier run
        # hook sees the module. Restored ones may sit on the CPU (the module may not have been on its
        # device yet when the checkpoint was loaded).
        if self.slow is None:
            self.slow = [p.detach().clone() for p in fast]
        elif self.slow[0].device != fast[0].device:
            self.slow = [s.to(p.device) for s, p in zip(self.slow, fast)]
        return self.slow

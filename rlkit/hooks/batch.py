"""The training batch: what a rollout source yields, one per update, and what the learner's loss
reads. Part of the contract (a plugin's source builds them), so it lives with the hooks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass
class Batch:
    """``rollout_len`` (T) steps of ``num_envs`` (N) envs; time-major tensors."""

    obs: torch.Tensor  # [T + 1, N, ...]: s_0 .. s_T; the value of s_T is the bootstrap
    actions: torch.Tensor  # [T, N, ...]
    rewards: torch.Tensor  # [T, N], what the learner learns on (clipped if the recipe says so)
    dones: torch.Tensor  # [T, N]
    steps: int  # agent steps in this batch
    scores: list = field(default_factory=list)  # raw scores of episodes that ended in the batch
    lengths: list = field(default_factory=list)

    def to(self, device) -> "Batch":
        """The batch with its tensors on ``device`` (the same object when they are there already)."""
        import torch  # the contract imports no torch until a batch exists

        if self.obs.device == torch.device(device):
            return self
        move = lambda t: t.to(device, non_blocking=True)  # noqa: E731
        return Batch(move(self.obs), move(self.actions), move(self.rewards), move(self.dones), self.steps,
                     self.scores, self.lengths)

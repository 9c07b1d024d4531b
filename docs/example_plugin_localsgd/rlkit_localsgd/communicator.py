"""The ``localsgd`` communicator: K synchronous learners that average their parameters every k updates.

Local SGD (periodic parameter averaging; Stich 2019, "Local SGD converges fast and communicates
little"; Lin et al. 2020, "Don't use large mini-batches, use local SGD"): every learner trains on
its own environments with its own optimizer, exactly as a single learner would, and every ``k``
optimizer updates the learners replace their parameters by the average of all learners'
parameters, with one all-reduce over a flat vector. ``k = 1`` averages after every step (close to,
but not the same as, averaging gradients: each learner's optimizer state stays its own).

The learners are laid out by the core (``Topology.SYNCHRONOUS``, ``sync_every=k``): every learner
runs the same sequence of updates, independent between syncs (the core's own collectives, the shared
episode scores and the stop decision, also happen only after every k-th update and the last), so
the all-reduce in ``rlkit_after_optimizer_step`` at ``update % k == 0`` meets all its peers, and so
does the final one in ``rlkit_train_end``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch
import torch.distributed as dist

from rlkit.api import LearnerLayout, RunFailed, Topology, UserError, first_line, hookimpl, interrupts_deferred

# -- the math: pure functions, tested on their own --------------------------------------------


def flatten(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """One new flat vector holding every tensor, in float32 at least (bf16/fp16 parameters are
    averaged in float32, so every learner rounds the same sum the same way)."""
    dtype = torch.float32
    for t in tensors:
        dtype = torch.promote_types(dtype, t.dtype)
    return torch.cat([t.detach().reshape(-1).to(dtype) for t in tensors])


def unflatten_into(flat: torch.Tensor, tensors: Sequence[torch.Tensor]) -> None:
    """Copy ``flat`` back into ``tensors`` in place (cast to each tensor's dtype)."""
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset:offset + n].view(t.shape))
        offset += n
    if offset != flat.numel():
        raise ValueError(f"flat vector has {flat.numel()} elements, the tensors {offset}")


def average_(summed: torch.Tensor, world_size: int) -> torch.Tensor:
    """The all-reduced SUM of the learners' vectors, turned into their mean in place."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    return summed.div_(world_size)


def distance(own: torch.Tensor, average: torch.Tensor) -> float:
    """L2 distance of one learner's flat parameters from the average."""
    return float(torch.linalg.vector_norm(own - average))


def average_parameters(params: Sequence[torch.Tensor], all_reduce_sum: Callable[[torch.Tensor], Any],
                       world_size: int) -> float:
    """One local-SGD average, in place: ``params`` <- mean over learners. ``all_reduce_sum`` sums a
    flat vector over the learners in place (``torch.distributed.all_reduce``; a stand-in in tests).
    Returns this learner's L2 distance from the average just before it was applied. The parameters
    are untouched when ``all_reduce_sum`` raises."""
    with torch.no_grad():
        own = flatten(params)
        summed = own.clone()
        all_reduce_sum(summed)
        mean = average_(summed, world_size)
        before = distance(own, mean)
        unflatten_into(mean, params)
    return before


# -- the run hooks ------------------------------------------------------------------------------


class LocalSGDCommunicator:
    """K synchronous learners; every ``k`` updates (and once at the end) their parameters are averaged."""

    def __init__(self, options, recipe):
        self.options = options
        self.recipe = recipe
        self.averages = 0  # parameter averages done so far (restored on resume)
        self.dist_before: float | None = None  # this learner's distance from the last average, before it
        self.averaged_at: int | None = None  # the update after which the last average happened (this process)

    @hookimpl
    def rlkit_learner_layout(self, run) -> LearnerLayout:
        # each learner steps its own RMSprop on its own gradients: its optimizer state is its own,
        # and the core saves and resumes it per learner; the learners meet only every k updates
        return LearnerLayout(Topology.SYNCHRONOUS, backend=self.options.backend, timeout_s=self.options.timeout_s,
                             min_learners=2, own_optimizer_state=True, sync_every=self.options.k)

    @hookimpl
    def rlkit_configure(self, run) -> None:
        # A skipped update (NaN/inf) is decided by each learner on its own loss here (nothing
        # shares gradients), so one learner's update count would fall behind its peers' and the
        # averages would stop meeting each other.
        if run.recipe.algo.on_nonfinite == "skip":
            raise UserError("algo.on_nonfinite: skip is not allowed with communicator localsgd (a learner that "
                            "skips an update would fall out of step with its peers' parameter averages); use stop")

    @hookimpl
    def rlkit_after_optimizer_step(self, run, module, update: int) -> None:
        if update % self.options.k == 0:
            self._average(module, update)

    @hookimpl
    def rlkit_train_end(self, run, module) -> None:
        # Every learner ends after the same update; the last average makes last.ckpt (learner 0's
        # parameters) the learners' consensus also when the budget is not a multiple of k.
        if self.averaged_at != module.global_step:
            self._average(module, module.global_step)

    @hookimpl
    def rlkit_metrics(self, run, module) -> Mapping[str, float]:
        out = {"localsgd/averages": float(self.averages)}
        if self.dist_before is not None:
            out["localsgd/dist_before"] = self.dist_before
        return out

    @hookimpl
    def rlkit_state_dict(self, run, module) -> Mapping[str, Any]:
        return {"localsgd": {"averages": self.averages}}

    @hookimpl
    def rlkit_load_state_dict(self, run, module, state: Mapping[str, Any]) -> None:
        mine = state.get("localsgd")
        if mine:
            self.averages = int(mine.get("averages", 0))

    def _average(self, module, update: int) -> None:
        def all_reduce_sum(flat: torch.Tensor) -> None:
            try:
                dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            except (RuntimeError, dist.DistBackendError) as exc:
                raise RunFailed(f"localsgd: learner {module.global_rank} lost its peers in the parameter average: "
                                f"{module.lost_peers()}; after update {update}, communication.options.timeout_s="
                                f"{self.options.timeout_s:g}; the backend said: {first_line(exc)}") from None

        # a Ctrl-C during the all-reduce is handled once the average is applied and counted, so
        # interrupted.ckpt never holds an average that happened without its count (or half applied)
        with interrupts_deferred():
            self.dist_before = average_parameters(list(module.parameters()), all_reduce_sum, module.world_size)
            self.averages += 1
            self.averaged_at = update

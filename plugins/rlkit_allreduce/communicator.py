"""AllreduceCommunicator: the learners are torch.distributed ranks launched by Lightning; after
backward, one flat all-reduce averages the gradients, so every rank takes the same optimizer
step from the same parameters and the parameters stay identical.

Why not DistributedDataParallel: DDP overlaps bucketed all-reduces with backward, which hides
their cost, and it owns the moment of synchronisation. Here the sync is the
``rlkit_sync_gradients`` hook, one collective whose time is measured and logged.
"""

from __future__ import annotations

import time
from datetime import timedelta

import torch.distributed as dist

from rlkit.errors import RunFailed, UserError
from rlkit.plugin import hookimpl
from rlkit.strategies import LearnerProcesses, first_line
from rlkit_allreduce.flat import flatten, unflatten_into


class AllreduceCommunicator:
    def __init__(self, options, recipe):
        self.options = options
        self.recipe = recipe
        self.comm_s = 0.0
        self.window_start = time.perf_counter()
        self.strategy = None

    @hookimpl
    def rlkit_configure(self, run) -> None:
        t, p = run.recipe.trainer, run.recipe.placement
        if p.learners != t.devices * p.learners_per_device * t.num_nodes:
            raise UserError(f"placement.learners: {p.learners} is not allowed with trainer.devices={t.devices}, "
                            f"placement.learners_per_device={p.learners_per_device} and trainer.num_nodes="
                            f"{t.num_nodes}; allreduce runs learners = devices x learners_per_device x num_nodes")
        if p.learners_per_device > 1 and self._backend(run) == "nccl":
            raise UserError(f"placement.learners_per_device: {p.learners_per_device} is not allowed with the nccl "
                            "backend (NCCL refuses two ranks on one GPU); use 1, or communication.options.backend=gloo")

    def _backend(self, run) -> str:
        if self.options.backend != "auto":
            return self.options.backend
        return "gloo" if run.recipe.trainer.accelerator == "cpu" else "nccl"

    @hookimpl
    def rlkit_make_strategy(self, run):
        self.strategy = LearnerProcesses(process_group_backend=self._backend(run),
                                         learners_per_device=run.recipe.placement.learners_per_device,
                                         timeout=timedelta(seconds=self.options.timeout_s))
        return self.strategy

    @hookimpl
    def rlkit_sync_gradients(self, run, module):
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        start = time.perf_counter()
        flat = flatten(grads)
        try:
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        except (RuntimeError, dist.DistBackendError) as exc:
            raise RunFailed(self._lost_peer(exc)) from None
        flat /= dist.get_world_size()
        unflatten_into(flat, grads)
        self.comm_s += time.perf_counter() - start
        return True

    def _lost_peer(self, exc: BaseException) -> str:
        lost = self.strategy.lost_peers() if self.strategy is not None else "a peer left"
        return (f"allreduce: learner {dist.get_rank()} lost its peers in the all-reduce: {lost} "
                f"(communication.options.timeout_s={self.options.timeout_s:g}); gloo/NCCL said: {first_line(exc)}")

    @hookimpl
    def rlkit_metrics(self, run, module):
        now = time.perf_counter()
        elapsed = max(now - self.window_start, 1e-9)
        out = {"comm/allreduce_frac": self.comm_s / elapsed, "comm/world_size": float(dist.get_world_size())}
        updates = run.recipe.trainer.log_every_n_updates if module.global_step > 1 else 1
        out["comm/allreduce_ms"] = 1000.0 * self.comm_s / updates
        self.comm_s, self.window_start = 0.0, now
        return out

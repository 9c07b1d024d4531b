"""AllreduceCommunicator: the learners are torch.distributed ranks launched by Lightning; after
backward, one flat all-reduce averages the gradients, so every rank takes the same optimizer
step from the same parameters and the parameters stay identical.

Why not DistributedDataParallel: DDP overlaps bucketed all-reduces with backward, which hides
their cost, and it owns the moment of synchronisation. Here the sync is the
``rlkit_sync_gradients`` hook, one collective whose time is measured and logged.
"""

from __future__ import annotations

import time

import torch.distributed as dist

from rlkit.api import LearnerLayout, RunFailed, Topology, first_line, hookimpl
from rlkit_allreduce.flat import flatten, unflatten_into


class AllreduceCommunicator:
    def __init__(self, options, recipe):
        self.options = options
        self.recipe = recipe
        self.comm_s = 0.0
        self.window_start = time.perf_counter()

    @hookimpl
    def rlkit_learner_layout(self, run) -> LearnerLayout:
        return LearnerLayout(Topology.SYNCHRONOUS, backend=self.options.backend, timeout_s=self.options.timeout_s)

    @hookimpl
    def rlkit_sync_gradients(self, run, module):
        grads = [p.grad for p in module.parameters() if p.grad is not None]
        start = time.perf_counter()
        flat = flatten(grads)
        try:
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        except (RuntimeError, dist.DistBackendError) as exc:
            raise RunFailed(self._lost_peer(module, exc)) from None
        flat /= dist.get_world_size()
        unflatten_into(flat, grads)
        self.comm_s += time.perf_counter() - start
        return True

    def _lost_peer(self, module, exc: BaseException) -> str:
        return (f"allreduce: learner {dist.get_rank()} lost its peers in the all-reduce: {module.lost_peers()} "
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

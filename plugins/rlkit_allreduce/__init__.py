"""The ``allreduce`` communicator: synchronous multi-learner A2C over torch.distributed."""

from __future__ import annotations

from dataclasses import dataclass

from rlkit.api import CommunicatorSpec, hookimpl, opt


@dataclass
class AllreduceConfig:
    backend: str = opt("auto", "process-group backend (auto = nccl on GPU, gloo on CPU)",
                       choices=("auto", "gloo", "nccl"))
    timeout_s: float = opt(120.0, "a collective or the process-group set-up waiting longer than this fails the run",
                           gt=0)


def _factory(options: AllreduceConfig, recipe):
    from rlkit_allreduce.communicator import AllreduceCommunicator

    return AllreduceCommunicator(options, recipe)


@hookimpl
def rlkit_communicators():
    return [CommunicatorSpec(name="allreduce", factory=_factory, options_schema=AllreduceConfig,
                             summary="K learners, gradients averaged every update (synchronous A2C)")]

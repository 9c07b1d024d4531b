"""rlkit-example-localsgd: the ``localsgd`` communicator.

This module is what the ``rlkit`` entry point names, so it stays light: it declares the options
schema and the registration hook. The communicator itself (and torch) is imported only when a run
selects it.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlkit.api import CommunicatorSpec, hookimpl, opt


@dataclass
class LocalSGDConfig:
    """Options of ``communication.options`` when ``communication.name: localsgd``."""

    k: int = opt(8, "optimizer updates between parameter averages (1 averages after every update)", ge=1)
    backend: str = opt("auto", "process-group backend (auto = nccl on GPU, gloo on CPU)",
                       choices=("auto", "gloo", "nccl"))
    timeout_s: float = opt(120.0, "a parameter average or the process-group set-up waiting longer than this fails "
                           "the run", gt=0)


def make_communicator(options: LocalSGDConfig, recipe):
    """The factory rlkit calls once per run, with the validated options and recipe."""
    from rlkit_localsgd.communicator import LocalSGDCommunicator

    return LocalSGDCommunicator(options, recipe)


@hookimpl
def rlkit_communicators():
    return [CommunicatorSpec(name="localsgd", factory=make_communicator, options_schema=LocalSGDConfig,
                             summary="K learners, parameters averaged every k updates (local SGD, example plugin)")]

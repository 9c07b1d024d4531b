"""rlkit-example-plugin: the ``lookahead`` communicator.

This module is what the ``rlkit`` entry point names, so it stays light: it declares the options
schema and the registration hook. The communicator itself (and torch) is imported only when a run
selects it.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlkit.api import CommunicatorSpec, hookimpl, opt


@dataclass
class LookaheadConfig:
    """Options of ``communication.options`` when ``communication.name: lookahead``."""

    k: int = opt(5, "optimizer steps between slow-weight syncs", ge=1)
    alpha: float = opt(0.5, "slow-weight step size: slow <- slow + alpha * (fast - slow)", gt=0, le=1)


def make_communicator(options: LookaheadConfig, recipe):
    """The factory rlkit calls once per run, with the validated options and recipe."""
    from rlkit_lookahead.communicator import LookaheadCommunicator

    return LookaheadCommunicator(options, recipe)


@hookimpl
def rlkit_communicators():
    return [CommunicatorSpec(name="lookahead", factory=make_communicator, options_schema=LookaheadConfig,
                             summary="one learner, Lookahead slow weights every k updates (example plugin)")]

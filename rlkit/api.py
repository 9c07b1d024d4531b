"""rlkit's public plugin API: everything a plugin imports from rlkit, and nothing else.

Built-in plugins import only this module (``tests/test_public_api.py`` enforces it), so a third
party can write any of them from these names and the hook contract (:mod:`rlkit.hookspecs`).
docs/writing-a-plugin.md walks through them.

Registering
    ``hookimpl``, ``CommunicatorSpec``, ``EnvFamilySpec``, ``opt`` (declare an option with its
    default, help and bounds).
Laying out learners
    ``LearnerLayout``, ``Topology`` (returned from ``rlkit_learner_layout``).
Failing cleanly
    ``UserError`` (a recipe the protocol cannot run: one line, exit code 2), ``RunFailed`` (the run
    cannot go on: one line, checkpoint kept, exit code 1).
On a learner
    Hooks receive the learner as ``module``; :class:`Learner` lists what a plugin may read and
    call on it. ``run_store()`` is the key-value store the run's learners share (multi-learner
    topologies), ``first_line(exc)`` the message of a backend error in one line,
    ``interrupts_deferred()`` a block (a collective and its bookkeeping) that Ctrl-C cannot cut in half.
Data
    ``Batch`` (a training batch), :class:`RolloutSource` (what ``rlkit_make_rollout_source``
    returns), :class:`Transport` (a point-to-point channel between learners, as gossip's);
    for plugins that step environments in their own processes: ``EnvConfig``,
    ``make_vector_env``, ``close_envs``, ``ScoreKeeper`` and ``die_with_parent``.

Heavy names (torch, gymnasium) load on first use, so a plugin's registration module stays cheap.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Iterator, Optional, Protocol, runtime_checkable

from rlkit.config import opt
from rlkit.errors import RunFailed, UserError, first_line
from rlkit.layout import LearnerLayout, Topology
from rlkit.plugin import CommunicatorSpec, EnvFamilySpec, hookimpl

if TYPE_CHECKING:
    import torch

    from rlkit.rollout import Batch

__all__ = [
    "hookimpl", "CommunicatorSpec", "EnvFamilySpec", "opt",
    "LearnerLayout", "Topology",
    "UserError", "RunFailed",
    "Learner", "RolloutSource", "Transport", "run_store", "first_line", "interrupts_deferred",
    "Batch", "EnvConfig", "make_vector_env", "close_envs", "ScoreKeeper", "die_with_parent",
]

_LAZY = {
    "Batch": ("rlkit.rollout", "Batch"),
    "ScoreKeeper": ("rlkit.rollout", "ScoreKeeper"),
    "EnvConfig": ("rlkit.config", "EnvConfig"),
    "make_vector_env": ("rlkit.envs", "make_vector_env"),
    "close_envs": ("rlkit.envs", "close_envs"),
    "die_with_parent": ("rlkit.processes", "die_with_parent"),
    "interrupts_deferred": ("rlkit.processes", "interrupts_deferred"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rlkit.api' has no attribute {name!r}")


def run_store() -> Any:
    """The run's key-value store (``torch.distributed.Store``: ``set``, ``get``, ``check``, ``add``),
    hosted by learner 0, in a multi-learner run once ``rlkit_learner_start`` is called; else None.
    Keys under ``rlkit/`` are the core's."""
    from rlkit.strategies import default_store

    return default_store()


class Learner(Protocol):
    """What a plugin may read and do on the learner its hooks receive (``module``).

    Everything else on the object (it is a Lightning module) is the core's and may change."""

    global_rank: int  # this learner's rank, 0 .. world_size - 1
    world_size: int  # learners in the run
    device: "torch.device"  # where its parameters live
    global_step: int  # optimizer updates done so far (the ``update`` hooks get is this after the step)
    agent_steps: int  # environment steps this learner has trained on
    recent_scores: deque  # raw episode scores of the score window (every learner's when synchronous)
    recipe: Any  # the validated recipe (rlkit.config.RunConfig)
    topology: Topology

    def parameters(self) -> Iterator["torch.nn.Parameter"]:
        """The parameters the optimizer steps (a plugin may read and overwrite them in place)."""

    def request_stop(self, reason: str) -> None:
        """End the run after this update, for every learner, with ``reason`` printed once. From
        a per-update hook of synchronous learners, all stop after the same update."""

    @property
    def stop_requested(self) -> bool:
        """The run is stopping after this update (any learner's request, or the score target)."""

    @property
    def interrupted(self) -> bool:
        """Training is ending by Ctrl-C or SIGTERM (each learner writes a checkpoint to resume from)."""

    def lost_peers(self) -> str:
        """After a failed collective: which learner processes have exited, in words."""


@runtime_checkable
class RolloutSource(Protocol):
    """What ``rlkit_make_rollout_source`` returns: training batches, one per update, produced with
    the learner's current parameters (or, for a queue, as fresh as the protocol allows). The core
    calls ``close()``, if present, when the learner ends."""

    def __iter__(self) -> Iterator["Batch"]: ...


@runtime_checkable
class Transport(Protocol):
    """A mailbox per (source, destination, kind) between learners, holding one message (a header
    and a flat tensor) at a time: the shape gossip's shared-memory and torch.distributed
    transports share, for protocols that move parameters without a collective."""

    def ready(self, src: int, dst: int, kind: int) -> bool:
        """The mailbox is free: a send will not overwrite an unread message."""

    def send(self, src: int, dst: int, kind: int, header: "torch.Tensor", data: "torch.Tensor") -> None: ...

    def waiting(self, src: int, dst: int, kind: int) -> bool:
        """A message is there to take."""

    def take(self, src: int, dst: int, kind: int) -> "Optional[tuple[torch.Tensor, torch.Tensor]]": ...

    def close(self, remove: bool = False) -> None: ...

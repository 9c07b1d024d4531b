"""rlkit's public plugin API: everything a plugin imports from rlkit, and nothing else.

Built-in plugins import only this module (``tests/test_public_api.py`` enforces it), so a third
party can write any of them from these names and the hook contract (:mod:`rlkit.hooks.hookspecs`).
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
    Every run hook receives the run as ``run`` (:class:`Run`: the recipe, the communicator's
    options, the run folder) and the learner as ``module``; :class:`Learner` lists what a plugin may read and
    call on it. ``run_store()`` is the key-value store the run's learners share (multi-learner
    topologies), ``first_line(exc)`` the message of a backend error in one line,
    ``interrupts_deferred()`` a block (a collective and its bookkeeping) that Ctrl-C cannot cut in half.
Data
    ``Batch`` (a training batch), :class:`RolloutSource` (what ``rlkit_make_rollout_source``
    returns), :class:`Transport` (a point-to-point channel between learners, as gossip's);
    for plugins that step environments in their own processes: ``EnvConfig``,
    ``make_vector_env``, ``close_envs``, ``ScoreKeeper`` and ``die_with_parent``;
    ``worker_modules()`` names the rlkit modules such a process imports (a forkserver's preload).

Heavy names (torch, gymnasium) load on first use, so a plugin's registration module stays cheap.
"""

from __future__ import annotations

from typing import Any

from rlkit.config.runtime import Run
from rlkit.config.schema import opt
from rlkit.hooks.layout import LearnerLayout, Topology
from rlkit.hooks.protocols import Learner, RolloutSource, Transport
from rlkit.hooks.records import CommunicatorSpec, EnvFamilySpec, hookimpl
from rlkit.infra.errors import RunFailed, UserError, first_line

__all__ = [
    "hookimpl", "CommunicatorSpec", "EnvFamilySpec", "opt",
    "LearnerLayout", "Topology",
    "UserError", "RunFailed",
    "Run", "Learner", "RolloutSource", "Transport", "run_store", "first_line", "interrupts_deferred",
    "Batch", "EnvConfig", "make_vector_env", "close_envs", "ScoreKeeper", "die_with_parent", "worker_modules",
    "write_atomic",
]

_LAZY = {
    "Batch": ("rlkit.hooks.batch", "Batch"),
    "ScoreKeeper": ("rlkit.learner.rollout", "ScoreKeeper"),
    "EnvConfig": ("rlkit.config.schema", "EnvConfig"),
    "make_vector_env": ("rlkit.learner.envs", "make_vector_env"),
    "close_envs": ("rlkit.learner.envs", "close_envs"),
    "die_with_parent": ("rlkit.infra.processes", "die_with_parent"),
    "interrupts_deferred": ("rlkit.infra.processes", "interrupts_deferred"),
    "write_atomic": ("rlkit.infra.files", "write_atomic"),
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
    from rlkit.training.strategies import default_store

    return default_store()


def worker_modules() -> tuple[str, ...]:
    """The rlkit modules a process that steps envs for a learner imports (``make_vector_env``,
    ``ScoreKeeper``): what a forkserver preloads so that each worker does not import them again."""
    return ("rlkit.learner.envs", "rlkit.learner.rollout")

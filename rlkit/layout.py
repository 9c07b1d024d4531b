"""Learner topologies: how a run's learner processes are laid out and what they may wait for.

A communicator declares the layout it needs (hook ``rlkit_learner_layout``); the core checks the
recipe's placement against it once, builds the Lightning strategy, shares episode scores, stops the
run and writes checkpoints the way the topology allows. Plugins never build strategies.

* ``single``: one learner process (``local``, ``queues``: its helpers are the plugin's own).
* ``synchronous``: K learner processes that step together. Every learner runs the same sequence of
  updates, so a collective inside a per-update hook (``rlkit_sync_gradients``,
  ``rlkit_after_optimizer_step``) meets its peers; the core shares episode scores each update (one
  score window, one stop decision) and checkpoints learner 0's state. A protocol whose learners
  each step their own optimizer on their own gradients (local SGD) sets ``own_optimizer_state``:
  learner r > 0 then also keeps its optimizer state beside each checkpoint and resumes it.
* ``independent``: K learner processes that never wait for each other (gossip). No collective may
  be used after start-up; each learner keeps its own score window, checkpoints and resume state,
  and a stop asked by one learner reaches the others through the run's key-value store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Any

from rlkit.errors import UserError


class Topology(str, Enum):
    SINGLE = "single"
    SYNCHRONOUS = "synchronous"
    INDEPENDENT = "independent"


@dataclass(frozen=True)
class LearnerLayout:
    """What a communicator needs from the core. ``backend`` is the process group's (``auto``: gloo
    on CPU, nccl on GPU); ``timeout_s`` bounds every collective; ``child_grace_s`` is how long the
    launching process waits for independent learners at the end before it kills them;
    ``min_learners`` is the fewest learners the protocol makes sense with. ``own_optimizer_state``
    (synchronous only): each learner's optimizer state is its own and is saved and resumed per
    learner (``checkpoints/learner<r>/<checkpoint name>``); without it every learner resumes
    learner 0's, which is right where the learners step on the same gradients (allreduce)."""

    topology: Topology = Topology.SINGLE
    backend: str = "auto"
    timeout_s: float = 1800.0
    child_grace_s: float = 60.0
    min_learners: int = 1
    own_optimizer_state: bool = False

    @property
    def multi(self) -> bool:
        return self.topology is not Topology.SINGLE


def resolve_backend(layout: LearnerLayout, recipe) -> str:
    if layout.backend != "auto":
        return layout.backend
    return "gloo" if recipe.trainer.accelerator == "cpu" else "nccl"


def check_placement(layout: LearnerLayout, recipe) -> None:
    """The one check of ``placement`` and ``trainer`` against the topology (a one-line UserError)."""
    t, p, name = recipe.trainer, recipe.placement, recipe.communication.name
    if not layout.multi:
        if p.learners != 1 or t.devices != 1 or t.num_nodes != 1:
            raise UserError(f"placement.learners / trainer.devices / trainer.num_nodes: {p.learners} / {t.devices} / "
                            f"{t.num_nodes} is not allowed with communicator {name}: it runs 1 learner on 1 device of "
                            "1 node (pick allreduce or gossip for more learners)")
        return
    if p.learners != t.devices * p.learners_per_device * t.num_nodes:
        raise UserError(f"placement.learners: {p.learners} is not allowed with trainer.devices={t.devices}, "
                        f"placement.learners_per_device={p.learners_per_device} and trainer.num_nodes={t.num_nodes}; "
                        f"{name} runs learners = devices x learners_per_device x num_nodes (on CPU, devices counts "
                        "learner processes)")
    if p.learners < layout.min_learners:
        raise UserError(f"placement.learners: {p.learners} is not allowed with communicator {name} (it needs >= "
                        f"{layout.min_learners} learners; use communicator local for one)")
    if p.learners_per_device > 1 and resolve_backend(layout, recipe) == "nccl":
        raise UserError(f"placement.learners_per_device: {p.learners_per_device} is not allowed with the nccl "
                        "backend (NCCL refuses two ranks on one GPU); use 1, or a gloo backend")


def build_strategy(layout: LearnerLayout, recipe) -> Any:
    """The Lightning strategy that lays the learners out (only the core calls this)."""
    from rlkit.strategies import LearnerProcesses, single_device_strategy

    if not layout.multi:
        return single_device_strategy(recipe.trainer.accelerator)
    return LearnerProcesses(independent=layout.topology is Topology.INDEPENDENT,
                            own_optimizer_state=layout.own_optimizer_state and layout.topology is Topology.SYNCHRONOUS,
                            learners_per_device=recipe.placement.learners_per_device,
                            process_group_backend=resolve_backend(layout, recipe),
                            timeout=timedelta(seconds=layout.timeout_s), child_grace_s=layout.child_grace_s)

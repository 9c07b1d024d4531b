"""Learner topologies: how a run's learner processes are laid out and what they may wait for.

A communicator declares the layout it needs (hook ``rlkit_learner_layout``); the core checks the
recipe's placement against it once (``rlkit.training.placement``), builds the Lightning strategy, shares episode scores, stops the
run and writes checkpoints the way the topology allows. Plugins never build strategies.

* ``single``: one learner process (``local``, ``queues``: its helpers are the plugin's own).
* ``synchronous``: K learner processes that step together. Every learner runs the same sequence of
  updates, so a collective inside a per-update hook (``rlkit_sync_gradients``,
  ``rlkit_after_optimizer_step``) meets its peers; the core shares episode scores each update (one
  score window, one stop decision) and checkpoints learner 0's state. A protocol whose learners
  each step their own optimizer on their own gradients (local SGD) sets ``own_optimizer_state``:
  learner r > 0 then also keeps its optimizer state beside each checkpoint and resumes it.
  ``sync_every = k > 1`` lays out learners that are independent between syncs and collective at a
  sync: the core's own collectives (the shared episode scores, the stop decision, an agreed Ctrl-C
  or SIGTERM) happen only after updates k, 2k, ... and the last one, so learners run free in
  between and meet there, where the protocol's own collective (a parameter average) meets too.
  Episodes ended between syncs count at the next sync; a stop asked for between syncs (a target,
  ``request_stop``, Ctrl-C) takes effect at the next sync, for every learner at the same update.
* ``independent``: K learner processes that never wait for each other (gossip). No collective may
  be used after start-up; each learner keeps its own score window, checkpoints and resume state,
  and a stop asked by one learner reaches the others through the run's key-value store.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


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
    learner 0's, which is right where the learners step on the same gradients (allreduce).
    ``sync_every`` (synchronous only): the core's collectives run only after every
    ``sync_every``-th update and the last one (1: after every update). ``rejoins`` (independent
    only): a learner process that dies may be restarted and take part again (the run's
    supervisor restarts it, up to ``fault.max_restarts``, and calls ``rlkit_learner_exit`` first);
    without it a dead learner stops the run."""

    topology: Topology = Topology.SINGLE
    backend: str = "auto"
    timeout_s: float = 1800.0
    child_grace_s: float = 60.0
    min_learners: int = 1
    own_optimizer_state: bool = False
    sync_every: int = 1
    rejoins: bool = False

    def __post_init__(self) -> None:
        if self.sync_every < 1:
            raise ValueError(f"LearnerLayout.sync_every must be >= 1, got {self.sync_every}")
        if self.sync_every > 1 and self.topology is not Topology.SYNCHRONOUS:
            raise ValueError(f"LearnerLayout.sync_every={self.sync_every} needs Topology.SYNCHRONOUS "
                             f"(got {self.topology.value})")
        if self.rejoins and self.topology is not Topology.INDEPENDENT:
            raise ValueError(f"LearnerLayout.rejoins needs Topology.INDEPENDENT (got {self.topology.value})")

    @property
    def multi(self) -> bool:
        return self.topology is not Topology.SINGLE

"""The run's learners as one learner sees them: what the learner asks of its Lightning strategy.

rlkit's two strategies both answer every method (``rlkit.training.strategies``: ``SingleLearner`` for
one learner, ``LearnerProcesses`` for K synchronous or independent ones), so the learner never asks
which topology it is in nor whether its strategy has a method; the answers differ instead."""

from __future__ import annotations

from typing import Mapping, Protocol


class LearnerGroup(Protocol):
    def share_episodes(self, scores: list[float], lengths: list[float], asks_stop: bool,
                       capacity: int) -> tuple[list[float], list[float], bool]:
        """The episodes (raw scores, lengths) that count for this learner's score window this update,
        and whether another learner asked to stop: every learner's when the learners step together
        (one collective per update, which also carries this learner's ``asks_stop``), its own
        otherwise. ``capacity`` bounds the episodes one learner can end in one update."""

    def announce_stop(self) -> bool:
        """This learner asks the run to stop. True where it stops after this update by itself (one
        learner; an independent one, which tells the others through the run's store), False where
        the request travels with the next shared episodes (synchronous learners stop together)."""

    def any_learner_stops(self, decision: bool) -> bool:
        """The run-wide stop after this update, given this learner's own ``decision``, without
        waiting for any other learner."""

    def training_started(self) -> None:
        """This learner's set-up is done and it trains (said once per process)."""

    def publish_final(self, summary: Mapping) -> None:
        """Leave this learner's end-of-run numbers (``final_summary``) where learner 0 finds them."""

    def gather_finals(self) -> dict[int, dict]:
        """Learner 0 at the end: every learner's published end-of-run numbers (missing: one that
        died first); empty where the learners' numbers are learner 0's (one, or in lockstep)."""

    def lost_peers(self) -> str:
        """After a failed collective: which learner processes have exited, in words."""


def total_agent_steps(own: int, learners: int, finals: Mapping[int, Mapping] | None = None) -> int:
    """The run's agent steps, summed over learners: the one rule for the logs, ``result.json`` and
    ``rlkit evaluate``. With the learners' reported end-of-run numbers (``finals``: independent
    learners), the sum of what each reported, so that the total always equals the sum of the
    per-learner list beside it; else (one learner, or learners in lockstep) ``own`` per learner."""
    if finals:
        return sum(int(f["agent_steps"]) for f in finals.values())
    return own * learners


def is_sync_point(update: int, sync_every: int, last_update: int) -> bool:
    """Whether synchronous learners meet after ``update`` (counted from 1): every ``sync_every``-th
    update, and the last one of the budget (``last_update``), where every learner ends."""
    return sync_every <= 1 or update % sync_every == 0 or update >= last_update


class EpisodeBuffer:
    """A learner's episodes (raw scores, lengths) and stop request between two sync points: what it
    shares at the next one (``LearnerLayout.sync_every``). :meth:`take` hands over at most
    ``capacity`` episodes, the newest (the shared record has a fixed size, the same on every learner)."""

    def __init__(self) -> None:
        self.scores: list[float] = []
        self.lengths: list[float] = []
        self.asks_stop = False

    def add(self, scores: list[float], lengths: list[float], asks_stop: bool) -> None:
        self.scores += scores
        self.lengths += lengths
        self.asks_stop = self.asks_stop or asks_stop

    def take(self, capacity: int) -> tuple[list[float], list[float], bool]:
        out = (self.scores[-capacity:] if capacity else [], self.lengths[-capacity:] if capacity else [],
               self.asks_stop)
        self.__init__()
        return out

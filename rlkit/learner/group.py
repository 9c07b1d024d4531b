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

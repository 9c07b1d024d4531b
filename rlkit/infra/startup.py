"""The learner process's start-up and its garbage collector.

Importing torch, Lightning (which pulls in ``torch._dynamo``, sympy and torchmetrics) and W&B builds
about 385,000 objects that CPython's cyclic collector tracks, nearly all of which live as long as
the process. The collector runs whenever enough new objects have piled up, so during those imports
it walks the growing heap again and again, and when the process exits it walks all of it once more
while the modules are torn down. Neither finds much garbage: import-time objects are not cycles
waiting to be freed.

So a process the CLI started for ``run``, ``resume`` or ``evaluate`` pauses the collector while it
sets itself up (:func:`pause_collector`), and when training (or playing) is about to start
(:func:`end_startup`, called by the learner's ``on_train_start`` and ``train``'s cleanup, and by
``evaluate`` when its set-up is done or has failed) moves every object alive at that point into
the collector's permanent generation (``gc.freeze``) and turns the collector back on. Collections in
the training loop then walk only what the loop itself allocates, and exit skips the frozen heap.
This is what CPython's documentation suggests ``gc.freeze`` for. The cost: cyclic garbage made
during start-up is never collected (reference counting still frees everything else).

Only the CLI pauses the collector, and only for commands that reach ``end_startup``: a program that
calls ``rlkit.training.run.train`` itself keeps its collector as it set it. A process forked while the
collector is paused ends its start-up when it begins (``os.register_at_fork``). Measured in docs/benchmarks.md
("Start-up").
"""

from __future__ import annotations

import gc
import os
import sys

_paused = False
_fork_hook = False


def pause_collector() -> bool:
    """Turn the cyclic collector off until :func:`end_startup` (True), or leave it alone where it
    was already off (False)."""
    global _paused, _fork_hook
    if _paused or not gc.isenabled():
        return False
    if not _fork_hook and hasattr(os, "register_at_fork"):
        # a process forked during start-up (gymnasium's async env workers) would otherwise run
        # without the collector for good: it ends its start-up at once
        os.register_at_fork(after_in_child=end_startup)
        _fork_hook = True
    gc.disable()
    _paused = True
    return True


def end_startup() -> bool:
    """If :func:`pause_collector` turned the collector off: freeze what start-up built and turn it on
    again (True). Otherwise do nothing (False)."""
    global _paused
    if not _paused:
        return False
    _paused = False
    gc.freeze()
    gc.enable()
    return True


OPENMP_SPIN = "100000"  # GOMP_SPINCOUNT for the CLI's own processes (libgomp's default: 300,000)


def shorten_openmp_spin() -> bool:
    """Set ``GOMP_SPINCOUNT`` for a process the CLI started for ``run``, ``resume`` or ``evaluate``,
    before torch (and with it libgomp, which reads it once) is loaded; launched learners and env
    workers inherit it. After a parallel op, torch's OpenMP threads spin this many times waiting
    for the next one before they sleep; with libgomp's default they are still spinning while the
    vector env's threads step the games, and on a machine with as many cores as threads they take
    those threads' cores. A user's own ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` is left alone, as is
    a process that has already loaded torch. Measured in docs/benchmarks.md ("OpenMP spin")."""
    if "torch" in sys.modules or "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ:
        return False
    os.environ["GOMP_SPINCOUNT"] = OPENMP_SPIN
    return True

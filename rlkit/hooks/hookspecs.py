"""The hook contract between rlkit's core and its plugins (communicators, environment families).

Every hook rlkit calls is declared here, and nowhere else. There are two tiers:

* **Registration hooks** are implemented by installed plugin *modules* (found through the
  ``rlkit`` entry-point group) and only return records: they must import nothing heavy and touch
  no device, process group or network.
* **Run hooks** are implemented by the *communicator instance* chosen for one run (and any other
  run-scoped helper a test or plugin registers for the run). The core calls them from exactly one
  place, :class:`rlkit.training.runhooks.RunHooks`, where the fallback used when nobody answers is written
  next to the call.

Each run hook receives ``run``, the :class:`rlkit.config.runtime.Run` of this run (validated recipe,
the communicator's validated options, run directory). Hooks evolve compatibly: arguments are
added, never renamed or reordered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping

import pluggy

if TYPE_CHECKING:
    from rlkit.config.runtime import Run
    from rlkit.hooks.layout import LearnerLayout
    from rlkit.hooks.protocols import Learner
    from rlkit.hooks.records import CommunicatorSpec, EnvFamilySpec

hookspec = pluggy.HookspecMarker("rlkit")


# --------------------------------------------------------------------------------------------
# Registration hooks
# --------------------------------------------------------------------------------------------


@hookspec
def rlkit_communicators() -> Iterable["CommunicatorSpec"]:
    """Return the communicators this plugin provides, as :class:`~rlkit.hooks.records.CommunicatorSpec`.

    All answers are collected. A name provided by two plugins is reported as a conflict when
    it is selected.

    Called on: the process that builds the plugin manager (the CLI, before a recipe is loaded),
    for ``rlkit plugins``, ``rlkit show``, ``rlkit run``, ``rlkit resume`` and ``rlkit sweep``; and
    in each learner process that Lightning launches for a multi-learner run, which re-runs the CLI.
    """


@hookspec
def rlkit_env_families() -> Iterable["EnvFamilySpec"]:
    """Return the environment families this plugin provides, as :class:`~rlkit.hooks.records.EnvFamilySpec`.

    All answers are collected. An env id that two families' prefixes both claim is reported as a
    conflict when a recipe asks for it. The records' ``register()`` is called only then, so this
    hook must not import the family's package.

    Called on: any process that builds an env (the CLI before a run starts, each learner, each
    queues actor) whose id gymnasium does not know yet; and for ``rlkit plugins``.
    """


# --------------------------------------------------------------------------------------------
# Run hooks
# --------------------------------------------------------------------------------------------


@hookspec
def rlkit_configure(run: "Run") -> None:
    """Prepare the run: check the recipe against what the protocol supports, set up run state.

    Raise :class:`rlkit.infra.errors.UserError` for a recipe the protocol cannot run.
    All implementations are called.

    Called on: the launching process, once, after the recipe and the communicator's options have
    been validated and before the Lightning ``Trainer`` is built; and again in each learner process
    that Lightning launches for a multi-learner run, which re-runs the CLI (under ``torchrun``, each
    learner process runs the CLI itself and so calls it once).
    """


@hookspec(firstresult=True)
def rlkit_learner_layout(run: "Run") -> "LearnerLayout":
    """Return the :class:`~rlkit.api.LearnerLayout` this protocol needs: its topology (``single``,
    ``synchronous`` or ``independent``; docs/writing-a-plugin.md says what each allows), the process
    group's backend and timeouts. The core checks ``placement`` against it once and builds the
    Lightning strategy from it; a plugin never builds a strategy.

    First non-None answer wins. When nobody answers: ``LearnerLayout()`` (one learner).

    Called on: the launching process, before ``rlkit_configure``; and again in each learner process
    that Lightning launches for a multi-learner run (it re-runs the CLI there).
    """


@hookspec(firstresult=True)
def rlkit_make_rollout_source(run: "Run", module: "Learner") -> Any:
    """Return the source of training batches: an iterable of :class:`rlkit.hooks.batch.Batch`,
    optionally with a ``close()`` method that the core calls at teardown.

    First non-None answer wins. When nobody answers: :class:`rlkit.learner.rollout.LocalRollout`, the
    learner's own vectorised environments, acting with its live parameters.

    Where no plugin implements this hook, a new single-learner Atari run builds its envs early and
    resets them while torch and Lightning import (:class:`rlkit.learner.envs.EnvStart`), and
    ``LocalRollout`` takes them; a plugin that implements it gets no envs built for it.

    Called on: every learner process, once, when Lightning asks for the train dataloader (the
    module is already on its device and knows its rank).
    """


@hookspec
def rlkit_learner_start(run: "Run", module: "Learner") -> None:
    """Set up what one learner needs to talk to its peers (channels, buffers), once its process
    group exists and its module is on its device. All implementations are called.

    Called on: every learner process, once, when training starts (before update 1).
    """


@hookspec
def rlkit_learner_end(run: "Run", module: "Learner") -> None:
    """Tell the peers this learner is leaving and release its channels. All implementations are
    called, also after an error.

    Called on: every learner process, once, when its training ends.
    """


@hookspec(firstresult=True)
def rlkit_sync_gradients(run: "Run", module: "Learner") -> Any:
    """Act on the gradients after backward and before clipping and the optimizer step (e.g.
    average them across learners). Return something other than None to say it was handled.

    First non-None answer wins. When nobody answers: the local gradients are used as they are.

    Called on: every learner process, once per update, right after ``manual_backward``.
    """


@hookspec
def rlkit_after_optimizer_step(run: "Run", module: "Learner", update: int) -> None:
    """Act on the parameters after the optimizer step (e.g. gossip them to peers and mix).

    ``update`` counts optimizer steps of this learner, starting at 1. All implementations are
    called; nothing happens when nobody answers.

    Called on: every learner process, once per update, right after ``optimizer.step()``.
    """


@hookspec
def rlkit_train_end(run: "Run", module: "Learner") -> None:
    """Training ended normally (the step budget, ``stop_at_score`` or a requested stop): a last
    action before the final checkpoint (``last.ckpt``) is written, e.g. a final parameter average.
    Synchronous learners all get here after the same update, so a collective is allowed. Not called
    when training ends by an error or a signal (``rlkit_learner_end`` is). All implementations are
    called.

    Called on: every learner process, once, after its last update.
    """


@hookspec
def rlkit_metrics(run: "Run", module: "Learner") -> Mapping[str, float]:
    """Return protocol metrics to log (name -> number), e.g. ``{"comm/allreduce_ms": 7.1}``.

    All answers are merged (a later plugin's key wins). When nobody answers: no extra metrics.

    Called on: every learner process, after update 1 and then every ``trainer.log_every_n_updates``;
    only rank 0's values reach the loggers unless the metric is reduced by the plugin.
    """


@hookspec
def rlkit_state_dict(run: "Run", module: "Learner") -> Mapping[str, Any]:
    """Return the protocol state a resumed run needs (counters, mixing weights), made of tensors
    and plain Python containers only (checkpoints are loaded weights-only).

    All answers are merged into the checkpoint under ``checkpoint["rlkit"]["plugins"]``.

    Called on: every learner process, whenever Lightning writes a checkpoint.
    """


@hookspec
def rlkit_load_state_dict(run: "Run", module: "Learner", state: Mapping[str, Any]) -> None:
    """Restore what :func:`rlkit_state_dict` returned. All implementations are called.

    Called on: every learner process, when a run resumes from a checkpoint, before training.
    """


@hookspec
def rlkit_learner_exit(run: "Run", rank: int, returncode: int, restarting: bool) -> None:
    """Learner ``rank``'s process has died (``returncode`` != 0: negative for a signal) and is being
    restarted (``restarting``: it will rejoin, ``LearnerLayout.rejoins``) or not (the run stops).
    Tell the surviving learners now, through ``run_store()``, rather than let them find out from
    its silence. All implementations are called.

    Called on: the launching process of a supervised run (``run.supervised``), which trains
    nothing itself and outlives every learner; never in a learner process.
    """


@hookspec
def rlkit_unconfigure(run: "Run", error: "BaseException | None") -> None:
    """Release what the run holds (processes, threads, shared memory, process groups).

    Always called, also after an error or Ctrl-C (``error`` is then the exception). All
    implementations are called; one that raises does not stop the others.

    Called on: the launching process, once, at the very end of the run; and again, at its own end,
    in each learner process that Lightning launches for a multi-learner run, which re-runs the CLI.
    Release there only what that process holds (``run.launcher`` is False there; the gossip plugin
    returns early then).
    """


# --------------------------------------------------------------------------------------------
# Hooks that changed: the one place deprecations live
# --------------------------------------------------------------------------------------------
# Hooks evolve compatibly: arguments are added, never renamed or reordered. A hook that is renamed
# all the same keeps working under its old name for one release: the manager calls the old name's
# implementation as the new hook and warns once, naming the replacement. A hook that is removed is
# refused with a message that says what replaced it, not with a guess at a similar name.

RENAMED: dict[str, str] = {}  # old name -> new name, kept for one release

REMOVED: dict[str, str] = {
    "rlkit_make_strategy": "it was removed in 0.1; return an rlkit.api.LearnerLayout from rlkit_learner_layout "
                           "instead (the core builds the Lightning strategy from it)",
}

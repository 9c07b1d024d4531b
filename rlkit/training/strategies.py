"""Lightning strategies for multi-learner communicators: Lightning's DDP process layout (launch,
ranks, process group) without the DDP wrapper, so the communicator owns every exchange.

* :class:`LearnerProcesses` (``independent=False``): rank 0's parameters are broadcast once and
  Lightning's own collectives (barrier, broadcast, boolean decisions) stay collective. Synchronous
  protocols (allreduce) use it. A Ctrl-C or SIGTERM that reaches any learner stops every learner at
  the start of the same update (:meth:`LearnerProcesses._agree_on_stop`), so each writes its part
  of ``interrupted.ckpt`` at one update, and the launching process waits for them to finish.
* ``independent=True``: learners that never wait for each other (gossip). Lightning's collectives
  become local: a barrier returns at once, a broadcast returns the caller's own object, and an
  "any learner" decision (``stop_at_score``) is shared through the process group's key-value store
  without blocking. A child that dies is reported, not fatal: the communicator decides (drop the
  peer or stop the run), and the launching process waits a bounded time for the children at the end
  and kills any that is left.

``learners_per_device`` co-locates several learner processes on one accelerator device (GALA runs
4 learners on one GPU).
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from lightning.pytorch.strategies import SingleDeviceStrategy

from rlkit.infra import upstream
from rlkit.infra.errors import RunFailed, first_line
from rlkit.infra.processes import die_with_parent
from rlkit.infra.upstream import LauncherStrategy
from rlkit.learner.group import EpisodeBuffer, is_sync_point
from rlkit.training.checkpoints import newest_first
from rlkit.training.launchers import (
    IndependentLauncher,
    SynchronousLauncher,
    signal_live,
)
from rlkit.training.supervisor import FINAL_KEY, STARTED_KEY, STOP_KEY, store_client

log = logging.getLogger("rlkit")

_DECISION_POLL_S = 0.25


class LearnerProcesses(LauncherStrategy):
    strategy_name = "rlkit_learners"

    def __init__(self, *, independent: bool = False, learners_per_device: int = 1,
                 child_grace_s: float = 60.0, own_optimizer_state: bool = False, sync_every: int = 1,
                 **kwargs: Any):
        super().__init__(**kwargs)
        self.independent = independent
        self.sync_every = sync_every  # synchronous: the core's collectives only at sync points
        self._pending = EpisodeBuffer()
        self.own_optimizer_state = own_optimizer_state
        self.learners_per_device = learners_per_device
        self.child_grace_s = child_grace_s
        self._last_poll = 0.0
        self._stop_seen = False
        self._sigint_seen = False  # synchronous: a Ctrl-C this learner got, acted on at the next update
        self._sigterm_seen = False  # synchronous: likewise a SIGTERM

    # -- placement ----------------------------------------------------------------------------

    def place_devices(self, devices):
        # each physical device hosts learners_per_device learner processes
        if devices is None:
            return None
        return [d for d in devices for _ in range(self.learners_per_device)]

    # -- launch ---------------------------------------------------------------------------------

    def make_launcher(self, start_method: str):
        if start_method != "popen":
            return None  # Lightning's
        kind = IndependentLauncher if self.independent else SynchronousLauncher
        return kind(self.cluster_environment, self.num_processes, self.num_nodes,
                    grace_s=getattr(self, "child_grace_s", 60.0))

    def setup_environment(self) -> None:
        launcher = bool(self.launched())  # (it has LOCAL_RANK=0 in its environment by now, as learners do)
        if not launcher:  # a launched learner (or one torchrun started), not the process the user started
            die_with_parent()
        try:
            super().setup_environment()
        except dist.DistError as exc:
            if not launcher:
                raise
            # the process group did not form (a learner died while starting, or never connected):
            # say which of the learners this process launched are gone, not only "3/4 clients joined"
            gone = self.lost_peers(wait_s=1.0, none_dead="the launched learners are all running; one did not connect")
            raise RunFailed(f"the learners' process group did not form ({first_line(exc)}): {gone}") from exc

    def setup(self, trainer) -> None:
        super().setup(trainer)
        replaceable = upstream.can_replace_sigterm_broadcast(trainer)
        if self.independent and replaceable:
            # Lightning broadcasts a SIGTERM flag from rank 0 before every step, which would put
            # independent learners in lock-step; each learner reacts to its own SIGTERM instead.
            upstream.replace_sigterm_broadcast(trainer, lambda: _raise_if_sigterm(trainer))
        if self.independent:
            # Lightning's SIGTERM handler (registered after this) broadcasts from rank 0: a learner
            # whose rank 0 got no SIGTERM would hang in it. Here each learner only notes its own
            # SIGTERM, and the launching process passes it on to the learners it started.
            def on_sigterm(signum, frame) -> None:
                if not upstream.sigterm_received(trainer):
                    self.stop_children(signum)
                upstream.mark_sigterm_received(trainer)

            upstream.set_sigterm_notifier(trainer, on_sigterm)
            # a Ctrl-C that reached only the launching process (kill -INT) goes on to the learners
            # it started as SIGTERM, before its own shutdown waits for them to leave the graph
            def on_sigint(signum, frame) -> None:
                self.stop_children(signal.SIGTERM)
                signal.default_int_handler(signum, frame)  # KeyboardInterrupt, as before

            self._take_sigint(trainer, on_sigint)
        elif self.world_size > 1 and replaceable:
            self._setup_synchronous_stop(trainer)

    def _setup_synchronous_stop(self, trainer) -> None:
        """Synchronous learners stop together. Lightning broadcasts rank 0's SIGTERM flag before each
        step (and from inside its SIGTERM handler, a collective the other learners are not in), and a
        Ctrl-C raises wherever each learner happens to be: learners then write their checkpoints at
        different updates, or wait in an all-reduce one of them has left. Here a signal only notes
        itself; before each step the learners all-reduce what they noted (:meth:`_agree_on_stop`)
        and all raise at the same update. A second Ctrl-C to a learner raises at once."""
        # Lightning raises on its own wherever it reads ``received_sigterm`` (after each step, at an
        # epoch's end): the noted SIGTERM stays here until the learners have agreed on it
        upstream.set_sigterm_notifier(trainer, lambda signum, frame: setattr(self, "_sigterm_seen", True))
        upstream.replace_sigterm_broadcast(trainer, lambda: self._agree_on_stop(trainer))

        def on_sigint(signum, frame) -> None:
            if self._sigint_seen:
                signal.default_int_handler(signum, frame)
            self._sigint_seen = True
            if self.global_rank == 0:
                os.write(2, b"rlkit: Ctrl-C: every learner stops at the next update (Ctrl-C again to stop at once)\n")

        self._take_sigint(trainer, on_sigint)

    def _take_sigint(self, trainer, on_sigint) -> None:
        """Makes ``on_sigint`` SIGINT's handler where the main thread still has Python's default
        (a learner the user started, or one launched by it); :meth:`teardown` puts it back."""
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            signal.signal(signal.SIGINT, on_sigint)
            self._on_sigint, self._sigint_trainer = on_sigint, trainer

    def _agree_on_stop(self, trainer) -> None:
        """Before each step of a synchronous run: 2 if any learner got a Ctrl-C, else 1 if any got a
        SIGTERM; every learner raises the same exception at the same update."""
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        if not self.at_sync_point():
            return  # learners that meet only at syncs agree there (LearnerLayout.sync_every)
        mine = 2 if self._sigint_seen else 1 if self._sigterm_seen else 0
        flag = torch.tensor([mine], device=self.root_device)
        try:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        except Exception:  # a learner left: the step's own collective reports it (as Lightning does)
            return
        code = int(flag.item())
        if code == 0:
            return
        if isinstance(self.launcher, SynchronousLauncher):
            self.launcher.stopping = True  # the children's exits are the stop, not a failure
        if code == 2:
            self._sigint_seen = True
            raise KeyboardInterrupt
        upstream.mark_sigterm_received(trainer)
        raise SIGTERMException()

    def teardown(self) -> None:
        """Puts SIGINT back as it was before :meth:`setup`. Lightning's signal connector saw
        ``on_sigint`` as the handler it found and would restore it after this: it is told the old
        one instead (unless an interrupted run has handed SIGINT to the at-once exit already)."""
        on_sigint, self._on_sigint = getattr(self, "_on_sigint", None), None
        trainer, self._sigint_trainer = getattr(self, "_sigint_trainer", None), None
        if on_sigint is not None and threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGINT) is on_sigint:
                signal.signal(signal.SIGINT, signal.default_int_handler)
            upstream.replace_saved_sigint(trainer, was=on_sigint, now=signal.default_int_handler)
        super().teardown()

    def configure_ddp(self) -> None:
        """Broadcast rank 0's parameters and buffers to every learner, at a fresh start only for
        independent learners. Lightning restores the module from the checkpoint *before* it sets up
        the strategy (``Trainer._run``: restore, then ``strategy.setup`` -> ``configure_ddp``), so a
        broadcast on resume would replace each independent learner's own restored parameters with
        rank 0's. (Synchronous learners all load learner 0's checkpoint: the broadcast changes
        nothing for them then.) Independent learners never broadcast: at a fresh start every learner
        has built the same model from ``recipe.seed`` (GALA's common starting point), and a learner
        that rejoins a supervised run finds no one in the collective."""
        if self.independent:  # never a collective: a learner that rejoins finds no one in it
            return
        with torch.no_grad():
            for tensor in [*self.model.parameters(), *self.model.buffers()]:
                dist.broadcast(tensor.data, src=0)

    # -- collectives ------------------------------------------------------------------------------

    def barrier(self, *args: Any, **kwargs: Any) -> None:
        if not self.independent:
            super().barrier(*args, **kwargs)

    def broadcast(self, obj, src: int = 0):
        return obj if self.independent else super().broadcast(obj, src)

    def reduce(self, tensor, group=None, reduce_op="mean"):
        return tensor if self.independent else super().reduce(tensor, group, reduce_op)

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        """Independent learners never reduce: each keeps its own answer. Lightning also asks this
        for per-process questions (does a checkpoint file exist?), which must stay local; the run-wide
        stop is :meth:`any_learner_stops`."""
        if not self.independent:
            return super().reduce_boolean_decision(decision, all)
        return bool(decision)

    # -- the learner group (rlkit.learner.group.LearnerGroup) ---------------------------------------

    def share_episodes(self, scores: list[float], lengths: list[float], asks_stop: bool,
                       capacity: int) -> tuple[list[float], list[float], bool]:
        """Synchronous learners all-gather each update's episodes with each learner's stop request
        (one row per learner: [episodes, scores..., lengths..., asks to stop]), so they share one
        score window and stop after the same update; independent learners keep their own."""
        if self.independent:
            return scores, lengths, False
        if self.sync_every > 1:  # between syncs, kept for the next one
            self._pending.add(scores, lengths, asks_stop)
            if not self.at_sync_point():
                return [], [], False
            capacity *= self.sync_every
            scores, lengths, asks_stop = self._pending.take(capacity)
        mine = torch.full((2 + 2 * capacity,), math.nan, device=self.root_device)
        n = len(scores)
        mine[0], mine[-1] = n, float(asks_stop)
        mine[1:1 + n] = torch.tensor(scores, dtype=mine.dtype)
        mine[1 + capacity:1 + capacity + n] = torch.tensor(lengths, dtype=mine.dtype)
        rows = [torch.empty_like(mine) for _ in range(self.world_size)]
        try:
            dist.all_gather(rows, mine)
        except RuntimeError as exc:
            raise RunFailed(f"learner {self.global_rank} lost its peers while sharing episode scores: "
                            f"{self.lost_peers()}; the backend said: {first_line(exc)}") from None
        all_scores, all_lengths, stop = [], [], False
        for row in torch.stack(rows).cpu().tolist():
            stop = stop or row[-1] > 0
            k = int(row[0])
            all_scores += row[1:1 + k]
            all_lengths += row[1 + capacity:1 + capacity + k]
        return all_scores, all_lengths, stop

    def at_sync_point(self) -> bool:
        """Synchronous learners meet after the update just done (:func:`is_sync_point`): after every
        update unless the layout's ``sync_every`` says otherwise."""
        if self.sync_every <= 1:
            return True
        trainer = self.lightning_module.trainer
        return is_sync_point(trainer.global_step, self.sync_every, trainer.max_steps)

    def announce_stop(self) -> bool:
        """Synchronous: the request travels with the next shared episodes (False); independent:
        said through the store at once (True)."""
        return self.independent and self.any_learner_stops(True)

    def any_learner_stops(self, decision: bool) -> bool:
        """The run-wide stop decision, without waiting for anyone: synchronous learners already
        share theirs with the episodes (:meth:`share_episodes`); an independent learner says its
        own "stop" through the store and, at most every ``_DECISION_POLL_S``, looks whether another
        learner has."""
        if not self.independent:  # taken at a sync point only, where every learner decides alike
            return bool(decision) and self.at_sync_point()
        store = default_store()
        if decision and store is not None and not self._stop_seen:
            store.set(STOP_KEY, str(self.global_rank))
            self._stop_seen = True
        now = time.monotonic()
        if not self._stop_seen and store is not None and now - self._last_poll > _DECISION_POLL_S:
            self._last_poll = now
            self._stop_seen = store.check([STOP_KEY])
        return bool(decision) or self._stop_seen

    # -- checkpoints ------------------------------------------------------------------------------
    # Independent learners each have their own parameters, optimizer, counters and communicator
    # state: learner r > 0 keeps its checkpoints in checkpoints/learner<r>/ (same names, its own
    # update numbers), and on resume takes its own newest one (else learner 0's).
    # Synchronous learners with their own optimizer state (LearnerLayout.own_optimizer_state):
    # learner 0 writes the checkpoint; learner r > 0 writes only its optimizer state, under the
    # same name in checkpoints/learner<r>/, and on resume puts it in place of learner 0's.

    def _own_path(self, filepath) -> Path:
        path = Path(filepath)
        return path.parent / f"learner{self.global_rank}" / path.name

    def _keeps_own(self) -> bool:
        return self.independent and self.global_rank != 0

    def _keeps_own_optimizer(self) -> bool:
        return self.own_optimizer_state and not self.independent and self.global_rank != 0

    def save_checkpoint(self, checkpoint, filepath, storage_options=None) -> None:
        if self._keeps_own():
            self.checkpoint_io.save_checkpoint(checkpoint, self._own_path(filepath), storage_options=storage_options)
        elif self._keeps_own_optimizer():
            own = {"global_step": checkpoint.get("global_step"), "optimizer_states": checkpoint.get("optimizer_states")}
            self.checkpoint_io.save_checkpoint(own, self._own_path(filepath), storage_options=storage_options)
        else:
            super().save_checkpoint(checkpoint, filepath, storage_options=storage_options)

    def remove_checkpoint(self, filepath) -> None:
        if self._keeps_own() or self._keeps_own_optimizer():
            self.checkpoint_io.remove_checkpoint(self._own_path(filepath))
        else:
            super().remove_checkpoint(filepath)

    def load_checkpoint(self, checkpoint_path, weights_only=None):
        if self._keeps_own() and Path(checkpoint_path).parent.name != f"learner{self.global_rank}":
            # the run's checkpoint was named (torchrun, srun): this learner's own newest instead
            own = newest_first(self._own_path(checkpoint_path).parent.glob("*.ckpt"))
            for path in own:  # one cut short by a kill falls back to the one before
                try:
                    return super().load_checkpoint(path, weights_only=weights_only)
                except Exception as exc:
                    log.warning("learner %d: skipping %s: %s", self.global_rank, path, first_line(exc))
        checkpoint = super().load_checkpoint(checkpoint_path, weights_only=weights_only)
        if self._keeps_own_optimizer():
            self._put_own_optimizer_state(checkpoint, self._own_path(checkpoint_path))
        return checkpoint

    def _put_own_optimizer_state(self, checkpoint: dict, path: Path) -> None:
        why = "it has none"
        if path.is_file():
            try:
                own = self.checkpoint_io.load_checkpoint(path, weights_only=True)
                if own.get("global_step") == checkpoint.get("global_step") and own.get("optimizer_states"):
                    checkpoint["optimizer_states"] = own["optimizer_states"]
                    return
                why = f"its {path.name} is from update {own.get('global_step')}, the run's from {checkpoint.get('global_step')}"
            except Exception as exc:
                why = first_line(exc)
        log.warning("learner %d: resuming learner 0's optimizer state (own state at %s: %s)",
                    self.global_rank, path, why)

    # -- end --------------------------------------------------------------------------------------

    def training_started(self) -> None:
        """Say in the store that this learner trains (a supervisor restarts only learners that did:
        a death during set-up would recur)."""
        store = default_store()
        if store is not None:
            store.set(STARTED_KEY.format(rank=self.global_rank), "1")

    def publish_final(self, summary: dict) -> None:
        """Independent learners: leave this learner's end-of-run numbers in the store for learner 0
        (set before the learner leaves, so learner 0 finds it once the communicator saw it go)."""
        store = default_store()
        if self.independent and store is not None:
            store.set(FINAL_KEY.format(rank=self.global_rank), json.dumps(summary))

    def gather_finals(self) -> dict[int, dict]:
        """Learner 0: the end-of-run numbers every learner has published so far (no waiting; a
        learner that died before its end is missing)."""
        store = default_store()
        if not self.independent or store is None:
            return {}
        out = {}
        for rank in range(self.world_size):
            key = FINAL_KEY.format(rank=rank)
            if store.check([key]):
                out[rank] = json.loads(store.get(key))
        return out

    @property
    def stopping(self) -> bool:
        """Launching process: the run is being stopped by a signal (its learners are leaving)."""
        return bool(getattr(self.launcher, "stopping", False))

    def launched(self) -> list[subprocess.Popen]:
        """Launching process: the learner processes it started (ranks 1.. on this node); else []."""
        return list(getattr(self.launcher, "procs", []) or [])

    def lost_peers(self, wait_s: float = 3.0, none_dead: str = "a peer left or timed out") -> str:
        """After a failed collective: which launched learners have exited (the launching process
        sees its children; a learner whose launcher died is ended by the kernel: die_with_parent)."""
        deadline = time.monotonic() + wait_s
        while True:
            dead = [(rank, p.pid, p.poll()) for rank, p in enumerate(self.launched(), start=1) if p.poll() is not None]
            if dead or time.monotonic() > deadline or not self.launched():
                break
            time.sleep(0.1)
        return ", ".join(f"learner {r} (pid {pid}) exited with code {c}" for r, pid, c in dead) or none_dead

    def stop_children(self, sig: int = signal.SIGTERM) -> None:
        """Launching process: ask the learner processes it started to stop the graceful way (each
        writes its own ``interrupted.ckpt``), as a Ctrl-C in the terminal would, when only this
        process got the signal (``kill -INT``, a scheduler)."""
        if self.launcher is not None:
            self.launcher.stopping = True  # their exits are the stop, not failures to report
        signal_live(self.launched(), sig)

    def saves_here(self, is_global_zero: bool) -> bool:
        """This learner writes a checkpoint of its own where learner 0 writes the run's: learner 0,
        an independent learner (its own state), a synchronous one with its own optimizer state."""
        return is_global_zero or self._keeps_own() or self._keeps_own_optimizer()

    def wait_for_children(self) -> list[tuple[int, int | None]]:
        """Launching process of independent learners, and of synchronous ones a signal stopped:
        wait up to ``child_grace_s`` for the learner processes, kill any left. Returns (rank,
        return code) of each child; None = it had to be killed. Otherwise nothing to wait for."""
        if not self.independent and not self.stopping:
            return []
        launcher = self.launcher
        procs = getattr(launcher, "procs", [])
        deadline = time.monotonic() + self.child_grace_s
        codes = []
        for rank, proc in enumerate(procs, start=1):
            try:
                codes.append((rank, proc.wait(timeout=max(0.1, deadline - time.monotonic()))))
            except subprocess.TimeoutExpired:
                proc.kill()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:  # stuck in the kernel: nothing more to do
                    pass
                codes.append((rank, None))
        return codes


def _raise_if_sigterm(trainer) -> None:
    if getattr(trainer, "received_sigterm", False):
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        raise SIGTERMException()


class SingleLearner(SingleDeviceStrategy):
    """Lightning's single-device strategy, answering the learner group's questions for a group of
    one (:class:`rlkit.learner.group.LearnerGroup`), as :class:`LearnerProcesses` does for K."""

    stopping = False  # no learner processes to stop

    def share_episodes(self, scores, lengths, asks_stop, capacity):
        return scores, lengths, False

    def announce_stop(self) -> bool:
        return True

    def any_learner_stops(self, decision: bool) -> bool:
        return bool(decision)

    def publish_final(self, summary) -> None:
        pass

    def training_started(self) -> None:
        pass

    def gather_finals(self) -> dict[int, dict]:
        return {}

    def lost_peers(self) -> str:
        return "no peers"

    def saves_here(self, is_global_zero: bool) -> bool:
        return True

    def wait_for_children(self) -> list[tuple[int, int | None]]:
        return []


def single_device_strategy(accelerator: str) -> SingleLearner:
    """One learner on the first GPU the recipe asks for, else the CPU."""
    use_cuda = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    return SingleLearner(device="cuda:0" if use_cuda else "cpu")


def default_store():
    """The run's key-value store: the supervisor's in a supervised run (it outlives every learner),
    else the default process group's (hosted by learner 0)."""
    return store_client() or upstream.default_store()

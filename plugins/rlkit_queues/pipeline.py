"""The GA3C pipeline of one learner: actor processes, predictor and trainer threads, the queues
between them; the learner iterates it for training batches (it is the run's rollout source).

Shutdown order, so that nothing hangs and nothing sent is lost: actors are told to stop and send
their last message (``Bye``) while the trainers keep draining the training queue; then the
predictor and trainer threads stop, and each trainer hands over its partly filled batch. Every
wait is bounded by ``timeout_s``; an actor still alive after it is killed.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import statistics
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Callable

import torch

from rlkit.api import RunFailed, worker_modules
from rlkit_queues.actor import FILLING, FREE, QUEUED, ActorPlan, Bye, Shared, actor_main
from rlkit_queues.tuner import Knob, Tuner
from rlkit_queues.workers import Assembled, Predictor, Stats, Trainer, Worker, timed_get

_HEALTH_S = 0.5
_POLL_S = 0.05


@dataclass
class ActorHandle:
    proc: mp.Process
    incarnation: int
    conn: Connection  # the learner's end of the actor's pipe
    stopping: bool = False
    drained: bool = False  # its pipe reached EOF: everything it sent has been received

    def finished(self) -> bool:
        return self.drained and self.proc.exitcode is not None


class Inbox(Worker):
    """Reads every actor's pipe: requests go to the prediction queue, segments to the training
    queue (their buffer is marked QUEUED on arrival), last words (``Bye``) to ``byes``."""

    def __init__(self, pipeline: "Pipeline"):
        super().__init__("rlkit-inbox")
        self.p = pipeline

    def once(self) -> None:
        handles = {h.conn: h for h in list(self.p.actors.values()) if not h.drained}
        if not handles:
            time.sleep(_POLL_S)
            return
        for conn in wait(list(handles), timeout=_POLL_S):
            h = handles[conn]
            try:
                item = conn.recv()
            except (EOFError, OSError):
                h.drained = True
                continue
            if isinstance(item, tuple):
                self.p.requests.put(item)
            elif isinstance(item, Bye):
                self.p.byes[(item.actor, item.incarnation)] = item.sent
            else:
                self.p.shared.state[item.actor, item.slot] = QUEUED
                self.p.producing.add((item.actor, item.incarnation))
                self.p.segments.put(item)


@dataclass
class Shape:
    """What the pipeline needs to know of the env and the learner."""

    obs_shape: tuple
    obs_dtype: torch.dtype
    action_shape: tuple
    action_dtype: object
    columns: int  # env segments per training batch


@dataclass
class Window:
    start: float = field(default_factory=time.perf_counter)
    steps: int = 0
    samples: list = field(default_factory=list)  # trained agent steps per second, one per second
    lags: list = field(default_factory=list)
    latencies: list = field(default_factory=list)
    batches: int = 0


class Pipeline:
    def __init__(self, recipe, options, shape: Shape, model, device, version: Callable[[], int], seed: int):
        self.recipe, self.o, self.shape = recipe, options, shape
        self.model, self.device, self.version, self.seed = model, device, version, seed
        self.ctx = mp.get_context("forkserver")
        # What every actor imports, imported once by the forkserver, not by each of 32 actors. A
        # spawned child also re-runs the imports of the main script: keep those light (the CLI's are).
        self.ctx.set_forkserver_preload(["torch", "gymnasium", "ale_py", *worker_modules(), "rlkit_queues.actor"])
        T, E = recipe.algo.rollout_len, options.envs_per_actor
        self.shared = Shared.allocate(options.max_actors, options.slots_per_actor, T, E, shape.obs_shape,
                                      shape.obs_dtype)
        # bounded by construction (one request and slots - 1 segments in flight per actor); the
        # maxsize turns a broken bound into an error instead of growth
        self.requests: queue.Queue = queue.Queue(maxsize=options.max_actors + 1)
        self.segments: queue.Queue = queue.Queue(maxsize=options.max_actors * options.slots_per_actor + 1)
        self.batches: queue.Queue = queue.Queue(maxsize=1)  # more would only add policy lag
        self.actors: dict[int, ActorHandle] = {}
        self.predictors: list[Predictor] = []
        self.trainers: list[Trainer] = []
        self.byes: dict[tuple[int, int], int] = {}  # (actor, incarnation) -> segments it sent
        self.producing: set[tuple[int, int]] = set()  # (actor, incarnation) that sent a segment
        self.incarnations: dict[int, int] = {}
        self.inbox = Inbox(self)
        self.replaced = 0
        self.retired: list[Assembled] = []  # partly filled batches of trainers tuning removed
        self.stats = Stats()
        self.window = Window()
        self.sample_start, self.sample_steps = time.perf_counter(), 0
        self.tuner = Tuner([Knob("predictors", options.predictors, 1, options.max_predictors),
                            Knob("trainers", options.trainers, 1, options.max_trainers),
                            Knob("actors", options.actors, 1, options.max_actors)], min_gain=options.tune_min_gain)
        self.tuning_log: list[str] = []
        self.last_health = 0.0
        self.warm = False
        self.metrics_at: float | None = None
        self.closed = False

    # -- start and resize ------------------------------------------------------------------------

    def start(self, resumed: dict | None = None) -> "Pipeline":
        """Start with the recipe's setting, or with the one a resumed run had tuned its way to."""
        if resumed:
            self.tuner.restore(resumed.get("tuner", {}))
            self.replaced = int(resumed.get("replaced", 0))
        self.inbox.start()
        s = self.tuner.setting()
        self.resize(s["predictors"], s["trainers"], s["actors"])
        return self

    def state(self) -> dict:
        return {"tuner": self.tuner.state(), "replaced": self.replaced}

    def resize(self, predictors: int, trainers: int, actors: int) -> None:
        while len(self.predictors) < predictors:
            self.predictors.append(Predictor(len(self.predictors), self.shared, self.requests, self._answer_to,
                                             self.model, self.device, self.version, self.o.prediction_batch,
                                             self.stats))
            self.predictors[-1].start()
        while len(self.predictors) > predictors:
            self.predictors.pop().halt.set()
        while len(self.trainers) < trainers:
            self.trainers.append(Trainer(len(self.trainers), self.shared, self.segments, self.batches,
                                         self.shape.columns, self.shape.action_shape, self.shape.action_dtype,
                                         self.stats, pin=torch.device(self.device).type == "cuda"))
            self.trainers[-1].start()
        while len(self.trainers) > trainers:
            self._retire_trainer(self.trainers.pop())
        live = sorted(a for a, h in self.actors.items() if not h.stopping)
        for a in live[actors:]:
            self._stop_actor(a)
        for _ in range(len(live), actors):
            self._spawn(self._free_id())

    def _free_id(self) -> int:
        """The lowest actor id whose buffers nobody uses: never started, or its process has
        ended and everything it sent has been received."""
        for a in range(self.o.max_actors):
            h = self.actors.get(a)
            if h is None or (h.stopping and h.finished()):
                return a
        raise RunFailed(f"queues: all {self.o.max_actors} actor ids are busy (communication.options.max_actors)")

    def _retire_trainer(self, trainer: Trainer) -> None:
        trainer.halt.set()
        trainer.join(self.o.timeout_s)
        leftover = trainer.flush()
        if leftover is not None:  # its segments go on with the other trainers' batches
            self.retired.append(leftover)

    def _spawn(self, actor: int) -> None:
        incarnation = self.incarnations.get(actor, -1) + 1
        self.incarnations[actor] = incarnation
        state = self.shared.state[actor]
        state[state == FILLING] = FREE  # what a predecessor was filling (or had sent, now QUEUED)
        self.shared.stop[actor] = 0
        plan = ActorPlan(actor, incarnation, self.recipe.env, self.seed + 1000 * actor + incarnation,
                         self.recipe.algo.rollout_len, self.recipe.algo.clip_rewards, self.o.timeout_s)
        here, there = self.ctx.Pipe()
        proc = self.ctx.Process(target=actor_main, name=f"rlkit-actor-{actor}", daemon=True,
                                args=(plan, self.shared, there))
        proc.start()
        there.close()
        self.actors[actor] = ActorHandle(proc, incarnation, here)

    def _stop_actor(self, actor: int) -> None:
        self.actors[actor].stopping = True
        self.shared.stop[actor] = 1

    def _answer_to(self, actor: int, incarnation: int):
        handle = self.actors.get(actor)
        return handle.conn if handle is not None and handle.incarnation == incarnation else None

    # -- the learner's side ----------------------------------------------------------------------

    def __iter__(self):
        while True:
            yield self.next_batch().batch.to(self.device)

    def next_batch(self) -> Assembled:
        try:
            parts = timed_get(self.batches, self.o.timeout_s, self.health)
        except TimeoutError:
            raise RunFailed(f"queues: no training batch for {self.o.timeout_s:g} s "
                            f"(communication.options.timeout_s); actors alive: {self.alive_actors()}") from None
        self._account(parts)
        return parts

    def _account(self, parts: Assembled) -> None:
        w, now = self.window, time.perf_counter()
        version = self.version()
        w.lags += [version - v for v in parts.versions]
        w.latencies += parts.latencies
        w.batches += 1
        w.steps += parts.batch.steps
        self.sample_steps += parts.batch.steps
        if now - self.sample_start >= 1.0:
            w.samples.append(self.sample_steps / (now - self.sample_start))
            self.sample_start, self.sample_steps = now, 0
        if self.o.tune and now - w.start >= self.o.tune_window_s and len(w.samples) >= 2:
            self._tune(w.samples)

    def _tune(self, samples: list[float]) -> None:
        self.window.samples = []
        self.window.start = time.perf_counter()
        if not self.warm:  # the first window holds start-up (actors importing, caches filling)
            self.warm = True
            return
        seen = len(self.tuner.log)
        decision = self.tuner.observe(samples)
        for line in self.tuner.log[seen:]:
            self.tuning_log.append(f"update {self.version()}: {line}")
            print(f"rlkit: queues tuning: {line}", file=sys.stderr)
        if decision is not None:
            s = self.tuner.setting()
            self.resize(s["predictors"], s["trainers"], s["actors"])

    def health(self) -> None:
        """Raise for a dead worker thread; replace (or fail on) a dead actor. Cheap to call often."""
        now = time.monotonic()
        if now - self.last_health < _HEALTH_S:
            return
        self.last_health = now
        for w in [*self.predictors, *self.trainers]:
            if w.error is not None:
                raise RunFailed(f"queues: {w.name} failed: {w.error!r}")
        for actor, h in list(self.actors.items()):
            code = h.proc.exitcode
            if code is None or h.stopping or not h.drained:
                continue  # alive, leaving on request, or what it sent is still being read
            if code > 0 and (actor, h.incarnation) not in self.producing:  # an error, not a signal
                raise RunFailed(f"queues: actor {actor} (pid {h.proc.pid}) failed with exit code {code} before it "
                                "sent a segment: not replaced (it would fail again); its error is above")
            if self.o.on_actor_failure == "stop":
                raise RunFailed(f"queues: actor {actor} (pid {h.proc.pid}) died with exit code {code}; the run "
                                "stops (communication.options.on_actor_failure=stop)")
            print(f"rlkit: queues: actor {actor} (pid {h.proc.pid}) died with exit code {code}; replaced",
                  file=sys.stderr)
            self.replaced += 1
            h.conn.close()
            self._spawn(actor)

    def alive_actors(self) -> int:
        return sum(h.proc.is_alive() for h in self.actors.values())

    def metrics(self) -> dict[str, float]:
        w, now = self.window, time.perf_counter()
        elapsed = max(now - (self.metrics_at or w.start), 1e-9)
        self.metrics_at = now
        c = self.stats.take()
        lat = sorted(w.latencies)
        out = {"queues/pps": c["predictions"] / elapsed, "queues/tps": w.batches / elapsed,
               "queues/prediction_batch": c["predictions"] / max(c["forward_passes"], 1),
               "queues/prediction_queue": float(self.requests.qsize()),
               "queues/training_queue": float(self.segments.qsize()),
               "queues/np": float(len(self.predictors)), "queues/nt": float(len(self.trainers)),
               "queues/na": float(sum(not h.stopping for h in self.actors.values())),
               "queues/actors_replaced": float(self.replaced)}
        if lat:
            out["queues/latency_ms"] = 1000 * statistics.fmean(lat)
            out["queues/latency_p95_ms"] = 1000 * lat[min(len(lat) - 1, int(0.95 * len(lat)))]
        if w.lags:
            out["queues/policy_lag"] = statistics.fmean(w.lags)
        w.lags, w.latencies, w.batches = [], [], 0
        return out

    # -- shutdown --------------------------------------------------------------------------------

    def close(self, drain: bool = False) -> list[Assembled]:
        """Stop everything (bounded). With ``drain``, return every batch not yet taken, partly
        filled ones included, so that all segments the actors sent are accounted for."""
        if self.closed:
            return []
        self.closed = True
        for actor in self.actors:
            self._stop_actor(actor)
        deadline = time.monotonic() + self.o.timeout_s
        leftovers: list[Assembled] = []
        while time.monotonic() < deadline and self.inbox.is_alive():
            self._take_ready(leftovers, drain)  # trainers must not block on a full batch queue
            if all(h.drained for h in self.actors.values()) and not self.segments.qsize():
                break
            if not any(t.is_alive() for t in self.trainers):
                break
            time.sleep(0.01)
        for w in [self.inbox, *self.predictors, *self.trainers]:
            w.halt.set()
        for w in [self.inbox, *self.predictors, *self.trainers]:
            w.join(self.o.timeout_s)
        self._take_ready(leftovers, drain)
        leftovers += self.retired
        leftovers += [p for t in self.trainers if (p := t.flush()) is not None]
        self._end_actors(deadline)
        _stop_forkserver()
        return leftovers if drain else []

    def _take_ready(self, into: list, keep: bool) -> None:
        while True:
            try:
                parts = self.batches.get_nowait()
            except queue.Empty:
                return
            if keep:
                into.append(parts)

    def _end_actors(self, deadline: float) -> None:
        for actor, h in self.actors.items():
            h.proc.join(max(0.1, deadline - time.monotonic()))
            if h.proc.is_alive():
                print(f"rlkit: queues: actor {actor} (pid {h.proc.pid}) did not stop in time and was killed",
                      file=sys.stderr)
                h.proc.kill()
                h.proc.join(5)
            h.conn.close()


def _stop_forkserver() -> None:
    """The fork server outlives its last actor; end it with the pipeline (the next one restarts it)."""
    from multiprocessing import forkserver

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:
        stop()

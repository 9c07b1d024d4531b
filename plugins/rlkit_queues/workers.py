"""The learner process's worker threads: predictors (batched inference on the live parameters)
and trainers (segments from the training queue assembled into training batches)."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from rlkit.api import Batch
from rlkit_queues.actor import FREE, Segment, Shared

_POLL_S = 0.1


class Worker(threading.Thread):
    """A thread with its own stop flag; an exception it dies of is kept for the learner to raise."""

    def __init__(self, name: str):
        super().__init__(daemon=True, name=name)
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.halt.is_set():
                self.once()
        except BaseException as exc:  # reported by the learner's health check
            self.error = exc


class Predictor(Worker):
    """Takes one request, drains up to ``max_batch`` while more are waiting, runs one forward pass
    and answers each actor on its own pipe."""

    def __init__(self, index: int, shared: Shared, requests, answer_to: Callable, model, device,
                 version: Callable[[], int], max_batch: int, stats: "Stats"):
        super().__init__(f"rlkit-predictor-{index}")
        self.shared, self.requests, self.answer_to = shared, requests, answer_to
        self.model, self.device, self.version, self.max_batch, self.stats = model, device, version, max_batch, stats

    def once(self) -> None:
        try:
            batch = [self.requests.get(timeout=_POLL_S)]
        except queue.Empty:
            return
        while len(batch) < self.max_batch:
            try:
                batch.append(self.requests.get_nowait())
            except queue.Empty:
                break
        obs = torch.cat([self.shared.obs[a, s, t] for a, _, s, t in batch]).to(self.device, non_blocking=True)
        actions, _ = self.model.act(obs)
        env_actions, raw, version = self.model.env_actions(actions), actions.cpu().numpy(), self.version()
        envs = self.shared.obs.shape[3]
        for i, (actor, incarnation, _, t) in enumerate(batch):
            conn = self.answer_to(actor, incarnation)
            if conn is None:  # that actor has been replaced since it asked
                continue
            part = slice(i * envs, (i + 1) * envs)
            try:
                conn.send((t, raw[part], env_actions[part], version))
            except OSError:  # it died after asking: replacing it is the health check's business
                pass
        self.stats.predicted(len(batch), len(batch) * envs)


@dataclass
class Assembled:
    batch: Batch
    segments: list  # (actor, incarnation, seq, columns) of every segment with columns in the batch
    versions: list  # the learner update that chose each segment's first action
    latencies: list


class Trainer(Worker):
    """Copies segments from shared memory into training batches of exactly ``columns`` env segments
    (a segment of E envs may be split over two batches) and frees each segment buffer once copied."""

    def __init__(self, index: int, shared: Shared, segments, out: queue.Queue, columns: int, action_shape,
                 action_dtype, stats: "Stats", pin: bool = False):
        super().__init__(f"rlkit-trainer-{index}")
        self.shared, self.segments, self.out, self.columns = shared, segments, out, columns
        self.action_shape, self.action_dtype, self.stats = action_shape, action_dtype, stats
        self.pin = pin  # page-locked batches copy to the GPU asynchronously
        self._fresh()

    def _fresh(self) -> None:
        T = self.shared.obs.shape[2] - 1
        n = self.columns
        self.obs = torch.empty((T + 1, n, *self.shared.obs.shape[4:]), dtype=self.shared.obs.dtype, pin_memory=self.pin)
        self.actions = np.empty((T, n, *self.action_shape), dtype=self.action_dtype)
        self.rewards, self.dones = np.empty((T, n), np.float32), np.empty((T, n), np.float32)
        self.filled = 0
        self.parts = Assembled(None, [], [], [])
        self.scores, self.lengths = [], []

    def once(self) -> None:
        try:
            item = self.segments.get(timeout=_POLL_S)
        except queue.Empty:
            return
        self.take(item)

    def take(self, seg: Segment) -> None:
        self.scores += seg.scores
        self.lengths += seg.lengths
        source = self.shared.obs[seg.actor, seg.slot]
        done = 0
        envs = source.shape[1]
        while done < envs:
            k = min(envs - done, self.columns - self.filled)
            into, cols = slice(self.filled, self.filled + k), slice(done, done + k)
            self.obs[:, into] = source[:, cols]
            self.actions[:, into] = seg.actions[:, cols]
            self.rewards[:, into], self.dones[:, into] = seg.rewards[:, cols], seg.dones[:, cols]
            self.parts.segments.append((seg.actor, seg.incarnation, seg.seq, k))
            self.parts.versions.append(seg.version)
            self.parts.latencies += seg.latencies
            self.filled += k
            done += k
            if self.filled == self.columns:
                self._emit()
        self.shared.state[seg.actor, seg.slot] = FREE
        self.stats.took_segment()

    def _emit(self, partial: bool = False) -> None:
        n = self.filled
        if n == 0:
            return
        T = self.rewards.shape[0]
        batch = Batch(self.obs[:, :n], torch.from_numpy(self.actions[:, :n]), torch.from_numpy(self.rewards[:, :n]),
                      torch.from_numpy(self.dones[:, :n]), T * n, self.scores, self.lengths)
        self.parts.batch = batch
        parts = self.parts
        self._fresh()
        while not partial:
            try:
                self.out.put(parts, timeout=_POLL_S)
                return
            except queue.Full:
                if self.halt.is_set():
                    break
        self.leftover = parts

    def flush(self) -> Assembled | None:
        """At shutdown: the partly filled batch, if any (its segments are not lost)."""
        self.leftover = None
        self._emit(partial=True)
        return self.leftover


@dataclass
class Stats:
    """Counters the workers bump (under the GIL) and the learner reads and resets per window."""

    requests: int = 0
    predictions: int = 0
    forward_passes: int = 0
    segments: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def predicted(self, requests: int, observations: int) -> None:
        with self.lock:
            self.requests += requests
            self.predictions += observations
            self.forward_passes += 1

    def took_segment(self) -> None:
        with self.lock:
            self.segments += 1

    def take(self) -> dict[str, int]:
        with self.lock:
            out = {"requests": self.requests, "predictions": self.predictions,
                   "forward_passes": self.forward_passes, "segments": self.segments}
            self.requests = self.predictions = self.forward_passes = self.segments = 0
        return out


def timed_get(q: queue.Queue, timeout_s: float, check: Callable[[], None]):
    """``q.get`` that calls ``check`` (raise to stop) every poll and gives up after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        check()
        try:
            return q.get(timeout=_POLL_S)
        except queue.Empty:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing arrived for {timeout_s:g} s") from None

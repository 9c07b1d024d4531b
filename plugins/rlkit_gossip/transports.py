"""Transports: one-message mailboxes between learners, one per (sender, receiver, kind).

A mailbox holds at most one message. A sender may write only when the receiver has taken the
previous one (``ready``), so no message is overwritten and push-sum mass is never lost; the
receiver ``take``s a message when it is there. Nothing here blocks: the protocol decides when to
wait, and for how long.

``ShmTransport``: each mailbox is a file in shared memory (/dev/shm) mapped by both learners —
how GALA co-locates learners on one host. Layout: an int64 flag (0 empty, 1 full) in the first
cache line, then the float64 header, then the float32 payload. The writer fills header and
payload before it sets the flag, the reader copies them out before it clears it (x86 and ARM64
keep these stores in order for aligned 8-byte flags written after a full copy returns).

``DistTransport``: torch.distributed point-to-point (isend/irecv over gloo, or NCCL on GPUs), so
learners on different hosts (torchrun, ``trainer.num_nodes > 1``) gossip too. The process group
carries the bytes; the group's key-value store carries the mailbox flags as two counters per
mailbox, ``bell`` (messages sent) and ``took`` (messages taken). A receiver posts its ``irecv``
only when the bell says a message is on its way, and a sender reuses its buffer only when ``took``
has caught up, so no wait blocks on a message that was never sent (gloo's send and receive
handles cannot be polled: they report completion only once waited on). A transfer that fails or
outlasts ``timeout_s`` (its peer died) breaks that link; the protocol's membership drops the peer.
Each kind of message has its own process group, so NCCL (which ignores tags) cannot match a
gossip message with a snapshot receive.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch

HEADER = 8  # float64 slots: weight, update, agent_steps, score_mean, sent, mixed, skipped, staleness
GOSSIP, SNAPSHOT = 0, 1


def shm_root(run_key: str) -> Path:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    return base / f"rlkit-gossip-{hashlib.sha1(run_key.encode()).hexdigest()[:16]}"


class ShmTransport:
    name = "shm"

    def __init__(self, root: Path, numel: int):
        self.root = Path(root)
        self.numel = numel
        self.data_offset = 64 + 8 * HEADER
        self.nbytes = self.data_offset + 4 * numel
        self._boxes: dict[tuple[int, int, int], tuple[np.ndarray, torch.Tensor, torch.Tensor]] = {}
        self.root.mkdir(parents=True, exist_ok=True)

    def _box(self, src: int, dst: int, kind: int):
        key = (src, dst, kind)
        box = self._boxes.get(key)
        if box is None:
            path = self.root / f"{src}-{dst}-{kind}"
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                if os.fstat(fd).st_size < self.nbytes:
                    os.ftruncate(fd, self.nbytes)
            finally:
                os.close(fd)
            raw = np.memmap(path, dtype=np.uint8, mode="r+", shape=(self.nbytes,))
            flag = raw[:8].view(np.int64)
            header = torch.from_numpy(raw[64:self.data_offset].view(np.float64))
            data = torch.from_numpy(raw[self.data_offset:].view(np.float32))
            box = self._boxes[key] = (flag, header, data)
        return box

    def ready(self, src: int, dst: int, kind: int) -> bool:
        return int(self._box(src, dst, kind)[0][0]) == 0

    def send(self, src: int, dst: int, kind: int, header: torch.Tensor, data: torch.Tensor) -> None:
        flag, h, d = self._box(src, dst, kind)
        h.copy_(header)
        d.copy_(data)
        flag[0] = 1

    def waiting(self, src: int, dst: int, kind: int) -> bool:
        return int(self._box(src, dst, kind)[0][0]) == 1

    def take(self, src: int, dst: int, kind: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        flag, h, d = self._box(src, dst, kind)
        if int(flag[0]) != 1:
            return None
        out = h.clone(), d.clone()
        flag[0] = 0
        return out

    def close(self, remove: bool = False) -> None:
        self._boxes.clear()
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)


def _message(numel: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One message buffer (bytes) with its float64 header and float32 payload views."""
    raw = torch.zeros(8 * HEADER + 4 * numel, dtype=torch.uint8, device=device)
    return raw, raw[:8 * HEADER].view(torch.float64), raw[8 * HEADER:].view(torch.float32)


class DistTransport:
    name = "dist"

    def __init__(self, numel: int, rank: int, store, *, device="cpu", timeout_s: float = 60.0, groups=None):
        import torch.distributed as dist

        self.dist, self.numel, self.rank, self.store = dist, numel, rank, store
        self.device = torch.device(device)
        self.timeout = timedelta(seconds=timeout_s)
        # one group per kind of message (collective: every learner creates its transport at start)
        self.groups = groups or {kind: dist.new_group(timeout=self.timeout) for kind in (GOSSIP, SNAPSHOT)}
        self._send: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self._recv: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self._pending: dict[tuple[int, int], object] = {}  # (dst, kind) -> isend handle not yet taken
        self._sent: dict[tuple[int, int], int] = {}  # (dst, kind) -> messages sent
        self._taken: dict[tuple[int, int], int] = {}  # (src, kind) -> messages taken
        self.broken: set[int] = set()  # peers whose link failed (a transfer timed out or errored)

    @staticmethod
    def _key(what: str, src: int, dst: int, kind: int) -> str:
        return f"gossip/{what}/{src}-{dst}-{kind}"

    def ready(self, src: int, dst: int, kind: int) -> bool:
        work = self._pending.get((dst, kind))
        if work is None:
            return dst not in self.broken
        if self.store.add(self._key("took", src, dst, kind), 0) < self._sent[(dst, kind)]:
            return False
        del self._pending[(dst, kind)]
        return self._finish(lambda: work, dst)

    def send(self, src: int, dst: int, kind: int, header: torch.Tensor, data: torch.Tensor) -> None:
        raw, h, d = self._send.get((dst, kind)) or self._send.setdefault((dst, kind), _message(self.numel, self.device))
        h.copy_(header)
        d.copy_(data)
        # the bell rings before the send: NCCL's first send to a peer blocks until that peer posts
        # its receive, which it does when it hears the bell
        self._sent[(dst, kind)] = self._sent.get((dst, kind), 0) + 1
        self.store.add(self._key("bell", src, dst, kind), 1)
        try:
            self._pending[(dst, kind)] = self.dist.isend(raw, dst, group=self.groups[kind], tag=kind)
        except RuntimeError:  # the link is gone (the peer exited)
            self.broken.add(dst)

    def waiting(self, src: int, dst: int, kind: int) -> bool:
        if src in self.broken:
            return False
        return self.store.add(self._key("bell", src, dst, kind), 0) > self._taken.get((src, kind), 0)

    def take(self, src: int, dst: int, kind: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        if not self.waiting(src, dst, kind):
            return None
        raw, h, d = self._recv.get((src, kind)) or self._recv.setdefault((src, kind), _message(self.numel, self.device))
        if not self._finish(lambda: self.dist.irecv(raw, src, group=self.groups[kind], tag=kind), src):
            return None
        self._taken[(src, kind)] = self._taken.get((src, kind), 0) + 1
        self.store.add(self._key("took", src, dst, kind), 1)
        return h.clone(), d.clone()

    def _finish(self, start, peer: int) -> bool:
        """Start (``start()`` returns the handle) and wait for a transfer known to be under way; a
        failure (the peer exited with its message unsent, a timeout) breaks the link to ``peer``."""
        try:
            start().wait(self.timeout)
            if self.device.type == "cuda":
                torch.cuda.current_stream(self.device).synchronize()
            return True
        except RuntimeError:
            self.broken.add(peer)
            return False

    def flush(self, alive, timeout_s: float, kind: int = GOSSIP) -> None:
        """Before this learner exits: wait (at most ``timeout_s``) until every message it sent is
        taken, or its receiver is gone (``alive(dst)`` False). A message not yet moved dies with
        the process that sent it; a shared-memory mailbox outlives its writer, so ShmTransport
        needs no flush."""
        deadline = time.monotonic() + timeout_s
        while True:
            waiting = [dst for (dst, k) in list(self._pending) if k == kind and not self.ready(self.rank, dst, kind)
                       and alive(dst)]
            if not waiting or time.monotonic() > deadline:
                return
            time.sleep(0.005)

    def close(self, remove: bool = False) -> None:
        # a message never taken (its receiver left) is abandoned with its handle
        self._pending.clear()
        self._send.clear()
        self._recv.clear()

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
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
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

"""How the learner process's C allocator treats the memory it frees (glibc on Linux).

Every update allocates and frees the same large buffers: the scaled observation batch (9 MB for
Pong's 80 frames), the convolutions' activations and gradients (4 MB and less each). glibc serves
blocks of this size with ``mmap`` and hands them back to the OS with ``munmap`` when they are freed
(its threshold adapts only up to a point, and the heap's top is trimmed too), so each update
page-faults them in again: 2,000-6,000 minor page faults per Pong train step, measured, and 0 with
the thresholds below. Keeping the freed memory in the process is what the allocators PyTorch's CPU
performance guide recommends (jemalloc, tcmalloc) do; glibc does it with two ``mallopt`` calls. The
process's resident memory stays at its peak instead of shrinking between updates.
"""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's upper limit on 64-bit: blocks below it come from the heap
TRIM_THRESHOLD = 1 << 30  # free memory at the heap's top kept up to this much


def keep_freed_memory() -> bool:
    """Have glibc keep freed memory for reuse (True), or leave the allocator alone where it is not
    glibc (False: macOS, musl, Windows)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))

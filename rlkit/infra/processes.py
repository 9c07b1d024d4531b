"""The processes of a run, read from /proc (Linux): children, descendants, and every process that
carries the run's RLKIT_RUN_DIR; the last-resort exit of a second Ctrl-C; and children that die
with their parent. Light to import (actor processes use it)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Iterator


def child_pids(pid: int | None = None) -> set[int]:
    """Live child processes of ``pid`` (default: this process), read from /proc."""
    pid = os.getpid() if pid is None else pid
    children = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z" and not _interpreter_helper(entry):
            children.add(int(entry.name))
    return children


def _interpreter_helper(proc: Path) -> bool:
    """multiprocessing's resource tracker: one per interpreter, started by the first queue or
    lock a run makes and ended with the interpreter, not with the run."""
    try:
        return b"multiprocessing.resource_tracker" in (proc / "cmdline").read_bytes()
    except OSError:
        return False


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), or None if it is gone or a zombie: with the pid
    it names one process, even after the pid is reused."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def snapshot_tree(pid: int) -> dict[int, int]:
    """``pid`` and every process below it now (forked env workers included), pid -> start time.
    A leak check takes it while the run is up and later asks :func:`still_alive`: unlike a walk of
    the tree after the parent has gone, it still sees children that were re-parented."""
    found = {}
    for p in [pid, *descendants(pid)]:
        t = start_time(p)
        if t is not None:
            found[p] = t
    return found


def still_alive(snapshot: dict[int, int]) -> list[int]:
    """The processes of a :func:`snapshot_tree` that are still running (same pid, same start)."""
    return [p for p, t in snapshot.items() if start_time(p) == t]


def processes_of_run(run_dir: Path) -> list[int]:
    """Pids of live processes started for the run in ``run_dir`` (they carry RLKIT_RUN_DIR)."""
    marker = f"RLKIT_RUN_DIR={run_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def descendants(pid: int | None = None) -> list[int]:
    """Every live process below ``pid`` (default: this process), children before grandchildren."""
    found, frontier = [], [os.getpid() if pid is None else pid]
    while frontier:
        kids = sorted(set().union(*(child_pids(p) for p in frontier)))
        found += kids
        frontier = kids
    return found


def exit_at_once_on_next_interrupt(code: int = 130) -> None:
    """From now on a Ctrl-C (SIGINT) kills every process below this one and exits at once with
    ``code``, skipping whatever shutdown is under way. Installed when the first Ctrl-C starts the
    graceful stop, so that a second one is never ignored."""

    def _handler(signum, frame):
        for pid in reversed(descendants()):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        print("rlkit: second interrupt: stopped at once (no checkpoint beyond the one already written)",
              file=sys.stderr, flush=True)
        os._exit(code)

    signal.signal(signal.SIGINT, _handler)


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """A step that must not be cut in half by Ctrl-C: a SIGINT that arrives inside the block is
    held and handled (by whatever handler was installed) as the block exits normally. Python raises
    ``KeyboardInterrupt`` at any bytecode, e.g. just after a collective returns and before the
    protocol has recorded it; inside this block it cannot. A second SIGINT inside the block is
    handled at once (a block stuck waiting stays interruptible). When the block raises, its own
    error goes on (the held Ctrl-C is dropped: the run is failing anyway). Nested blocks act as one;
    off the main thread (where no signal handler runs), or where SIGINT is ignored or handled outside
    Python, it does nothing."""
    previous = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    if previous is None or previous == signal.SIG_IGN or getattr(previous, "_rlkit_hold", False):
        yield
        return
    held: list = []

    def handle(signum, frame):
        if callable(previous):
            previous(signum, frame)
        else:  # SIG_DFL
            signal.default_int_handler(signum, frame)

    def hold(signum, frame):
        held.append((signum, frame))
        if len(held) > 1:  # a second Ctrl-C (the block hangs): both handled now, as without the block
            signal.signal(signal.SIGINT, previous)
            handle(*held[0])  # a handler that only notes the first Ctrl-C sees two, as it would have
            handle(signum, frame)

    hold._rlkit_hold = True  # type: ignore[attr-defined]
    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is hold:
            signal.signal(signal.SIGINT, previous)
    if len(held) == 1:
        handle(*held[0])


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Linux: a launched learner gets ``sig`` when the process that launched it dies, so no learner
    outlives its run even if the launcher is killed with SIGKILL."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, sig)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() == 1:  # the parent died before prctl took effect
        os.kill(os.getpid(), sig)

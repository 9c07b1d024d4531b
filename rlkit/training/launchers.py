"""How the launching process starts and watches the learner processes of a multi-learner run:
Lightning's subprocess launcher and child observer, changed where a run stops (the learners get time
to write their part of ``interrupted.ckpt``) and where a learner dies (the launching process is left
time to say so; independent learners outlive a dead peer and it is only reported). Used by
:class:`rlkit.training.strategies.LearnerProcesses`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable

from rlkit.infra.upstream import ChildObserver, ScriptLauncher


def signal_live(procs: list[subprocess.Popen], sig: int) -> None:
    for proc in procs:
        if proc.poll() is None:
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                pass


class SynchronousLauncher(ScriptLauncher):
    """Lightning's launcher, except at a stop. After a Ctrl-C Lightning SIGKILLs the children as
    soon as the launching process is done with its own shutdown, and its observer kills every
    process when a child exits with an error code, as a learner leaving after a Ctrl-C does. The
    learners are each writing their part of ``interrupted.ckpt`` then, so once the run is stopping
    the observer stands aside and :meth:`kill` gives the children ``grace_s`` to finish, naming any
    it then has to kill. A stop the learners did not agree on (a second Ctrl-C, a Ctrl-C before
    training) is Lightning's: the children may be waiting in a collective learner 0 has left."""

    def __init__(self, *args: Any, grace_s: float = 60.0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.grace_s = grace_s
        self.stopping = False  # set once the run is being stopped by a signal

    def kill(self, signum: Any) -> None:
        agreed, self.stopping = self.stopping, True
        if not agreed:  # not a stop the learners agreed on (a second Ctrl-C, one during set-up): they
            super().kill(signum)  # may wait in a collective learner 0 has left; no grace then
            return
        deadline = time.monotonic() + self.grace_s
        for rank, proc in enumerate(self.procs, start=1):
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"rlkit: learner {rank} (pid {proc.pid}) did not finish its shutdown in {self.grace_s:g} s; killed",
                      file=sys.stderr, flush=True)
        super().kill(signum)  # skips the ones that have exited

    def launch(self, function: Callable, *args: Any, trainer: Any = None, **kwargs: Any) -> Any:
        self.cluster_environment.validate_settings(num_devices=self.num_processes, num_nodes=self.num_nodes)
        if not self.cluster_environment.creates_processes_externally:
            self.start_children()
            self.watch_children()
        self.set_num_threads()
        return function(*args, **kwargs)

    def watch_children(self) -> None:
        StopAwareObserver(self).start()


class StopAwareObserver(ChildObserver):
    """Lightning's observer (a learner that dies takes the run down), idle while the run stops, and
    one that lets the launching process say what happened. Lightning's SIGKILLs the launching
    process as soon as it sees a dead learner (it polls every 5 s); but learner 0 finds the dead
    peer itself, in its next collective, and fails with one line naming it. Killed first, the run
    ended with -9 and no word (seen in CI on a slow host). So a dead learner gives the launching
    process ``main_grace_s`` to end on its own; one still running then (stuck where no collective
    fails) is ended here: the other learners are killed, the line is printed, exit code 1."""

    def __init__(self, launcher: SynchronousLauncher, main_grace_s: float = 30.0, sleep_period: float = 5.0):
        super().__init__(main_pid=os.getpid(), child_processes=launcher.procs, sleep_period=sleep_period)
        self.launcher, self.main_grace_s = launcher, main_grace_s

    def check(self) -> bool:
        if self.launcher.stopping:
            return True
        codes = [proc.poll() for proc in self.children]
        if all(code == 0 for code in codes):
            return True
        dead = [(rank, proc.pid, code) for rank, (proc, code) in enumerate(zip(self.children, codes), start=1)
                if code]
        if not dead:
            return False
        deadline = time.monotonic() + self.main_grace_s
        while time.monotonic() < deadline:  # the launching process ends the run itself (and this thread with it)
            time.sleep(0.2)
            if self.launcher.stopping:
                return True
        rank, pid, code = dead[0]
        for proc in self.children:
            if proc.poll() is None:
                proc.send_signal(self.termination_signal)
        print(f"rlkit: run failed: learner {rank} (pid {pid}) exited with code {code}; learner 0 did not stop "
              f"within {self.main_grace_s:g} s of it and was ended", file=sys.stderr, flush=True)
        os._exit(1)


class IndependentLauncher(SynchronousLauncher):
    """Lightning's launcher kills every process when one child dies; independent learners must
    outlive a dead peer, so the children are watched by :class:`ChildReporter` instead. At a stop,
    :meth:`kill` first sends each live learner SIGTERM (in case the stop did not reach it; a second
    one changes nothing), then waits as the synchronous launcher does."""

    def kill(self, signum: Any) -> None:
        self.stopping = True
        signal_live(self.procs, signal.SIGTERM)  # in case the stop never reached them (harmless if it did)
        super().kill(signum)

    def watch_children(self) -> None:
        ChildReporter(self).start()


class ChildReporter(threading.Thread):
    """Says which launched learner died, and how, unless the run is being stopped by a signal."""

    def __init__(self, launcher: SynchronousLauncher, period_s: float = 1.0):
        super().__init__(daemon=True, name="rlkit-child-reporter")
        self.launcher, self.procs, self.period_s = launcher, launcher.procs, period_s

    def run(self) -> None:
        reported: set[int] = set()
        while len(reported) < len(self.procs):
            time.sleep(self.period_s)
            for rank, proc in enumerate(self.procs, start=1):
                code = proc.poll()
                if code is not None and rank not in reported:
                    reported.add(rank)
                    if code != 0 and not self.launcher.stopping:
                        print(f"rlkit: learner {rank} (pid {proc.pid}) exited with code {code}", file=sys.stderr)

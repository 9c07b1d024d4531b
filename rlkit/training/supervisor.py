"""The launching process of a run whose learners may die and come back (independent learners on
one host: gossip). It trains nothing itself, so no learner is special:

* it hosts the run's key-value store (a ``TCPStore`` server in this process), which therefore
  outlives any learner; every learner is a client of it (``RLKIT_STORE``), and of the process
  group formed through it (``TORCHELASTIC_USE_AGENT_STORE``, as under torchrun's agent; gloo
  connects lazily, ``TORCH_GLOO_LAZY_INIT``, so a learner that starts again joins without the
  others);
* it starts the K learner processes as torchrun would (``RANK``, ``WORLD_SIZE``, ... in their
  environment, the user's command line again), watches them, and restarts one that dies, up to
  ``fault.max_restarts`` times per learner, where the communicator lets learners rejoin
  (``LearnerLayout.rejoins``). A restarted learner continues from its own newest checkpoint
  (:func:`own_checkpoint`), or from update 0 where it has none, and the communicator takes it back
  (``rlkit_learner_exit`` tells it about the death at once);
* a learner that exhausts its restarts stops the run: the others are asked to stop through the
  store (each writes its ``last.ckpt``) and the run fails with one line, to be continued with
  ``rlkit resume``; where learners cannot rejoin (gossip's dist transport) the others go on
  without it;
* at the end it hands ``result.json`` what every learner published (its own agent steps,
  score window, updates), so the run's agent steps are the learners' own, summed;
* a Ctrl-C or SIGTERM is passed on to every learner as SIGTERM (each writes its
  ``interrupted.ckpt``), waited for ``LearnerLayout.child_grace_s`` at most, and any learner
  still there is killed; a second Ctrl-C kills them at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkit.config.runtime import RUN_DIR_ENV, Run
from rlkit.hooks.layout import LearnerLayout, Topology
from rlkit.infra.errors import RunFailed

LIFE_ENV = "RLKIT_LEARNER_LIFE"  # 0 for a learner's first process, n after its n-th restart
STORE_ENV = "RLKIT_STORE"  # host:port of the run's store, hosted by the supervisor
STOP_KEY = "rlkit/stop"
FINAL_KEY = "rlkit/final/{rank}"
RESULT_KEY = "rlkit/result"  # learner 0's result, where the learners step together
STARTED_KEY = "rlkit/started/{rank}"  # set by a learner once training has started (any life)
RESTART_PAUSE_S = 1.0
_POLL_S = 0.1


def launched_externally() -> bool:
    """This process is one learner of a run that something else launched (torchrun, srun tasks)."""
    if "RANK" in os.environ or "LOCAL_RANK" in os.environ:
        return True
    return "SLURM_PROCID" in os.environ and int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1


def supervises(layout: LearnerLayout, recipe) -> bool:
    """Runs whose launching process supervises its learners instead of being learner 0."""
    return layout.multi and recipe.trainer.num_nodes == 1 and not launched_externally()


def life() -> int:
    """0 in a learner's first process, n after its n-th restart (by the supervisor, or by torchrun's
    agent on this node)."""
    return int(os.environ.get(LIFE_ENV) or os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0)


def torchrun_marker(run_dir: Path) -> Path | None:
    """Under torchrun: the file by which this worker's agent (its parent process: host, pid, start
    time) marks the run folder once its first workers trained here; None outside torchrun.

    A worker that finds its agent's mark was started again by the same ``torchrun --max-restarts``
    after a failure, its own learner's or another node's. ``TORCHELASTIC_RESTART_COUNT`` cannot
    tell: an agent whose own workers were healthy restarts them when another node rejoins the
    rendezvous, without counting a restart. A new ``torchrun`` is a new agent: it finds no mark,
    and ``rlkit run`` into a folder with checkpoints is refused as before."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or supervised_learner():
        return None
    import socket

    agent = os.getppid()
    try:  # field 22 of /proc/<pid>/stat: the start time, so a reused pid is another agent
        started = Path(f"/proc/{agent}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        started = "0"
    name = f"{socket.gethostname()}-{agent}-{started}-{os.environ.get('LOCAL_RANK', '0')}"
    return run_dir / ".torchrun" / name


def supervised_learner() -> bool:
    return STORE_ENV in os.environ


_client: Any = None


def store_client() -> Any:
    """The supervisor's store: the server itself in the supervisor, a connection to it (one per
    process) in a supervised learner; None in any other process."""
    global _client
    if _client is None and supervised_learner():
        from datetime import timedelta

        from torch.distributed import TCPStore

        host, port = os.environ[STORE_ENV].rsplit(":", 1)
        _client = TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=60))
    return _client


def own_checkpoint(checkpoint_dir: Path, rank: int) -> Path | None:
    """An independent learner's own newest readable checkpoint: learner 0's in ``checkpoints/``,
    learner r's in ``checkpoints/learner<r>/``; None where it has none (it starts at update 0)."""
    from rlkit.training.checkpoints import newest_first, stored_step

    folder = checkpoint_dir if rank == 0 else checkpoint_dir / f"learner{rank}"
    for path in newest_first(folder.glob("*.ckpt")):
        if stored_step(path) is not None:
            return path
    return None


def say(message: str) -> None:
    print(f"rlkit: {message}", file=sys.stderr, flush=True)


@dataclass
class Learner:
    rank: int
    proc: subprocess.Popen
    life: int = 0
    deaths: list[int] = field(default_factory=list)  # exit codes of the lives that ended badly
    done: bool = False  # exited 0 (or stopped by the run's stop)


class Supervisor:
    def __init__(self, run: Run, hooks, layout: LearnerLayout):
        from datetime import timedelta

        from torch.distributed import TCPStore

        self.run, self.hooks, self.layout = run, hooks, layout
        self.world = run.recipe.placement.learners
        self.synchronous = layout.topology is Topology.SYNCHRONOUS  # restarted all together
        self.max_restarts = run.recipe.fault.max_restarts if (layout.rejoins or self.synchronous) else 0
        self._new_store = lambda: TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                           timeout=timedelta(seconds=layout.timeout_s))
        global _client
        self.store = _client = self._new_store()
        self.world_restarts = 0
        self.learners: dict[int, Learner] = {}
        self.interrupts = 0
        self.stop_cause: str | None = None  # "Ctrl-C" / "SIGTERM" once a signal stops the run
        self.failure: str | None = None
        self.restarts: list[dict] = []

    # -- processes ------------------------------------------------------------------------------

    def _env(self, rank: int, life: int) -> dict[str, str]:
        env = dict(os.environ)
        env.update({RUN_DIR_ENV: str(self.run.run_dir), STORE_ENV: f"127.0.0.1:{self.store.port}",
                    LIFE_ENV: str(life), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(self.store.port),
                    "WORLD_SIZE": str(self.world), "RANK": str(rank), "LOCAL_RANK": str(rank),
                    "GROUP_RANK": "0", "NODE_RANK": "0", "LOCAL_WORLD_SIZE": str(self.world),
                    "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0"})
        if not self.synchronous:  # a restarted learner forms its process group without the others
            env["TORCH_GLOO_LAZY_INIT"] = "1"
        return env

    def _start(self, rank: int, life: int) -> subprocess.Popen:
        from rlkit.infra.upstream import script_command

        return subprocess.Popen(script_command(), env=self._env(rank, life))

    def _live(self) -> list[Learner]:
        return [x for x in self.learners.values() if x.proc.poll() is None]

    def _signal_live(self, sig: int) -> None:
        for x in self._live():
            try:
                x.proc.send_signal(sig)
            except ProcessLookupError:
                pass

    # -- signals --------------------------------------------------------------------------------

    def _on_signal(self, signum, frame) -> None:
        cause = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
        self.interrupts += 1
        if self.interrupts > 1 and signum == signal.SIGINT:  # a second Ctrl-C: now
            self._signal_live(signal.SIGKILL)
            os.write(2, b"rlkit: second Ctrl-C: learners killed\n")
            os._exit(130)
        if self.stop_cause is None:
            self.stop_cause = cause
            os.write(2, f"rlkit: {cause}: every learner stops and writes its checkpoint"
                        f"{' (Ctrl-C again to stop at once)' if cause == 'Ctrl-C' else ''}\n".encode())
        # a terminal's Ctrl-C reached the learners too; one sent to this process alone did not
        self._signal_live(signal.SIGTERM)

    # -- the run ----------------------------------------------------------------------------------

    def supervise(self) -> tuple[dict[int, dict], float, dict | None]:
        """Run the learners to their end: every learner's end-of-run numbers, the seconds taken, and
        learner 0's result where the learners step together (else None)."""
        handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        start = time.perf_counter()
        try:
            for rank in range(self.world):
                self.learners[rank] = Learner(rank, self._start(rank, 0))
            self._watch()
        finally:
            self._end_learners()
            for s, h in handlers.items():
                signal.signal(s, h)
            global _client
            _client = None  # the server stops with this object
        if self.stop_cause == "Ctrl-C":  # each learner has said where it stopped; exit code 1, as Lightning's
            raise SystemExit(1)
        if self.stop_cause == "SIGTERM":
            from lightning.pytorch.utilities.exceptions import SIGTERMException

            raise SIGTERMException
        if self.failure is not None:
            raise RunFailed(self.failure)
        seconds = time.perf_counter() - start
        if self.synchronous:
            if not self.store.check([RESULT_KEY]):
                raise RunFailed("the learners ended without learner 0's result")
            return {}, seconds, json.loads(self.store.get(RESULT_KEY))
        return self._finals(), seconds, None

    def _watch(self) -> None:
        while True:
            pending = [x for x in self.learners.values() if not x.done]
            if not pending:
                return
            time.sleep(_POLL_S)
            for x in pending:
                code = x.proc.poll()
                if code is None:
                    continue
                if code == 0 or self.stop_cause is not None or self.failure is not None:  # ended, or stopped
                    x.done = True
                    continue
                self._died(x, code)

    def _died(self, x: Learner, code: int) -> None:
        x.deaths.append(code)
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        if not self.store.check([STARTED_KEY.format(rank=x.rank)]):  # a set-up failure: it would recur
            x.done = True
            self.failure = (f"learner {x.rank} (pid {x.proc.pid}) {how} before it started training; the other "
                            f"learners stopped")
            self.store.set(STOP_KEY, f"supervisor: learner {x.rank} failed to start")
            self._signal_live(signal.SIGTERM)  # the others may still wait in their own set-up
            return
        if self.synchronous:
            return self._restart_all(x, how)
        can_restart = len(x.deaths) <= self.max_restarts and self.failure is None
        self.hooks.learner_exit(x.rank, code, can_restart)
        if can_restart:
            x.life += 1
            say(f"learner {x.rank} (pid {x.proc.pid}) {how}; restarting it ({len(x.deaths)} of "
                f"fault.max_restarts={self.max_restarts})")
            self.restarts.append({"learner": x.rank, "exit_code": code, "restart": len(x.deaths),
                                  "time": round(time.time(), 3)})
            time.sleep(RESTART_PAUSE_S)
            x.proc = self._start(x.rank, x.life)
            return
        x.done = True
        if not self.layout.rejoins:  # independent learners: the others go on without it
            say(f"learner {x.rank} (pid {x.proc.pid}) {how}; not restarted (communicator "
                f"{self.run.recipe.communication.name} cannot take a learner back here); the others go on")
            return
        self.failure = (f"learner {x.rank} (pid {x.proc.pid}) {how} and is not restarted: it died "
                        f"{len(x.deaths)} times (fault.max_restarts={self.max_restarts}); the other learners "
                        f"stopped; continue with: rlkit resume {self.run.run_dir}")
        say(f"learner {x.rank} (pid {x.proc.pid}) {how}; not restarted (fault.max_restarts={self.max_restarts}): "
            "stopping the others")
        self.store.set(STOP_KEY, f"supervisor: learner {x.rank} lost")

    def _restart_all(self, x: Learner, how: str, grace_s: float = 30.0) -> None:
        """Learners in lockstep cannot go on without one of them: every learner is restarted from
        the run's newest checkpoint (torchrun's restart-the-world), with a new store, as long as
        ``fault.max_restarts`` allows; the work since that checkpoint is redone."""
        if self.world_restarts >= self.max_restarts:
            self.failure = (f"learner {x.rank} (pid {x.proc.pid}) {how}; the learners were restarted "
                            f"{self.world_restarts} times (fault.max_restarts={self.max_restarts}); continue with: "
                            f"rlkit resume {self.run.run_dir}")
            self._signal_live(signal.SIGTERM)
            return
        self.world_restarts += 1
        say(f"learner {x.rank} (pid {x.proc.pid}) {how}; restarting every learner from the newest checkpoint "
            f"({self.world_restarts} of fault.max_restarts={self.max_restarts})")
        deadline = time.monotonic() + grace_s  # the others fail their next collective within seconds
        for other in self._live():
            try:
                other.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                other.proc.kill()
                other.proc.wait(timeout=10)
        self.restarts.append({"learner": x.rank, "exit_code": x.deaths[-1], "restart": self.world_restarts,
                              "time": round(time.time(), 3), "all": True})
        if self.stop_cause is not None:
            return
        global _client
        self.store = _client = self._new_store()
        time.sleep(RESTART_PAUSE_S)
        for other in self.learners.values():
            other.life, other.done = self.world_restarts, False
            other.proc = self._start(other.rank, other.life)

    def _end_learners(self) -> None:
        """Every learner leaves: ``child_grace_s`` at most after a stop, then it is killed."""
        deadline = time.monotonic() + self.layout.child_grace_s
        for x in self.learners.values():
            try:
                x.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                say(f"learner {x.rank} (pid {x.proc.pid}) did not finish in {self.layout.child_grace_s:g} s; killed")
                x.proc.kill()
                try:
                    x.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass

    def _finals(self) -> dict[int, dict]:
        """Each learner's end-of-run numbers; one that never published them (it died for good)
        counts what its newest checkpoint keeps."""
        out = {}
        for rank in range(self.world):
            key = FINAL_KEY.format(rank=rank)
            if self.store.check([key]):
                out[rank] = json.loads(self.store.get(key))
                continue
            path = own_checkpoint(self.run.checkpoint_dir, rank)
            if path is not None:
                import torch

                ckpt = torch.load(path, map_location="cpu", weights_only=True)
                kept = ckpt.get("rlkit", {})
                out[rank] = {"agent_steps": int(kept.get("agent_steps", 0)), "scores": [],
                             "window": self.run.recipe.algo.score_window, "updates": int(ckpt.get("global_step", 0))}
            else:
                out[rank] = {"agent_steps": 0, "scores": [], "window": self.run.recipe.algo.score_window, "updates": 0}
        return out


__all__ = ["Supervisor", "supervises", "own_checkpoint", "store_client", "life", "supervised_learner"]

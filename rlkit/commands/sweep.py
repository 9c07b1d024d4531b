"""``rlkit sweep``: every recipe x seed as its own ``rlkit run`` child process, several at once
without oversubscribing the cores, each in ``<root>/<sweep>/<recipe>/seed<k>/``, one W&B group.

A sweep folder holds ``sweep.json`` (its recipes, seeds and overrides). Running the sweep again
(``rlkit sweep --resume <root>/<sweep>``, or the same command with the same ``--name``) keeps the
runs that finished (they have ``result.json``), resumes those that have a checkpoint (``rlkit
resume``) and starts the others. Ctrl-C or SIGTERM passes a Ctrl-C to every run, which writes its
``interrupted.ckpt``; a run still there after ``STOP_TIMEOUT_S`` is killed, and so is every run at a
second Ctrl-C. The runs die with the sweep even if it is killed outright (they get SIGTERM).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from rlkit.commands.sweep_status import LOCK_FILE, record_run
from rlkit.infra.errors import UserError
from rlkit.infra.processes import die_with_parent

SWEEP_FILE = "sweep.json"
POLL_S = 0.5
STOP_TIMEOUT_S = 120.0  # a run's own graceful stop (gossip learners wait up to peer_timeout_s)
KILL_WAIT_S = 10.0
# what the sweep sets for every run; an override of one of these would put runs where it cannot find them
OWNED_KEYS = ("seed", "logging.root", "logging.run_name", "logging.group")


def parse_seeds(text: str) -> list[int]:
    """'0-4' -> [0, 1, 2, 3, 4]; '3' -> [3]; '0,2,5-6' -> [0, 2, 5, 6]."""
    seeds: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not match:
            raise UserError(f"--seeds: '{text}' is not a seed list; write e.g. 0-4 or 0,2,5")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last < first:
            raise UserError(f"--seeds: {part.strip()} is an empty range; write the lower seed first "
                            f"(e.g. {last}-{first})")
        seeds += [s for s in range(first, last + 1) if s not in seeds]
    return seeds


@dataclass
class SweepPlan:
    """What ``sweep.json`` records: enough to run the sweep again from any directory."""

    name: str
    recipes: list[str]  # bundled recipe names, or absolute YAML paths
    seeds: list[int]
    overrides: list[str]
    created: str = field(default_factory=lambda: datetime.now().isoformat(timespec="seconds"))
    executor: str = "local"  # or "slurm" (rlkit.commands.slurm)
    slurm: dict | None = None  # SlurmOptions, for --executor slurm

    def same_sweep(self, other: "SweepPlan") -> bool:
        return (self.recipes, self.seeds, self.overrides) == (other.recipes, other.seeds, other.overrides)


@dataclass(frozen=True)
class SweepRun:
    """One recipe x seed: its folder, the cores it keeps busy, its ``rlkit run`` arguments."""

    label: str
    seed: int
    run_dir: Path
    cores: int
    run_args: tuple[str, ...]
    gpus: int = 0

    def state(self) -> str:
        """'done' (result.json written), 'resume' (a checkpoint to continue from) or 'new'."""
        if (self.run_dir / "result.json").is_file():
            return "done"
        if any((self.run_dir / "checkpoints").glob("*.ckpt")):
            return "resume"
        return "new"

    def command(self) -> list[str]:
        cli = [sys.executable, "-m", "rlkit.cli"]
        if self.state() == "resume":
            return [*cli, "resume", str(self.run_dir)]
        return [*cli, "run", *self.run_args]


def new_plan(items: list[str], seeds: str | None, name: str | None) -> SweepPlan:
    """The plan of ``rlkit sweep RECIPE ... [key=value ...]``: recipes are the items without '='."""
    from rlkit.config.recipes import RECIPES_DIR, resolve_recipe_path

    recipes = [i for i in items if "=" not in i]
    overrides = [i for i in items if "=" in i]
    if not recipes:
        raise UserError("sweep: give at least one recipe (a name from `rlkit recipes` or a YAML path)")
    owned = [o for o in overrides if o.split("=", 1)[0].strip() in OWNED_KEYS]
    if owned:
        raise UserError(f"sweep: {owned[0]}: the sweep sets {', '.join(OWNED_KEYS)} for each run; remove it")
    resolved = []
    for recipe in recipes:
        path = resolve_recipe_path(recipe).resolve()
        resolved.append(path.stem if path.parent == RECIPES_DIR.resolve() else str(path))
    stems = [Path(r).stem for r in resolved]
    twice = sorted({s for s in stems if stems.count(s) > 1})
    if twice:
        raise UserError(f"sweep: two recipes would share the folder '{twice[0]}'; give each a distinct file name")
    name = name or f"sweep-{datetime.now():%Y%m%d-%H%M%S}"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise UserError(f"--name: '{name}' is not a folder name (letters, digits, '.', '_', '-')")
    return SweepPlan(name, resolved, parse_seeds(seeds or "0"), overrides)


def read_plan(sweep_dir: Path) -> SweepPlan:
    path = sweep_dir / SWEEP_FILE
    if not path.is_file():
        raise UserError(f"sweep --resume: {sweep_dir} is not a sweep folder (no {SWEEP_FILE})")
    try:
        return SweepPlan(**json.loads(path.read_text()))
    except (ValueError, TypeError) as exc:
        raise UserError(f"sweep --resume: {path} is not a sweep file ({exc})") from None


def plan_runs(plan: SweepPlan, sweep_dir: Path, cores: int, manager) -> list[SweepRun]:
    """Every recipe x seed, seed-major (seed 0 of every recipe first, so a partial sweep already
    compares them all), validated: recipe, overrides, communicator options and env ids."""
    from rlkit.learner.envs import env_spaces
    from rlkit.training.run import prepare

    runs, envs_checked = [], set()
    for seed in plan.seeds:
        for recipe in plan.recipes:
            label = Path(recipe).stem
            placed = [f"seed={seed}", f"logging.root={sweep_dir / label}", f"logging.run_name=seed{seed}",
                      f"logging.group={plan.name}", "trainer.progress_bar=false"]
            cfg, spec, options = prepare(recipe, [*plan.overrides, *placed], manager)
            if cfg.env.id not in envs_checked:  # an unknown env fails here, not in every run
                env_spaces(cfg.env)
                envs_checked.add(cfg.env.id)
            need = min(cores, spec.cores_used(options, cfg))
            if cfg.trainer.torch_threads == 0:  # a thread per core it holds, not per core of the host
                placed.append(f"trainer.torch_threads={max(1, need // cfg.placement.learners)}")
            gpus = cfg.trainer.devices if cfg.trainer.accelerator in ("gpu", "cuda") else 0
            runs.append(SweepRun(label, seed, sweep_dir / label / f"seed{seed}", need,
                                 (recipe, *plan.overrides, *placed), gpus))
    return runs


def open_sweep(items: list[str], seeds: str | None, name: str | None, root: str,
               resume: str | None) -> tuple[SweepPlan, Path]:
    """The plan and folder of a new sweep, or of the one to continue (``--resume``, or a ``--name``
    whose folder already holds the same sweep)."""
    if resume is not None:
        if items or seeds or name:
            raise UserError("sweep --resume: give only the sweep folder; its recipes, seeds and overrides "
                            f"are in its {SWEEP_FILE}")
        sweep_dir = Path(resume)
        return read_plan(sweep_dir), sweep_dir
    plan = new_plan(items, seeds, name)
    sweep_dir = Path(root) / plan.name
    if (sweep_dir / SWEEP_FILE).is_file():
        old = read_plan(sweep_dir)
        if not old.same_sweep(plan):
            raise UserError(f"--name: {sweep_dir} holds another sweep (its recipes, seeds or overrides differ); "
                            f"continue it with `rlkit sweep --resume {sweep_dir}` or choose another --name")
        return old, sweep_dir
    if sweep_dir.exists() and any(p.name != ".lock" for p in sweep_dir.iterdir()):
        raise UserError(f"--name: {sweep_dir} exists and is not a sweep folder; choose another --name")
    return plan, sweep_dir


def sweep(items: list[str], seeds: str | None = None, name: str | None = None, root: str = "runs",
          resume: str | None = None, cores: int | None = None, manager=None, executor: str | None = None,
          slurm=None) -> int:
    """Validate, write ``sweep.json``, run every run that has not finished: here (``executor``
    local, at most ``cores`` busy) or as SLURM jobs (slurm: ``rlkit.commands.slurm``, with
    ``slurm`` a SlurmOptions). The exit code: 0 when every run finished, 1 when one failed, 130
    when interrupted. A resumed sweep keeps its executor and SLURM options unless given again."""
    from rlkit.hooks.manager import build_plugin_manager
    from rlkit.infra.files import write_atomic

    if cores is not None and cores < 1:
        raise UserError(f"--cores: {cores} is not allowed; must be >= 1")
    if executor not in (None, "local", "slurm"):
        raise UserError(f"--executor: '{executor}' is not allowed; one of: local, slurm")
    plan, sweep_dir = open_sweep(items, seeds, name, root, resume)
    plan.executor = executor or plan.executor
    if plan.executor == "slurm":
        from rlkit.commands import slurm as cluster

        cluster.check_cluster()
        if slurm is not None or plan.slurm is None:
            plan.slurm = asdict(slurm or cluster.SlurmOptions())
        cores = min(cores or 10**6, cluster.node_cpus())  # a job asks for at most one node's CPUs
        sweep_dir = sweep_dir.resolve()  # a job may start in another folder
    cores = cores or os.cpu_count() or 1
    runs = plan_runs(plan, sweep_dir, cores, manager or build_plugin_manager())
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with _only_sweep_of(sweep_dir):
        write_atomic(sweep_dir / SWEEP_FILE, json.dumps(asdict(plan), indent=2) + "\n")
        if plan.executor == "slurm":
            return cluster.SlurmSweep(runs, sweep_dir, plan.name, cluster.SlurmOptions(**plan.slurm)).run()
        return Scheduler(runs, cores, sweep_dir).run()


@contextmanager
def _only_sweep_of(sweep_dir: Path):
    """An exclusive lock on the sweep folder for as long as this sweep runs (the kernel drops it
    when the process dies): a second ``rlkit sweep`` of the same folder would start the same runs."""
    with open(sweep_dir / LOCK_FILE, "a+") as fh:  # not truncated before the lock is ours
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"sweep: {sweep_dir} is being run by another rlkit sweep; wait for it or stop it "
                            f"(Ctrl-C, or rlkit sweep --cancel {sweep_dir}), then resume") from None
        fh.truncate(0)
        fh.write(str(os.getpid()))  # who follows the sweep, for --status and --cancel
        fh.flush()
        yield


class SweepStopped(Exception):
    """SIGTERM to the sweep: stop like a Ctrl-C."""


class Scheduler:
    """Starts runs while their cores fit, polls them (never blocks), stops them all on the way out."""

    def __init__(self, runs: list[SweepRun], cores: int, sweep_dir: Path):
        self.runs, self.cores, self.sweep_dir = runs, cores, sweep_dir
        self.running: dict[subprocess.Popen, SweepRun] = {}
        self.failed: list[tuple[SweepRun, int]] = []
        self.started = time.monotonic()

    def run(self) -> int:
        pending = [r for r in self.runs if r.state() != "done"]
        kept = len(self.runs) - len(pending)
        resumable = sum(r.state() == "resume" for r in pending)
        say(f"sweep {self.sweep_dir}: {len(self.runs)} runs, {self.cores} cores; {kept} finished (kept), "
            f"{resumable} to resume, {len(pending) - resumable} to start")
        # Ctrl-C stops the sweep even where it was started with SIGINT ignored (in the background)
        previous = (signal.signal(signal.SIGTERM, _raise_stopped),
                    signal.signal(signal.SIGINT, signal.default_int_handler))
        try:
            self._loop(pending)
        except (KeyboardInterrupt, SweepStopped) as exc:
            cause = "Ctrl-C" if isinstance(exc, KeyboardInterrupt) else "SIGTERM"
            say(f"sweep: {cause}: stopping {len(self.running)} runs (each writes its interrupted.ckpt)")
            self.stop_all()
            say(f"sweep: stopped; continue with: rlkit sweep --resume {self.sweep_dir}")
            return 130
        finally:
            self.stop_all()
            signal.signal(signal.SIGTERM, previous[0])
            signal.signal(signal.SIGINT, previous[1])
        return self._summary()

    def _loop(self, pending: list[SweepRun]) -> None:
        while pending or self.running:
            free = self.cores - sum(r.cores for r in self.running.values())
            for r in list(pending):
                if r.cores <= free:
                    self._start(r)
                    pending.remove(r)
                    free -= r.cores
            time.sleep(POLL_S)
            for proc, r in list(self.running.items()):
                if proc.poll() is not None:
                    del self.running[proc]
                    _signal_group(proc, signal.SIGKILL)  # nothing the run started outlives it
                    self._finished(r, proc.returncode)

    def _start(self, r: SweepRun) -> None:
        r.run_dir.mkdir(parents=True, exist_ok=True)
        how = r.state()
        with open(r.run_dir / "sweep.log", "ab") as log:
            log.write(f"\n=== {datetime.now():%Y-%m-%d %H:%M:%S} {how}\n".encode())
            log.flush()
            proc = subprocess.Popen(r.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=_prepare_child)
        self.running[proc] = r
        record_run(self.sweep_dir, r.run_dir, state="running", pid=proc.pid)
        verb = "resume" if how == "resume" else "start"
        say(f"sweep: {verb} {r.label} seed {r.seed} ({r.cores} core{'s' * (r.cores > 1)}) -> {r.run_dir}")

    def _finished(self, r: SweepRun, code: int) -> None:
        record_run(self.sweep_dir, r.run_dir, state="done" if code == 0 else "failed", exit_code=code)
        if code == 0 and r.state() == "done":
            result = json.loads((r.run_dir / "result.json").read_text())
            score = result.get("score_mean")
            shown = "no episode finished" if score is None else f"score {score:.2f}"
            say(f"sweep: done {r.label} seed {r.seed}: {shown}, {result['agent_steps']:,} agent steps "
                f"in {result['seconds']:.0f} s")
            return
        self.failed.append((r, code))
        say(f"sweep: FAILED {r.label} seed {r.seed} (exit code {code}); see {r.run_dir / 'sweep.log'}")

    def stop_all(self) -> None:
        """Ctrl-C to every run's process group, then wait (bounded) and kill what is left. A second
        Ctrl-C while waiting kills them at once."""
        if not self.running:
            return
        for proc in self.running:
            _signal_group(proc, signal.SIGINT)
        try:
            _wait_all(list(self.running), STOP_TIMEOUT_S)
        except KeyboardInterrupt:
            say("sweep: second interrupt: killing the runs")
        for proc in self.running:
            _signal_group(proc, signal.SIGKILL)
        _wait_all(list(self.running), KILL_WAIT_S)
        self.running.clear()

    def _summary(self) -> int:
        done = sum(r.state() == "done" for r in self.runs)
        minutes = (time.monotonic() - self.started) / 60.0
        say(f"sweep: {done}/{len(self.runs)} runs finished ({minutes:.1f} min this time); "
            f"compare with: rlkit compare {self.sweep_dir}")
        if self.failed:
            say(f"sweep: {len(self.failed)} failed: " + ", ".join(f"{r.label} seed {r.seed}" for r, _ in self.failed))
            return 1
        return 0


def say(line: str) -> None:
    print(line, flush=True)


def _raise_stopped(signum, frame):
    raise SweepStopped()


def _prepare_child() -> None:
    """In the child, before exec: Ctrl-C handled (a sweep started in the background of a script
    inherits SIGINT ignored, and so would its runs), and SIGTERM (a run's graceful stop) when the
    sweep dies, however it dies."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    die_with_parent(signal.SIGTERM)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the run and the processes it started (its own session)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_all(procs: list[subprocess.Popen], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.2)

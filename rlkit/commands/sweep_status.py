"""``rlkit sweep --status`` and ``--cancel``: a sweep's runs as they stand, for local and SLURM
sweeps alike, read from the sweep folder (and ``squeue``), never from a process that must be alive.

A run is **done** (``result.json``), **running** or **pending** (a SLURM job in the queue, or a run
the local sweep has started and whose sweep is alive), **failed** (it exited without a result, or
its job left the queue without one), **stopped** (it has a checkpoint to resume from: Ctrl-C,
``--cancel``, a sweep killed outright), or **waiting** (not started yet).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from rlkit.infra.files import read_json_map, read_rows, write_atomic

RUNS_FILE = "sweep-runs.json"  # the local sweep's record: {run folder: {"state", "pid", "exit_code"}}
LOCK_FILE = ".lock"


def record_run(sweep_dir: Path, run_dir: Path, **fields) -> None:
    """Note a run's start or end in RUNS_FILE (the local scheduler; replaced atomically)."""
    known = read_records(sweep_dir)
    known[str(run_dir)] = fields
    write_atomic(sweep_dir / RUNS_FILE, json.dumps(known, indent=2) + "\n")


def read_records(sweep_dir: Path) -> dict[str, dict]:
    return read_json_map(sweep_dir / RUNS_FILE)


def sweep_owner(sweep_dir: Path) -> int | None:
    """The pid of the ``rlkit sweep`` following this folder now, or None: the process that holds
    the flock on the folder's lock file, as the kernel lists it in /proc/locks (a dead sweep
    holds none). Reading it takes no lock, so it never gets in a starting sweep's way."""
    try:
        st = (sweep_dir / LOCK_FILE).stat()
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    for line in table.splitlines():
        parts = line.split()  # 1: FLOCK ADVISORY WRITE 1234 08:01:5678 0 EOF
        want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == want:
            return int(parts[4])
    return None


def sweep_folders(plan, sweep_dir: Path) -> list:
    """Every recipe x seed of a plan as (label, seed, run_dir), in the sweep's order, unvalidated."""
    from types import SimpleNamespace

    return [SimpleNamespace(label=Path(recipe).stem, seed=seed, run_dir=sweep_dir / Path(recipe).stem / f"seed{seed}")
            for seed in plan.seeds for recipe in plan.recipes]


def progress(run_dir: Path) -> tuple[int | None, float | None]:
    """(agent steps, latest logged mean score) from the run's metrics log; result.json where done."""
    result = run_dir / "result.json"
    if result.is_file():
        try:
            done = json.loads(result.read_text())
            return done.get("agent_steps"), done.get("score_mean")
        except ValueError:
            pass
    log = run_dir / "csv" / "metrics.csv"
    if not log.is_file() or not log.stat().st_size:
        return None, None
    _, rows, _ = read_rows(log, warn=lambda line: None)
    steps = next((r["agent_steps"] for r in reversed(rows) if "agent_steps" in r), None)
    score = next((r["score_mean"] for r in reversed(rows) if "score_mean" in r), None)
    return (None if steps is None else int(steps)), score


def run_states(runs, sweep_dir: Path) -> list[dict]:
    """One dict per run: label, seed, state, job (SLURM job id or local pid), agent_steps, score."""
    from rlkit.commands import slurm

    jobs = slurm.read_jobs(sweep_dir)
    queued = slurm.queue_states(list(jobs.values())) if jobs and slurm.has_slurm() else {}
    records = read_records(sweep_dir)
    owner = sweep_owner(sweep_dir)
    out = []
    for r in runs:
        key = str(r.run_dir)
        job, record = jobs.get(key), records.get(key, {})
        if (r.run_dir / "result.json").is_file():
            state = "done"
        elif job is not None and job in queued:
            state = queued[job].lower()  # pending, running, completing, ...
        elif record.get("state") == "running" and owner is not None:
            state = "running"
        elif record.get("state") == "failed" or (job is not None and not _has_checkpoint(r.run_dir)):
            state = "failed"
        elif _has_checkpoint(r.run_dir):
            state = "stopped"
        else:
            state = "waiting"
        steps, score = progress(r.run_dir)
        out.append({"label": r.label, "seed": r.seed, "state": state,
                    "job": job or (str(record["pid"]) if state == "running" and "pid" in record else ""),
                    "agent_steps": steps, "score": score, "run_dir": key})
    return out


def _has_checkpoint(run_dir: Path) -> bool:
    return any((run_dir / "checkpoints").glob("*.ckpt"))


def status_table(sweep_dir: Path, states: list[dict]) -> str:
    counts: dict[str, int] = {}
    for s in states:
        counts[s["state"]] = counts.get(s["state"], 0) + 1
    head = ["recipe", "seed", "state", "job", "agent steps", "score"]
    rows = [[s["label"], str(s["seed"]), s["state"], s["job"],
             "" if s["agent_steps"] is None else f"{s['agent_steps']:,}",
             "" if s["score"] is None else f"{s['score']:.1f}"] for s in states]
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *rows]]
    summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    owner = sweep_owner(sweep_dir)
    follower = f"followed by rlkit sweep (pid {owner})" if owner else "no rlkit sweep is following it"
    return "\n".join([f"sweep {sweep_dir}: {len(states)} runs: {summary}; {follower}", *lines])


def cancel_sweep(sweep_dir: Path, runs) -> list[str]:
    """Stop every unfinished run of the sweep the graceful way (each writes its interrupted.ckpt):
    SLURM jobs are cancelled (SLURM sends SIGTERM), a local sweep gets SIGTERM (it passes a Ctrl-C
    to each run). Returns one line per action."""
    from rlkit.commands import slurm

    said = []
    jobs = slurm.read_jobs(sweep_dir)
    if jobs and slurm.has_slurm():
        live = sorted(slurm.queue_states(list(jobs.values())))
        slurm.cancel(live)
        said.append(f"sweep --cancel: cancelled {len(live)} SLURM job{'s' * (len(live) != 1)}"
                    + (f" ({', '.join(live)})" if live else ""))
    owner = sweep_owner(sweep_dir)
    if owner and owner > 0:
        os.kill(owner, signal.SIGTERM)
        deadline = time.monotonic() + 150  # the sweep waits up to its STOP_TIMEOUT_S for its runs
        while sweep_owner(sweep_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = "stopped" if not sweep_owner(sweep_dir) else "still stopping after 150 s"
        said.append(f"sweep --cancel: rlkit sweep (pid {owner}) {left}")
    if not said:
        said.append("sweep --cancel: nothing is running")
    unfinished = sum(not (r.run_dir / "result.json").is_file() for r in runs)
    said.append(f"sweep --cancel: {unfinished} runs unfinished; continue with: rlkit sweep --resume {sweep_dir}")
    return said

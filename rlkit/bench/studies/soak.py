"""Soak: one long CPU run through the CLI, its resources sampled every minute.

Every process of the run (the CLI process and every process below it: learners, env workers,
actors, forkserver) is read from /proc once a minute: resident memory (VmRSS, summed over the processes; shared pages count once per
process that maps them, the same way in every sample), open file descriptors, threads and the
number of processes. After the warm-up the run must not grow: the summary gives each quantity's
change from the first sample after warm-up to the last, and the largest sample after warm-up.

    python -m rlkit.bench.studies.soak --minutes 30 --recipe a2c-cartpole-queues \\
        --csv docs/benchmarks/soak-queues.csv --json docs/benchmarks/soak-queues.json
"""

from __future__ import annotations

import argparse
import csv
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlkit.infra.processes import descendants, processes_of_run

FIELDS = ["minute", "agent_steps", "processes", "rss_mb", "fds", "threads"]


def sample(root_pid: int) -> dict[str, float]:
    rss_kb, fds, threads, procs = 0, 0, 0, 0
    for pid in [root_pid, *descendants(root_pid)]:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            fds += len(list(Path(f"/proc/{pid}/fd").iterdir()))
        except OSError:
            continue  # ended between the listing and the read
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        rss_kb += int(fields.get("VmRSS", "0 kB").split()[0])
        threads += int(fields.get("Threads", "0"))
        procs += 1
    return {"processes": procs, "rss_mb": rss_kb / 1024, "fds": fds, "threads": threads}


def _name(pid: int) -> str:
    """A process's command line, shortened (multiprocessing's helpers name themselves in it)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:100]
    except OSError:
        return f"{pid} (gone)"


def agent_steps(run_dir: Path) -> float:
    path = run_dir / "csv" / "metrics.csv"
    if not path.exists():
        return 0.0
    rows = [r for r in csv.DictReader(open(path)) if r.get("agent_steps")]
    return float(rows[-1]["agent_steps"]) if rows else 0.0


def soak(recipe: str, minutes: int, warmup: int, overrides: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as root:
        run_dir = Path(root) / "soak"
        cmd = [sys.executable, "-m", "rlkit.cli", "run", recipe, f"logging.root={root}", "logging.run_name=soak",
               "logging.backends=[csv]", "trainer.progress_bar=false", "algo.stop_at_score=null",
               "algo.total_steps=100000000000", "checkpoint.every_steps=200000", *overrides]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        rows = []
        try:
            start = time.monotonic()
            for minute in range(1, minutes + 1):
                time.sleep(max(0.0, start + 60 * minute - time.monotonic()))
                if proc.poll() is not None:
                    raise SystemExit(f"soak: the run ended early (code {proc.returncode}): {proc.stderr.read()[-2000:]}")
                row = {"minute": minute, "agent_steps": agent_steps(run_dir), **sample(proc.pid)}
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            proc.send_signal(signal.SIGTERM)  # SIGINT is ignored when started in the background
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        left = [_name(pid) for pid in processes_of_run(run_dir)]  # the instant the CLI process ended
        time.sleep(1.0)
        left_1s = [_name(pid) for pid in processes_of_run(run_dir)]
    after = [r for r in rows if r["minute"] >= warmup]
    summary = {"recipe": recipe, "minutes": minutes, "warmup_minutes": warmup, "overrides": overrides,
               "agent_steps": rows[-1]["agent_steps"], "exit_code_after_sigterm": proc.returncode,
               "processes_left": len(left), "processes_left_names": left,
               "processes_left_after_1s": len(left_1s), "processes_left_after_1s_names": left_1s}
    for key in ("rss_mb", "fds", "threads", "processes"):
        first, last = after[0][key], after[-1][key]
        summary[key] = {"at_warmup": first, "last": last, "max_after_warmup": max(r[key] for r in after),
                        "growth_pct": 100.0 * (last - first) / first if first else 0.0}
    return {"summary": summary, "samples": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="a2c-cartpole-queues")
    parser.add_argument("--minutes", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5, help="minutes before the reference sample")
    parser.add_argument("--set", action="append", default=[], help="recipe override (repeatable)")
    parser.add_argument("--csv", help="write the samples here")
    parser.add_argument("--json", help="write summary and samples here")
    args = parser.parse_args()
    out = soak(args.recipe, args.minutes, args.warmup, args.set)
    print(json.dumps(out["summary"], indent=2))
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(out["samples"])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

"""Communicators side by side on Pong, at 16 envs per learner, every number from this one run:
local (1 learner), allreduce with 2 and 4 learners, gossip with 4 learners (GALA's ring) over each
transport (shared memory; torch.distributed isend/irecv over gloo).

For each: aggregate agent steps/s over all learners, and the share of wall time and the time per
update spent communicating (``comm/allreduce_frac`` / ``comm/allreduce_ms`` for allreduce,
``comm/gossip_frac`` / ``comm/gossip_ms`` for gossip). Rounds alternate the configurations; each
number is the median over a run's log rows after warm-up. Run it on an otherwise idle machine:
another job's processes would take a share of the cores that grows with our process count.

    python -m rlkit.bench.studies.comm --json docs/benchmarks/bench-comm.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CONFIGS = {
    "local x1": ("a2c-pong-local", []),
    "allreduce x2": ("a2c-pong-allreduce", ["placement.learners=2", "trainer.devices=2"]),
    "allreduce x4": ("a2c-pong-allreduce", ["placement.learners=4", "trainer.devices=4"]),
    "gossip x4": ("gala-pong", ["placement.learners=4", "trainer.devices=4"]),
    "gossip x4 dist": ("gala-pong", ["placement.learners=4", "trainer.devices=4", "communication.options.transport=dist"]),
}
KEYS = ("sps", "comm/allreduce_frac", "comm/allreduce_ms", "comm/gossip_frac", "comm/gossip_ms")


def measure(recipe: str, overrides: list[str], updates: int) -> dict[str, float]:
    """One run through the CLI: Lightning launches further learners by re-running the command, so
    multi-learner runs must start from ``rlkit run``, not from this script."""
    learners = next((int(o.split("=")[1]) for o in overrides if o.startswith("placement.learners=")), 1)
    steps = learners * 16 * 5 * updates
    with tempfile.TemporaryDirectory() as root:
        subprocess.run([sys.executable, "-m", "rlkit.cli", "run", recipe, *overrides, f"algo.total_steps={steps}",
                        "logging.backends=[csv]", f"logging.root={root}", "logging.run_name=bench",
                        "trainer.progress_bar=false", "algo.stop_at_score=null",
                        f"trainer.log_every_n_updates={max(1, updates // 8)}", "checkpoint.every_steps=1000000000000"],
                       check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, WANDB_MODE="disabled"))
        rows = list(csv.DictReader(open(Path(root) / "bench" / "csv" / "metrics.csv")))
    steady = rows[2:] or rows
    return {k: statistics.median(float(r[k]) for r in steady if r.get(k)) for k in KEYS
            if any(r.get(k) for r in steady)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--updates", type=int, default=80, help="updates per learner per measured run")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="recipe override for every configuration, e.g. trainer.accelerator=gpu")
    a = p.parse_args()
    got: dict[str, list] = {name: [] for name in CONFIGS}
    for _ in range(a.rounds):
        for name, (recipe, overrides) in CONFIGS.items():
            got[name].append(measure(recipe, [*overrides, *a.set], a.updates))
            print(name, got[name][-1], flush=True)
    out = {name: {k: statistics.median(r[k] for r in runs if k in r) for k in KEYS if any(k in r for r in runs)}
           for name, runs in got.items()}
    base = out["local x1"]["sps"]
    for name, r in out.items():
        r["vs_local"] = r["sps"] / base
    for name, runs in got.items():
        out[name]["sps_per_round"] = [r["sps"] for r in runs]
    for gossip, key in (("gossip x4", "gossip_vs_allreduce_x4"), ("gossip x4 dist", "gossip_dist_vs_allreduce_x4")):
        out[key] = out[gossip]["sps"] / out["allreduce x4"]["sps"]
        # the same ratio within each round (measured minutes apart, so less exposed to drift)
        out[key + "_per_round"] = [g["sps"] / a["sps"] for g, a in zip(got[gossip], got["allreduce x4"])]
    print(json.dumps(out, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

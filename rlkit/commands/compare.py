"""``rlkit compare PATH ...``: runs (a sweep folder, or run folders) grouped by env and recipe; per
env a table of final scores as IQM with 95% stratified-bootstrap CIs, median and mean, agent steps
to a target score and agent steps/s; learning curves with CI bands (PNG); the tables as Markdown.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from rlkit.commands.plot import read_metrics
from rlkit.commands.stats import Estimate, iqm_band, iqm_estimate
from rlkit.commands.sweep import SWEEP_FILE
from rlkit.infra.errors import UserError
from rlkit.infra.files import write_atomic, write_atomic_with

CURVE_POINTS = 100


@dataclass
class RunRecord:
    """What one run contributes: its group (env, label) and its numbers."""

    run_dir: Path
    env_id: str
    label: str  # the recipe's folder in a sweep, else the communicator
    communicator: str
    finished: bool
    final: float | None  # mean raw score over the run's last score window
    sps: float | None  # median logged agent steps/s (resumed runs included)
    curve: np.ndarray  # (k, 2): agent_steps, score_mean as logged
    sweep: Path | None = None  # the sweep folder the run is in


@dataclass
class Row:
    """One table row: a recipe's runs on one env, summarised."""

    label: str
    communicator: str
    runs: int
    unfinished: int
    final: Estimate | None
    median: float | None
    mean: float | None
    to_target: float | None  # median agent steps to the target (inf: most runs never got there)
    reached: int
    sps: float | None


def find_runs(paths: list[str]) -> list[Path]:
    """Run folders (those with a recipe.yaml) given or below the given folders."""
    found: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise UserError(f"compare: {p} not found")
        runs = [p] if (p / "recipe.yaml").is_file() else sorted(r.parent for r in p.rglob("recipe.yaml"))
        if not runs:
            raise UserError(f"compare: {p} holds no runs (no recipe.yaml in it or below it)")
        found += [r for r in runs if r not in found]
    return found


def load_run(run_dir: Path) -> RunRecord:
    recipe = yaml.safe_load((run_dir / "recipe.yaml").read_text()) or {}
    communicator = (recipe.get("communication") or {}).get("name", "local")
    in_sweep = re.fullmatch(r"seed\d+", run_dir.name) and (run_dir.parent.parent / SWEEP_FILE).is_file()
    rows = read_metrics(run_dir) if (run_dir / "csv" / "metrics.csv").is_file() else []
    curve = np.array([(r["agent_steps"], r["score_mean"]) for r in rows if "agent_steps" in r and "score_mean" in r])
    result = run_dir / "result.json"
    final = json.loads(result.read_text()).get("score_mean") if result.is_file() else None
    if final is None and len(curve):
        final = float(curve[-1, 1])
    speeds = [r["sps"] for r in rows[1:] if "sps" in r]  # the first row is warm-up
    return RunRecord(run_dir, recipe.get("env", {}).get("id", "?"), run_dir.parent.name if in_sweep else communicator,
                     communicator, result.is_file(), final, statistics.median(speeds) if speeds else None,
                     curve.reshape(-1, 2), run_dir.parent.parent if in_sweep else None)


def steps_to_target(curve: np.ndarray, target: float) -> float:
    """The first logged agent_steps at which the running mean score reached ``target`` (inf: never)."""
    hits = np.flatnonzero(curve[:, 1] >= target) if len(curve) else []
    return float(curve[hits[0], 0]) if len(hits) else math.inf


def summarise(label: str, runs: list[RunRecord], target: float | None) -> Row:
    finals = [r.final for r in runs if r.final is not None]
    to_target = [steps_to_target(r.curve, target) for r in runs] if target is not None else []
    speeds = [r.sps for r in runs if r.sps is not None]
    return Row(label, runs[0].communicator, len(runs), sum(not r.finished for r in runs),
               iqm_estimate(finals) if finals else None,
               float(np.median(finals)) if finals else None, float(np.mean(finals)) if finals else None,
               float(np.median(to_target)) if to_target else None, sum(math.isfinite(t) for t in to_target),
               float(np.mean(speeds)) if speeds else None)


def group_runs(records: list[RunRecord]) -> dict[str, dict[str, list[RunRecord]]]:
    """env id -> label -> runs, both sorted. A recipe found in several sweeps given (the same
    recipe with and without an override, say) is a row per sweep, labelled ``<sweep>/<recipe>``."""
    sweeps: dict[tuple[str, str], set] = {}
    for r in records:
        sweeps.setdefault((r.env_id, r.label), set()).add(r.sweep)
    groups: dict[str, dict[str, list[RunRecord]]] = {}
    for r in records:
        label = f"{r.sweep.name}/{r.label}" if r.sweep is not None and len(sweeps[r.env_id, r.label]) > 1 else r.label
        groups.setdefault(r.env_id, {}).setdefault(label, []).append(r)
    return {env: dict(sorted(by_label.items())) for env, by_label in sorted(groups.items())}


def markdown(groups: dict[str, dict[str, list[RunRecord]]], target: float | None) -> str:
    head = ["recipe", "communicator", "runs", "final score IQM [95% CI]", "median", "mean"]
    if target is not None:
        head.append(f"agent steps to {target:g} (median; reached)")
    head.append("agent steps/s")
    out = ["Final score: each run's mean raw score over its last score window. IQM: the mean of the middle "
           "50% of runs, with a 95% stratified-bootstrap confidence interval (percentile, 50,000 resamples; "
           "Agarwal et al. 2021). Agent steps/s: each run's median logged rate, averaged over runs.", ""]
    for env, by_label in groups.items():
        out += [f"## {env}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for label, runs in by_label.items():
            out.append("| " + " | ".join(_cells(summarise(label, runs, target), target)) + " |")
        out.append("")
    return "\n".join(out)


def _cells(row: Row, target: float | None) -> list[str]:
    runs = f"{row.runs}" + (f" ({row.unfinished} unfinished)" if row.unfinished else "")
    cells = [row.label, row.communicator, runs, "-" if row.final is None else str(row.final), _num(row.median),
             _num(row.mean)]
    if target is not None:
        steps = "not reached" if row.to_target is None or math.isinf(row.to_target) else f"{row.to_target:,.0f}"
        cells.append(f"{steps} ({row.reached}/{row.runs})")
    cells.append("-" if row.sps is None else f"{row.sps:,.0f}")
    return cells


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def plot_curves(groups: dict[str, dict[str, list[RunRecord]]], output: Path) -> Path:
    """One panel per env: per recipe, the IQM over runs of the running mean score against agent
    steps, with its 95% bootstrap band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(groups), 1, figsize=(7.5, 3.6 * len(groups)), squeeze=False)
    for ax, (env, by_label) in zip(axes[:, 0], groups.items()):
        for label, runs in by_label.items():
            curves = [r.curve for r in runs if len(r.curve) >= 2]
            if not curves:
                continue
            # the steps every run has logged a score for: no run's curve is extrapolated
            grid = np.linspace(max(c[0, 0] for c in curves), min(c[-1, 0] for c in curves), CURVE_POINTS)
            centre, lo, hi = iqm_band(np.stack([np.interp(grid, c[:, 0], c[:, 1]) for c in curves]))
            line, = ax.plot(grid, centre, label=f"{label} ({len(curves)} runs)", linewidth=1.4)
            ax.fill_between(grid, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_title(env)
        ax.set_xlabel("agent steps")
        ax.set_ylabel("score (IQM over runs, 95% CI)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    write_atomic_with(output, lambda fh: fig.savefig(fh, format="png", dpi=110))
    plt.close(fig)
    return output


def compare(paths: list[str], target: float | None = None, out_dir: str | None = None) -> tuple[str, Path, Path]:
    """(Markdown, its file, the PNG); ``runs.csv`` and ``curves.csv`` are written beside them. By
    default all go into the sweep folder given first, or the current folder."""
    groups = group_runs([load_run(r) for r in find_runs(paths)])
    first = Path(paths[0])
    where = Path(out_dir) if out_dir else (first if (first / SWEEP_FILE).is_file() else Path("."))
    text = markdown(groups, target)
    where.mkdir(parents=True, exist_ok=True)
    table = where / "compare.md"
    write_atomic(table, text)
    write_csvs(groups, where)
    return text, table, plot_curves(groups, where / "curves.png")


def _run_name(r: RunRecord) -> str:
    return r.run_dir.name


def write_csvs(groups: dict[str, dict[str, list[RunRecord]]], where: Path) -> tuple[Path, Path]:
    """``runs.csv`` (one row per run: its final score and speed, the numbers behind the table) and
    ``curves.csv`` (every run's logged score against agent steps, the numbers behind the plot)."""
    runs_csv, curves_csv = where / "runs.csv", where / "curves.csv"
    runs = [["env", "recipe", "communicator", "run", "finished", "final_score", "agent_steps_per_s"]]
    curves = [["env", "recipe", "run", "agent_steps", "score_mean"]]
    for env, by_label in groups.items():
        for label, records in by_label.items():
            for r in records:
                runs.append([env, label, r.communicator, _run_name(r), int(r.finished),
                             "" if r.final is None else f"{r.final:.6g}", "" if r.sps is None else f"{r.sps:.6g}"])
                curves += [[env, label, _run_name(r), int(steps), f"{score:.6g}"] for steps, score in r.curve]
    for path, rows in ((runs_csv, runs), (curves_csv, curves)):
        text = io.StringIO(newline="")
        csv.writer(text).writerows(rows)
        write_atomic(path, text.getvalue())
    return runs_csv, curves_csv

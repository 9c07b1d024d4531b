"""``rlkit plot RUN_DIR...``: learning curves from runs' CSV logs to one PNG."""

from __future__ import annotations

import csv
from pathlib import Path

from rlkit.infra.errors import UserError
from rlkit.infra.files import write_atomic_with


def read_metrics(run_dir: str | Path) -> list[dict[str, float]]:
    """Rows of a run's ``csv/metrics.csv`` as floats (empty cells dropped)."""
    path = Path(run_dir) / "csv" / "metrics.csv"
    if not path.is_file():
        raise UserError(f"run folder {run_dir}: no csv/metrics.csv (was the run logged with the csv backend?)")
    with open(path, newline="") as fh:
        return [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in csv.DictReader(fh)]


def plot_runs(run_dirs: list[str], output: str, metrics: list[str], x: str = "agent_steps") -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {Path(d).name: read_metrics(d) for d in run_dirs}
    fig, axes = plt.subplots(len(metrics), 1, figsize=(7, 3.2 * len(metrics)), squeeze=False)
    for ax, metric in zip(axes[:, 0], metrics):
        plotted = False
        for name, rows in runs.items():
            points = [(r[x], r[metric]) for r in rows if x in r and metric in r]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, label=name, linewidth=1.2)
                plotted = True
        if not plotted:
            known = sorted({k for rows in runs.values() for r in rows for k in r})
            raise UserError(f"--metric {metric} / --x {x}: not in the logs; logged: {', '.join(known)}")
        ax.set_ylabel(metric)
        ax.set_xlabel(x.replace("_", " "))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    write_atomic_with(output, lambda fh: fig.savefig(fh, format="png", dpi=110))
    plt.close(fig)
    return output

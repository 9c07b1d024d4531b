"""Plot the learning diagnostics of several runs against learner updates: explained variance of
the value function, the fraction of inactive last-layer units, policy entropy and value loss.

    python -m rlkit.bench.studies.critic_plot -o docs/benchmarks/pong-critic-diagnostics.png \\
        "PyTorch RMSprop, lr 0.0014=docs/benchmarks/diag-pong-local-lr0.0014-rmsprop-2000u.csv" ...

Each argument is LABEL=CSV (a run's csv/metrics.csv or a learner's csv/learner<r>.csv).
"""

from __future__ import annotations

import argparse
import csv

METRICS = ("value/explained_variance", "model/dead_units", "loss/entropy", "loss/value")


def read(path: str) -> list[dict[str, float]]:
    with open(path, newline="") as fh:
        return [{k: float(v) for k, v in r.items() if v not in ("", None)} for r in csv.DictReader(fh)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="LABEL=CSV")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--max-update", type=float, default=None)
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(METRICS), 1, figsize=(7, 2.6 * len(METRICS)), sharex=True)
    for i, spec in enumerate(args.runs):
        label, path = spec.split("=", 1)
        rows = [r for r in read(path) if args.max_update is None or r["step"] <= args.max_update]
        for ax, metric in zip(axes, METRICS):
            pts = [(r["step"], r[metric]) for r in rows if metric in r and r["step"] > 1]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, label=label, linewidth=1.1, color=f"C{i}")
    for ax, metric in zip(axes, METRICS):
        ax.set_ylabel(metric, fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].set_ylim(-0.5, 1.0)
    handles = [plt.Line2D([], [], color=f"C{i}", label=s.split("=", 1)[0]) for i, s in enumerate(args.runs)]
    axes[0].legend(handles=handles, fontsize=7)
    axes[-1].set_xlabel("learner updates (16 envs x 5 steps each)")
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

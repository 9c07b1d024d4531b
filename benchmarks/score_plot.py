"""Plot raw game score against agent steps for several runs, on two axes: agent steps summed over a
run's learners (the budget GALA's claim is stated in) and learner updates (what each learner did).

    python benchmarks/score_plot.py -o docs/benchmarks/gala-pong-score.png \\
        "A2C, 1 learner x 16 envs=docs/benchmarks/a2c-pong-local-3m.csv" \\
        "GALA learner 0=docs/benchmarks/gala-pong-7e-4-learner0.csv@4" ...

Each argument is LABEL=CSV, with ``@K`` after the CSV for one learner of a K-learner run: its own
agent steps (``learner_agent_steps``) are multiplied by K for the summed axis, as its peers step at
about the same rate. A run's ``metrics.csv`` (``agent_steps``, already summed) needs no ``@K``.
"""

from __future__ import annotations

import argparse
import csv


def read(path: str, learners: int) -> list[tuple[float, float, float]]:
    """(summed agent steps, update, score) per logged row that has a score."""
    out = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            if not r.get("score_mean"):
                continue
            own = r.get("learner_agent_steps")
            steps = float(own) * learners if own else float(r["agent_steps"])
            out.append((steps, float(r["step"]), float(r["score_mean"])))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="LABEL=CSV[@LEARNERS]")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--target", type=float, default=18.0)
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_steps, by_updates) = plt.subplots(1, 2, figsize=(12, 4.5))
    for spec in args.runs:
        label, _, rest = spec.partition("=")
        path, _, k = rest.partition("@")
        rows = read(path, int(k) if k else 1)
        by_steps.plot([s / 1e6 for s, _, _ in rows], [v for _, _, v in rows], label=label, lw=1)
        by_updates.plot([u for _, u, _ in rows], [v for _, _, v in rows], label=label, lw=1)
    for ax, xlabel in ((by_steps, "agent steps summed over learners (millions; frames = 4x)"),
                       (by_updates, "updates of each learner")):
        ax.axhline(args.target, color="grey", ls="--", lw=0.8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("mean raw score, last 10-20 episodes")
        ax.grid(alpha=0.3)
    by_steps.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=80)


if __name__ == "__main__":
    main()

"""Plot raw game score against agent steps for several runs, on three axes: agent steps summed over
a run's learners (the budget GALA's claim is stated in), learner updates (what each learner did),
and wall time (hours, rebuilt from the logged agent steps/s: the time between two log rows is the
agent steps between them over the row's ``sps``, the run's own start-up not counted).

    python -m rlkit.bench.studies.score_plot -o docs/benchmarks/gala-pong-score.png \\
        "A2C, 1 learner x 16 envs=docs/benchmarks/a2c-pong-local-3m.csv" \\
        "GALA learner 0=docs/benchmarks/gala-pong-7e-4-learner0.csv@4" ...

Each argument is LABEL=CSV, with ``@K`` after the CSV for one learner of a K-learner run: its own
agent steps (``learner_agent_steps``) are multiplied by K for the summed axis, as its peers step at
about the same rate. A run's ``metrics.csv`` (``agent_steps``, already summed) needs no ``@K``.
"""

from __future__ import annotations

import argparse
import csv


def read(path: str, learners: int) -> list[tuple[float, float, float, float]]:
    """(summed agent steps, update, score, wall hours) per logged row that has a score."""
    out, clock, last = [], 0.0, 0.0
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            summed = float(r["agent_steps"])  # every learner's row logs the summed estimate
            if r.get("sps") and float(r["sps"]) > 0:
                clock += (summed - last) / float(r["sps"])
            last = summed
            if not r.get("score_mean"):
                continue
            own = r.get("learner_agent_steps")
            steps = float(own) * learners if own else summed
            out.append((steps, float(r["step"]), float(r["score_mean"]), clock / 3600))
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

    fig, (by_steps, by_updates, by_time) = plt.subplots(1, 3, figsize=(17, 4.5))
    for spec in args.runs:
        label, _, rest = spec.partition("=")
        path, _, k = rest.partition("@")
        rows = read(path, int(k) if k else 1)
        scores = [v for _, _, v, _ in rows]
        by_steps.plot([s / 1e6 for s, _, _, _ in rows], scores, label=label, lw=1)
        by_updates.plot([u for _, u, _, _ in rows], scores, label=label, lw=1)
        by_time.plot([h for _, _, _, h in rows], scores, label=label, lw=1)
    for ax, xlabel in ((by_steps, "agent steps summed over learners (millions; frames = 4x)"),
                       (by_updates, "updates of each learner"),
                       (by_time, "wall time (hours, from logged agent steps/s)")):
        ax.axhline(args.target, color="grey", ls="--", lw=0.8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("mean raw score, last 10-20 episodes")
        ax.grid(alpha=0.3)
    by_steps.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.output, dpi=80)


if __name__ == "__main__":
    main()

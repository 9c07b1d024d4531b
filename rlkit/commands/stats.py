"""Scores across seeds as Agarwal et al. 2021 ("Deep RL at the edge of the statistical precipice")
recommend reporting them: the interquartile mean (IQM) with a 95% stratified-bootstrap confidence
interval, percentile method. The same definitions as their library ``rliable`` (whose ``arch``
dependency does not import with pandas 3, which MinAtar pulls in); pure numpy, golden-tested.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

BOOTSTRAP_REPS = 50_000  # rliable's default
CONFIDENCE = 0.95


def iqm(scores: Sequence[float] | np.ndarray) -> float:
    """Interquartile mean: sort, drop ``int(n / 4)`` scores from each end, average the rest (the
    middle 50%; scipy's ``trim_mean(x, 0.25)``, which rliable uses)."""
    return float(iqm_rows(np.asarray(scores, dtype=float).reshape(1, -1))[0])


def iqm_rows(samples: np.ndarray) -> np.ndarray:
    """The IQM of every row of a 2-D array (one bootstrap sample per row)."""
    n = samples.shape[1]
    cut = int(n * 0.25)
    return np.sort(samples, axis=1)[:, cut:n - cut].mean(axis=1)


def mean_rows(samples: np.ndarray) -> np.ndarray:
    return samples.mean(axis=1)


def median_rows(samples: np.ndarray) -> np.ndarray:
    return np.median(samples, axis=1)


def stratified_bootstrap_ci(tasks: Sequence[Sequence[float]], statistic: Callable[[np.ndarray], np.ndarray] = iqm_rows,
                            reps: int = BOOTSTRAP_REPS, confidence: float = CONFIDENCE,
                            seed: int = 0) -> tuple[float, float]:
    """Percentile confidence interval of ``statistic`` over the pooled scores of all tasks.

    ``tasks`` holds one sequence of per-run scores per task (env); each bootstrap sample draws, for
    every task separately, as many runs as it has, with replacement (stratified: a task's share of
    the pool never changes), and ``statistic`` maps the ``(reps, runs)`` array of samples to one
    value per sample. The interval is the (1 - confidence)/2 and (1 + confidence)/2 percentiles of
    those values (numpy's linear interpolation)."""
    rng = np.random.default_rng(seed)
    pooled = []
    for runs in tasks:
        x = np.asarray(runs, dtype=float)
        if x.size == 0:
            raise ValueError("stratified_bootstrap_ci: a task with no runs")
        pooled.append(x[rng.integers(0, x.size, size=(reps, x.size))])
    values = statistic(np.concatenate(pooled, axis=1))
    tail = (1.0 - confidence) / 2.0 * 100.0
    lo, hi = np.percentile(values, [tail, 100.0 - tail])
    return float(lo), float(hi)


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its confidence interval."""

    value: float
    lo: float
    hi: float

    def __str__(self) -> str:
        return f"{self.value:.2f} [{self.lo:.2f}, {self.hi:.2f}]"


def iqm_estimate(scores: Sequence[float], reps: int = BOOTSTRAP_REPS, seed: int = 0) -> Estimate:
    """The IQM of one task's runs with its 95% bootstrap interval."""
    lo, hi = stratified_bootstrap_ci([scores], iqm_rows, reps=reps, seed=seed)
    return Estimate(iqm(scores), lo, hi)


def iqm_band(curves: np.ndarray, reps: int = 2_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(IQM, lower, upper) at every point of learning curves given as a ``(runs, points)`` array:
    one bootstrap over runs per point (fewer resamples than a table cell: a band is read by eye)."""
    runs, points = curves.shape
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, runs, size=(reps, runs))
    samples = curves[idx]  # (reps, runs, points)
    n_cut = int(runs * 0.25)
    values = np.sort(samples, axis=1)[:, n_cut:runs - n_cut, :].mean(axis=1)  # (reps, points)
    tail = (1.0 - CONFIDENCE) / 2.0 * 100.0
    lo, hi = np.percentile(values, [tail, 100.0 - tail], axis=0)
    centre = np.sort(curves, axis=0)[n_cut:runs - n_cut].mean(axis=0)
    return centre, lo, hi

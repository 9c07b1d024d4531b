"""IQM and stratified-bootstrap confidence intervals against hand-computed values."""

import itertools

import numpy as np
import pytest

from rlkit.commands.stats import iqm, iqm_band, iqm_estimate, iqm_rows, mean_rows, stratified_bootstrap_ci

X = [1.0, 3.5, 4.0, 7.0, 12.0]


@pytest.mark.parametrize("scores, expected", [
    (range(1, 9), (3 + 4 + 5 + 6) / 4),       # n = 8: the middle 4
    (X, (3.5 + 4.0 + 7.0) / 3),               # n = 5: int(5/4) = 1 dropped at each end
    ([10.0, 0.0, 2.0, 5.0], (2.0 + 5.0) / 2),  # unsorted input
    ([2.0, 9.0, 4.0], 5.0),                    # n < 4: nothing dropped, the mean
    ([100.0, -100.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0], (2 + 3 + 4 + 5) / 4),  # outliers do not move it
])
def test_iqm_is_the_mean_of_the_middle_half(scores, expected):
    assert iqm(scores) == pytest.approx(expected)


def test_equal_scores_give_a_zero_width_interval():
    assert stratified_bootstrap_ci([[3.0] * 5]) == (3.0, 3.0)
    e = iqm_estimate([7.5] * 4)
    assert (e.value, e.lo, e.hi) == (7.5, 7.5, 7.5)


def test_two_runs_interval_is_their_range():
    # resamples of [0, 1]: (0, 0), (0, 1), (1, 0), (1, 1), so the statistic is 0, 0.5, 0.5, 1 with
    # probabilities 1/4, 1/2, 1/4: its 2.5th percentile is 0 and its 97.5th is 1
    assert stratified_bootstrap_ci([[0.0, 1.0]], seed=1) == (0.0, 1.0)


def test_interval_equals_the_exact_bootstrap_distributions_percentiles():
    """All 5^5 equally likely resamples of X, enumerated: the 2.5% and 97.5% quantiles of their
    IQMs are 11/6 and 31/3, and 50,000 random resamples find the same two values (rliable 1.2.0
    gives (1.8333, 10.3333) for X too, and (2.6, 9.0) for the mean)."""
    x = np.array(X)
    exact = np.sort(iqm_rows(x[np.array(list(itertools.product(range(5), repeat=5)))]))
    cdf = np.arange(1, exact.size + 1) / exact.size
    lo, hi = exact[np.searchsorted(cdf, 0.025)], exact[np.searchsorted(cdf, 0.975)]
    assert (lo, hi) == pytest.approx((11 / 6, 31 / 3))
    assert stratified_bootstrap_ci([X]) == pytest.approx((lo, hi))
    assert stratified_bootstrap_ci([X], mean_rows) == pytest.approx((2.6, 9.0))


def test_bootstrap_is_stratified_by_task():
    # each task keeps its two runs' share of the pool: every resample pools {0, 0} with {1, 1}, so
    # the IQM is 0.5 in every one of them (an unstratified bootstrap would vary)
    assert stratified_bootstrap_ci([[0.0, 0.0], [1.0, 1.0]]) == (0.5, 0.5)
    # two tasks of 5 runs each; rliable 1.2.0 (get_interval_estimates, 50,000 reps) gives the same
    assert stratified_bootstrap_ci([X, [10.0, 0.0, 2.0, 5.0, 6.0]]) == pytest.approx((7 / 3, 23 / 3))


def test_interval_is_reproducible_and_brackets_the_estimate():
    rng = np.random.default_rng(5)
    scores = rng.normal(10.0, 3.0, size=10)
    assert stratified_bootstrap_ci([scores], seed=3) == stratified_bootstrap_ci([scores], seed=3)
    e = iqm_estimate(scores)
    assert e.lo < e.value < e.hi


def test_band_is_a_bootstrap_per_point():
    curves = np.array([[0.0, 1.0, 5.0], [0.0, 2.0, 6.0], [0.0, 4.0, 9.0]])
    centre, lo, hi = iqm_band(curves, reps=4000, seed=2)
    assert centre == pytest.approx([0.0, iqm([1, 2, 4]), iqm([5, 6, 9])])
    assert (lo[0], hi[0]) == (0.0, 0.0)
    for j in (1, 2):
        assert (lo[j], hi[j]) == pytest.approx(stratified_bootstrap_ci([curves[:, j]], reps=4000, seed=2))

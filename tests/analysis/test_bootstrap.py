"""The vectorised bootstrap against scipy.stats.bootstrap (within Monte-Carlo error), against
hand counts, and by coverage on synthetic data shaped like the real trials.

Monte-Carlo tolerance used throughout (see `mc_tolerance`): an interval endpoint is the
q-quantile of B bootstrap replicates. Its Monte-Carlo standard deviation is
sqrt(q (1 - q) / B) / f(xi_q), with f the density of the bootstrap distribution at the quantile,
estimated from scipy's large reference distribution by a finite difference of its quantiles.
For BCa the level q itself is estimated: z0 = Phi^-1(p_hat) with sd(p_hat) = sqrt(p (1 - p) / B),
and q = Phi(z0 + w / (1 - a w)), w = z0 + z_alpha, moves by
phi(z0 + w / (1 - a w)) (1 + 1 / (1 - a w)^2) per unit of z0; that sd is added (a conservative
bound for correlated errors). Ours and scipy's use independent draws, so the sd of their
difference is the root sum of squares; the tolerance is 5 of those, which a correct
implementation exceeds with probability about 6e-7 per endpoint.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats as sps
from scipy.special import expit, ndtr, ndtri

from ibias.analysis import bootstrap
from ibias.analysis import replicates as draws
from ibias.analysis.bootstrap import (
    CI,
    Method,
    bootstrap_mean_ci,
    cluster_bootstrap_share_ci,
    grouped_bootstrap_mean_ci,
    grouped_cluster_bootstrap_share_ci,
    grouped_paired_difference_ci,
    grouped_pooled_bias_ci,
    paired_difference_ci,
)

K_SD = 5.0


def mc_tolerance(
    ref: np.ndarray,
    level: float,
    b_mine: int,
    b_ref: int,
    *,
    jackknife: np.ndarray | None = None,
    estimate: float | None = None,
) -> tuple[float, float]:
    """Tolerances (low, high) for |ours - scipy's| endpoints; BCa when `jackknife` is given."""
    ref = np.sort(ref)
    alpha = (1 - level) / 2

    def density(q: float) -> float:
        h = min(0.01, q / 2, (1 - q) / 2)
        lo, hi = np.quantile(ref, [q - h, q + h])
        return float(2 * h / (hi - lo))

    tols = []
    for z_alpha in (ndtri(alpha), -ndtri(alpha)):
        if jackknife is None:
            q, level_sd = (alpha if z_alpha < 0 else 1 - alpha), 0.0
        else:
            assert estimate is not None
            p = (np.sum(ref < estimate) + np.sum(ref <= estimate)) / (2 * ref.size)
            z0 = ndtri(p)
            d = jackknife.mean() - jackknife
            a = np.sum(d**3) / (6 * np.sum(d**2) ** 1.5)
            w = z0 + z_alpha
            arg = z0 + w / (1 - a * w)
            q = ndtr(arg)
            z0_sd = math.sqrt(p * (1 - p)) / sps.norm.pdf(z0)
            level_sd = sps.norm.pdf(arg) * (1 + 1 / (1 - a * w) ** 2) * z0_sd
        f = density(q)
        sd = [(math.sqrt(q * (1 - q)) + level_sd) / math.sqrt(b) / f for b in (b_mine, b_ref)]
        tols.append(K_SD * math.hypot(*sd))
    return tols[0], tols[1]


def jackknife_values(data: list[np.ndarray], statistic: Callable[..., np.ndarray]) -> np.ndarray:
    """Leave-one-unit-out statistic, by a plain loop (independent of the code under test)."""
    n = data[0].shape[0]
    keep = np.ones(n, dtype=bool)
    out = []
    for i in range(n):
        keep[i] = False
        out.append(float(statistic(*[d[keep] for d in data])))
        keep[i] = True
    return np.array(out)


def assert_matches_scipy(
    ours: CI, ref: sps._resampling.BootstrapResult, tol: tuple[float, float]
) -> None:
    assert abs(ours.low - ref.confidence_interval.low) <= tol[0], (ours, ref, tol)
    assert abs(ours.high - ref.confidence_interval.high) <= tol[1], (ours, ref, tol)


# ---------------------------------------------------------------------------------------------
# Agreement with scipy.stats.bootstrap
# ---------------------------------------------------------------------------------------------

B_CMP = 100_000


def skewed_sample() -> np.ndarray:
    # Strong right skew (lognormal, sigma 1.2, n 25) so that BCa visibly differs from the
    # percentile interval: the comparison below checks that it does, by more than the
    # tolerance, so the BCa comparison has power.
    return np.random.default_rng(2024).lognormal(0.0, 1.2, size=25)


def test_percentile_mean_matches_scipy() -> None:
    x = skewed_sample()
    ours = bootstrap_mean_ci(x, B=B_CMP, method="percentile", rng=np.random.default_rng(1))
    ref, tol = scipy_reference("percentile", (x,), mean_stat, B_CMP, np.random.default_rng(2))
    assert ours.estimate == pytest.approx(x.mean(), rel=1e-12)
    assert (ours.n, ours.B, ours.method, ours.n_dropped) == (25, B_CMP, "percentile", 0)
    assert_matches_scipy(ours, ref, tol)


def test_bca_mean_matches_scipy_and_differs_from_percentile() -> None:
    x = skewed_sample()
    ours = bootstrap_mean_ci(x, B=B_CMP, method="bca", rng=np.random.default_rng(3))
    ref = sps.bootstrap(
        (x,), np.mean, n_resamples=B_CMP, method="BCa", rng=np.random.default_rng(4)
    )
    tol = mc_tolerance(
        ref.bootstrap_distribution,
        0.95,
        B_CMP,
        B_CMP,
        jackknife=jackknife_values([x], np.mean),
        estimate=float(x.mean()),
    )
    assert_matches_scipy(ours, ref, tol)
    # Power: if BCa and percentile endpoints differ by more than 2 tol, an implementation that
    # returned the percentile interval would miss scipy's BCa by more than tol and fail above.
    pct = bootstrap_mean_ci(x, B=B_CMP, method="percentile", rng=np.random.default_rng(5))
    assert ours.low - pct.low > 2 * tol[0] and ours.high - pct.high > 2 * tol[1]


def scipy_reference(
    method: Method,
    data: tuple[np.ndarray, ...],
    statistic: Callable[..., np.ndarray],
    B: int,
    rng: np.random.Generator,
) -> tuple[sps._resampling.BootstrapResult, tuple[float, float]]:
    """scipy's interval for the same estimator (several arrays are resampled together, one row
    per unit) and the Monte-Carlo tolerance for comparing ours with it."""
    ref = sps.bootstrap(
        data, statistic, paired=len(data) > 1, vectorized=True, n_resamples=B,
        method="BCa" if method == "bca" else "percentile", rng=rng,
    )  # fmt: skip
    if method == "percentile":
        return ref, mc_tolerance(ref.bootstrap_distribution, 0.95, B, B)
    tol = mc_tolerance(
        ref.bootstrap_distribution, 0.95, B, B,
        jackknife=jackknife_values(list(data), statistic), estimate=float(statistic(*data)),
    )  # fmt: skip
    return ref, tol


def mean_stat(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.asarray(np.mean(x, axis=axis))


def ratio_stat(s: np.ndarray, t: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.asarray(np.sum(s, axis=axis) / np.sum(t, axis=axis))


def difference_stat(
    s1: np.ndarray, t1: np.ndarray, s0: np.ndarray, t0: np.ndarray, axis: int = -1
) -> np.ndarray:
    return np.asarray(ratio_stat(s1, t1, axis) - ratio_stat(s0, t0, axis))


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_grouped_mean_matches_scipy_per_group_with_nans_and_unequal_sizes(method: Method) -> None:
    rng = np.random.default_rng(99)
    sizes = {"a": 12, "b": 40, "c": 40, "d": 7}
    values = np.concatenate([np.clip(rng.normal(0.3, 0.5, n), -1, 1) for n in sizes.values()])
    groups = np.repeat(list(sizes), list(sizes.values()))
    values[[0, 3, 20, 21, 60]] = np.nan
    B = 40_000
    ours = grouped_bootstrap_mean_ci(values, groups, B=B, method=method, rng=rng)
    assert list(ours) == ["a", "b", "c", "d"]
    for key, ci in ours.items():
        x = values[(groups == key) & ~np.isnan(values)]
        assert ci.n == x.size and ci.n_dropped == np.sum((groups == key) & np.isnan(values))
        assert ci.estimate == pytest.approx(x.mean(), rel=1e-12)
        ref, tol = scipy_reference(method, (x,), mean_stat, B, rng)
        assert_matches_scipy(ci, ref, tol)


def pair_data(rng: np.random.Generator, n_pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """Allocation-like trials: 0/1 outcomes, two orders per pair, some pairs with one order."""
    eta = rng.choice([-2.0, 0.0, 2.0], size=n_pairs)
    y = (rng.random((n_pairs, 2)) < expit(eta[:, None] + [0.7, -0.7])).astype(float)
    y[rng.random((n_pairs, 2)) < 0.05] = 0.0  # 'none': stays in the denominator as 0
    pairs = np.repeat(np.arange(n_pairs), 2)
    y = y.ravel()
    y[[5, 17]] = np.nan  # two trials missing: pairs 2 and 8 are incomplete
    return y, pairs


def per_pair(y: np.ndarray, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-pair (successes, trials) over non-NaN trials, by bincount (independent code)."""
    keep = ~np.isnan(y)
    return np.bincount(pairs[keep], weights=y[keep]), np.bincount(pairs[keep]).astype(float)


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_cluster_share_matches_scipy_paired_bootstrap_over_pairs(method: Method) -> None:
    rng = np.random.default_rng(5)
    y, pairs = pair_data(rng, 60)
    B = 40_000
    ours = cluster_bootstrap_share_ci(y, pairs, B=B, method=method, rng=rng)
    # The same estimator written independently: per-pair successes and trial counts, resampled
    # together by scipy (paired=True), statistic = sum(successes) / sum(trials).
    succ, trials = per_pair(y, pairs)
    ref, tol = scipy_reference(method, (succ, trials), ratio_stat, B, rng)
    assert ours.estimate == pytest.approx(np.nansum(y) / np.sum(~np.isnan(y)), rel=1e-12)
    assert (ours.n, ours.n_dropped) == (60, 2)
    assert_matches_scipy(ours, ref, tol)


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_paired_difference_matches_scipy_paired_bootstrap(method: Method) -> None:
    rng = np.random.default_rng(8)
    y_no, pairs = pair_data(rng, 60)
    y_yes, _ = pair_data(rng, 60)
    y_yes = np.where(np.isnan(y_yes), np.nan, np.maximum(y_yes, rng.random(y_yes.size) < 0.2))
    outcome = np.concatenate([y_yes, y_no])
    clusters = np.concatenate([pairs, pairs])
    treated = np.repeat([True, False], y_no.size)
    B = 40_000
    ours = paired_difference_ci(outcome, clusters, treated, B=B, method=method, rng=rng)
    data = (*per_pair(y_yes, pairs), *per_pair(y_no, pairs))
    ref, tol = scipy_reference(method, data, difference_stat, B, rng)
    assert ours.estimate == pytest.approx(float(difference_stat(*data)), rel=1e-12)
    assert (ours.n, ours.n_dropped) == (60, 4)  # two NaN trials per condition
    assert_matches_scipy(ours, ref, tol)


def pooled_stat(
    pos_t: np.ndarray, neg_t: np.ndarray, pos_r: np.ndarray, neg_r: np.ndarray, axis: int = -1
) -> np.ndarray:
    """The pooled word-association score written from its definition: the per-trial score's
    formula applied to the word counts summed over trials."""
    pt, nt = np.sum(pos_t, axis=axis), np.sum(neg_t, axis=axis)
    pr, nr = np.sum(pos_r, axis=axis), np.sum(neg_r, axis=axis)
    return np.asarray(nt / (pt + nt) + pr / (nr + pr) - 1)


def word_trials(rng: np.random.Generator, n: int, p_neg_to_target: float) -> np.ndarray:
    """Trials shaped like the real ones: 5 positive and 5 negative words, each word given to
    the target group with some probability (negatives more often), a few words unassigned."""
    neg_t = rng.binomial(5, p_neg_to_target, n)
    pos_t = rng.binomial(5, 1 - p_neg_to_target, n)
    counts = np.column_stack([pos_t, neg_t, 5 - pos_t, 5 - neg_t]).astype(float)
    counts[rng.random((n, 4)) < 0.05] -= 1  # an unassigned word here and there
    return np.clip(counts, 0, None)


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_pooled_bias_matches_scipy_resampling_trials(method: Method) -> None:
    rng = np.random.default_rng(17)
    counts = word_trials(rng, 50, 0.65)
    B = 40_000
    ours = grouped_pooled_bias_ci(counts, np.zeros(50, dtype=int), B=B, method=method, rng=rng)[0]
    ref, tol = scipy_reference(method, tuple(counts.T), pooled_stat, B, rng)
    assert ours.estimate == pytest.approx(float(pooled_stat(*counts.T)), rel=1e-12)
    assert (ours.n, ours.n_dropped) == (50, 0)
    assert_matches_scipy(ours, ref, tol)


def test_pooled_bias_by_hand_and_its_dropping_rules() -> None:
    # Cell a: trial 1 gives the target 1 positive and 3 negative words, the reference 4
    # positive and 2 negative; trial 2 gives the target 2 / 2 and the reference 1 / 3; trial 3
    # assigned nothing (a refusal) and is left out. Pooled: target 3 positive, 5 negative;
    # reference 5 positive, 5 negative: 5/8 + 5/10 - 1 = 0.125. (The per-trial mean would be
    # ((3/4 + 4/6 - 1) + (2/4 + 1/4 - 1)) / 2 = (0.41667 - 0.25) / 2 = 0.08333.)
    counts = [[1, 3, 4, 2], [2, 2, 1, 3], [0, 0, 0, 0]]
    # Cell b: the first trial gave the target no word; pooled over both trials it is defined
    # (target 2 positive, 1 negative; reference 3 / 4: 1/3 + 3/7 - 1), but a replicate that
    # draws the first trial twice leaves the target empty, so the cell gets no interval.
    counts += [[0, 0, 3, 2], [2, 1, 0, 2]]
    groups = ["a", "a", "a", "b", "b"]
    out = grouped_pooled_bias_ci(counts, groups, B=2000, rng=np.random.default_rng(0))
    assert out["a"].estimate == pytest.approx(0.125)
    assert (out["a"].n, out["a"].n_dropped) == (2, 1)
    assert out["a"].low <= 0.125 <= out["a"].high
    assert out["b"].estimate == pytest.approx(1 / 3 + 3 / 7 - 1)
    assert math.isnan(out["b"].low) and math.isnan(out["b"].high)
    with pytest.raises(ValueError, match="counts"):
        grouped_pooled_bias_ci([[1, 2, 3]], ["a"], B=10, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="counts"):
        grouped_pooled_bias_ci([[1, -2, 3, 1]], ["a"], B=10, rng=np.random.default_rng(0))


def test_identical_to_scipy_when_drawing_the_same_indices() -> None:
    """With one cell, our resampling consumes the generator exactly as scipy.stats.bootstrap
    does today (B x n bounded 64-bit integers in order), so the same seed gives the same
    replicates and every endpoint must agree to rounding: an exact check of the quantile rule
    and of BCa's z0 (with ties, on 0/1 pair data) and jackknife acceleration. If a future scipy
    draws differently, the percentile probe differs and the test skips; the Monte-Carlo
    comparisons above still apply."""
    x = skewed_sample()
    y = np.random.default_rng(1).integers(0, 2, size=(60, 2)).astype(float)
    y[3, 1] = np.nan
    pairs = np.repeat(np.arange(60), 2)
    succ, trials = per_pair(y.ravel(), pairs)

    def ours_and_scipy(method: Method) -> list[tuple[CI, sps._resampling.BootstrapResult]]:
        kw = {"n_resamples": 5000, "method": "BCa" if method == "bca" else "percentile"}
        return [
            (
                bootstrap_mean_ci(x, B=5000, method=method, rng=np.random.default_rng(9)),
                sps.bootstrap((x,), mean_stat, rng=np.random.default_rng(9), **kw),
            ),
            (
                cluster_bootstrap_share_ci(
                    y.ravel(), pairs, B=5000, method=method, rng=np.random.default_rng(9)
                ),
                sps.bootstrap(
                    (succ, trials), ratio_stat, paired=True, rng=np.random.default_rng(9), **kw
                ),
            ),
        ]

    probe, ref = ours_and_scipy("percentile")[0]
    if abs(probe.low - ref.confidence_interval.low) > 1e-12:
        pytest.skip("scipy's resampling stream differs from ours")
    for method in ("percentile", "bca"):
        for ours, theirs in ours_and_scipy(method):
            assert ours.low == pytest.approx(theirs.confidence_interval.low, abs=1e-12)
            assert ours.high == pytest.approx(theirs.confidence_interval.high, abs=1e-12)


# ---------------------------------------------------------------------------------------------
# Hand-counted estimates, dropping rules, keys, degenerate cases
# ---------------------------------------------------------------------------------------------


def test_share_counts_none_in_denominator_and_nan_leaves_trials_out() -> None:
    # Pair 1: trans, trans. Pair 2: trans, none. Pair 3: cis, none. Pair 4: cis, (missing).
    # Share choosing trans among all 7 present trials, 'none' included: 3 / 7.
    outcome = [1, 1, 1, 0, 0, 0, 0, np.nan]
    pairs = [1, 1, 2, 2, 3, 3, 4, 4]
    ci = cluster_bootstrap_share_ci(outcome, pairs, B=500, rng=np.random.default_rng(0))
    assert ci.estimate == pytest.approx(3 / 7)
    assert (ci.n, ci.n_dropped) == (4, 1)
    assert ci.low <= ci.estimate <= ci.high
    # Among decided trials only (caller passes NaN for 'none'): 3 / 4.
    decided = [1, 1, 1, np.nan, 0, np.nan, 0, np.nan]
    ci = cluster_bootstrap_share_ci(decided, pairs, B=500, rng=np.random.default_rng(0))
    assert ci.estimate == pytest.approx(3 / 5)  # trials: t, t, t, c, c -> 3 of 5
    assert (ci.n, ci.n_dropped) == (4, 3)


def test_paired_difference_drops_pairs_seen_under_one_condition() -> None:
    # Pairs 1-3 under both conditions; pair 4 only treated (its 2 trials are dropped).
    outcome = [1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0]
    pairs = [1, 1, 2, 2, 3, 3, 4, 4, 1, 1, 2, 2, 3, 3]
    treated = [True] * 8 + [False] * 6
    ci = paired_difference_ci(outcome, pairs, treated, B=500, rng=np.random.default_rng(0))
    # treated share over pairs 1-3: 3/6; untreated: 1/6.
    assert ci.estimate == pytest.approx(3 / 6 - 1 / 6)
    assert (ci.n, ci.n_dropped) == (3, 2)


def test_composite_keys_and_all_nan_groups() -> None:
    keys = np.array([["gpt", "en"], ["gpt", "es"], ["llama", "en"]] * 4)
    values = np.arange(12, dtype=float)
    values[[1, 4, 7, 10]] = np.nan  # every ("gpt", "es") value is undefined
    out = grouped_bootstrap_mean_ci(values, keys, B=200, rng=np.random.default_rng(0))
    assert list(out) == [("gpt", "en"), ("gpt", "es"), ("llama", "en")]
    empty = out[("gpt", "es")]
    assert (empty.n, empty.n_dropped) == (0, 4)
    assert math.isnan(empty.estimate) and math.isnan(empty.low) and math.isnan(empty.high)
    assert out[("gpt", "en")].estimate == pytest.approx(np.mean([0, 3, 6, 9]))
    mixed = grouped_bootstrap_mean_ci(
        [0.1, 0.2, 0.3], [("m", 2), ("m", 10), ("m", 2)], B=50, rng=np.random.default_rng(0)
    )
    assert list(mixed) == [("m", 2), ("m", 10)]  # types kept, so 2 sorts before 10


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_degenerate_samples_give_exact_intervals_without_warnings(method: Method) -> None:
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        empty = bootstrap_mean_ci([], method=method, rng=rng)
        assert empty.n == 0 and all(math.isnan(v) for v in (empty.estimate, empty.low, empty.high))
        nans = bootstrap_mean_ci([np.nan] * 3, method=method, rng=rng)
        assert (nans.n, nans.n_dropped) == (0, 3) and math.isnan(nans.low)
        for values in ([0.4] * 9 + [np.nan], [0.7], [-1.0, -1.0]):
            ci = bootstrap_mean_ci(values, method=method, rng=rng)
            assert ci.low == ci.high == ci.estimate == pytest.approx(np.nanmean(values))
        share = cluster_bootstrap_share_ci([1, 1, 1, 1, 1], [1, 1, 2, 2, 3], method=method, rng=rng)
        assert share.low == share.high == share.estimate == 1.0
        diff = paired_difference_ci(
            [1, 1, 0, 0], [1, 2, 1, 2], [1, 1, 0, 0], method=method, rng=rng
        )
        assert diff.low == diff.high == diff.estimate == 1.0
        # Two distinct values, tiny sample: a real interval, still no warnings.
        two = bootstrap_mean_ci([0.0, 1.0], method=method, rng=rng)
        assert two.low == 0.0 and two.high == 1.0


def test_same_seed_same_intervals_and_bad_options_are_rejected() -> None:
    x = np.random.default_rng(1).normal(size=40)
    a = bootstrap_mean_ci(x, method="bca", rng=np.random.default_rng(7))
    b = bootstrap_mean_ci(x, method="bca", rng=np.random.default_rng(7))
    c = bootstrap_mean_ci(x, method="bca", rng=np.random.default_rng(8))
    assert a == b and a != c
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="B"):
        bootstrap_mean_ci(x, B=0, rng=rng)
    with pytest.raises(ValueError, match="level"):
        bootstrap_mean_ci(x, level=95, rng=rng)
    with pytest.raises(ValueError, match="method"):
        bootstrap_mean_ci(x, method="basic", rng=rng)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="groups"):
        grouped_bootstrap_mean_ci(x, ["a"] * 3, rng=rng)
    with pytest.raises(ValueError, match="finite"):
        bootstrap_mean_ci([1.0, np.inf], rng=rng)
    with pytest.raises(ValueError, match="treated"):
        paired_difference_ci([1.0, 0.0], [1, 1], [1.0, 0.5], rng=rng)


# ---------------------------------------------------------------------------------------------
# Coverage on synthetic data with known truth
# ---------------------------------------------------------------------------------------------
# R independent cells (one grouped call, so the whole study is vectorised), each with its own
# 95% interval; the number covering the truth is Binomial(R, c) with c the method's true
# coverage. Bootstrap intervals for a mean of n observations under-cover slightly: the
# percentile interval behaves like the normal interval with the ML standard deviation, whose
# coverage is P(|t_{n-1}| <= 1.96 sqrt((n-1)/n)), about 0.944 at n = 45; allowing another 0.014
# for skewness and discreteness, we take c in [C_LOW, C_HIGH] = [0.93, 0.96] for correct code
# and accept counts between the 1e-4 quantile of Bin(R, C_LOW) and the 1 - 1e-4 quantile of
# Bin(R, C_HIGH): correct code fails with probability below 1e-4 per check.

R = 1000
B_COV = 1000  # per interval; 1000 instead of 2000 keeps each study under a second
C_LOW, C_HIGH = 0.93, 0.96
COUNT_LOW = int(sps.binom.ppf(1e-4, R, C_LOW))
COUNT_HIGH = int(sps.binom.isf(1e-4, R, C_HIGH))


def test_coverage_band_calculation() -> None:
    normal_theory = 2 * sps.t.cdf(1.96 * math.sqrt(44 / 45), df=44) - 1
    assert normal_theory - 0.01 >= C_LOW and normal_theory <= C_HIGH
    assert sps.binom.cdf(COUNT_LOW - 1, R, C_LOW) < 1e-4
    assert sps.binom.sf(COUNT_HIGH, R, C_HIGH) < 1e-4
    assert 880 < COUNT_LOW < 935 < COUNT_HIGH < 990


# Word association: 5 negative and 5 positive words; each word goes to the target group with
# probability (1 - U) P_NEG (negative) or (1 - U)(1 - P_NEG) (positive), to the reference group
# with the complementary probability, or is left unassigned with probability U, so that a
# group sometimes gets no words and the score is NaN (about 10% of trials here).
P_NEG, U = 0.7, 0.5


def word_association_truth() -> tuple[float, float]:
    """(E[score | defined], P(undefined)) by exact enumeration of the two multinomials."""
    neg = [(1 - U) * P_NEG, (1 - U) * (1 - P_NEG), U]
    pos = [(1 - U) * (1 - P_NEG), (1 - U) * P_NEG, U]
    total = mass = 0.0
    for nt in range(6):
        for nr in range(6 - nt):
            p_neg = sps.multinomial.pmf([nt, nr, 5 - nt - nr], 5, neg)
            for pt in range(6):
                for pr in range(6 - pt):
                    if nt + pt == 0 or nr + pr == 0:
                        continue
                    prob = p_neg * sps.multinomial.pmf([pt, pr, 5 - pt - pr], 5, pos)
                    total += prob * (nt / (nt + pt) + pr / (nr + pr) - 1)
                    mass += prob
    return total / mass, 1 - mass


def word_association_scores(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    neg = rng.multinomial(5, [(1 - U) * P_NEG, (1 - U) * (1 - P_NEG), U], size=shape)
    pos = rng.multinomial(5, [(1 - U) * (1 - P_NEG), (1 - U) * P_NEG, U], size=shape)
    nt, nr, pt, pr = neg[..., 0], neg[..., 1], pos[..., 0], pos[..., 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return nt / (nt + pt) + pr / (nr + pr) - 1


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_coverage_word_association_means(method: Method) -> None:
    truth, p_undefined = word_association_truth()
    assert 0.05 < p_undefined < 0.2 and 0.3 < truth < 0.6
    rng = np.random.default_rng(12345)
    scores = word_association_scores(rng, (R, 50))
    cells = np.repeat(np.arange(R), 50)
    out = grouped_bootstrap_mean_ci(scores.ravel(), cells, B=B_COV, method=method, rng=rng)
    assert sum(ci.n_dropped for ci in out.values()) == np.isnan(scores).sum() > 0
    covered = sum(ci.low <= truth <= ci.high for ci in out.values())
    assert COUNT_LOW <= covered <= COUNT_HIGH, covered


# Allocation: each pair has a latent preference eta (on the logit scale, from ETA with weights
# W: most pairs lean strongly one way, as when a model keys on the people's names or ages) and
# a position effect DELTA for whoever is listed first; the transgender candidate is chosen with
# probability (1 - NONE) expit(eta +/- DELTA) in the order listing them first/second, and no one
# is chosen with probability NONE ('none', in the denominator). 100 pairs x 2 orders per cell.
ETA = np.array([-5.0, 0.0, 5.0])
W = np.array([0.45, 0.10, 0.45])
DELTA, NONE, N_PAIRS = 1.0, 0.05, 100


def allocation_truth(shift: float = 0.0) -> float:
    """Expected share choosing the transgender candidate, exactly, over the eta distribution."""
    both_orders = expit(ETA + shift + DELTA) + expit(ETA + shift - DELTA)
    return float((1 - NONE) * np.sum(W * both_orders) / 2)


def allocation_outcomes(
    rng: np.random.Generator, eta: np.ndarray, shift: float = 0.0
) -> np.ndarray:
    """(cells, pairs, 2 orders) outcomes: 1 = transgender candidate chosen."""
    p_trans = (1 - NONE) * expit(eta[..., None] + shift + np.array([DELTA, -DELTA]))
    return np.asarray(rng.random(p_trans.shape) < p_trans, dtype=np.float64)


def test_pairs_are_strongly_dependent_in_this_design() -> None:
    # Design effect of a pair's two trials: Var(Y1 + Y2) / (Var(Y1) + Var(Y2)), exactly over
    # eta. About 1.77, so a trial-level bootstrap's 95% interval is too narrow by sqrt(1.77)
    # and covers only about P(|Z| < 1.96 / 1.33) = 0.86: the coverage check below must (and
    # does) catch resampling the wrong unit.
    p1 = (1 - NONE) * expit(ETA + DELTA)
    p2 = (1 - NONE) * expit(ETA - DELTA)
    m1, m2 = np.sum(W * p1), np.sum(W * p2)
    v1, v2 = m1 * (1 - m1), m2 * (1 - m2)
    cov = np.sum(W * p1 * p2) - m1 * m2
    deff = (v1 + v2 + 2 * cov) / (v1 + v2)
    trial_level_coverage = 2 * sps.norm.cdf(1.96 / math.sqrt(deff)) - 1
    assert 1.7 < deff < 1.85 and trial_level_coverage < 0.87
    assert sps.binom.sf(COUNT_LOW - 1, R, trial_level_coverage + 0.005) < 1e-3


def test_coverage_cluster_share_and_trial_level_resampling_fails() -> None:
    truth = allocation_truth()
    rng = np.random.default_rng(777)
    eta = rng.choice(ETA, p=W, size=(R, N_PAIRS))
    y = allocation_outcomes(rng, eta).ravel()
    cells = np.repeat(np.arange(R), 2 * N_PAIRS)
    pairs = np.tile(np.repeat(np.arange(N_PAIRS), 2), R)
    methods: tuple[Method, ...] = ("percentile", "bca")
    for method in methods:
        out = grouped_cluster_bootstrap_share_ci(
            y,
            pairs,
            cells,
            B=B_COV,
            method=method,
            rng=rng,
        )
        covered = sum(ci.low <= truth <= ci.high for ci in out.values())
        assert COUNT_LOW <= covered <= COUNT_HIGH, (method, covered)
    # Power: treating each trial as its own cluster ignores the within-pair dependence, and the
    # same check rejects it (expected coverage ~0.86, see the design-effect test above).
    trials = np.arange(y.size)
    wrong = grouped_cluster_bootstrap_share_ci(y, trials, cells, B=B_COV, rng=rng)
    covered_wrong = sum(ci.low <= truth <= ci.high for ci in wrong.values())
    assert covered_wrong < COUNT_LOW, covered_wrong


@pytest.mark.parametrize("method", ["percentile", "bca"])
def test_coverage_paired_difference(method: Method) -> None:
    # The same pairs (same eta) under two conditions; the treated condition shifts every pair's
    # logit by SHIFT (e.g. asking for an explanation). Truth: the exact difference of shares.
    shift = 0.8
    truth = allocation_truth(shift) - allocation_truth(0.0)
    rng = np.random.default_rng(4242)
    eta = rng.choice(ETA, p=W, size=(R, N_PAIRS))
    treated_y = allocation_outcomes(rng, eta, shift).reshape(R, -1)
    control_y = allocation_outcomes(rng, eta).reshape(R, -1)
    outcome = np.concatenate([treated_y, control_y], axis=1).ravel()
    treated = np.tile(np.repeat([True, False], 2 * N_PAIRS), R)
    pairs = np.tile(np.repeat(np.arange(N_PAIRS), 2), 2 * R)
    cells = np.repeat(np.arange(R), 4 * N_PAIRS)
    out = grouped_paired_difference_ci(
        outcome,
        pairs,
        treated,
        cells,
        B=B_COV,
        method=method,
        rng=rng,
    )
    covered = sum(ci.low <= truth <= ci.high for ci in out.values())
    assert COUNT_LOW <= covered <= COUNT_HIGH, covered


# ---------------------------------------------------------------------------------------------
# Resampling by counts (cells whose units take few values) and from unit sums
# ---------------------------------------------------------------------------------------------


def test_counted_cells_match_scipy_and_take_the_counts_path() -> None:
    """A cell of 600 pairs whose per-pair sums take a handful of values is resampled by
    multinomial counts (`replicates.by_counts`); its interval must still match scipy's index-drawing
    bootstrap within Monte-Carlo error, for the share and for the paired difference."""
    rng = np.random.default_rng(41)
    y, pairs = pair_data(rng, 600)
    succ, trials = per_pair(y, pairs)
    cols = np.column_stack([succ, trials])
    sizes, starts = np.array([600]), np.array([0])
    assert 0 in draws.by_counts(cols, sizes, starts)
    B = 40_000
    for method in ("percentile", "bca"):
        ours = cluster_bootstrap_share_ci(y, pairs, B=B, method=method, rng=rng)
        ref, tol = scipy_reference(method, (succ, trials), ratio_stat, B, rng)
        assert_matches_scipy(ours, ref, tol)
    y_yes, _ = pair_data(rng, 600)
    outcome = np.concatenate([y_yes, y])
    treated = np.repeat([True, False], y.size)
    ours = paired_difference_ci(outcome, np.concatenate([pairs, pairs]), treated, B=B, rng=rng)
    data = (*per_pair(y_yes, pairs), succ, trials)
    ref, tol = scipy_reference("percentile", data, difference_stat, B, rng)
    assert_matches_scipy(ours, ref, tol)


def test_counts_and_index_draws_have_the_same_law(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bootstrap distribution of a mean over 240 units taking three values, drawn by
    counts and (forced) by indices: the same exact moments (mean x-bar, variance
    s^2 / n with s^2 the 1/n variance) and the same distribution by a two-sample KS test."""
    x = np.repeat([0.0, 1.0, 2.0], [60, 100, 80])
    cols = np.column_stack([x, np.ones_like(x)])
    sizes, starts = np.array([240]), np.array([0])
    B = 50_000

    def replicates() -> np.ndarray:
        out = draws.draw(cols, sizes, starts, bootstrap._ratio, B, np.random.default_rng(7))
        return out[0]

    counted = replicates()
    monkeypatch.setattr(draws, "COUNTS_MIN_UNITS_PER_VALUE", 10**9)
    assert draws.by_counts(cols, sizes, starts) == {}
    indexed = replicates()
    var = x.var() / x.size
    for reps in (counted, indexed):
        assert abs(reps.mean() - x.mean()) < 5 * math.sqrt(var / B)
        # The sample variance of B normal-ish replicates has sd var * sqrt(2 / B).
        assert abs(reps.var() - var) < 5 * var * math.sqrt(2 / B)
    assert sps.ks_2samp(counted, indexed).pvalue > 1e-4
    assert not np.array_equal(counted, indexed)  # two draws, not the same numbers twice


def test_distinct_values_and_their_multiplicities_by_hand() -> None:
    # Cell 0: 60 units, values (1, 2) x 40 and (0, 2) x 20: counted (2 values, 30 units each).
    # Cell 1: 24 units, all different: drawn by indices. Cell 2: 48 units of one value.
    cols = np.vstack(
        [
            np.repeat([[1.0, 2.0], [0.0, 2.0]], [40, 20], axis=0),
            np.column_stack([np.arange(24.0), np.ones(24)]),
            np.tile([3.0, 1.0], (48, 1)),
        ]
    )
    sizes, starts = np.array([60, 24, 48]), np.array([0, 60, 84])
    found = draws.by_counts(cols, sizes, starts)
    assert set(found) == {0, 2}
    values, multiplicity = found[0]
    assert values.tolist() == [[0.0, 2.0], [1.0, 2.0]] and multiplicity.tolist() == [20, 40]
    assert found[2][0].tolist() == [[3.0, 1.0]] and found[2][1].tolist() == [48]


@pytest.mark.parametrize("n_pairs", [40, 400])  # index draws, then counts
def test_unit_sums_give_the_trial_level_intervals(n_pairs: int) -> None:
    """A table may pass each pair's sums instead of its trials: the same units in the same
    order, so the same intervals for the same seed, exactly, dropped trials included."""
    rng = np.random.default_rng(3)
    y, pairs = pair_data(rng, n_pairs)
    groups = pairs % 3  # three cells, pairs nested in them
    trial = grouped_cluster_bootstrap_share_ci(
        y, pairs, groups, B=999, rng=np.random.default_rng(1)
    )
    keep = ~np.isnan(y)
    unit_cell = np.array([p % 3 for p in range(n_pairs)])
    succ = np.bincount(pairs[keep], weights=y[keep], minlength=n_pairs)
    n = np.bincount(pairs[keep], minlength=n_pairs).astype(float)
    order = np.lexsort((np.arange(n_pairs), unit_cell))
    used = order[n[order] > 0]
    dropped = np.bincount(groups[~keep], minlength=3)
    units = bootstrap.grouped_share_units_ci(
        np.column_stack([succ[used], n[used]]), unit_cell[used], 3, dropped=dropped,
        B=999, rng=np.random.default_rng(1),
    )  # fmt: skip
    assert units == trial

    y1, _ = pair_data(rng, n_pairs)
    outcome = np.concatenate([y1, y])
    treated = np.repeat([True, False], y.size)
    trial_d = grouped_paired_difference_ci(
        outcome, np.concatenate([pairs, pairs]), treated, np.concatenate([groups, groups]),
        B=999, rng=np.random.default_rng(2),
    )  # fmt: skip
    k1 = ~np.isnan(y1)
    s1 = np.bincount(pairs[k1], weights=y1[k1], minlength=n_pairs)
    n1 = np.bincount(pairs[k1], minlength=n_pairs).astype(float)
    sums = np.column_stack([s1, n1, succ, n])[order]
    seen = (sums[:, 1] + sums[:, 3]) > 0
    lost = np.bincount(groups[~k1], minlength=3) + dropped
    units_d = bootstrap.grouped_paired_difference_units_ci(
        sums[seen], unit_cell[order][seen], 3, dropped=lost, B=999, rng=np.random.default_rng(2)
    )
    assert units_d == trial_d


def test_unit_sums_are_checked() -> None:
    rng = np.random.default_rng(0)
    share = bootstrap.grouped_share_units_ci
    with pytest.raises(ValueError, match="sorted by cell"):
        share([[1, 2], [1, 2]], np.array([1, 0]), 2, rng=rng)
    with pytest.raises(ValueError, match="cell numbers"):
        share([[1, 2]], np.array([2]), 2, rng=rng)
    with pytest.raises(ValueError, match="2 sums per unit"):
        share([[1, 2, 3]], np.array([0]), 1, rng=rng)
    with pytest.raises(ValueError, match="at least one trial"):
        share([[0, 0]], np.array([0]), 1, rng=rng)
    with pytest.raises(ValueError, match="one count per cell"):
        share([[1, 2]], np.array([0]), 1, dropped=[1, 2], rng=rng)
    with pytest.raises(ValueError, match="4 sums per unit"):
        bootstrap.grouped_paired_difference_units_ci([[1, 2]], np.array([0]), 1, rng=rng)
    empty = share(np.zeros((0, 2)), np.zeros(0, dtype=int), 2, dropped=[3, 0], rng=rng)
    assert [c.n for c in empty.values()] == [0, 0] and empty[0].n_dropped == 3
    assert math.isnan(empty[1].estimate)

"""Exact tests and intervals against independent computations: scipy, exact rational
enumeration of the binomial pmf, closed testing for Holm, and hand-worked examples."""

from __future__ import annotations

import itertools
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as sps

from ibias.analysis.stats import (
    binomial_test,
    binomial_tests,
    holm,
    one_sample_test,
    one_sided_binomial_tests,
    sign_flip_test,
    sign_test,
    sign_tests,
    wilson_interval,
)

# ---------------------------------------------------------------------------------------------
# Wilson
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("level", [0.8, 0.95, 0.99])
def test_wilson_matches_scipy_on_a_grid_of_counts(level: float) -> None:
    for n in [1, 2, 5, 13, 50, 200, 1000]:
        for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            low, high = wilson_interval(k, n, level)
            ref = sps.binomtest(k, n).proportion_ci(confidence_level=level, method="wilson")
            assert low == pytest.approx(ref.low, abs=1e-12), (k, n)
            assert high == pytest.approx(ref.high, abs=1e-12), (k, n)
            assert 0.0 <= low <= k / n <= high <= 1.0


def test_wilson_is_vectorised_and_agrees_with_scalar_calls() -> None:
    k = np.array([0, 3, 7, 10, 40])
    n = np.array([10, 10, 10, 10, 100])
    low, high = wilson_interval(k, n)
    assert isinstance(low, np.ndarray) and low.shape == (5,)
    for i in range(5):
        assert (low[i], high[i]) == pytest.approx(wilson_interval(int(k[i]), int(n[i])))


def test_wilson_with_no_trials_is_undefined_and_bad_counts_are_rejected() -> None:
    low, high = wilson_interval(np.array([0, 1]), np.array([0, 2]))
    assert np.isnan(low[0]) and np.isnan(high[0]) and not np.isnan(low[1])
    with pytest.raises(ValueError):
        wilson_interval(5, 3)
    with pytest.raises(ValueError):
        wilson_interval(1, 3, level=1.0)


# ---------------------------------------------------------------------------------------------
# Binomial and sign tests
# ---------------------------------------------------------------------------------------------


def brute_force_two_sided(k: int, n: int, p: Fraction) -> float:
    """Two-sided exact p-value by enumerating the pmf in exact rational arithmetic: the total
    probability of all counts whose probability does not exceed that of k (scipy's relative
    tolerance of 1e-7 only matters for ties, which exact arithmetic resolves exactly)."""
    pmf = [math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(n + 1)]
    return float(sum(q for q in pmf if q <= pmf[k]))


@pytest.mark.parametrize("p", [Fraction(1, 2), Fraction(3, 10), Fraction(77, 100)])
def test_binomial_test_matches_enumeration_and_scipy(p: Fraction) -> None:
    for n in range(1, 31):
        for k in range(n + 1):
            got = binomial_test(k, n, float(p))
            assert got == pytest.approx(brute_force_two_sided(k, n, p), rel=1e-9, abs=1e-15)
            assert got == pytest.approx(sps.binomtest(k, n, float(p)).pvalue, rel=1e-9)


def test_binomial_test_large_n_matches_scipy() -> None:
    for n, k, p in [(1000, 470, 0.5), (1000, 530, 0.5), (5000, 2600, 0.5), (2000, 700, 0.33)]:
        assert binomial_test(k, n, p) == pytest.approx(sps.binomtest(k, n, p).pvalue, rel=1e-9)


def test_binomial_test_edge_cases() -> None:
    assert np.isnan(binomial_test(0, 0))
    assert binomial_test(5, 10) == 1.0
    with pytest.raises(ValueError):
        binomial_test(11, 10)
    with pytest.raises(ValueError):
        binomial_test(-1, 10)


@pytest.mark.parametrize("p", [0.5, 0.3, 0.77, 0.0, 1.0])
def test_binomial_tests_of_a_whole_table_match_scipy_cell_by_cell(p: float) -> None:
    """The vectorised test (what the allocation tables call, a table at a time) gives each
    cell scipy's binomtest p-value, over small and paper-sized counts, in any order."""
    rng = np.random.default_rng(7)
    cells = [(k, n) for n in range(0, 26) for k in range(n + 1)]
    cells += [(int(k), n) for n in (999, 1000, 2001, 5000) for k in rng.integers(0, n + 1, 25)]
    rng.shuffle(cells)
    k, n = (np.array(c) for c in zip(*cells, strict=True))
    got = binomial_tests(k, n, p)
    for i, (ki, ni) in enumerate(cells):
        if ni == 0:
            assert np.isnan(got[i])
        else:
            assert got[i] == pytest.approx(sps.binomtest(ki, ni, p).pvalue, rel=1e-9, abs=1e-300)
            assert got[i] == binomial_test(ki, ni, p)


def test_binomial_tests_refuse_what_the_scalar_test_refuses() -> None:
    assert binomial_tests(np.array([], dtype=int), np.array([], dtype=int)).shape == (0,)
    for k, n in (([11], [10]), ([-1], [10]), ([1, 2], [3]), ([0.5], [1]), ([True], [1])):
        with pytest.raises(ValueError):
            binomial_tests(np.array(k), np.array(n))
    with pytest.raises(ValueError):
        binomial_tests(np.array([1]), np.array([2]), 1.5)


@pytest.mark.parametrize("alternative", ["greater", "less"])
def test_one_sided_binomial_tests_equal_scipy_binomtest(alternative: str) -> None:
    cells = [(k, n) for n in (0, 1, 2, 7, 30, 501) for k in range(0, n + 1, max(1, n // 40))]
    k, n = (np.array(c) for c in zip(*cells, strict=True))
    got = one_sided_binomial_tests(k, n, alternative)
    for i, (ki, ni) in enumerate(cells):
        expected = sps.binomtest(ki, ni, 0.5, alternative=alternative).pvalue if ni else np.nan
        assert got[i] == expected or (np.isnan(got[i]) and np.isnan(expected))
    with pytest.raises(ValueError):
        one_sided_binomial_tests(k, n, "two-sided")


def test_sign_tests_equal_the_scalar_sign_test() -> None:
    cis, trans = np.meshgrid(np.arange(0, 30), np.arange(0, 30))
    got = sign_tests(cis.ravel(), trans.ravel())
    for c, t, g in zip(cis.ravel(), trans.ravel(), got, strict=True):
        s = sign_test(int(c), int(t))
        assert g == s or (np.isnan(g) and np.isnan(s))


def test_sign_test_hand_worked_example() -> None:
    # 8 pairs chose the cisgender candidate in both orders, 2 the transgender one. Under H0 the
    # count of trans-both pairs is Bin(10, 1/2); P(X <= 2) = (1 + 10 + 45) / 1024 = 56/1024, and
    # the two-sided p-value doubles it: 112/1024 = 0.109375.
    assert sign_test(8, 2) == pytest.approx(112 / 1024, rel=1e-12)
    assert sign_test(2, 8) == pytest.approx(112 / 1024, rel=1e-12)
    assert sign_test(5, 5) == 1.0
    assert np.isnan(sign_test(0, 0))


def test_sign_test_matches_enumeration() -> None:
    for cis in range(0, 25):
        for trans in range(0, 25 - cis):
            if cis + trans == 0:
                continue
            expected = brute_force_two_sided(trans, cis + trans, Fraction(1, 2))
            assert sign_test(cis, trans) == pytest.approx(expected, rel=1e-9)
            assert sign_test(cis, trans) == pytest.approx(
                sps.binomtest(trans, cis + trans).pvalue, rel=1e-9
            )


# ---------------------------------------------------------------------------------------------
# Holm
# ---------------------------------------------------------------------------------------------


def test_holm_hand_worked_example() -> None:
    # m = 4 raw p-values [0.01, 0.04, 0.03, 0.005]. Sorted: 0.005, 0.01, 0.03, 0.04.
    # Multipliers m - j + 1 = 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04.
    # Running maximum (monotonicity): 0.02, 0.03, 0.06, 0.06.
    # Back in input order: [0.03, 0.06, 0.06, 0.02].
    got = holm([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(got, [0.03, 0.06, 0.06, 0.02], rtol=1e-12)
    # A NaN (undefined test) stays NaN and does not count in m: same answer around it.
    got = holm([0.01, np.nan, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(got, [0.03, np.nan, 0.06, 0.06, 0.02], rtol=1e-12)
    # Capped at 1: m = 2, [0.5, 0.6] -> 2 * 0.5 = 1.0, max(1.0, 0.6) = 1.0.
    np.testing.assert_allclose(holm([0.5, 0.6]), [1.0, 1.0])
    assert holm([]).shape == (0,)
    assert np.isnan(holm([np.nan])).all()


def closed_testing_holm(p: list[float]) -> list[float]:
    """Holm = closed testing with Bonferroni local tests: H_i is rejected at level a iff every
    intersection hypothesis over a subset S containing i has |S| min_{j in S} p_j <= a, so its
    adjusted p-value is max over S containing i of min(1, |S| min_{j in S} p_j). Enumerates all
    subsets; independent of the step-down formula."""
    m = len(p)
    out = []
    for i in range(m):
        worst = 0.0
        for size in range(1, m + 1):
            for subset in itertools.combinations(range(m), size):
                if i in subset:
                    worst = max(worst, min(1.0, size * min(p[j] for j in subset)))
        out.append(worst)
    return out


def test_holm_matches_closed_testing_enumeration() -> None:
    rng = np.random.default_rng(20240601)
    for _ in range(200):
        m = int(rng.integers(1, 8))
        p = rng.uniform(0, 0.3, size=m)
        if m > 2:
            p[1] = p[0]  # ties
        got = holm(p)
        np.testing.assert_allclose(got, closed_testing_holm(p.tolist()), rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# One-sample tests
# ---------------------------------------------------------------------------------------------


def test_one_sample_t_test_matches_scipy_with_nans_dropped() -> None:
    rng = np.random.default_rng(7)
    for n, shift in [(5, 0.0), (50, 0.1), (50, -0.3), (200, 0.02)]:
        x = np.clip(rng.normal(shift, 0.4, size=n), -1, 1)
        x[rng.random(n) < 0.1] = np.nan
        expected = sps.ttest_1samp(x[~np.isnan(x)], 0.0).pvalue
        assert one_sample_test(x) == pytest.approx(expected, rel=1e-10)
        expected = sps.ttest_1samp(x[~np.isnan(x)], 0.25).pvalue
        assert one_sample_test(x, popmean=0.25) == pytest.approx(expected, rel=1e-10)


def test_one_sample_t_test_degenerate_cases() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(one_sample_test([0.3]))
        assert np.isnan(one_sample_test([np.nan, np.nan]))
        assert one_sample_test([0.0, 0.0, 0.0]) == 1.0
        assert one_sample_test([0.4, 0.4, 0.4]) == 0.0


def brute_force_sign_flip(x: list[int]) -> float:
    """Exact sign-flip p-value for integer data by enumerating every sign pattern in Python."""
    observed = abs(sum(x))
    patterns = list(itertools.product([1, -1], repeat=len(x)))
    extreme = sum(
        1 for s in patterns if abs(sum(si * xi for si, xi in zip(s, x, strict=True))) >= observed
    )
    return extreme / len(patterns)


def test_sign_flip_exact_matches_enumeration() -> None:
    rng = np.random.default_rng(3)
    for n in [1, 4, 9, 12]:
        x = rng.integers(-5, 8, size=n).tolist()
        nonzero = [v for v in x if v != 0]
        expected = brute_force_sign_flip(nonzero) if nonzero else 1.0
        # Scaling to scores in [-1, 1] (non-integer floats) must not change the answer: ties
        # between patterns survive rounding.
        got = sign_flip_test(np.array(x) / 7.0, rng=rng)
        assert got == pytest.approx(expected, rel=1e-12)


def test_sign_flip_monte_carlo_agrees_with_exact_value() -> None:
    # 18 nonzero scores are now within the exact range (<= 20), so this checks the blocked
    # enumeration against brute force; the Monte Carlo path is checked with 30 scores in
    # test_explained_tables.test_monte_carlo_sign_flip_agrees_with_the_convolution.
    rng = np.random.default_rng(11)
    x = rng.integers(-3, 5, size=20)
    x = x[x != 0][:18]
    exact = brute_force_sign_flip_numpy(x)
    R = 20000
    got = sign_flip_test(x / 5.0, n_resamples=R, rng=rng)
    # p_hat = (1 + X) / (1 + R), X ~ Bin(R, p): sd = sqrt(p(1-p)/R) <= 0.0036 for R = 20000;
    # tolerance 5 sd plus the 1/(R+1) offset: fails with probability ~6e-7.
    tol = 5 * math.sqrt(exact * (1 - exact) / R) + 1 / (R + 1)
    assert abs(got - exact) <= tol


def brute_force_sign_flip_numpy(x: np.ndarray) -> float:
    patterns = np.array(list(itertools.product([1, -1], repeat=x.size)), dtype=np.int64)
    return float(np.mean(np.abs(patterns @ x.astype(np.int64)) >= abs(int(x.sum()))))

"""Exact tests and closed-form intervals for the analysis: Wilson, binomial, sign, Holm, t.

Pure functions of counts or arrays, no state. Undefined tests (no trials, fewer than two scores)
return NaN rather than 1.0, so that `holm` can leave them out of the multiplicity count instead
of silently spending part of the error budget on them.

Which test for which question:
- `binomial_test` on all decided allocation trials is the "naive" test the paper's authors ran:
  it treats the two orders of a pair as independent trials, which they are not (see
  `analysis.bootstrap` on pairs), so its p-values are too small when a model prefers a person
  consistently in both orders.
- `sign_test` uses only the pairs whose two orders agree (both chose the cisgender candidate, or
  both the transgender one). A pair whose two orders disagree was decided by position, not by
  identity; agreeing pairs are independent units, and under no identity preference either
  agreement is equally likely, so the count is Binomial(agreeing pairs, 1/2).
- `one_sample_test` (t-test) and `sign_flip_test` test whether the mean word-association bias
  differs from 0.
"""

from __future__ import annotations

from typing import overload

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ndtri, stdtr
from scipy.stats import binom

FloatArray = NDArray[np.float64]

# Relative tolerance for "as likely as the observed count" in the two-sided binomial test: the
# same 1 + 1e-7 factor as scipy.stats.binomtest, so that ties in the pmf are not split by
# rounding.
_PMF_RTOL = 1.0 + 1e-7


# --------------------------------------------------------------------------------------------
# Wilson score interval
# --------------------------------------------------------------------------------------------


@overload
def wilson_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]: ...
@overload
def wilson_interval(
    successes: ArrayLike, n: ArrayLike, level: float = 0.95
) -> tuple[FloatArray, FloatArray]: ...
def wilson_interval(
    successes: ArrayLike, n: ArrayLike, level: float = 0.95
) -> tuple[float, float] | tuple[FloatArray, FloatArray]:
    """Wilson score interval for a binomial proportion (no continuity correction).

    Chosen over the Wald interval because shares near 0 or 1 are common here (a model that
    always picks the cisgender candidate for gynecology) and Wald collapses to a point there.
    Broadcasts over arrays; returns floats for scalar input. n = 0 gives (NaN, NaN).
    """
    _check_level(level)
    k = np.asarray(successes, dtype=np.float64)
    m = np.asarray(n, dtype=np.float64)
    if np.any(k < 0) or np.any(k > m) or np.any(k != np.floor(k)) or np.any(m != np.floor(m)):
        raise ValueError("wilson_interval: need integer counts with 0 <= successes <= n")
    z = float(ndtri(0.5 + 0.5 * level))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = k / m
        denom = 1.0 + z * z / m
        center = (p + z * z / (2.0 * m)) / denom
        half = z * np.sqrt(p * (1.0 - p) / m + z * z / (4.0 * m * m)) / denom
        low = np.where(k == 0, 0.0, np.clip(center - half, 0.0, 1.0))
        high = np.where(k == m, 1.0, np.clip(center + half, 0.0, 1.0))
    low = np.where(m == 0, np.nan, low)
    high = np.where(m == 0, np.nan, high)
    if low.ndim == 0:
        return float(low), float(high)
    return low, high


# --------------------------------------------------------------------------------------------
# Exact binomial and sign tests
# --------------------------------------------------------------------------------------------


def binomial_test(successes: int, n: int, p: float = 0.5) -> float:
    """Exact two-sided binomial test p-value ("minimum likelihood" rule, as scipy.binomtest).

    The p-value sums the probabilities of all counts no more likely than the observed one.
    n = 0 gives NaN (no evidence either way; `holm` ignores it).
    """
    k, n = _count(successes, "successes"), _count(n, "n")
    return float(binomial_tests(np.array([k]), np.array([n]), p)[0])


def binomial_tests(successes: ArrayLike, n: ArrayLike, p: float = 0.5) -> FloatArray:
    """`binomial_test` for many counts at once, elementwise: the same p-values to the last
    bit (the same scipy calls on arrays instead of scalars), in a few calls for a whole table
    rather than four per cell, whose per-call overhead was most of a table's test time.

    The pmf is unimodal: on the far side of the mode from k, the counts no more likely than k
    form a tail. Each count's far side is scanned in one concatenated array."""
    k, m = _trials(successes, n, "binomial_tests")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"binomial_test: p must be in [0, 1], got {p}")
    out = np.full(k.shape, np.nan)
    out[(m > 0) & (k == p * m)] = 1.0
    todo = np.flatnonzero((m > 0) & (k != p * m))
    if todo.size == 0:
        return out
    k, m = k[todo], m[todo]
    low = k < p * m
    threshold = binom.pmf(k, m, p) * _PMF_RTOL
    # Far side: ceil(p m) .. m when k is below the mean, 0 .. floor(p m) when above.
    start = np.where(low, np.ceil(p * m), 0).astype(np.int64)
    stop = np.where(low, m, np.floor(p * m)).astype(np.int64) + 1
    sizes = stop - start
    owner = np.repeat(np.arange(todo.size), sizes)
    far = np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes) + start[owner]
    inside = binom.pmf(far, m[owner], p) <= threshold[owner]
    # The tail's edge: the first far count inside (below the mean) or the last (above); a
    # count's far side is in ascending order, so those are its first and last hit.
    edge = np.full(todo.size, -1, dtype=np.int64)
    hits = np.flatnonzero(inside)
    owners, first = np.unique(owner[hits], return_index=True)
    last = hits.size - 1 - np.unique(owner[hits][::-1], return_index=True)[1]
    edge[owners] = np.where(low[owners], far[hits[first]], far[hits[last]])
    found = edge >= 0
    tail = np.zeros(todo.size)
    below, above = found & low, found & ~low
    tail[below] = binom.sf(edge[below] - 1, m[below], p)
    tail[above] = binom.cdf(edge[above], m[above], p)
    pvalue = np.where(low, binom.cdf(k, m, p), binom.sf(k - 1, m, p)) + tail
    out[todo] = np.minimum(1.0, pvalue)
    return out


def one_sided_binomial_tests(
    successes: ArrayLike, n: ArrayLike, alternative: str, p: float = 0.5
) -> FloatArray:
    """Exact one-sided binomial test p-values, elementwise, as
    `scipy.stats.binomtest(k, n, p, alternative=...)` gives them ("greater": P(X >= k),
    "less": P(X <= k)) in two scipy calls for a whole table; n = 0 gives NaN."""
    k, m = _trials(successes, n, "one_sided_binomial_tests")
    if alternative not in ("greater", "less"):
        raise ValueError(f"one_sided_binomial_tests: alternative {alternative!r}")
    tail = binom.sf(k - 1, m, p) if alternative == "greater" else binom.cdf(k, m, p)
    return np.where(m > 0, np.minimum(1.0, tail), np.nan)


def sign_test(n_cis_both: int, n_trans_both: int) -> float:
    """Exact two-sided sign test over the pairs whose two orders agree.

    `n_cis_both`: pairs where the cisgender candidate was chosen in both orders;
    `n_trans_both`: pairs where the transgender candidate was. Under no identity preference
    each agreeing pair is equally likely to be either, so n_trans_both ~ Binomial(n_cis_both +
    n_trans_both, 1/2). No agreeing pairs gives NaN.
    """
    cis, trans = _count(n_cis_both, "n_cis_both"), _count(n_trans_both, "n_trans_both")
    return binomial_test(trans, cis + trans, 0.5)


def sign_tests(n_cis_both: ArrayLike, n_trans_both: ArrayLike) -> FloatArray:
    """`sign_test` for many cells at once, elementwise (`binomial_tests`)."""
    cis, trans = _counts(n_cis_both, "n_cis_both"), _counts(n_trans_both, "n_trans_both")
    return binomial_tests(trans, cis + trans, 0.5)


# --------------------------------------------------------------------------------------------
# Multiplicity
# --------------------------------------------------------------------------------------------


def holm(pvalues: ArrayLike) -> FloatArray:
    """Holm's step-down adjusted p-values (controls the family-wise error rate).

    With the m non-NaN p-values sorted, p_(1) <= ... <= p_(m), the adjusted value of p_(i) is
    max over j <= i of min(1, (m - j + 1) p_(j)): monotone in the raw p-values and capped at 1.
    NaNs (undefined tests) stay NaN and do not count in m. Same shape as the input.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    flat = p.ravel()
    defined = ~np.isnan(flat)
    if np.any((flat[defined] < 0) | (flat[defined] > 1)):
        raise ValueError("holm: p-values must lie in [0, 1] (or be NaN)")
    values = flat[defined]
    m = values.size
    order = np.argsort(values, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * values[order])
    adjusted_sorted = np.maximum.accumulate(scaled)
    adjusted = np.empty(m)
    adjusted[order] = adjusted_sorted
    out = np.full(flat.shape, np.nan)
    out[defined] = adjusted
    return out.reshape(p.shape)


# --------------------------------------------------------------------------------------------
# Mean bias against zero
# --------------------------------------------------------------------------------------------


def one_sample_test(values: ArrayLike, popmean: float = 0.0) -> float:
    """Two-sided one-sample t-test p-value for mean bias = `popmean` (NaNs dropped).

    Word-association scores are bounded in [-1, 1], so with ~50 trials per cell the mean is
    close to normal and the t-test is accurate. If every score equals the same value the
    variance is 0: the p-value is 1 when that value is `popmean`, else 0 (the limit of the
    t-test). Fewer than two scores gives NaN. See `sign_flip_test` for a test that does not rely
    on the normal approximation.
    """
    x = _scores(values)
    n = x.size
    if n < 2:
        return float("nan")
    dev = x - popmean
    mean = float(dev.mean())
    sd = float(dev.std(ddof=1))
    if sd == 0.0 or sd <= 1e-14 * max(1.0, abs(mean)):
        return 1.0 if abs(mean) <= 1e-14 else 0.0
    t = mean / (sd / np.sqrt(n))
    return float(min(1.0, 2.0 * stdtr(n - 1, -abs(t))))


# Up to this many nonzero deviations the sign-flip test enumerates all 2^n sign patterns (in
# blocks of `_EXACT_BLOCK` patterns, so 2^20 patterns never need more than a few MB at once).
EXACT_SIGN_FLIP_MAX = 20
_EXACT_BLOCK = 1 << 14
SIGN_FLIP_RESAMPLES = 9999


def sign_flip_is_exact(values: ArrayLike, popmean: float = 0.0) -> bool:
    """Whether `sign_flip_test` enumerates every sign pattern for these scores (at most
    `EXACT_SIGN_FLIP_MAX` nonzero deviations) rather than drawing Monte Carlo patterns."""
    x = _scores(values)
    return int(np.count_nonzero(x - popmean)) <= EXACT_SIGN_FLIP_MAX


def sign_flip_floor(n_resamples: int = SIGN_FLIP_RESAMPLES) -> float:
    """The smallest p-value the Monte Carlo sign-flip test can return, 1 / (1 + n_resamples):
    a p-value equal to it means "no random pattern was as extreme", i.e. p <= this, not p = this."""
    return 1.0 / (1.0 + n_resamples)


def sign_flip_test(
    values: ArrayLike,
    popmean: float = 0.0,
    *,
    n_resamples: int = SIGN_FLIP_RESAMPLES,
    rng: np.random.Generator,
) -> float:
    """Two-sided sign-flip (randomisation) test p-value for mean bias = `popmean` (NaNs dropped).

    Under the null that scores are symmetric about `popmean`, each deviation's sign is a fair
    coin, so the observed |mean deviation| is compared with its distribution over random sign
    flips. This needs symmetry, not normality: a safer choice than the t-test for small or
    lumpy samples (scores take few distinct values). Exact enumeration of all 2^n patterns when
    at most `EXACT_SIGN_FLIP_MAX` (20) deviations are nonzero; otherwise Monte Carlo with
    `n_resamples` patterns and p = (1 + #{at least as extreme}) / (1 + n_resamples), which is a
    valid p-value whose floor is `sign_flip_floor(n_resamples)`. Empty input gives NaN; all
    deviations zero gives 1.
    """
    x = _scores(values)
    if x.size == 0:
        return float("nan")
    dev = x - popmean
    dev = dev[dev != 0.0]
    if dev.size == 0:
        return 1.0
    observed = abs(float(dev.sum()))
    tol = 1e-9 * max(1.0, float(np.abs(dev).sum()))
    if dev.size <= EXACT_SIGN_FLIP_MAX:
        return _exact_sign_flip(dev, observed - tol)
    if n_resamples < 1:
        raise ValueError("sign_flip_test: n_resamples must be positive")
    extreme = 0
    step = max(1, (1 << 22) // dev.size)
    for lo in range(0, n_resamples, step):
        size = min(step, n_resamples - lo)
        signs = rng.integers(0, 2, size=(size, dev.size), dtype=np.int8) * 2 - 1
        extreme += int(np.count_nonzero(np.abs(signs @ dev) >= observed - tol))
    return (1.0 + extreme) / (1.0 + n_resamples)


def _exact_sign_flip(dev: FloatArray, threshold: float) -> float:
    """Share of all 2^n sign patterns whose |sum| reaches `threshold`, in blocks of patterns.

    Pattern i gives deviation j the sign - when bit j of i is set. The block's patterns share
    their high bits, so each block is (the low bits' signed sums) + (one constant)."""
    n = dev.size
    low_bits = min(n, _EXACT_BLOCK.bit_length() - 1)
    low = np.arange(1 << low_bits)[:, None] >> np.arange(low_bits) & 1
    low_sums = (1 - 2 * low).astype(np.float64) @ dev[:low_bits]
    high = dev[low_bits:]
    extreme = 0
    for i in range(1 << high.size):
        bits = (i >> np.arange(high.size)) & 1
        offset = float((1 - 2 * bits) @ high) if high.size else 0.0
        extreme += int(np.count_nonzero(np.abs(low_sums + offset) >= threshold))
    return extreme / float(1 << n)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ValueError(f"{name}: expected a non-negative integer count, got {value!r}")
    return int(value)


def _counts(values: ArrayLike, name: str) -> NDArray[np.int64]:
    x = np.asarray(values)
    if x.dtype == bool or not np.issubdtype(x.dtype, np.integer) or np.any(x < 0):
        raise ValueError(f"{name}: expected non-negative integer counts")
    return x.astype(np.int64).reshape(-1)


def _trials(
    successes: ArrayLike, n: ArrayLike, name: str
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Counts of successes and of trials, elementwise, 0 <= successes <= n."""
    k, m = _counts(successes, "successes"), _counts(n, "n")
    if k.shape != m.shape:
        raise ValueError(f"{name}: {k.shape} successes for {m.shape} trials")
    if np.any(k > m):
        raise ValueError(f"{name}: successes > n")
    return k, m


def _scores(values: ArrayLike) -> FloatArray:
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"expected a 1-D array of scores, got shape {x.shape}")
    if np.isinf(x).any():
        raise ValueError("scores must be finite numbers or NaN (undefined)")
    return x[~np.isnan(x)]


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: expected a confidence level in (0, 1), got {level!r}")

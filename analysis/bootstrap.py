"""Seeded, vectorised bootstrap confidence intervals for many analysis cells at once.

The analysis needs an interval for every model x language x category cell (word association)
and every model x language x service x condition cell (allocation): hundreds of cells, B = 2000
resamples each. Every estimator here is a *ratio of sums over resampling units*: the mean of
trial scores is sum(score) / sum(1); the share of trials choosing the transgender candidate is
sum(chosen trans) / sum(trials) over pairs; a paired difference is a difference of two such
ratios over the same resampled pairs. So one engine serves them all: resample each cell's
units, sum the unit columns, and apply the ratio. A replicate draws as many units as the cell
has, with replacement, in one of two ways with the same law: as resample indices (for all
cells of the same size at once, one `rng.integers` block), or, for a cell whose units take few
distinct values (allocation's pairs: 0, 1 or 2 trials choosing someone), as how many times
each distinct value is drawn (one multinomial draw per replicate). Python loops only over
distinct cell sizes, counted cells and memory-bounded chunks, never over resamples.

Resampling units. For word association the unit is the trial: each trial draws its own words,
template and label order, so trials are independent given the model. That holds for the
pooled score too (`grouped_pooled_bias_ci`: all words of a cell pooled), whose statistic is a
sum of two ratios of summed word counts: a trial's words are resampled together.

For allocation the unit is the *pair*: each pair of candidates appears twice, once in each
order, and the two orders share the same two people and the same symptoms, so their outcomes
are correlated (a model that favours one of the two people does so in both orders; a model that
favours whoever is listed first gives opposite answers in the two orders). Resampling trials
would treat the two orders as independent and give intervals of the wrong width; resampling
pairs keeps both of a pair's trials together and is valid whatever the dependence within a
pair. The same holds for paired comparisons between conditions (explanation yes/no, symptoms vs
none): the same pairs are shown under every condition, so a pair carries all of its trials
under both conditions. Pair intervals are about *these people* (the roster's): a person recurs
in several pairs, so pairs are not independent draws of people; intervals for people in general
resample the persons themselves (`analysis.population`, a pigeonhole bootstrap).

Intervals. `percentile` takes the alpha/2 and 1 - alpha/2 quantiles of the bootstrap
distribution (linear interpolation, as numpy and scipy do). `bca` is the bias-corrected and
accelerated interval of Efron & Tibshirani (1993, ch. 14) exactly as `scipy.stats.bootstrap`
computes it: bias correction z0 = Phi^-1(share of replicates below the estimate, ties counted
half), acceleration a = sum(d^3) / (6 (sum(d^2))^1.5) from the leave-one-unit-out jackknife
deviations d, and adjusted levels Phi(z0 + (z0 + z_alpha) / (1 - a (z0 + z_alpha))). Two
deliberate differences from scipy, both only where scipy returns NaN with a warning: when every
replicate lies on one side of the estimate the share is clipped to [1/(2B), 1 - 1/(2B)], and
when the jackknife deviations are all zero the acceleration is 0.

Reproducibility: the result is a deterministic function of the inputs, B, level, method and the
state of `rng`. Cells drawn in the same call share the generator's stream (index-drawn cells in
order of size, then of key; then the counted cells in order of key), so a cell's interval also
depends on which other cells were passed; re-running the same call with the same seed
reproduces every interval exactly. Which way a cell is drawn depends on its data only (its
units per distinct value, `replicates.COUNTS_MIN_UNITS_PER_VALUE`), never on the machine.

Undefined observations (NaN: a word-association trial where a group got no words, an allocation
trial excluded by the caller) are dropped before resampling and counted in `CI.n_dropped`; a
cell with no usable unit gets a CI of NaNs with n = 0. A cell whose units are all identical gets
low = high = estimate.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ibias.analysis.replicates import (
    FloatArray,
    IntArray,
    Statistic,
    bca_levels,
    draw,
    quantile_rows,
)

Method = Literal["percentile", "bca"]

_METHODS: tuple[str, ...] = ("percentile", "bca")


@dataclass(frozen=True)
class CI:
    """A bootstrap confidence interval for one cell.

    `n` is the number of resampling units used (trials for word association, pairs for
    allocation); `n_dropped` the number of observations (trials) dropped as undefined before
    resampling, reported so that missing data is visible next to the interval.
    """

    estimate: float
    low: float
    high: float
    n: int
    B: int
    method: Method
    level: float = 0.95
    n_dropped: int = 0


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def bootstrap_mean_ci(
    values: ArrayLike,
    *,
    B: int = 2000,
    level: float = 0.95,
    method: Method = "percentile",
    rng: np.random.Generator,
) -> CI:
    """CI for the mean of one sample, resampling observations (e.g. word-association trials).

    NaN values are undefined observations: they are dropped and counted in `n_dropped`.
    """
    x = _as_float_vector(values, "values")
    result = grouped_bootstrap_mean_ci(
        x, np.zeros(x.shape[0], dtype=np.intp), B=B, level=level, method=method, rng=rng
    )
    return result[0] if result else _empty_ci(B, method, level, 0)


def grouped_bootstrap_mean_ci(
    values: ArrayLike,
    groups: ArrayLike | Sequence[Hashable],
    *,
    B: int = 2000,
    level: float = 0.95,
    method: Method = "percentile",
    rng: np.random.Generator,
) -> dict[Any, CI]:
    """Per-group CIs for the mean, all groups resampled together (one cell = one group).

    `groups` labels each value with its cell: a 1-D array of labels, or a 2-D array whose rows
    are composite keys (e.g. model, language, category), which become tuples in the result, as
    do sequences of tuples (which keep mixed types, e.g. ("gpt-4o", 2)). Keys come out sorted
    (in first-appearance order if they cannot be compared). A group whose values are all NaN is
    present with a CI of NaNs.
    """
    _check_options(B, level, method)
    x = _as_float_vector(values, "values")
    codes, keys = factorize(groups, x.shape[0], "groups")
    defined = ~np.isnan(x)
    if np.isinf(x).any():
        raise ValueError("values: must be finite numbers or NaN (undefined)")
    dropped = np.bincount(codes[~defined], minlength=len(keys))
    x, codes = x[defined], codes[defined]
    order = np.argsort(codes, kind="stable")
    cols = np.column_stack([x[order], np.ones(x.shape[0])])
    return _run(cols, codes[order], keys, dropped, _ratio, B, level, method, rng)


def cluster_bootstrap_share_ci(
    outcome: ArrayLike,
    clusters: ArrayLike | Sequence[Hashable],
    *,
    B: int = 2000,
    level: float = 0.95,
    method: Method = "percentile",
    rng: np.random.Generator,
) -> CI:
    """CI for a share of trials, resampling clusters (allocation: pairs) with all their trials.

    Definition. `outcome` has one entry per trial: 1 (or True) when the event happened (e.g.
    the transgender candidate was chosen), 0 when it did not (the cisgender candidate was
    chosen, *or* no one was: 'none' stays in the denominator), NaN to leave the trial out
    entirely (e.g. to compute a share among decided trials only). `clusters` gives each trial's
    cluster (pair_id). The estimate is

        share = sum of outcome over all non-NaN trials / number of non-NaN trials,

    the ratio estimator over clusters. Each bootstrap replicate draws as many clusters as there
    are, with replacement, and recomputes the same ratio over all trials of the drawn clusters,
    so a pair's two orders always travel together and an incomplete pair (one order missing)
    weighs in with its one trial. Outcomes need not be 0/1: any finite numbers give the mean
    per trial with cluster resampling. `n` counts clusters.
    """
    y = _as_float_vector(outcome, "outcome")
    result = grouped_cluster_bootstrap_share_ci(
        y, clusters, np.zeros(y.shape[0], dtype=np.intp),
        B=B, level=level, method=method, rng=rng,
    )  # fmt: skip
    return result[0] if result else _empty_ci(B, method, level, 0)


def grouped_cluster_bootstrap_share_ci(
    outcome: ArrayLike,
    clusters: ArrayLike | Sequence[Hashable],
    groups: ArrayLike | Sequence[Hashable],
    *,
    B: int = 2000,
    level: float = 0.95,
    method: Method = "percentile",
    rng: np.random.Generator,
) -> dict[Any, CI]:
    """`cluster_bootstrap_share_ci` for every group (cell) at once.

    Clusters are nested in groups: the same pair_id in two groups is two clusters. `groups`
    takes the same forms as in `grouped_bootstrap_mean_ci`.
    """
    _check_options(B, level, method)
    y = _as_float_vector(outcome, "outcome")
    cell, unit, keys, dropped, defined = _units(y, clusters, groups)
    n_units = int(unit.max()) + 1 if unit.size else 0
    num = np.bincount(unit, weights=y[defined], minlength=n_units)
    den = np.bincount(unit, minlength=n_units).astype(np.float64)
    cols = np.column_stack([num, den])
    return _run(cols, cell, keys, dropped, _ratio, B, level, method, rng)


def grouped_share_units_ci(
    sums: ArrayLike,
    cells: ArrayLike,
    n_cells: int,
    *,
    dropped: ArrayLike | None = None,
    B: int = 2000,
    level: float = 0.95,
    method: Method = "percentile",
    rng: np.random.Generator,
) -> dict[int, CI]:
    """`grouped_cluster_bootstrap_share_ci` from each cluster's sums rather than its trials.

    `sums` has one row per (cell, cluster) unit with at least one usable trial: the sum of its
    usable trials' outcomes and their number. `cells` numbers each unit's cell (0 .. n_cells -
    1), ascending; within a cell, units in the order of their clusters' labels (the order
    `grouped_cluster_bootstrap_share_ci` numbers them in, so the same units give the same
    intervals). `dropped` counts per cell the trials left out (NaN outcomes). A table with
    millions of trials passes a row per pair this way, summed where the trials are. Results
    are keyed by cell number; a cell without units has a CI of NaNs.
    """
    _check_options(B, level, method)
    cols, cell, lost = _unit_input(sums, 2, cells, n_cells, dropped)
    if (cols[:, 1] <= 0).any():
        raise ValueError("sums: every unit needs at least one trial")
    return _run(cols, cell, list(range(n_cells)), lost, _ratio, B, level, method, rng)


def _unit_input(
    sums: ArrayLike, width: int, cells: ArrayLike, n_cells: int, dropped: ArrayLike | None
) -> tuple[FloatArray, IntArray, NDArray[np.int64]]:
    """Checked unit sums, their cell numbers and the dropped counts per cell."""
    cols = np.asarray(sums, dtype=np.float64)
    cell = np.asarray(cells)
    if cols.ndim != 2 or cols.shape[1] != width or cell.shape != (cols.shape[0],):
        raise ValueError(f"sums: expected {width} sums per unit and one cell number per unit")
    if cell.size and (cell.dtype.kind not in "iu" or cell.min() < 0 or cell.max() >= n_cells):
        raise ValueError(f"cells: expected cell numbers 0 .. {n_cells - 1}")
    if cell.size > 1 and (np.diff(cell) < 0).any():
        raise ValueError("cells: units must be sorted by cell")
    if not np.isfinite(cols).all() or (cols[:, 1::2] < 0).any():
        raise ValueError("sums: expected finite sums and non-negative trial numbers")
    lost = np.zeros(n_cells, np.int64) if dropped is None else np.asarray(dropped, np.int64)
    if lost.shape != (n_cells,):
        raise ValueError("dropped: expected one count per cell")
    return cols, cell.astype(np.intp), lost


def grouped_pooled_bias_ci(
    counts: ArrayLike,
    groups: ArrayLike | Sequence[Hashable],
    *,
    B: int = 2000,
    level: float = 0.95,
    method: Method = "percentile",
    rng: np.random.Generator,
) -> dict[Any, CI]:
    """Per-group CIs for the word-association score of all words of a cell pooled.

    `counts` has one row per trial: positive and negative words the trial gave the target
    group, then positive and negative words it gave the reference group (P_t, N_t, P_r, N_r).
    The estimate applies the score to the cell's sums,

        sum N_t / (sum P_t + sum N_t) + sum P_r / (sum N_r + sum P_r) - 1,

    so every assigned word weighs the same, whichever trial it came from (the per-trial mean
    weighs every scored trial the same instead). The resampling unit is still the *trial*:
    the ten words of one trial are assigned in one reply, under one template and label order,
    so they are not independent draws; each replicate draws as many trials as the cell has,
    with replacement, and pools their words. Trials that assigned no word carry nothing and are
    left out (counted in `n_dropped`). The score has no smoothing; a cell whose pooled words
    leave a group empty has no estimate, and a cell where some replicate leaves a group empty
    gets no interval (NaN) rather than one computed from the replicates that happen to work.
    """
    _check_options(B, level, method)
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim != 2 or c.shape[1] != 4:
        raise ValueError("counts: expected one row (P_t, N_t, P_r, N_r) per trial")
    if not np.isfinite(c).all() or (c < 0).any():
        raise ValueError("counts: expected non-negative word counts")
    codes, keys = factorize(groups, c.shape[0], "groups")
    usable = c.sum(axis=1) > 0
    dropped = np.bincount(codes[~usable], minlength=len(keys)).astype(np.int64)
    c, codes = c[usable], codes[usable]
    order = np.argsort(codes, kind="stable")
    return _run(c[order], codes[order], keys, dropped, _pooled_bias, B, level, method, rng)


def paired_difference_ci(
    outcome: ArrayLike,
    clusters: ArrayLike | Sequence[Hashable],
    treated: ArrayLike,
    *,
    B: int = 2000,
    level: float = 0.95,
    method: Method = "percentile",
    rng: np.random.Generator,
) -> CI:
    """CI for the effect of a condition on a share, paired by cluster (pair).

    `treated` marks each trial's condition (True: e.g. explanation yes, or symptoms 'high';
    False: explanation no, or symptoms 'none'). The estimate is

        share(treated trials) - share(untreated trials),

    each share defined as in `cluster_bootstrap_share_ci` ('none' counts in the denominator,
    NaN outcomes are left out), over the clusters that have at least one usable trial under
    *both* conditions; trials of clusters seen under one condition only are dropped and counted
    in `n_dropped`. Each replicate resamples clusters with all their trials under both
    conditions, so the comparison stays paired: the same pairs (same candidates, same symptoms)
    enter both shares, and pair-to-pair variation largely cancels.
    """
    y = _as_float_vector(outcome, "outcome")
    result = grouped_paired_difference_ci(
        y, clusters, treated, np.zeros(y.shape[0], dtype=np.intp),
        B=B, level=level, method=method, rng=rng,
    )  # fmt: skip
    return result[0] if result else _empty_ci(B, method, level, 0)


def grouped_paired_difference_ci(
    outcome: ArrayLike,
    clusters: ArrayLike | Sequence[Hashable],
    treated: ArrayLike,
    groups: ArrayLike | Sequence[Hashable],
    *,
    B: int = 2000,
    level: float = 0.95,
    method: Method = "percentile",
    rng: np.random.Generator,
) -> dict[Any, CI]:
    """`paired_difference_ci` for every group (cell) at once; clusters are nested in groups."""
    _check_options(B, level, method)
    y = _as_float_vector(outcome, "outcome")
    t = np.asarray(treated)
    if t.shape != y.shape or t.dtype.kind not in "bui" or not np.isin(t, (0, 1)).all():
        raise ValueError("treated: must be a boolean array with one entry per trial")
    t = t.astype(bool)
    cell, unit, keys, dropped, defined = _units(y, clusters, groups)
    n_units = int(unit.max()) + 1 if unit.size else 0
    y_def, t_def = y[defined], t[defined]
    cols = np.column_stack(
        [
            np.bincount(unit, weights=np.where(t_def, y_def, 0.0), minlength=n_units),
            np.bincount(unit, weights=t_def.astype(np.float64), minlength=n_units),
            np.bincount(unit, weights=np.where(t_def, 0.0, y_def), minlength=n_units),
            np.bincount(unit, weights=(~t_def).astype(np.float64), minlength=n_units),
        ]
    ).astype(np.float64)
    return _paired(cols, cell, keys, dropped, B, level, method, rng)


def grouped_paired_difference_units_ci(
    sums: ArrayLike,
    cells: ArrayLike,
    n_cells: int,
    *,
    dropped: ArrayLike | None = None,
    B: int = 2000,
    level: float = 0.95,
    method: Method = "percentile",
    rng: np.random.Generator,
) -> dict[int, CI]:
    """`grouped_paired_difference_ci` from each unit's sums rather than its trials.

    `sums` has one row per (cell, cluster) unit: the treated trials' outcome sum, their
    number, the untreated trials' outcome sum, their number. `cells` numbers each unit's cell
    (0 .. n_cells - 1), ascending; within a cell, units in the order of their clusters' labels
    (the order `grouped_paired_difference_ci` numbers them in, so the same units give the same
    intervals). `dropped` counts per cell the trials left out before (undefined outcomes). A
    table with millions of trials passes a row per pair this way, summed where the trials are
    (analysis/units/allocation/shares.py), instead of a row per trial. Results are keyed by
    cell number.
    """
    _check_options(B, level, method)
    cols, cell, lost = _unit_input(sums, 4, cells, n_cells, dropped)
    return _paired(cols, cell, list(range(n_cells)), lost, B, level, method, rng)


def _paired(
    cols: FloatArray,
    cell: IntArray,
    keys: list[Any],
    dropped: NDArray[np.int64],
    B: int,
    level: float,
    method: Method,
    rng: np.random.Generator,
) -> dict[Any, CI]:
    """The paired difference over the units seen under both conditions; the trials of the
    others are dropped and counted."""
    complete = (cols[:, 1] > 0) & (cols[:, 3] > 0)
    unpaired_trials = cols[~complete, 1] + cols[~complete, 3]
    dropped = dropped + np.bincount(
        cell[~complete], weights=unpaired_trials, minlength=len(keys)
    ).astype(np.int64)
    return _run(cols[complete], cell[complete], keys, dropped, _difference, B, level, method, rng)


# --------------------------------------------------------------------------------------------
# Statistics as functions of summed unit columns (the last axis)
# --------------------------------------------------------------------------------------------


def _ratio(sums: FloatArray) -> FloatArray:
    return sums[..., 0] / sums[..., 1]


def _difference(sums: FloatArray) -> FloatArray:
    return sums[..., 0] / sums[..., 1] - sums[..., 2] / sums[..., 3]


def _pooled_bias(sums: FloatArray) -> FloatArray:
    pos_t, neg_t, pos_r, neg_r = (sums[..., i] for i in range(4))
    return neg_t / (pos_t + neg_t) + pos_r / (neg_r + pos_r) - 1.0


# --------------------------------------------------------------------------------------------
# Engine
# --------------------------------------------------------------------------------------------


def _run(
    cols: FloatArray,
    cell: IntArray,
    keys: list[Any],
    dropped: NDArray[np.int64],
    statistic: Statistic,
    B: int,
    level: float,
    method: Method,
    rng: np.random.Generator,
) -> dict[Any, CI]:
    """Intervals for every cell from unit rows `cols` sorted by `cell`."""
    n_cells = len(keys)
    sizes = np.bincount(cell, minlength=n_cells)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.intp)
    estimate = np.full(n_cells, np.nan)
    low = np.full(n_cells, np.nan)
    high = np.full(n_cells, np.nan)
    present = sizes > 0
    if present.any():
        with np.errstate(divide="ignore", invalid="ignore"):
            totals = np.add.reduceat(cols, starts[present], axis=0)
            estimate[present] = statistic(totals)
            replicates = draw(cols, sizes, starts, statistic, B, rng)
            alpha = (1.0 - level) / 2.0
            if method == "bca":
                q_low, q_high = bca_levels(
                    cols, cell, sizes, totals, estimate, replicates, statistic, alpha, present
                )
            else:
                q_low = np.full(n_cells, alpha)
                q_high = np.full(n_cells, 1.0 - alpha)
            replicates.sort(axis=1)
            idx = np.flatnonzero(present)
            low[idx] = quantile_rows(replicates[idx], q_low[idx])
            high[idx] = quantile_rows(replicates[idx], q_high[idx])
        # All units identical: every replicate equals the estimate up to summation order; report
        # the exact degenerate interval instead of rounding noise.
        constant = _constant_cells(cols, starts, present)
        low[constant] = estimate[constant]
        high[constant] = estimate[constant]
        # A replicate the statistic cannot score (an empty denominator; the ratios of means,
        # shares and paired differences never have one) leaves the cell without an interval.
        undefined = ~np.isfinite(replicates).all(axis=1) & present
        low[undefined] = np.nan
        high[undefined] = np.nan
    return {
        key: CI(
            estimate=float(estimate[i]),
            low=float(low[i]),
            high=float(high[i]),
            n=int(sizes[i]),
            B=B,
            method=method,
            level=level,
            n_dropped=int(dropped[i]),
        )
        for i, key in enumerate(keys)
    }


def _constant_cells(
    cols: FloatArray, starts: NDArray[np.intp], present: NDArray[np.bool_]
) -> NDArray[np.bool_]:
    """The cells (of all, absent ones False) whose units are all identical."""
    spread = np.maximum.reduceat(cols, starts[present], axis=0) - np.minimum.reduceat(
        cols, starts[present], axis=0
    )
    constant = np.zeros(len(present), dtype=bool)
    constant[present] = ~spread.any(axis=1)
    return constant


# --------------------------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------------------------


def _units(
    y: FloatArray,
    clusters: ArrayLike | Sequence[Hashable],
    groups: ArrayLike | Sequence[Hashable],
) -> tuple[IntArray, IntArray, list[Any], NDArray[np.int64], NDArray[np.bool_]]:
    """Map trials to (cell, cluster) units.

    Returns the cell of each unit (sorted ascending), the unit of each usable trial, the cell
    keys, trials dropped per cell (NaN outcome), and the usable-trial mask.
    """
    n = y.shape[0]
    if np.isinf(y).any():
        raise ValueError("outcome: must be finite numbers or NaN (left out)")
    cell_codes, keys = factorize(groups, n, "groups")
    cluster_codes, cluster_keys = factorize(clusters, n, "clusters")
    defined = ~np.isnan(y)
    dropped = np.bincount(cell_codes[~defined], minlength=len(keys)).astype(np.int64)
    combined = (
        cell_codes[defined].astype(np.int64) * max(1, len(cluster_keys)) + cluster_codes[defined]
    )
    unit_keys, unit = np.unique(combined, return_inverse=True)
    unit_cell = (unit_keys // max(1, len(cluster_keys))).astype(np.intp)
    return unit_cell, unit.astype(np.intp), keys, dropped, defined


def factorize(
    labels: ArrayLike | Sequence[Hashable], n: int, name: str
) -> tuple[IntArray, list[Any]]:
    """Integer codes 0..k-1 for labels, and the keys (Python scalars or tuples) in sorted order.

    Numeric and string arrays go through `np.unique` (rows of a 2-D array are composite keys);
    object arrays and sequences of tuples are factorised in Python, so mixed-type composite keys
    such as ("gpt-4o", 2) keep their types. Keys that cannot be ordered keep first appearance.
    """
    if not isinstance(labels, np.ndarray):
        seq = list(cast(Sequence[Any], labels))
        if any(isinstance(v, tuple | list) for v in seq):
            return _factorize_python([tuple(v) for v in seq], n, name)
        labels = np.asarray(seq)
    arr = labels
    if arr.ndim == 0 or arr.ndim > 2 or arr.shape[0] != n:
        raise ValueError(f"{name}: expected one label (or one row of labels) per observation")
    if arr.dtype.kind == "O":
        rows = arr.tolist()
        return _factorize_python([tuple(r) for r in rows] if arr.ndim == 2 else rows, n, name)
    if arr.dtype.kind == "f" and np.isnan(arr).any():
        raise ValueError(f"{name}: labels must not be NaN")
    if arr.ndim == 2:
        uniq, inverse = np.unique(arr, axis=0, return_inverse=True)
        return inverse.reshape(-1).astype(np.intp), [tuple(r) for r in uniq.tolist()]
    uniq, inverse = np.unique(arr, return_inverse=True)
    return inverse.reshape(-1).astype(np.intp), list(uniq.tolist())


def _factorize_python(rows: list[Any], n: int, name: str) -> tuple[IntArray, list[Any]]:
    if len(rows) != n:
        raise ValueError(f"{name}: expected one label (or one row of labels) per observation")
    index: dict[Any, int] = {}
    codes = np.fromiter((index.setdefault(r, len(index)) for r in rows), np.intp, count=n)
    keys = list(index)
    try:
        ordered = sorted(keys)
    except TypeError:
        return codes, keys
    remap = np.array([index[k] for k in ordered], dtype=np.intp).argsort()
    return remap[codes] if n else codes, ordered


def _as_float_vector(values: ArrayLike, name: str) -> FloatArray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {arr.shape}")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name}: expected numbers (NaN = undefined), got dtype {arr.dtype}")
    return arr.astype(np.float64)


def _check_options(B: int, level: float, method: str) -> None:
    if isinstance(B, bool) or not isinstance(B, int | np.integer) or B < 1:
        raise ValueError(f"B: expected a positive integer number of resamples, got {B!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: expected a confidence level in (0, 1), got {level!r}")
    if method not in _METHODS:
        raise ValueError(f"method: expected one of {', '.join(_METHODS)}, got {method!r}")


def _empty_ci(B: int, method: Method, level: float, n_dropped: int) -> CI:
    _check_options(B, level, method)
    return CI(np.nan, np.nan, np.nan, 0, B, method, level, n_dropped)

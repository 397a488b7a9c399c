"""Population-level intervals and tests for allocation: a two-way bootstrap over persons.

Why. The roster reuses each person in several pairs (the controlled design's 25 x 25 people
make 100 pairs; the paper's pairs reuse its 100 people too). The pair bootstrap of
`analysis.bootstrap` treats the pairs as independent draws: right for *these people* (the
roster-conditional target, where only the models' answers are random), too narrow for *people
like these* (the population target, where the people are random as well): with person effects
of demo size its intervals cover the population value 0.80-0.88 of the time.

How. Owen's pigeonhole bootstrap for crossed designs (Owen 2007, "The pigeonhole bootstrap",
Ann. Appl. Stat. 1(2)): each replicate draws the cis persons of a cell with replacement and,
independently, its trans persons; a pair enters with multiplicity (times its cis person was
drawn) x (times its trans person was drawn), with all of its trials. The statistic is the same
ratio as the pair bootstrap's (a share, a gap, or a paired difference of two shares) with those
weights. Pairs whose two persons were not both drawn carry weight 0.

The pigeonhole bootstrap is conservative: besides the cis-person and trans-person variance it
adds about twice the pair-level (answer) variance, so with much answer noise its intervals are
wider than needed (measured in tests/analysis/test_population_coverage.py: coverage about
0.98-0.99 for a nominal 0.95). We accept that: it never understates the uncertainty about
people in general, needs no model of how people differ, and is what the test of no identity
preference is read from (docs/paper-statistics.md says why not a crossed mixed model).

The test of no preference: the two-sided percentile-bootstrap p-value of the null value
(0 for a gap or effect), 2 x min(replicates <= null, replicates >= null) counted as
(k + 1) / (B + 1) and capped at 1: p < alpha when the null lies outside the (1 - alpha)
percentile interval (up to one replicate), so the test and the interval agree.

Vectorised: cells whose pairs link the same persons in the same way (every model, language and
condition of one service shows the same pairs) share one draw of person weights, and all of
their statistics come from one matrix product (B x pairs) @ (pairs x columns). Intervals are
percentile intervals whatever `--ci` says (BCa needs a jackknife that a crossed design lacks).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ibias.analysis.bootstrap import _factorize

FloatArray = NDArray[np.float64]

METHOD = "percentile"
RESAMPLED = "cis and trans persons"
TARGET = "people like these"
CONDITIONAL_TARGET = "these people"


@dataclass(frozen=True)
class PopulationCI:
    """A pigeonhole-bootstrap interval and test for one cell.

    `pairs`, `cis_persons`, `trans_persons` count the units; `n_dropped` the trials left out
    (NaN outcome, or a pair seen under one condition only of a paired difference);
    `undefined` the replicates whose denominator was 0 (left out of the quantiles)."""

    estimate: float
    low: float
    high: float
    p: float
    pairs: int
    cis_persons: int
    trans_persons: int
    B: int
    level: float
    n_dropped: int = 0
    undefined: int = 0


def _check_settings(B: object, level: float) -> None:
    if isinstance(B, bool) or not isinstance(B, int | np.integer) or B < 1:
        raise ValueError(f"B: expected a positive integer number of resamples, got {B!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: expected a confidence level in (0, 1), got {level!r}")


def _pairs(
    cell: NDArray[np.intp], cis: NDArray[np.intp], trans: NDArray[np.intp]
) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Pairs, the unique (cell, cis, trans): each trial's pair index, and per pair its cell,
    cis person and trans person (columns), in sorted order."""
    n_cis_all, n_trans_all = int(cis.max(initial=-1)) + 1, int(trans.max(initial=-1)) + 1
    combined = (cell.astype(np.int64) * n_cis_all + cis) * n_trans_all + trans
    flat_units, unit = np.unique(combined, return_inverse=True)
    units = np.column_stack(
        [
            flat_units // (n_cis_all * n_trans_all),
            (flat_units // n_trans_all) % n_cis_all,
            flat_units % n_trans_all,
        ]
    ).astype(np.intp)
    return unit.reshape(-1).astype(np.intp), units


def grouped_pigeonhole_ci(
    outcome: ArrayLike,
    cis_person: ArrayLike | Sequence[Hashable],
    trans_person: ArrayLike | Sequence[Hashable],
    groups: ArrayLike | Sequence[Hashable],
    *,
    treated: ArrayLike | None = None,
    null: float = 0.0,
    B: int = 2000,
    level: float = 0.95,
    rng: np.random.Generator,
) -> dict[Any, PopulationCI]:
    """Per cell (group): the ratio estimate, its pigeonhole interval and the p-value of `null`.

    Without `treated` the estimate is sum(outcome) / trials over the cell's non-NaN trials (a
    share, or with outcomes +1 / -1 / NaN the gap among decided trials), as in
    `bootstrap.grouped_cluster_bootstrap_share_ci`. With `treated` (one boolean per trial) it is
    the paired difference ratio(treated) - ratio(untreated) over the pairs seen under both, as
    in `bootstrap.grouped_paired_difference_ci`. A pair is one (cell, cis person, trans
    person)."""
    _check_settings(B, level)
    y = np.asarray(outcome, dtype=np.float64)
    if y.ndim != 1:
        raise ValueError("outcome: expected a 1-D array")
    n = y.shape[0]
    cell, keys = _factorize(groups, n, "groups")
    cis, _ = _factorize(cis_person, n, "cis_person")
    trans, _ = _factorize(trans_person, n, "trans_person")
    defined = ~np.isnan(y)
    dropped = np.bincount(cell[~defined], minlength=len(keys)).astype(np.int64)
    y, cell, cis, trans = y[defined], cell[defined], cis[defined], trans[defined]
    if treated is None:
        t = np.ones(y.shape[0], dtype=bool)
    else:
        t = np.asarray(treated).astype(bool)[defined]
    unit, units = _pairs(cell, cis, trans)
    k = units.shape[0]
    if treated is None:
        cols = np.column_stack(
            [np.bincount(unit, weights=y, minlength=k), np.bincount(unit, minlength=k)]
        ).astype(np.float64)
        complete = np.ones(k, dtype=bool)
    else:
        cols = np.column_stack(
            [
                np.bincount(unit, weights=np.where(t, y, 0.0), minlength=k),
                np.bincount(unit, weights=t.astype(np.float64), minlength=k),
                np.bincount(unit, weights=np.where(t, 0.0, y), minlength=k),
                np.bincount(unit, weights=(~t).astype(np.float64), minlength=k),
            ]
        )
        complete = (cols[:, 1] > 0) & (cols[:, 3] > 0)
        lost = cols[~complete, 1] + cols[~complete, 3]
        dropped = dropped + np.bincount(
            units[~complete, 0], weights=lost, minlength=len(keys)
        ).astype(np.int64)
    units, cols = units[complete], cols[complete]
    return _cells(units, cols, keys, dropped, treated is not None, null, B, level, rng)


def _statistic(sums: FloatArray, paired: bool) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        if paired:
            return sums[..., 0] / sums[..., 1] - sums[..., 2] / sums[..., 3]
        return sums[..., 0] / sums[..., 1]


def _structures(
    units: NDArray[np.intp], n_keys: int
) -> tuple[dict[int, NDArray[np.intp]], dict[bytes, list[int]]]:
    """Per cell its pairs' rows (units sorted by cell), and the cells grouped by their pair
    structure (the same persons in the same pairs), in cell order."""
    by_structure: dict[bytes, list[int]] = {}
    rows_of: dict[int, NDArray[np.intp]] = {}
    bounds = np.searchsorted(units[:, 0], np.arange(n_keys + 1))
    for c in range(n_keys):
        rows = np.arange(bounds[c], bounds[c + 1])
        rows_of[c] = rows
        if rows.size:
            by_structure.setdefault(units[rows, 1:].tobytes(), []).append(c)
    return rows_of, by_structure


def _quantiles(
    reps: FloatArray, finite: NDArray[np.bool_], alpha: float
) -> tuple[FloatArray, FloatArray]:
    """Per column the percentile interval's ends, over the usable (finite) replicates."""
    if finite.all():
        lows, highs = np.quantile(reps, [alpha, 1.0 - alpha], axis=0)
    else:  # some replicate left a denominator empty: quantiles of the usable ones
        with np.errstate(all="ignore"):
            lows, highs = np.nanquantile(
                np.where(finite, reps, np.nan), [alpha, 1.0 - alpha], axis=0
            )
    return lows, highs


def _cells(
    units: NDArray[np.intp],
    cols: FloatArray,
    keys: list[Any],
    dropped: NDArray[np.int64],
    paired: bool,
    null: float,
    B: int,
    level: float,
    rng: np.random.Generator,
) -> dict[Any, PopulationCI]:
    """Group cells by their pair structure and bootstrap each structure once."""
    alpha = (1.0 - level) / 2.0
    order = np.argsort(units[:, 0], kind="stable")
    units, cols = units[order], cols[order]
    rows_of, by_structure = _structures(units, len(keys))
    out: dict[Any, PopulationCI] = {}
    for c in range(len(keys)):
        if not rows_of[c].size:
            out[keys[c]] = PopulationCI(
                np.nan, np.nan, np.nan, np.nan, 0, 0, 0, B, level, int(dropped[c])
            )
    for cells in by_structure.values():
        first = rows_of[cells[0]]
        _, cis = np.unique(units[first, 1], return_inverse=True)
        _, trans = np.unique(units[first, 2], return_inverse=True)
        n_cis, n_trans = int(cis.max()) + 1, int(trans.max()) + 1
        weights = _pair_weights(cis.reshape(-1), trans.reshape(-1), n_cis, n_trans, B, rng)
        stacked = np.concatenate([cols[rows_of[c]] for c in cells], axis=1)  # (pairs, C*k)
        sums = weights @ stacked  # (B, C*k)
        n_cols, k = cols.shape[1], len(cells)
        # (B, k) replicates and (k,) estimates of every cell of this structure at once.
        reps = _statistic(sums.reshape(B, k, n_cols), paired)
        estimates = _statistic(stacked.sum(axis=0).reshape(k, n_cols), paired)
        finite = np.isfinite(reps)
        lows, highs = _quantiles(reps, finite, alpha)
        usable = finite.sum(axis=0)
        below = np.count_nonzero(finite & (reps <= null), axis=0)
        above = np.count_nonzero(finite & (reps >= null), axis=0)
        spread = np.ptp(stacked, axis=0).reshape(k, n_cols).any(axis=1)
        for i, c in enumerate(cells):
            estimate = float(estimates[i])
            if usable[i] == 0 or not np.isfinite(estimate):
                low = high = p = np.nan
            else:
                low, high = float(lows[i]), float(highs[i])
                if not spread[i]:
                    low = high = estimate
                p = _p_value(int(below[i]), int(above[i]), int(usable[i]), null, estimate)
            out[keys[c]] = PopulationCI(
                estimate, low, high, p, int(first.size), n_cis, n_trans, B, level,
                int(dropped[c]), int(B - usable[i]),
            )  # fmt: skip
    return {k: out[k] for k in keys}


def _pair_weights(
    cis: NDArray[np.intp],
    trans: NDArray[np.intp],
    n_cis: int,
    n_trans: int,
    B: int,
    rng: np.random.Generator,
) -> FloatArray:
    """(B, pairs) pigeonhole weights: times the pair's cis person was drawn x times its trans
    person was drawn, each set of persons drawn with replacement to its own size."""
    w_cis = _counts(rng.integers(0, n_cis, size=(B, n_cis)), n_cis)
    w_trans = _counts(rng.integers(0, n_trans, size=(B, n_trans)), n_trans)
    return w_cis[:, cis] * w_trans[:, trans]


def _counts(draws: NDArray[np.int64], n: int) -> FloatArray:
    """Row-wise counts of 0..n-1 in `draws` (B, m), as floats (B, n)."""
    b = draws.shape[0]
    flat = draws + (np.arange(b) * n)[:, None]
    return np.bincount(flat.reshape(-1), minlength=b * n).reshape(b, n).astype(np.float64)


def _p_value(below: int, above: int, b: int, null: float, estimate: float) -> float:
    """Two-sided percentile-bootstrap p-value of `null` from the counts of usable replicates
    at or below and at or above it; 1 when the estimate equals it. Counted as (k + 1) / (b + 1),
    so it is never 0 from finitely many replicates."""
    if estimate == null:
        return 1.0
    return float(min(1.0, 2.0 * (min(below, above) + 1) / (b + 1)))

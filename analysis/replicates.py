"""The bootstrap's draws: a statistic's (cells, B) distribution, and the levels BCa reads it at.

Its own module because it is the one place where the resampling law is implemented, apart
from what the estimators are (analysis/bootstrap.py: ratios of sums over resampling units, the
intervals' public functions): a change here changes which random numbers every interval of
the analysis draws, so it is read and reviewed on its own. Two ways of drawing a replicate
have the same law and each cell takes the cheaper (`by_counts`); the generator serves the
index draws first (cells by size, then by key), then the counted cells in key order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np
from numpy.typing import NDArray
from scipy.special import ndtr, ndtri

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]
Statistic = Callable[[FloatArray], FloatArray]

#: Upper bound on resample indices drawn at once: 2^21 intp indices = 16 MB per chunk, whatever
#: the number of cells (gathers then run one cell at a time).
CHUNK_ELEMENTS = 1 << 21
#: Replicates within this relative distance of the estimate count as ties for the BCa bias
#: correction: sums taken in a different order differ in the last bits, and discrete data
#: (shares, bounded scores) produce many exact ties that must not be split by rounding noise.
TIE_RTOL = 1e-12
#: A cell is resampled by counts (`by_counts`) when it has at least this many units per
#: distinct unit value: numpy's multinomial costs about 150-300 ns per value and replicate,
#: an index draw and its gather 10-25 ns per unit (bench/bench_bootstrap.py measures both).
COUNTS_MIN_UNITS_PER_VALUE = 24


def draw(
    cols: FloatArray,
    sizes: IntArray,
    starts: IntArray,
    statistic: Statistic,
    B: int,
    rng: np.random.Generator,
) -> FloatArray:
    """The (cells, B) bootstrap distribution; rows of empty cells are NaN.

    A replicate of a cell of n units is n units drawn with replacement. Two ways of drawing
    it have that same law, and each cell takes the cheaper (`by_counts`): cells whose units
    take few distinct values (rows of `cols`) draw how often each value is drawn; the others
    draw the units' indices (`index_replicates`). The generator serves the index draws first
    (cells by size, then by key), then the counted cells in key order.
    """
    replicates = np.full((sizes.shape[0], B), np.nan)
    counted = by_counts(cols, sizes, starts)
    indexed = sizes.copy()
    indexed[list(counted)] = 0
    index_replicates(cols, indexed, starts, statistic, B, rng, replicates)
    for i, (values, multiplicity) in counted.items():
        n = int(sizes[i])
        counts = rng.multinomial(n, multiplicity / n, size=B)
        replicates[i] = statistic(counts.astype(np.float64) @ values)
    return replicates


def by_counts(
    cols: FloatArray, sizes: IntArray, starts: IntArray
) -> dict[int, tuple[FloatArray, NDArray[np.int64]]]:
    """The cells to resample by counts: cell -> (its distinct unit rows, their multiplicities).

    Drawing n units with replacement from units whose distinct values have multiplicities m
    draws value j a Multinomial(n, m / n) number of times: the same law as n index draws,
    and the statistic only sees the sums. It costs one binomial draw per distinct value per
    replicate instead of n index draws and gathers. Allocation's pairs take a few values each
    (a pair's count of trials choosing someone: 0, 1 or 2), so at ten times the paper's grid
    (1,000 pairs per cell) a replicate costs a few binomials instead of a thousand draws;
    word association's trial scores take many values and keep the index draws.
    """
    counted: dict[int, tuple[FloatArray, NDArray[np.int64]]] = {}
    candidates = np.flatnonzero(sizes >= COUNTS_MIN_UNITS_PER_VALUE)
    if candidates.size == 0:
        return counted
    # Every candidate cell's distinct rows at once: sort its units by cell, then by value, and
    # cut where the cell or any column changes (np.unique per cell costs a sort per cell).
    rows = np.concatenate([np.arange(starts[i], starts[i] + sizes[i]) for i in candidates])
    cell = np.repeat(np.arange(candidates.size), sizes[candidates])
    order = np.lexsort((*(cols[rows, c] for c in range(cols.shape[1] - 1, -1, -1)), cell))
    values, cell = cols[rows[order]], cell[order]
    new = np.ones(values.shape[0], dtype=bool)
    new[1:] = (cell[1:] != cell[:-1]) | (values[1:] != values[:-1]).any(axis=1)
    first = np.flatnonzero(new)
    multiplicity = np.diff(np.append(first, values.shape[0]))
    distinct = np.bincount(cell[first], minlength=candidates.size)
    bounds = np.concatenate([[0], np.cumsum(distinct)])
    for j, i in enumerate(candidates.tolist()):
        if distinct[j] * COUNTS_MIN_UNITS_PER_VALUE <= sizes[i]:
            lo, hi = bounds[j], bounds[j + 1]
            counted[i] = (values[first[lo:hi]], multiplicity[lo:hi].astype(np.int64))
    return counted


def index_replicates(
    cols: FloatArray,
    sizes: IntArray,
    starts: IntArray,
    statistic: Statistic,
    B: int,
    rng: np.random.Generator,
    replicates: FloatArray,
) -> None:
    """Fill the rows of `replicates` of the cells of non-zero `sizes` by index draws.

    Cells of equal size n share one index draw of shape (rows, n), a row being one (cell,
    replicate), chunked to bound memory. The gather then runs cell by cell from that cell's own
    n values, which stay in cache: several times faster than one gather through flat indices
    into all cells. A column that is constant over a size bucket (the 1s of a mean, the 2 trials
    of complete pairs) is summed as n * value without a gather.
    """
    n_cols = cols.shape[1]
    for n in np.unique(sizes[sizes > 0]).tolist():
        members = np.flatnonzero(sizes == n)
        rows_of = starts[members][:, None] + np.arange(n)  # (cells, n) unit rows
        data = cols[rows_of]  # (cells, n, C)
        constant = (data == data[0, 0]).all(axis=(0, 1))
        total_rows = members.shape[0] * B
        sums = np.empty((total_rows, n_cols))
        sums[:, constant] = n * data[0, 0, constant]
        varying = [
            (c, np.ascontiguousarray(data[:, :, c])) for c in np.flatnonzero(~constant).tolist()
        ]
        step = max(1, CHUNK_ELEMENTS // n)
        for lo in range(0, total_rows, step):
            hi = min(lo + step, total_rows)
            draw = rng.integers(0, n, size=(hi - lo, n), dtype=np.intp)
            for k in range(lo // B, (hi - 1) // B + 1):  # cells (within the bucket) in chunk
                a, b = max(lo, k * B), min(hi, (k + 1) * B)
                block = draw[a - lo : b - lo]
                for c, column in varying:
                    sums[a:b, c] = column[k][block].sum(axis=1)
        replicates[members] = statistic(sums).reshape(members.shape[0], B)


def bca_levels(
    cols: FloatArray,
    cell: IntArray,
    sizes: IntArray,
    totals: FloatArray,
    estimate: FloatArray,
    replicates: FloatArray,
    statistic: Statistic,
    alpha: float,
    present: NDArray[np.bool_],
) -> tuple[FloatArray, FloatArray]:
    """Per-cell BCa quantile levels (Efron & Tibshirani eq. 14.10, 14.14-14.15; scipy's rule)."""
    n_cells, B = replicates.shape
    theta = estimate[:, None]
    tol = TIE_RTOL * np.maximum(1.0, np.abs(theta))
    below = np.count_nonzero(replicates < theta - tol, axis=1)
    at_or_below = np.count_nonzero(replicates <= theta + tol, axis=1)
    share = (below + at_or_below) / (2.0 * B)
    z0 = ndtri(np.clip(share, 1.0 / (2 * B), 1.0 - 1.0 / (2 * B)))

    # Jackknife: leave one unit out of its cell, from the cell totals.
    cell_totals = np.zeros((n_cells, cols.shape[1]))
    cell_totals[present] = totals
    theta_i = statistic(cell_totals[cell] - cols)
    usable = np.isfinite(theta_i)
    weights = np.where(usable, theta_i, 0.0)
    n_usable = np.bincount(cell, weights=usable.astype(np.float64), minlength=n_cells)
    theta_dot = np.bincount(cell, weights=weights, minlength=n_cells) / n_usable
    dev = np.where(usable, theta_dot[cell] - theta_i, 0.0)
    s2 = np.bincount(cell, weights=dev**2, minlength=n_cells)
    s3 = np.bincount(cell, weights=dev**3, minlength=n_cells)
    accel = np.where((sizes >= 2) & (s2 > 0), s3 / (6.0 * s2**1.5), 0.0)
    accel = np.nan_to_num(accel, nan=0.0, posinf=0.0, neginf=0.0)

    z_alpha = float(ndtri(alpha))

    def adjusted(z: float) -> FloatArray:
        w = z0 + z
        den = 1.0 - accel * w
        # den <= 0 only for absurd accelerations; use the limit as den -> 0+.
        limit = np.where(w < 0, 0.0, 1.0)
        return cast(
            FloatArray, np.where(den > 0, ndtr(z0 + w / np.where(den > 0, den, 1.0)), limit)
        )

    return adjusted(z_alpha), adjusted(-z_alpha)


def quantile_rows(sorted_rows: FloatArray, q: FloatArray) -> FloatArray:
    """Row-wise quantiles at per-row levels, numpy's default 'linear' (Hyndman-Fan type 7)."""
    b = sorted_rows.shape[1]
    h = (b - 1) * np.clip(q, 0.0, 1.0)
    lo = np.floor(h).astype(np.intp)
    hi = np.minimum(lo + 1, b - 1)
    rows = np.arange(sorted_rows.shape[0])
    v_lo = sorted_rows[rows, lo]
    v_hi = sorted_rows[rows, hi]
    return cast(FloatArray, v_lo + (h - lo) * (v_hi - v_lo))

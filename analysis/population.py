"""Population-level intervals and tests for allocation: people like these, with power.

Why. The roster reuses each person in several pairs (the controlled design's 25 x 25 people
make 100 pairs; the paper's pairs reuse its 100 people too). The pair bootstrap of
`analysis.bootstrap` treats the pairs as independent draws: right for *these people* (the
roster-conditional target, where only the models' answers are random), too narrow for *people
like these* (the population target, where the people are random as well).

The statistic is the same ratio as the pair bootstrap's (a share, a gap among decided trials,
or a paired difference of two ratios over the pairs seen under both conditions); the methods
differ only in how they measure its spread over rosters of people (`METHODS`):

- `two-way-cr2-satterthwaite` (the default, chosen by the simulation study of
  bench/bench_population.py; the grid and the choice are in docs/paper-statistics.md): the
  two-way cluster-robust variance of Cameron, Gelbach & Miller (2011), V = V_cis + V_trans -
  V_pair, of the linearised ratio. Each one-way term is bias-reduced (CR2, Bell & McCaffrey
  2002): for a mean, or a contrast of two arms' means, CR2 divides each cluster's score by
  sqrt(1 - h) with h the cluster's share of the arm's trials, which makes every term unbiased
  when the trials are independent and equally variable. The reference is Student's t on the
  Satterthwaite degrees of freedom of V under that same working model (how noisy V itself is:
  about 14 for the controlled design's 25 x 25 people in 100 pairs, 10 for the authors' most
  concentrated pairs), capped at min(G_cis, G_trans) - 1. When V <= 0 (possible: it is a
  difference) the larger one-way term is used instead.
- `two-way-cr2`: the same variance with t on min(G_cis, G_trans) - 1 degrees of freedom (too
  many: its test rejected a true null 6-7% of the time in the study).
- `two-way-cr1`: the same with the G/(G-1) factors instead of CR2.
- `pigeonhole-corrected`: the variance of the pigeonhole replicates (below) less twice the
  pair-level (answer) variance, which the pigeonhole counts three times; same t reference.
- `pigeonhole`: Owen's pigeonhole bootstrap for crossed designs (Owen 2007, Ann. Appl. Stat.
  1(2)): each replicate draws the cell's cis persons with replacement and, independently, its
  trans persons; a pair enters with weight (draws of its cis person) x (draws of its trans
  person), with all its trials; percentile interval and the two-sided percentile p-value of the
  null, 2 x min(replicates <= null, replicates >= null), counted as (k + 1) / (B + 1). Valid
  but conservative: with much answer noise its test has little power (docs/paper-statistics.md
  has the measurements).

The t methods' test of `null` is the two-sided t-test (estimate - null) / se on the same
degrees of freedom as the interval, so the test and the interval agree. A cell whose variance
is exactly 0 (every trial the same outcome) gets the interval [estimate, estimate] and p = 0
(1 when the estimate is the null). A cell with fewer than two persons on either side has no
interval.

Vectorised: the t methods work on per-pair sums with `np.bincount` over every cell at once;
the bootstrap methods group cells whose pairs link the same persons in the same way (every
model, language and condition of one service shows the same pairs) under one draw of person
weights, and compute all their statistics from one matrix product (B x pairs) @ (pairs x
columns). Intervals ignore `--ci` (BCa needs a jackknife that a crossed design lacks).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats as scipy_stats

from ibias.analysis.bootstrap import factorize
from ibias.analysis.cells import combined_codes

FloatArray = NDArray[np.float64]

SATTERTHWAITE = "two-way-cr2-satterthwaite"
METHODS: tuple[str, ...] = (
    SATTERTHWAITE,
    "two-way-cr2",
    "two-way-cr1",
    "pigeonhole-corrected",
    "pigeonhole",
)
"""The population methods (`analyze --population-method`), the default first."""
DEFAULT_METHOD = SATTERTHWAITE
BOOTSTRAP_METHODS = frozenset({"pigeonhole", "pigeonhole-corrected"})

#: What each method's intervals are, for the tables' `ci_method` and `resampled` columns.
CI_LABELS: dict[str, tuple[str, str]] = {
    SATTERTHWAITE: (
        "t, two-way cluster-robust CR2, Satterthwaite df",
        "none: cis and trans persons as crossed clusters",
    ),
    "two-way-cr2": (
        "t, two-way cluster-robust CR2",
        "none: cis and trans persons as crossed clusters",
    ),
    "two-way-cr1": (
        "t, two-way cluster-robust CR1",
        "none: cis and trans persons as crossed clusters",
    ),
    "pigeonhole-corrected": (
        "t, pigeonhole variance less twice the pair variance",
        "cis and trans persons (pigeonhole)",
    ),
    "pigeonhole": ("percentile, pigeonhole", "cis and trans persons (pigeonhole)"),
}
TARGET = "people like these"
CONDITIONAL_TARGET = "these people"


@dataclass(frozen=True)
class PopulationCI:
    """A population interval and test for one cell.

    `pairs`, `cis_persons`, `trans_persons` count the units; `n_dropped` the trials left out
    (NaN outcome, or a pair seen under one condition only of a paired difference);
    `undefined` the bootstrap replicates whose denominator was 0 (left out); `se` and `df` the
    standard error and t degrees of freedom of the t methods (NaN for the percentile
    pigeonhole); `method` one of `METHODS`."""

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
    se: float = float("nan")
    df: float = float("nan")
    method: str = "pigeonhole"


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


@dataclass(frozen=True)
class _Prepared:
    """Per pair (the unique cell x cis person x trans person, sorted by cell): its cell, cis
    and trans person codes (`units`) and its sums (`cols`: outcome and trials; with
    `paired`, those of the treated and then of the untreated trials)."""

    units: NDArray[np.intp]
    cols: FloatArray
    keys: list[Any]
    dropped: NDArray[np.int64]
    paired: bool


def _prepare(
    outcome: ArrayLike,
    cis_person: ArrayLike | Sequence[Hashable],
    trans_person: ArrayLike | Sequence[Hashable],
    groups: ArrayLike | Sequence[Hashable],
    treated: ArrayLike | None,
    trials: ArrayLike | None = None,
) -> _Prepared:
    y = np.asarray(outcome, dtype=np.float64)
    if y.ndim != 1:
        raise ValueError("outcome: expected a 1-D array")
    n = y.shape[0]
    w = np.ones(n) if trials is None else np.asarray(trials, dtype=np.float64)
    if w.shape != (n,) or (w < 1).any():
        raise ValueError("trials: expected one count of at least 1 per row")
    cell, keys = factorize(groups, n, "groups")
    cis, _ = factorize(cis_person, n, "cis_person")
    trans, _ = factorize(trans_person, n, "trans_person")
    defined = ~np.isnan(y)
    dropped = np.bincount(cell[~defined], weights=w[~defined], minlength=len(keys)).astype(np.int64)
    y, w, cell, cis, trans = y[defined], w[defined], cell[defined], cis[defined], trans[defined]
    unit, units = _pairs(cell, cis, trans)
    k = units.shape[0]
    if treated is None:
        cols = np.column_stack(
            [np.bincount(unit, weights=y, minlength=k), np.bincount(unit, weights=w, minlength=k)]
        ).astype(np.float64)
        complete = np.ones(k, dtype=bool)
    else:
        t = np.asarray(treated).astype(bool)[defined]
        cols = np.column_stack(
            [
                np.bincount(unit, weights=np.where(t, y, 0.0), minlength=k),
                np.bincount(unit, weights=np.where(t, w, 0.0), minlength=k),
                np.bincount(unit, weights=np.where(t, 0.0, y), minlength=k),
                np.bincount(unit, weights=np.where(t, 0.0, w), minlength=k),
            ]
        )
        complete = (cols[:, 1] > 0) & (cols[:, 3] > 0)
        lost = cols[~complete, 1] + cols[~complete, 3]
        dropped = dropped + np.bincount(
            units[~complete, 0], weights=lost, minlength=len(keys)
        ).astype(np.int64)
    units, cols = units[complete], cols[complete]
    order = np.argsort(units[:, 0], kind="stable")
    return _Prepared(units[order], cols[order], keys, dropped, treated is not None)


def grouped_population_ci(
    outcome: ArrayLike,
    cis_person: ArrayLike | Sequence[Hashable],
    trans_person: ArrayLike | Sequence[Hashable],
    groups: ArrayLike | Sequence[Hashable],
    *,
    treated: ArrayLike | None = None,
    null: float = 0.0,
    method: str = DEFAULT_METHOD,
    B: int = 2000,
    level: float = 0.95,
    rng: np.random.Generator | None = None,
    trials: ArrayLike | None = None,
) -> dict[Any, PopulationCI]:
    """Per cell (group): the ratio estimate, its interval for people like these by `method`
    (one of `METHODS`, module docstring) and the two-sided p-value of `null`.

    Without `treated` the estimate is sum(outcome) / trials over the cell's non-NaN trials (a
    share, or with outcomes +1 / -1 / NaN the gap among decided trials), as in
    `bootstrap.grouped_cluster_bootstrap_share_ci`. With `treated` (one boolean per trial) it is
    the paired difference ratio(treated) - ratio(untreated) over the pairs seen under both, as
    in `bootstrap.grouped_paired_difference_ci`. A pair is one (cell, cis person, trans
    person). `B` and `rng` are used by the bootstrap methods only.

    `trials`, when given, says how many trials each row stands for, `outcome` then holding
    their sum: a table with millions of trials passes them summed per pair and condition
    (analysis/units/allocation/population_tables.py), with the same pairs, sums and results."""
    if method not in METHODS:
        raise ValueError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
    _check_settings(B, level)
    prepared = _prepare(outcome, cis_person, trans_person, groups, treated, trials)
    if method in BOOTSTRAP_METHODS:
        if rng is None:
            raise ValueError(f"rng: the {method} method draws replicates and needs a generator")
        cells = _corrected_cells if method == "pigeonhole-corrected" else _cells
        return cells(prepared, null, B, level, rng)
    return _sandwich(prepared, null, level, method)


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
    """`grouped_population_ci` with the percentile pigeonhole bootstrap."""
    return grouped_population_ci(
        outcome, cis_person, trans_person, groups, treated=treated, null=null,
        method="pigeonhole", B=B, level=level, rng=rng,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# The two-way cluster-robust variance (t methods)
# --------------------------------------------------------------------------------------------


def _scores(prep: _Prepared) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per cell its estimate, and per pair its linearised score columns and trial counts.

    Columns: one per arm (one, or treated and untreated). A pair's score in an arm is
    (sum of its outcomes - estimate x its trials) / the arm's trials of the cell, so that the
    statistic's error is, to first order, the sum of the scores (treated minus untreated)."""
    cell = prep.units[:, 0]
    n_keys = len(prep.keys)
    arms = [(0, 1), (2, 3)] if prep.paired else [(0, 1)]
    estimate = np.zeros(n_keys)
    score = np.empty((cell.shape[0], len(arms)))
    trials = np.empty((cell.shape[0], len(arms)))
    for a, (yi, ni) in enumerate(arms):
        total_y = np.bincount(cell, weights=prep.cols[:, yi], minlength=n_keys)
        total_n = np.bincount(cell, weights=prep.cols[:, ni], minlength=n_keys)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = total_y / total_n
        estimate = estimate + (ratio if a == 0 else -ratio)
        safe = np.where(total_n > 0, total_n, 1.0)
        score[:, a] = (prep.cols[:, yi] - ratio[cell] * prep.cols[:, ni]) / safe[cell]
        trials[:, a] = prep.cols[:, ni] / safe[cell]  # the pair's share of the arm's trials
    return estimate, score, trials


def _one_way(
    codes: NDArray[np.integer],
    cell_of: NDArray[np.intp],
    score: FloatArray,
    share: FloatArray,
    n_keys: int,
    cr2: bool,
) -> tuple[FloatArray, NDArray[np.int64]]:
    """Per cell the one-way cluster-robust variance of the statistic with clusters `codes`
    (0..m-1 per pair, nested in cells; `cell_of` each cluster's cell), and the number of
    clusters.

    CR2: each cluster's score in an arm divided by sqrt(1 - the cluster's share of the arm's
    trials) (the bias-reduced adjustment for a mean); CR1: the plain scores times G/(G-1)."""
    m = cell_of.shape[0]
    per_arm = []
    for a in range(score.shape[1]):
        s = np.bincount(codes, weights=score[:, a], minlength=m)
        if cr2:
            h = np.bincount(codes, weights=share[:, a], minlength=m)
            with np.errstate(invalid="ignore", divide="ignore"):
                s = s / np.sqrt(1.0 - h)
        per_arm.append(s)
    total = per_arm[0] if len(per_arm) == 1 else per_arm[0] - per_arm[1]
    v: FloatArray = np.bincount(cell_of, weights=total * total, minlength=n_keys).astype(np.float64)
    g = np.bincount(cell_of, minlength=n_keys).astype(np.int64)
    if not cr2:
        with np.errstate(invalid="ignore", divide="ignore"):
            v = v * g / (g - 1)
    return v, g


def _sandwich(prep: _Prepared, null: float, level: float, method: str) -> dict[Any, PopulationCI]:
    """Every cell's two-way cluster-robust interval and t-test at once."""
    cr2 = method != "two-way-cr1"
    n_keys = len(prep.keys)
    cl = _clusters(prep)
    estimate, score, share = _scores(prep)
    v_cis, g_cis = _one_way(cl.cis, cl.cis_cell, score, share, n_keys, cr2)
    v_trans, g_trans = _one_way(cl.trans, cl.trans_cell, score, share, n_keys, cr2)
    v_pair, g_pair = _one_way(np.arange(cl.cell.shape[0]), cl.cell, score, share, n_keys, cr2)
    v = v_cis + v_trans - v_pair
    v = np.where(v > 0, v, np.maximum(v_cis, v_trans))
    df = (np.minimum(g_cis, g_trans) - 1).astype(np.float64)
    if method == SATTERTHWAITE:
        df = np.fmin(df, _satterthwaite(prep, cl))
    return _t_results(prep, estimate, v, df, g_pair, g_cis, g_trans, null, level, method)


@dataclass(frozen=True)
class _Clusters:
    """The pairs' cells and person clusters (codes over all cells), and each cluster's cell."""

    cell: NDArray[np.intp]
    cis: NDArray[np.intp]
    trans: NDArray[np.intp]
    cis_cell: NDArray[np.intp]
    trans_cell: NDArray[np.intp]
    n_keys: int

    def sum(self, values: FloatArray, level: str) -> FloatArray:
        """Per cell the sum of per-pair (`pair`) or per-person (`cis`, `trans`) values."""
        where = {"pair": self.cell, "cis": self.cis_cell, "trans": self.trans_cell}[level]
        return np.bincount(where, weights=values, minlength=self.n_keys).astype(np.float64)


@dataclass(frozen=True)
class _Arm:
    """One arm's CR2 weights (w) and u = W' n, per pair, cis person and trans person."""

    w: dict[str, FloatArray]
    u: dict[str, FloatArray]
    n: dict[str, FloatArray]
    lam: FloatArray  # per cell: -1 / N


def _clusters(prep: _Prepared) -> _Clusters:
    """Each pair's cis-person and trans-person cluster (codes over all cells), and each
    cluster's cell."""
    cell = prep.units[:, 0]
    codes = [combined_codes(cell, prep.units[:, col]) for col in (1, 2)]
    owner = []
    for code in codes:
        of = np.zeros(int(code.max(initial=-1)) + 1, dtype=np.intp)
        of[code] = cell
        owner.append(of)
    return _Clusters(cell, codes[0], codes[1], owner[0], owner[1], len(prep.keys))


def _arm(cl: _Clusters, n: FloatArray) -> _Arm:
    total = cl.sum(n, "pair")
    counts: dict[str, FloatArray] = {
        "pair": n,
        "cis": np.bincount(cl.cis, weights=n).astype(np.float64),
        "trans": np.bincount(cl.trans, weights=n).astype(np.float64),
    }
    owner = {"pair": cl.cell, "cis": cl.cis_cell, "trans": cl.trans_cell}
    with np.errstate(divide="ignore", invalid="ignore"):
        w = {
            k: 1.0 / (total[owner[k]] * np.sqrt(1.0 - v / total[owner[k]]))
            for k, v in counts.items()
        }
        lam = -1.0 / total
    return _Arm(w, {k: w[k] * counts[k] for k in w}, counts, lam)


_SIGN = {"pair": -1.0, "cis": 1.0, "trans": 1.0}
"""Each cluster level's sign in V = V_cis + V_trans - V_pair."""


def _satterthwaite(prep: _Prepared, cl: _Clusters) -> FloatArray:
    """Per cell the Satterthwaite degrees of freedom of the two-way CR2 variance under its
    working model (independent trials of equal variance; Bell & McCaffrey 2002).

    The variance is a quadratic form in the pairs' residual sums, V = z' Omega z with
    Omega = W diag(s) W' over the clusters (cis persons and trans persons s = +1, pairs
    s = -1; W the clusters' CR2 weights per arm) and z ~ (0, sigma^2 G), G = diag(n) - n n' / N
    per arm. So E[V] = sigma^2 tr(S C) and Var[V] = 2 sigma^4 tr((S C)^2) with C = W' G W, and
    df = tr(S C)^2 / tr((S C)^2) = (sum_a s_a C_aa)^2 / sum_ab s_a s_b C_ab^2. C is a sparse
    part (clusters that share a pair: a person with itself, with each of its pairs, and the two
    persons of a pair) plus a low-rank part (lam_r u_r u_r' per arm r, u = W' n, lam = -1/N),
    so every sum is a `bincount` over all cells at once."""
    arms = [_arm(cl, prep.cols[:, i]) for i in ((1, 3) if prep.paired else (1,))]
    ci, ti = cl.cis, cl.trans
    zero = np.zeros(cl.n_keys)
    # The sparse part of C, arms added: each cluster's diagonal, and the entries a pair links
    # (its cis with its trans person, each of them with the pair).
    diag = {k: np.sum([a.w[k] ** 2 * a.n[k] for a in arms], axis=0) for k in _SIGN}
    ct = np.sum([a.n["pair"] * a.w["cis"][ci] * a.w["trans"][ti] for a in arms], axis=0)
    cp = np.sum([a.n["pair"] * a.w["cis"][ci] * a.w["pair"] for a in arms], axis=0)
    tp = np.sum([a.n["pair"] * a.w["trans"][ti] * a.w["pair"] for a in arms], axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        trace = zero + sum(_SIGN[k] * cl.sum(diag[k], k) for k in _SIGN)
        sparse = zero + sum(cl.sum(diag[k] ** 2, k) for k in _SIGN)
        sparse += 2.0 * cl.sum(ct**2 - cp**2 - tp**2, "pair")
        cross, low_rank = zero.copy(), zero.copy()
        for a in arms:
            trace += a.lam * sum(_SIGN[k] * cl.sum(a.u[k] ** 2, k) for k in _SIGN)
            uc, ut, up = a.u["cis"][ci], a.u["trans"][ti], a.u["pair"]
            links = 2.0 * cl.sum(ct * uc * ut - cp * uc * up - tp * ut * up, "pair")
            cross += a.lam * (sum(cl.sum(diag[k] * a.u[k] ** 2, k) for k in _SIGN) + links)
            for b in arms:
                m = zero + sum(_SIGN[k] * cl.sum(a.u[k] * b.u[k], k) for k in _SIGN)
                low_rank += a.lam * b.lam * m * m
        return np.asarray(trace**2 / (sparse + 2.0 * cross + low_rank), dtype=np.float64)


def _t_results(
    prep: _Prepared,
    estimate: FloatArray,
    variance: FloatArray,
    df: FloatArray,
    pairs: NDArray[np.int64],
    cis_persons: NDArray[np.int64],
    trans_persons: NDArray[np.int64],
    null: float,
    level: float,
    method: str,
    B: int = 0,
    undefined: NDArray[np.int64] | None = None,
) -> dict[Any, PopulationCI]:
    """The t interval and two-sided t-test per cell from its estimate, variance and df."""
    with np.errstate(invalid="ignore"):
        se = np.sqrt(variance)
    usable = (df > 0) & np.isfinite(se) & np.isfinite(estimate)
    safe_df = np.where(usable, df, 1.0)
    q = scipy_stats.t.ppf(0.5 + level / 2.0, safe_df)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.abs(estimate - null) / se
    p = np.where(se > 0, 2.0 * scipy_stats.t.sf(z, safe_df), np.where(estimate == null, 1.0, 0.0))
    low = np.where(usable, estimate - q * se, np.nan)
    high = np.where(usable, estimate + q * se, np.nan)
    p = np.where(usable, p, np.nan)
    out: dict[Any, PopulationCI] = {}
    for c, key in enumerate(prep.keys):
        out[key] = PopulationCI(
            float(estimate[c]) if pairs[c] else np.nan, float(low[c]), float(high[c]),
            float(p[c]), int(pairs[c]), int(cis_persons[c]), int(trans_persons[c]), B, level,
            int(prep.dropped[c]), 0 if undefined is None else int(undefined[c]),
            se=float(se[c]) if usable[c] else np.nan, df=float(df[c]) if usable[c] else np.nan,
            method=method,
        )  # fmt: skip
    return out


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


@dataclass(frozen=True)
class _Structure:
    """The replicates of every cell that shares one pair structure (same persons, same
    pairs): `cells` (codes), `reps` (B, cells), `estimates`, the unit counts and whether a
    cell's pair sums vary at all (`spread`)."""

    cells: list[int]
    reps: FloatArray
    estimates: FloatArray
    pairs: int
    n_cis: int
    n_trans: int
    spread: NDArray[np.bool_]


def _replicates(prep: _Prepared, B: int, rng: np.random.Generator) -> Iterator[_Structure]:
    """Group cells by their pair structure and draw each structure's person weights once."""
    units, cols = prep.units, prep.cols
    rows_of, by_structure = _structures(units, len(prep.keys))
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
        yield _Structure(
            cells, _statistic(sums.reshape(B, k, n_cols), prep.paired),
            _statistic(stacked.sum(axis=0).reshape(k, n_cols), prep.paired), int(first.size),
            n_cis, n_trans, np.ptp(stacked, axis=0).reshape(k, n_cols).any(axis=1),
        )  # fmt: skip


def _cells(
    prep: _Prepared, null: float, B: int, level: float, rng: np.random.Generator
) -> dict[Any, PopulationCI]:
    """The percentile pigeonhole interval and p-value of every cell."""
    keys, dropped = prep.keys, prep.dropped
    alpha = (1.0 - level) / 2.0
    out: dict[Any, PopulationCI] = {
        key: PopulationCI(np.nan, np.nan, np.nan, np.nan, 0, 0, 0, B, level, int(dropped[c]))
        for c, key in enumerate(keys)
    }
    for st in _replicates(prep, B, rng):
        reps = st.reps
        finite = np.isfinite(reps)
        usable = finite.sum(axis=0)
        lows, highs = _quantiles(reps, finite, alpha)
        below = np.count_nonzero(finite & (reps <= null), axis=0)
        above = np.count_nonzero(finite & (reps >= null), axis=0)
        for i, c in enumerate(st.cells):
            estimate = float(st.estimates[i])
            if usable[i] == 0 or not np.isfinite(estimate):
                low = high = p = np.nan
            else:
                low, high = float(lows[i]), float(highs[i])
                if not st.spread[i]:
                    low = high = estimate
                p = _p_value(int(below[i]), int(above[i]), int(usable[i]), null, estimate)
            out[keys[c]] = PopulationCI(
                estimate, low, high, p, st.pairs, st.n_cis, st.n_trans, B, level,
                int(dropped[c]), int(B - usable[i]),
            )  # fmt: skip
    return out


def _corrected_cells(
    prep: _Prepared, null: float, B: int, level: float, rng: np.random.Generator
) -> dict[Any, PopulationCI]:
    """The replicates' variance per cell, then `_corrected`'s t interval."""
    n_keys = len(prep.keys)
    variance = np.full(n_keys, np.nan)
    counts = np.zeros((3, n_keys), dtype=np.int64)  # pairs, cis persons, trans persons
    undefined = np.zeros(n_keys, dtype=np.int64)
    for st in _replicates(prep, B, rng):
        finite = np.isfinite(st.reps)
        with np.errstate(all="ignore"):
            variance[st.cells] = np.nanvar(np.where(finite, st.reps, np.nan), axis=0, ddof=1)
        counts[:, st.cells] = np.array([[st.pairs], [st.n_cis], [st.n_trans]])
        undefined[st.cells] = B - finite.sum(axis=0)
    return _corrected(prep, variance, counts, undefined, null, B, level)


def _corrected(
    prep: _Prepared,
    variance: FloatArray,
    counts: NDArray[np.int64],
    undefined: NDArray[np.int64],
    null: float,
    B: int,
    level: float,
) -> dict[Any, PopulationCI]:
    """The pigeonhole replicates' variance less twice the pair-level variance (each pair's
    weight, a product of two draw counts, has variance 3 where a pair bootstrap's has 1), never
    below the pair-level variance itself; t on min(G_cis, G_trans) - 1 df."""
    estimate, score, _ = _scores(prep)
    pair_score = score[:, 0] if score.shape[1] == 1 else score[:, 0] - score[:, 1]
    v_pair = np.bincount(prep.units[:, 0], weights=pair_score**2, minlength=len(prep.keys))
    v = np.maximum(variance - 2.0 * v_pair, v_pair)
    df = (np.minimum(counts[1], counts[2]) - 1).astype(np.float64)
    return _t_results(prep, estimate, v, df, counts[0], counts[1], counts[2], null, level,
                      "pigeonhole-corrected", B, undefined)  # fmt: skip


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

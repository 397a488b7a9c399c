"""Benchmark: ibias's vectorised bootstrap against a per-cell loop of scipy.stats.bootstrap.

Cells shaped like the paper's grid, B = 2000, in one run on the same data:
- word association: 7 models x 2 languages x 8 categories = 112 cells of 50 trials (scores from
  the word-association process, about 10% undefined and dropped);
- allocation: 7 models x 2 languages x 8 services x 6 conditions = 672 cells of 100 pairs x 2
  orders, share choosing the transgender candidate, resampling pairs.

The scipy baseline gets per-cell arrays prepared outside its timing (for allocation: one value
per pair, the pair's share, whose mean is the same ratio estimator when every pair is complete),
and uses its vectorised statistic, so the comparison favours scipy. Each timing is the best of
`repeats` runs. Run with `python -m bench.bench_bootstrap`; `run()` returns the figures.

`counts_against_indices()` times the allocation cells at the paper's size (100 pairs a cell)
and ten times it (1,000) as ibias draws them (by counts of each distinct pair value, the
cells having a few) and forced to draw one index per pair
(`replicates.COUNTS_MIN_UNITS_PER_VALUE` set out of reach), in one run: the ratio, and the
cost per distinct value and per pair of one replicate, from which
`replicates.COUNTS_MIN_UNITS_PER_VALUE` is set.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

import numpy as np
from scipy import stats as sps

from ibias.analysis import replicates
from ibias.analysis.bootstrap import (
    CI,
    Method,
    grouped_bootstrap_mean_ci,
    grouped_cluster_bootstrap_share_ci,
)

B = 2000
N_MODELS, N_LANGUAGES, N_CATEGORIES, N_SERVICES, N_CONDITIONS = 7, 2, 8, 8, 6
WA_TRIALS, N_PAIRS = 50, 100
T = TypeVar("T")


def _best_of(repeats: int, fn: Callable[[], T]) -> tuple[float, T]:
    """Best wall time of `repeats` calls (the machine is shared; the minimum is the least noisy)
    and the last result."""
    best = float("inf")
    result = fn()
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def _word_association_cells(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n_cells = N_MODELS * N_LANGUAGES * N_CATEGORIES
    shape = (n_cells, WA_TRIALS)
    p = rng.uniform(0.4, 0.8, size=(n_cells, 1, 1))
    u = 0.3
    neg = rng.multinomial(
        5, np.concatenate([(1 - u) * p, (1 - u) * (1 - p), np.full_like(p, u)], -1), size=shape
    )
    pos = rng.multinomial(
        5, np.concatenate([(1 - u) * (1 - p), (1 - u) * p, np.full_like(p, u)], -1), size=shape
    )
    nt, nr, pt, pr = neg[..., 0], neg[..., 1], pos[..., 0], pos[..., 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        scores = nt / (nt + pt) + pr / (nr + pr) - 1
    return scores.ravel(), np.repeat(np.arange(n_cells), WA_TRIALS)


def _allocation_cells(
    rng: np.random.Generator, n_pairs: int = N_PAIRS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n_cells = N_MODELS * N_LANGUAGES * N_SERVICES * N_CONDITIONS
    lean = rng.normal(0.0, 1.0, size=(n_cells, 1, 1))
    eta = lean + rng.choice([-3.0, 0.0, 3.0], size=(n_cells, n_pairs, 1))
    p_trans = 0.95 / (1 + np.exp(-(eta + np.array([0.7, -0.7]))))
    outcome = (rng.random(p_trans.shape) < p_trans).astype(np.float64).ravel()
    pairs = np.tile(np.repeat(np.arange(n_pairs), 2), n_cells)
    cells = np.repeat(np.arange(n_cells), 2 * n_pairs)
    return outcome, pairs, cells


def counts_against_indices(repeats: int = 3, seed: int = 7) -> dict[str, float]:
    """The allocation cells at 100 and 1,000 pairs: ibias's draw by counts against one index
    per pair, best of `repeats` each, in one run (see the module docstring)."""
    figures: dict[str, float] = {}
    for n_pairs in (N_PAIRS, 10 * N_PAIRS):
        outcome, pairs, cells = _allocation_cells(np.random.default_rng(seed), n_pairs)
        once = partial(
            grouped_cluster_bootstrap_share_ci, outcome, pairs, cells, B=B,
            rng=np.random.default_rng(seed),
        )  # fmt: skip

        t_counts, _ = _best_of(repeats, once)
        kept = replicates.COUNTS_MIN_UNITS_PER_VALUE
        replicates.COUNTS_MIN_UNITS_PER_VALUE = 1 << 62
        try:
            t_indices, _ = _best_of(repeats, once)
        finally:
            replicates.COUNTS_MIN_UNITS_PER_VALUE = kept
        n_cells = int(cells.max()) + 1
        values = 3 * n_cells  # a complete pair's count choosing the candidate: 0, 1 or 2
        figures[f"pairs{n_pairs}_counts_s"] = t_counts
        figures[f"pairs{n_pairs}_indices_s"] = t_indices
        figures[f"pairs{n_pairs}_ratio"] = t_indices / t_counts
        figures[f"pairs{n_pairs}_ns_per_value"] = t_counts / (values * B) * 1e9
        figures[f"pairs{n_pairs}_ns_per_pair"] = t_indices / (n_cells * n_pairs * B) * 1e9
    return figures


def _scipy_loop(samples: list[np.ndarray], method: str, seed: int) -> list[tuple[float, float]]:
    rng = np.random.default_rng(seed)
    out = []
    for x in samples:
        res = sps.bootstrap((x,), np.mean, n_resamples=B, method=method, rng=rng)
        out.append((float(res.confidence_interval.low), float(res.confidence_interval.high)))
    return out


def _mean_gap(ours: dict[object, CI], theirs: list[tuple[float, float]]) -> float:
    """Mean |endpoint difference| relative to interval width: Monte-Carlo noise, ~0.02 at B=2000."""
    gaps = []
    for ci, (low, high) in zip(ours.values(), theirs, strict=True):
        width = ci.high - ci.low
        if width > 0:
            gaps.append((abs(ci.low - low) + abs(ci.high - high)) / (2 * width))
    return float(np.mean(gaps))


def _compare(
    figures: dict[str, float],
    label: str,
    repeats: int,
    ours: Callable[[], dict[object, CI]],
    theirs: Callable[[], list[tuple[float, float]]],
) -> None:
    t_ours, ours_cis = _best_of(repeats, ours)
    t_scipy, scipy_cis = _best_of(repeats, theirs)
    figures[f"{label}_ibias_s"] = t_ours
    figures[f"{label}_scipy_s"] = t_scipy
    figures[f"{label}_speedup"] = t_scipy / t_ours
    figures[f"{label}_mean_gap"] = _mean_gap(ours_cis, scipy_cis)


def run(repeats: int = 3, seed: int = 20250101) -> dict[str, float]:
    """Wall times (s), speed ratios (scipy / ibias) and mean endpoint gaps per scenario.

    Ours and scipy use different seeds, so the gap measures Monte-Carlo noise (with equal
    seeds and equal cell sizes both would draw the same indices and agree exactly)."""
    rng = np.random.default_rng(seed)
    figures: dict[str, float] = {}
    methods: tuple[tuple[str, Method, str], ...] = (
        ("", "percentile", "percentile"),
        ("_bca", "bca", "BCa"),
    )

    scores, wa_cells = _word_association_cells(rng)
    wa_samples = [s[~np.isnan(s)] for s in scores.reshape(-1, WA_TRIALS)]

    def ours_wa(method: Method) -> dict[object, CI]:
        return grouped_bootstrap_mean_ci(
            scores, wa_cells, B=B, method=method, rng=np.random.default_rng(seed)
        )

    outcome, pairs, cells = _allocation_cells(rng)
    pair_shares = [row.mean(axis=1) for row in outcome.reshape(-1, N_PAIRS, 2)]

    def ours_alloc(method: Method) -> dict[object, CI]:
        return grouped_cluster_bootstrap_share_ci(
            outcome, pairs, cells, B=B, method=method, rng=np.random.default_rng(seed)
        )

    for suffix, ours_method, scipy_method in methods:
        _compare(
            figures, "wa" + suffix, repeats,
            partial(ours_wa, ours_method), partial(_scipy_loop, wa_samples, scipy_method, seed + 1),
        )  # fmt: skip
        _compare(
            figures, "alloc" + suffix, repeats,
            partial(ours_alloc, ours_method),
            partial(_scipy_loop, pair_shares, scipy_method, seed + 1),
        )  # fmt: skip
    return figures


def main() -> None:
    counted = counts_against_indices()
    print(f"allocation cells (672), B = {B}: drawn by counts (ibias) against one index per pair")
    for n_pairs in (N_PAIRS, 10 * N_PAIRS):
        k = f"pairs{n_pairs}"
        print(
            f"  {n_pairs:,} pairs a cell: counts {counted[k + '_counts_s'] * 1000:.0f} ms, "
            f"indices {counted[k + '_indices_s'] * 1000:.0f} ms, ratio "
            f"{counted[k + '_ratio']:.1f}x ({counted[k + '_ns_per_value']:.0f} ns per value, "
            f"{counted[k + '_ns_per_pair']:.1f} ns per pair, per replicate)"
        )
    figures = run()
    rows = [
        ("word association, percentile (112 cells x 50 trials)", "wa"),
        ("word association, BCa (112 cells x 50 trials)", "wa_bca"),
        ("allocation, percentile (672 cells x 100 pairs x 2 orders)", "alloc"),
        ("allocation, BCa (672 cells x 100 pairs x 2 orders)", "alloc_bca"),
    ]
    print(f"bootstrap, B = {B}: ibias vectorised vs per-cell scipy.stats.bootstrap loop")
    for title, key in rows:
        print(
            f"  {title}: ibias {figures[key + '_ibias_s'] * 1000:.0f} ms, "
            f"scipy {figures[key + '_scipy_s'] * 1000:.0f} ms, "
            f"speed ratio {figures[key + '_speedup']:.1f}x "
            f"(mean endpoint gap {figures[key + '_mean_gap']:.3f} of the width)"
        )


if __name__ == "__main__":
    main()

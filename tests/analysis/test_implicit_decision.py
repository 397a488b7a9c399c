"""Implicit versus decision bias across models, against scipy and counting."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from ibias.analysis import implicit_decision as imp
from ibias.analysis.analyze import AnalysisResult
from ibias.analysis.load import load_store
from tests.analysis.test_tables import table


def _rho(x: np.ndarray, y: np.ndarray) -> float:
    return float(sps.spearmanr(x, y).statistic)


def _rho_vectorized(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """Spearman's rho along `axis` for scipy's resampling functions (fast enough to call with
    many resamples): Pearson's r of scipy's average ranks; checked against spearmanr below."""
    rx, ry = sps.rankdata(x, axis=axis), sps.rankdata(y, axis=axis)
    dx = rx - rx.mean(axis=axis, keepdims=True)
    dy = ry - ry.mean(axis=axis, keepdims=True)
    return (dx * dy).sum(axis=axis) / np.sqrt((dx**2).sum(axis=axis) * (dy**2).sum(axis=axis))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_spearman_matches_scipy_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 4, 9).astype(float)  # ties on purpose
    y = rng.normal(size=9)
    assert imp.spearman(x, y) == pytest.approx(_rho(x, y), rel=1e-12)
    assert float(_rho_vectorized(x, y)) == pytest.approx(_rho(x, y), rel=1e-12)
    assert math.isnan(imp.spearman(np.ones(5), y[:5]))


@pytest.mark.parametrize("n", [4, 6, 7, 8])
def test_exact_permutation_p_matches_scipy_permutation_test(n: int) -> None:
    rng = np.random.default_rng(n)
    x = rng.normal(size=n)
    y = 0.8 * x + rng.normal(size=n)
    y[0] = y[1]  # a tie
    # scipy permutes the pairing by permuting the one sample it is given (its own recipe for a
    # correlation test); y is held fixed by the statistic
    ref = sps.permutation_test(
        (x,), lambda xs, axis=-1: _rho_vectorized(xs, np.broadcast_to(y, xs.shape), axis),
        permutation_type="pairings", alternative="two-sided", n_resamples=np.inf,
        vectorized=True,
    )  # fmt: skip
    p, exact = imp.permutation_p(x, y, rng=np.random.default_rng(0))
    assert exact
    assert p == pytest.approx(ref.pvalue, rel=1e-9)


def test_monte_carlo_permutation_p_agrees_with_scipy_within_binomial_error() -> None:
    """12 models: 9,999 random pairings; scipy with 50,000 is the reference. p_hat's sd is at
    most sqrt(p (1 - p) / 9999) (0.005 at p = 0.5); tolerance 5 sd of both plus the offset."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=12)
    y = 0.3 * x + rng.normal(size=12)
    ref = sps.permutation_test(
        (x,), lambda xs, axis=-1: _rho_vectorized(xs, np.broadcast_to(y, xs.shape), axis),
        permutation_type="pairings", n_resamples=50_000, rng=np.random.default_rng(1),
        vectorized=True,
    ).pvalue  # fmt: skip
    p, exact = imp.permutation_p(x, y, rng=np.random.default_rng(2))
    assert not exact
    sd = math.sqrt(ref * (1 - ref) / 9999) + math.sqrt(ref * (1 - ref) / 50_000)
    assert abs(p - ref) <= 5 * sd + 2 / 10_000


def test_bootstrap_interval_over_models_matches_scipy_bootstrap() -> None:
    """Percentile interval of rho over resampled models vs scipy.stats.bootstrap (paired,
    20,000 resamples). With 15 models rho's bootstrap distribution is lumpy; the tolerance
    (0.1 of the width) is ~6 Monte Carlo sd of a 2.5% quantile at B = 4,000."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=15)
    y = 0.6 * x + rng.normal(size=15)
    low, high, undefined = imp.bootstrap_rho(x, y, B=4000, rng=np.random.default_rng(3))
    ref = sps.bootstrap(
        (x, y), _rho_vectorized, paired=True, vectorized=True, n_resamples=20000,
        method="percentile", rng=np.random.default_rng(4),
    ).confidence_interval  # fmt: skip
    width = ref.high - ref.low
    assert undefined == 0
    assert abs(low - ref.low) < 0.1 * width
    assert abs(high - ref.high) < 0.1 * width


def test_model_points_recount() -> None:
    wa = pl.DataFrame(
        {
            "model_id": ["a", "a", "a", "b", "b", "c"],
            "language": ["en"] * 6,
            "design": ["controlled"] * 6,
            "bias": [0.2, None, 0.4, -0.1, 0.1, 0.5],
        }
    )
    al = pl.DataFrame(
        {
            "model_id": ["a", "a", "a", "a", "b", "b", "d"],
            "language": ["en"] * 7,
            "design": ["controlled"] * 7,
            "chosen": ["cis", "cis", "trans", "none", "none", "none", "cis"],
        }
    )
    points = {r["model_id"]: r for r in imp.model_points(wa, al).iter_rows(named=True)}
    assert set(points) == {"a", "b"}  # c has no allocation, d no word association
    assert points["a"]["mean_bias"] == pytest.approx(0.3)
    assert points["a"]["scored"] == 2
    assert points["a"]["gap"] == pytest.approx(1 / 3)
    assert points["a"]["decided"] == 3
    assert points["b"]["gap"] is None and points["b"]["decided"] == 0


def test_the_analysis_writes_the_association_and_warns_under_8_models(
    analysed: AnalysisResult, sim_store: Path
) -> None:
    points = table(analysed, "implicit_vs_decision")
    summary = table(analysed, "implicit_vs_decision_summary")
    assert set(summary["language"].to_list()) == {"en", "es"}
    data = load_store(sim_store)
    for row in summary.iter_rows(named=True):
        sub = points.filter(pl.col("language") == row["language"]).sort("model_id")
        assert row["models"] == sub.height == 2
        expected = _rho(sub["mean_bias"].to_numpy(), sub["gap"].to_numpy())
        assert row["rho"] == pytest.approx(expected)
        assert row["warning"] and "fewer than 8 models" in row["warning"]
        assert row["perm_method"] == "exact, all pairings"
        assert (row["ci_level"], row["resampled"]) == (0.95, "model")
        # recount one model's gap from the view
        for m in sub.iter_rows(named=True):
            chosen = data.views["allocation"].filter(
                (pl.col("model_id") == m["model_id"]) & (pl.col("language") == row["language"])
            )["chosen"]
            cis, trans = int((chosen == "cis").sum()), int((chosen == "trans").sum())
            assert m["gap"] == pytest.approx((cis - trans) / (cis + trans))
    html = (analysed.out_dir / "report.html").read_text()
    assert "Implicit versus decision bias" in html
    assert "fewer than 8 models" in html

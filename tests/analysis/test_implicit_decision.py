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
from tests.analysis.conftest import build_store
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


def _loops_q(pairs: dict[str, tuple[float, float]]) -> float | None:
    """sum over ordered pairs k != l of d_k d_l over the same of c_k c_l, by double loop."""
    num = den = 0.0
    for k, (dk, ck) in pairs.items():
        for l, (dl, cl) in pairs.items():  # noqa: E741
            if k != l:
                num += dk * dl
                den += ck * cl
    return num / den if den > 0 else None


def _measure_by_loops(allocation: pl.DataFrame) -> dict[str, tuple[float, int]]:
    """model -> (mean over services of Q_s, services), from the rows one by one."""
    per: dict[str, dict[str, dict[str, list[float]]]] = {}
    for row in allocation.iter_rows(named=True):
        if row.get("identity_swap"):
            continue
        d = {"cis": 1.0, "trans": -1.0}.get(row["chosen"], 0.0)
        c = 1.0 if row["chosen"] in ("cis", "trans") else 0.0
        cell = per.setdefault(row["model_id"], {}).setdefault(row["service"], {})
        acc = cell.setdefault(row["pair_id"], [0.0, 0.0])
        acc[0] += d
        acc[1] += c
    out = {}
    for model, services in per.items():
        qs = [_loops_q({k: (v[0], v[1]) for k, v in pairs.items()}) for pairs in services.values()]
        kept = [q for q in qs if q is not None]
        if kept:
            out[model] = (sum(kept) / len(kept), len(kept))
    return out


def test_model_points_recount() -> None:
    wa = pl.DataFrame(
        {
            "model_id": ["a", "a", "a", "b", "b", "c"],
            "language": ["en"] * 6,
            "design": ["controlled"] * 6,
            "bias": [0.2, None, 0.4, -0.1, 0.1, 0.5],
        }
    )
    # a: service s1 favours cis in pairs p1, p2; s2 favours trans in p3, p4 (opposite ways, so
    # the pooled gap is 0 and the decision measure is not); the swapped arm's rows are ignored
    al = pl.DataFrame(
        {
            "model_id": ["a"] * 10 + ["b", "b", "d"],
            "language": ["en"] * 13,
            "design": ["controlled"] * 13,
            "service": ["s1"] * 4 + ["s2"] * 4 + ["s1", "s2", "s1", "s1", "s1"],
            "pair_id": ["p1", "p1", "p2", "p2", "p3", "p3", "p4", "p4",
                        "p1", "p3", "p1", "p2", "p1"],
            "chosen": ["cis", "cis", "cis", "none", "trans", "trans", "trans", "none", "trans",
                       "cis", "none", "none", "cis"],
            "identity_swap": [None] * 8 + [True, True] + [None] * 3,
        }
    )  # fmt: skip
    points = {r["model_id"]: r for r in imp.model_points(wa, al).iter_rows(named=True)}
    assert set(points) == {"a", "b"}  # c has no allocation, d no word association
    assert points["a"]["mean_bias"] == pytest.approx(0.3)
    assert points["a"]["scored"] == 2
    assert points["a"]["gap"] == pytest.approx(0.0)
    assert (points["a"]["n_cis"], points["a"]["n_trans"], points["a"]["decided"]) == (3, 3, 6)
    # s1: d = (2, 1), c = (2, 1): Q = 2 (2 x 1) / 2 (2 x 1) = 1; s2: d = (-2, -1): Q = 1 too
    assert points["a"]["decision_msq"] == pytest.approx(1.0)
    assert points["a"]["decision_rms"] == pytest.approx(1.0)
    assert points["a"]["services"] == 2
    assert (points["a"]["decision_msq"], 2) == pytest.approx(_measure_by_loops(al)["a"])
    assert points["b"]["gap"] is None and points["b"]["decided"] == 0
    assert points["b"]["decision_msq"] is None and points["b"]["services"] == 0


@pytest.mark.parametrize("seed", [0, 1])
def test_cross_pair_square_is_the_product_over_distinct_pairs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 12, size=(3, 9)).astype(float)
    d = np.array([[rng.integers(-n, n + 1) for n in row] for row in c.astype(int)], dtype=float)
    got = imp.cross_pair_square(d, c)
    for i in range(3):
        expected = _loops_q({str(k): (d[i, k], c[i, k]) for k in range(9)})
        assert got[i] == pytest.approx(expected, rel=1e-12)
    assert np.isnan(imp.cross_pair_square(np.array([3.0]), np.array([4.0])))


def _rosters(
    rng: np.random.Generator, q: np.ndarray, *, rosters: int, pairs: int, person_sd: float
) -> tuple[np.ndarray, np.ndarray]:
    """(d, c) of shape (rosters, services, pairs): each pair shown 6 times in each order, P(cis)
    = clip(sigmoid(logit q_s + pair effect) +- 0.1) (position bias), 5% refusals; the pair
    effect N(0, person_sd^2) drawn afresh for every pair (people from a population)."""
    shape = (rosters, q.shape[0], pairs)
    eta = np.log(q / (1 - q))[None, :, None] + person_sd * rng.normal(size=shape)
    base = 1.0 / (1.0 + np.exp(-eta))
    d = np.zeros(shape)
    c = np.zeros(shape)
    for shift in (0.1, -0.1):
        decided = rng.binomial(6, 0.95, size=shape)
        cis = rng.binomial(decided, np.clip(base + shift, 0.0, 1.0))
        d += 2 * cis - decided
        c += decided
    return d, c


@pytest.mark.parametrize("person_sd", [0.0, 0.8])
def test_decision_measure_is_zero_on_average_without_any_preference(person_sd: float) -> None:
    """No preference in any of 8 services (q = 0.5; with position bias, refusals and, in the
    second case, pair effects from a population with no preference): over 4,000 simulated
    rosters of 25 pairs per service the mean of the measure is 0 within 4 Monte Carlo SE, while
    the plain mean |gap| and mean gap^2 are far above 0."""
    rng = np.random.default_rng(11)
    d, c = _rosters(rng, np.full(8, 0.5), rosters=4000, pairs=25, person_sd=person_sd)
    msq = imp.cross_pair_square(d, c).mean(axis=1)
    se = msq.std(ddof=1) / math.sqrt(msq.size)
    assert abs(msq.mean()) <= 4 * se
    gaps = d.sum(axis=2) / c.sum(axis=2)
    assert np.abs(gaps).mean(axis=1).mean() > 0.03 > 20 * se
    assert (gaps**2).mean(axis=1).mean() > 10 * se


def test_opposite_preferences_add_up_instead_of_cancelling() -> None:
    """Four services at q = 0.7 and four at 0.3 (gaps +0.4 and -0.4 with both orders): the
    pooled gap is 0 but the measure's mean is 0.16 = 0.4^2 within 4 Monte Carlo SE."""
    rng = np.random.default_rng(12)
    d, c = _rosters(rng, np.array([0.7, 0.3] * 4), rosters=2000, pairs=25, person_sd=0.0)
    msq = imp.cross_pair_square(d, c).mean(axis=1)
    se = msq.std(ddof=1) / math.sqrt(msq.size)
    assert abs(msq.mean() - 0.16) <= 4 * se
    pooled = d.sum(axis=(1, 2)) / c.sum(axis=(1, 2))
    assert abs(pooled.mean()) < 0.01


SWAP_BODY = """
[[models]]
id = "sim-none"
provider = "simulator"
max_concurrency = 16

[models.sim]
position_bias = 0.1
refusal_rate = 0.05
person_sd = 0.5

[[models]]
id = "sim-both-ways"
provider = "simulator"
max_concurrency = 16

[models.sim]
word_bias = 0.7
allocation_cis = { gynecology = 0.85, hiv_testing = 0.15 }

[experiments.word_association]
languages = ["en"]
categories = ["emotions"]
trials_per_category = 5

[experiments.allocation]
languages = ["en"]
services = ["gynecology", "hiv_testing"]
pairs_per_service = 10
"""


@pytest.fixture(scope="module")
def swap_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same run (config and seed) without and with the identity-swap control."""
    without = build_store(tmp_path_factory.mktemp("no-swap"), SWAP_BODY, seed=3)
    with_swap = build_store(
        tmp_path_factory.mktemp("swap"),
        SWAP_BODY.replace("pairs_per_service = 10", "pairs_per_service = 10\nidentity_swap = true"),
        seed=3,
    )
    return without, with_swap


def test_the_decision_measure_uses_the_original_arm_only(swap_pair: tuple[Path, Path]) -> None:
    without, with_swap = (load_store(s).views for s in swap_pair)
    assert without["allocation"]["identity_swap"].null_count() == without["allocation"].height
    swapped = with_swap["allocation"].filter(pl.col("identity_swap").fill_null(False))
    assert swapped.height == without["allocation"].height > 0
    a = imp.model_points(without["word_association"], without["allocation"])
    b = imp.model_points(with_swap["word_association"], with_swap["allocation"])
    assert a.height == 2
    assert a.equals(b)
    for row in a.iter_rows(named=True):
        expected = _measure_by_loops(without["allocation"].drop("design"))[row["model_id"]]
        assert (row["decision_msq"], row["services"]) == pytest.approx(expected)
    # pooling the swapped arm in (the old inputs) would have moved them
    pooled = imp.decision_measure(with_swap["allocation"])
    assert not pooled.sort("model_id")["decision_msq"].equals(
        imp.decision_measure(without["allocation"]).sort("model_id")["decision_msq"]
    )
    # the model biased both ways: its pooled gap is small, its decision measure is not
    both = a.filter(pl.col("model_id") == "sim-both-ways").row(0, named=True)
    assert abs(both["gap"]) < 0.3 < both["decision_rms"]


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
        expected = _rho(sub["mean_bias"].to_numpy(), sub["decision_rms"].to_numpy())
        assert row["rho"] == pytest.approx(expected)
        assert row["warning"] and "fewer than 8 models" in row["warning"]
        assert row["perm_method"] == "exact, all pairings"
        assert (row["ci_level"], row["resampled"], row["target"]) == (
            0.95,
            "model",
            "models like these",
        )
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

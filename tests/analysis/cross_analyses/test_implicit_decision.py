"""Implicit versus decision bias across models, against scipy and counting."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from ibias.analysis.analyze import AnalysisResult
from ibias.analysis.cross_analyses import implicit_decision as imp
from ibias.analysis.load import load_store
from ibias.analysis.units.allocation.load import PAIR_PEOPLE
from tests.analysis.conftest import build_store, query
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


Pair = tuple[float, float, object, object]
"""(d, c, cis person, trans person) of one pair; a None person is a person of its own."""


def _loops_q(pairs: dict[str, Pair]) -> float | None:
    """sum over ordered pairs k != l that share no person of d_k d_l over the same of c_k c_l,
    by double loop."""
    num = den = 0.0
    for k, (dk, ck, ik, jk) in pairs.items():
        for l, (dl, cl, il, jl) in pairs.items():  # noqa: E741
            shared = (ik is not None and ik == il) or (jk is not None and jk == jl)
            if k != l and not shared:
                num += dk * dl
                den += ck * cl
    return num / den if den > 0 else None


def _measure_by_loops(
    allocation: pl.DataFrame, people: pl.DataFrame | None = None
) -> dict[str, tuple[float, int]]:
    """model -> (mean over services of Q_s, services), from the rows one by one; a pair's
    people from `people` (its first row), else its own."""
    who: dict[str, tuple[object, object]] = {}
    for row in people.iter_rows(named=True) if people is not None else []:
        who.setdefault(row["pair_id"], (row["cis_person"], row["trans_person"]))
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
        qs = [
            _loops_q({k: (v[0], v[1], *who.get(k, (None, None))) for k, v in pairs.items()})
            for pairs in services.values()
        ]
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
    # with people: p1 and p2 share their cis person, so s1 has no two disjoint pairs and no
    # Q; s2's pairs share no one (p4's trans person is unknown: a person of its own); p9 is
    # not in the allocation
    people = pl.DataFrame(
        {
            "pair_id": ["p1", "p2", "p3", "p4", "p9"],
            "cis_person": ["x", "x", "y", "z", "x"],
            "trans_person": ["u", "v", "u", None, "u"],
        }
    )
    known = {r["model_id"]: r for r in imp.model_points(wa, al, people).iter_rows(named=True)}
    assert known["a"]["services"] == 1
    assert known["a"]["decision_msq"] == pytest.approx(1.0)
    assert (known["a"]["decision_msq"], 1) == pytest.approx(_measure_by_loops(al, people)["a"])
    assert known["b"]["decision_msq"] is None


@pytest.mark.parametrize("seed", [0, 1])
def test_cross_pair_square_is_the_product_over_distinct_pairs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 12, size=(3, 9)).astype(float)
    d = np.array([[rng.integers(-n, n + 1) for n in row] for row in c.astype(int)], dtype=float)
    got = imp.cross_pair_square(d, c)
    for i in range(3):
        expected = _loops_q({str(k): (d[i, k], c[i, k], None, None) for k in range(9)})
        assert got[i] == pytest.approx(expected, rel=1e-12)
    assert np.isnan(imp.cross_pair_square(np.array([3.0]), np.array([4.0])))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_disjoint_products_are_the_double_loop_over_pairs_sharing_no_person(seed: int) -> None:
    """S^2 - sum Dc^2 - sum Dt^2 + sum Dct^2 (and the same in c) against a double loop over
    ordered pairs of pairs with four different people, per group: few people so that pairs
    share them, repeated (cis, trans) pairs, unknown people (-1), a group with one pair and an
    empty group."""
    rng = np.random.default_rng(seed)
    n, groups = 60, 6
    group = rng.integers(0, groups - 2, size=n)
    group[0] = groups - 2  # exactly one pair in group 4; group 5 has none
    cis = rng.integers(-1, 4, size=n)
    trans = rng.integers(-1, 4, size=n)
    c = rng.integers(0, 5, size=n).astype(float)
    d = 2.0 * rng.binomial(c.astype(int), 0.6) - c  # d has the parity of c
    num, den = imp.disjoint_products(d, c, group, cis, trans, groups)
    for g in range(groups):
        loop_num = loop_den = 0.0
        for k in range(n):
            for l in range(n):  # noqa: E741
                if k == l or group[k] != g or group[l] != g:
                    continue
                if (cis[k] >= 0 and cis[k] == cis[l]) or (trans[k] >= 0 and trans[k] == trans[l]):
                    continue
                loop_num += d[k] * d[l]
                loop_den += c[k] * c[l]
        assert num[g] == pytest.approx(loop_num, abs=1e-9)
        assert den[g] == pytest.approx(loop_den, abs=1e-9)
    assert num[groups - 2] == den[groups - 2] == num[groups - 1] == den[groups - 1] == 0.0
    # the same through the per-service frame function
    frame = pl.DataFrame(
        {
            "model_id": "m", "language": "en", "service": [f"s{g}" for g in group],
            "pair_id": [f"p{k}" for k in range(n)],
            "d": d, "c": c,
        }
    ).with_columns(  # one trial row per decided choice, no-choice rows for the rest
        pl.struct("d", "c").map_elements(
            lambda r: ["cis"] * int((r["c"] + r["d"]) / 2) + ["trans"] * int((r["c"] - r["d"]) / 2)
            + ["none"],
            return_dtype=pl.List(pl.String),
        ).alias("chosen")
    ).explode("chosen")  # fmt: skip
    people = pl.DataFrame(
        {
            "pair_id": [f"p{k}" for k in range(n)],
            "cis_person": [None if i < 0 else f"c{i}" for i in cis],
            "trans_person": [None if j < 0 else f"t{j}" for j in trans],
        }
    )
    got = imp.decision_measure(frame, people).row(0, named=True)
    qs = [num[g] / den[g] for g in range(groups) if den[g] > 0]
    assert got["services"] == len(qs) > 0
    assert got["decision_msq"] == pytest.approx(np.mean(qs), rel=1e-12)
    assert (got["decision_msq"], len(qs)) == pytest.approx(_measure_by_loops(frame, people)["m"])


def test_unknown_people_give_back_the_product_over_all_distinct_pairs() -> None:
    rng = np.random.default_rng(4)
    c = rng.integers(0, 9, size=(2, 5, 12)).astype(float)
    d = rng.integers(-2, 3, size=c.shape) * np.minimum(c, 2)
    unknown = np.full(c.shape, -1)
    old = (d.sum(-1) ** 2 - (d * d).sum(-1)) / (c.sum(-1) ** 2 - (c * c).sum(-1))
    np.testing.assert_allclose(imp.cross_pair_square(d, c), old, rtol=1e-12)
    np.testing.assert_allclose(imp.cross_pair_square(d, c, unknown, unknown), old, rtol=1e-12)
    people = pl.DataFrame(
        {"pair_id": ["x"], "cis_person": ["a"], "trans_person": ["b"]}
    )  # names no pair of the frame
    frame = pl.DataFrame(
        {
            "model_id": "m", "language": "en", "service": ["s"] * 6,
            "pair_id": ["p1", "p1", "p2", "p2", "p3", "p3"],
            "chosen": ["cis", "cis", "cis", "trans", "trans", "none"],
        }
    )  # fmt: skip
    for who in (None, people):
        row = imp.decision_measure(frame, who).row(0, named=True)
        # d = (2, 0, -1), c = (2, 2, 1): (1 - 5) / (25 - 9)
        assert row["decision_msq"] == pytest.approx(-4 / 16)
        assert row["decision_rms"] == pytest.approx(-0.5)


# The design of the unbiasedness check (issue 32): one roster of 25 cis and 25 trans people; 8
# services, each its own random pairing of them into 100 distinct pairs (each person in 4 pairs
# of a service); person effects u_c, v_t ~ N(0, sd^2) on the logit, the same in every service;
# both orders, 2 trials per order, a position effect of 0.3 for the first-named candidate, 7%
# no choice; P(cis | decided) = expit(beta_s + u_c - v_t +- 0.3).
PEOPLE, DEGREE, SERVICES, TRIALS, POSITION, NO_CHOICE = 25, 4, 8, 2, 0.3, 0.07


def _expit(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _shared_rosters(
    rng: np.random.Generator, beta: np.ndarray, *, rosters: int, person_sd: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(d, c, cis, trans) of shape (rosters, services, pairs) in the design above. A service's
    pairing: cis person a[i] with trans persons b[(i + j) % 25], j = 0..3, for random
    permutations a, b (a circulant: distinct pairs, every person in 4)."""
    shape = (rosters, beta.shape[0], PEOPLE * DEGREE)
    a = rng.permuted(np.tile(np.arange(PEOPLE), (*shape[:2], 1)), axis=2)
    b = rng.permuted(np.tile(np.arange(PEOPLE), (*shape[:2], 1)), axis=2)
    i = np.repeat(np.arange(PEOPLE), DEGREE)
    j = np.tile(np.arange(DEGREE), PEOPLE)
    cis = a[:, :, i]
    trans = np.take_along_axis(b, np.broadcast_to((i + j) % PEOPLE, shape), axis=2)
    u = person_sd * rng.normal(size=(rosters, PEOPLE))
    v = person_sd * rng.normal(size=(rosters, PEOPLE))
    roster = np.arange(rosters)[:, None, None]
    eta = beta[None, :, None] + u[roster, cis] - v[roster, trans]
    d = np.zeros(shape)
    c = np.zeros(shape)
    for shift in (POSITION, -POSITION):
        decided = rng.binomial(TRIALS, 1.0 - NO_CHOICE, size=shape)
        chose_cis = rng.binomial(decided, _expit(eta + shift))
        d += 2 * chose_cis - decided
        c += decided
    return d, c, cis, trans


def _population_gap(beta: np.ndarray, person_sd: float) -> np.ndarray:
    """2 S(beta) - 1, S(b) = E[(expit(b + D + g) + expit(b + D - g)) / 2], D ~ N(0, 2 sd^2),
    by 80-node Gauss-Hermite (probabilists')."""
    x, w = np.polynomial.hermite_e.hermegauss(80)
    w = w / w.sum()
    z = math.sqrt(2.0) * person_sd * x[:, None] + beta[None, :]
    s = (w[:, None] * (_expit(z + POSITION) + _expit(z - POSITION)) / 2).sum(axis=0)
    return 2.0 * s - 1.0


def test_population_gap_by_quadrature_matches_numerical_integration() -> None:
    from scipy import integrate

    for sd in (0.6, 1.5):
        scale = math.sqrt(2.0) * sd
        for b in (0.0, 0.85, -0.85):
            s = integrate.quad(
                lambda z, b=b, scale=scale: sps.norm.pdf(z)
                * float((_expit(np.array(b + scale * z + POSITION))
                         + _expit(np.array(b + scale * z - POSITION))) / 2),
                -12, 12, epsabs=1e-13,
            )[0]  # fmt: skip
            assert _population_gap(np.array([b]), sd)[0] == pytest.approx(2 * s - 1, abs=1e-10)


ROSTERS = 1000


@pytest.mark.parametrize("person_sd", [0.0, 0.6, 1.5])
@pytest.mark.parametrize("scenario", ["none", "two-services"])
def test_decision_msq_is_unbiased_under_person_effects(scenario: str, person_sd: float) -> None:
    """Over 1,000 rosters of the design above, the mean of `decision_msq` (the mean over the 8
    services of Q_s, by the analysis' `cross_pair_square` with the pairs' people) is within 3
    Monte Carlo standard errors of the mean of the 8 squared population gaps: 0 with no
    preference anywhere; with services at +0.85 and -0.85 on the logit and six at 0, 2 G^2 / 8
    (G = 2 S(0.85) - 1; S(-0.85) = 1 - S(0.85)). The earlier form, cross-products over all
    distinct pairs (the same function without people), is within 3 SE without person effects
    but more than 3 SE too high at person sd 1.5, so the check tells the two apart."""
    beta = np.zeros(SERVICES)
    if scenario == "two-services":
        beta[:2] = (0.85, -0.85)
    seed = 100 + 10 * int(scenario == "two-services") + int(10 * person_sd)
    d, c, cis, trans = _shared_rosters(
        np.random.default_rng(seed), beta, rosters=ROSTERS, person_sd=person_sd
    )
    # the design: 100 distinct pairs per service, every person in 4 of them
    assert np.unique(cis[0, 0] * PEOPLE + trans[0, 0]).size == PEOPLE * DEGREE
    assert (np.bincount(cis[0, 3], minlength=PEOPLE) == DEGREE).all()
    assert (np.bincount(trans[0, 3], minlength=PEOPLE) == DEGREE).all()
    value = float(np.mean(_population_gap(beta, person_sd) ** 2))
    if scenario == "none":
        assert value == pytest.approx(0.0, abs=1e-15)
    new = imp.cross_pair_square(d, c, cis, trans).mean(axis=1)
    old = imp.cross_pair_square(d, c).mean(axis=1)
    assert np.isfinite(new).all()
    se_new = new.std(ddof=1) / math.sqrt(ROSTERS)
    se_old = old.std(ddof=1) / math.sqrt(ROSTERS)
    root = np.sign(new) * np.sqrt(np.abs(new))  # decision_rms
    root_old = np.sign(old) * np.sqrt(np.abs(old))
    print(
        f"{scenario} sd={person_sd}: value {value:.5f}, new {new.mean():.5f} ± {se_new:.5f} "
        f"(root {root.mean():+.4f}), old {old.mean():.5f} ± {se_old:.5f} "
        f"(root {root_old.mean():+.4f})"
    )
    assert abs(new.mean() - value) <= 3 * se_new
    if person_sd == 0.0:
        assert abs(old.mean() - value) <= 3 * se_old
    if person_sd == 1.5:
        assert old.mean() - value > 3 * se_old


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
    (without, people), (with_swap, people_swap) = (
        (data.views, data.extras[PAIR_PEOPLE]) for data in map(load_store, swap_pair)
    )
    assert people.sort("pair_id").equals(people_swap.sort("pair_id"))  # the original arm's
    assert without["allocation"]["identity_swap"].null_count() == without["allocation"].height
    swapped = with_swap["allocation"].filter(pl.col("identity_swap").fill_null(False))
    assert swapped.height == without["allocation"].height > 0
    a = imp.model_points(without["word_association"], without["allocation"], people)
    b = imp.model_points(with_swap["word_association"], with_swap["allocation"], people)
    assert a.height == 2
    assert a.equals(b)
    for row in a.iter_rows(named=True):
        expected = _measure_by_loops(without["allocation"].drop("design"), people)
        assert (row["decision_msq"], row["services"]) == pytest.approx(expected[row["model_id"]])
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
    people = _store_people(sim_store)
    # pairs of a service share people here, so the people matter
    shares = (
        data.views["allocation"]
        .select(pl.col("service", "pair_id").cast(pl.String))  # read as categoricals
        .unique()
        .join(people, on="pair_id")
    )
    assert shares.height > shares.unique(["service", "cis_person"]).height
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
        # the decision measure by double loop over pairs that share no person, each pair's
        # people read from the trials here (not from the analysis' frame)
        views = data.views["allocation"].filter(pl.col("language") == row["language"])
        by_loops = _measure_by_loops(views.drop("design", strict=False), people)
        for m in sub.iter_rows(named=True):
            assert (m["decision_msq"], m["services"]) == pytest.approx(by_loops[m["model_id"]])
            assert m["decision_rms"] == pytest.approx(
                math.copysign(math.sqrt(abs(m["decision_msq"])), m["decision_msq"])
            )
    html = (analysed.out_dir / "report.html").read_text()
    assert "Implicit versus decision bias" in html
    assert "fewer than 8 models" in html


def _store_people(store: Path) -> pl.DataFrame:
    """pair_id, cis_person, trans_person of the store's original-arm allocation trials."""
    rows = query(
        store,
        "SELECT DISTINCT item->>'$.pair_id', item->>'$.candidates[0].identity', "
        "item->>'$.candidates[0].person_id', item->>'$.candidates[1].person_id' FROM trials "
        "WHERE experiment = 'allocation' AND NOT coalesce(CAST(coords->>'$.identity_swap' AS "
        "BOOLEAN), false)",
    )
    people: dict[str, set[tuple[str, str]]] = {}
    for pair, first, a, b in rows:  # one row per order shown
        people.setdefault(pair, set()).add((a, b) if first == "cis" else (b, a))
    assert all(len(v) == 1 for v in people.values())  # one pair of people per pair_id
    return pl.DataFrame(
        [(k, *v.pop()) for k, v in people.items()],
        schema=["pair_id", "cis_person", "trans_person"],
        orient="row",
    )

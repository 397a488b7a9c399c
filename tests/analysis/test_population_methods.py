"""The t methods of `analysis.population` against plain matrix algebra.

The reference builds, per cell, the trial-level regression the ratio estimator is (an
intercept; for a paired difference one mean per arm), and for each clustering (cis person,
trans person, pair) the textbook sandwich
(X'X)^-1 sum_g X_g' A_g e_g e_g' A_g X_g (X'X)^-1 with A_g = (I - H_gg)^(-1/2) from an
eigendecomposition (CR2, Bell & McCaffrey) or A_g = I times G/(G-1) (CR1); V = V_cis + V_trans -
V_pair (Cameron, Gelbach & Miller), the larger one-way term when that is not positive; Student's
t from scipy on min(G_cis, G_trans) - 1 degrees of freedom. Nothing is shared with the engine
but the inputs. The corrected pigeonhole is checked against the plain pigeonhole replicates of
tests/analysis/test_population.py."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ibias.analysis import population
from ibias.analysis.population import grouped_population_ci
from ibias.runner.commands.analyze import POPULATION_METHODS
from tests.analysis.test_population import _design, _naive


def _inverse_sqrt(m: np.ndarray) -> np.ndarray:
    w, v = np.linalg.eigh(m)
    return (v / np.sqrt(w)) @ v.T


def _complete(y, c, t, tr):  # type: ignore[no-untyped-def]
    keep = np.zeros(y.shape[0], dtype=bool)
    for pc, pt in set(zip(c.tolist(), t.tolist(), strict=True)):
        here = (c == pc) & (t == pt)
        if tr[here].any() and (~tr[here]).any():
            keep |= here
    return keep


def _reference(
    d: dict[str, np.ndarray], cell: int, paired: bool, cr2: bool, null: float = 0.0
) -> tuple[float, float, float, float, float, float]:
    """(estimate, se, df, low, high, p) of one cell of `_design` by matrix algebra."""
    m = (d["cell"] == cell) & ~np.isnan(d["y"])
    return reference(d["y"][m], d["cis"][m], d["trans"][m], d["treated"][m], paired, cr2, null)


def reference(
    y: np.ndarray,
    c: np.ndarray,
    t: np.ndarray,
    tr: np.ndarray,
    paired: bool,
    cr2: bool,
    null: float = 0.0,
) -> tuple[float, float, float, float, float, float]:
    """(estimate, se, df, low, high, p) of one cell's trials (no NaN) by matrix algebra."""
    if paired:
        keep = _complete(y, c, t, tr)
        y, c, t, tr = y[keep], c[keep], t[keep], tr[keep]
        x = np.column_stack([tr, ~tr]).astype(float)
        contrast = np.array([1.0, -1.0])
    else:
        x = np.ones((y.shape[0], 1))
        contrast = np.array([1.0])
    bread = np.linalg.inv(x.T @ x)
    beta = bread @ x.T @ y
    e = y - x @ beta
    pair = np.unique(np.column_stack([c, t]), axis=0, return_inverse=True)[1].reshape(-1)

    def one_way(cluster: np.ndarray) -> tuple[float, int]:
        groups = np.unique(cluster)
        meat = np.zeros((x.shape[1], x.shape[1]))
        for g in groups:
            i = cluster == g
            xg, eg = x[i], e[i]
            if cr2:
                a = _inverse_sqrt(np.eye(i.sum()) - xg @ bread @ xg.T)
                u = xg.T @ a @ eg
            else:
                u = xg.T @ eg
            meat += np.outer(u, u)
        v = float(contrast @ bread @ meat @ bread @ contrast)
        if not cr2:
            v *= len(groups) / (len(groups) - 1)
        return v, len(groups)

    (v_c, g_c), (v_t, g_t), (v_p, _) = one_way(c), one_way(t), one_way(pair)
    v = v_c + v_t - v_p
    if v <= 0:
        v = max(v_c, v_t)
    se, df = float(np.sqrt(v)), float(min(g_c, g_t) - 1)
    est = float(contrast @ beta)
    q = stats.t.ppf(0.975, df)
    p = 2 * stats.t.sf(abs(est - null) / se, df)
    return est, se, df, est - q * se, est + q * se, float(p)


@pytest.mark.parametrize("paired", [False, True])
@pytest.mark.parametrize("method", ["two-way-cr2", "two-way-cr1"])  # min(G) - 1 df
def test_t_methods_equal_the_matrix_sandwich(paired: bool, method: str) -> None:
    for seed in (3, 4, 5):
        d = _design(np.random.default_rng(seed))
        got = grouped_population_ci(
            d["y"], d["cis"], d["trans"], d["cell"],
            treated=d["treated"] if paired else None, method=method, null=0.1,
        )  # fmt: skip
        for cell in (0, 1, 2):
            est, se, df, low, high, p = _reference(d, cell, paired, method.endswith("cr2"), 0.1)
            g = got[cell]
            assert g.method == method
            assert g.estimate == pytest.approx(est, abs=1e-12)
            assert g.se == pytest.approx(se, rel=1e-9)
            assert g.df == df
            assert (g.low, g.high) == (pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9))
            assert g.p == pytest.approx(p, rel=1e-9)


def _satterthwaite_reference(d: dict[str, np.ndarray], cell: int, paired: bool) -> float:
    """tr(A)^2 / tr(A^2) for A = M Omega M at the trial level: M = I - H the residual maker of
    the cell's regression, Omega = sum over cis and trans clusters minus pair clusters of
    u u' with u the cluster's CR2 score weights (1 / (N_arm sqrt(1 - h)) on its trials of an
    arm, signed by the contrast)."""
    m = (d["cell"] == cell) & ~np.isnan(d["y"])
    y, c, t, tr = d["y"][m], d["cis"][m], d["trans"][m], d["treated"][m]
    if paired:
        keep = _complete(y, c, t, tr)
        y, c, t, tr = y[keep], c[keep], t[keep], tr[keep]
        x = np.column_stack([tr, ~tr]).astype(float)
        arms = [(tr, 1.0), (~tr, -1.0)]
    else:
        x = np.ones((y.shape[0], 1))
        arms = [(np.ones(y.shape[0], dtype=bool), 1.0)]
    resid = np.eye(y.shape[0]) - x @ np.linalg.inv(x.T @ x) @ x.T
    pair = np.unique(np.column_stack([c, t]), axis=0, return_inverse=True)[1].reshape(-1)
    omega = np.zeros((y.shape[0], y.shape[0]))
    for codes, s in ((c, 1.0), (t, 1.0), (pair, -1.0)):
        for g in np.unique(codes):
            u = np.zeros(y.shape[0])
            for arm, sign in arms:
                here = arm & (codes == g)
                h = here.sum() / arm.sum()
                u[here] = sign / (arm.sum() * np.sqrt(1.0 - h))
            omega += s * np.outer(u, u)
    a = resid @ omega @ resid
    return float(np.trace(a) ** 2 / np.sum(a * a.T))


@pytest.mark.parametrize("paired", [False, True])
def test_satterthwaite_df_is_the_quadratic_forms_ratio(paired: bool) -> None:
    for seed in (3, 4):
        d = _design(np.random.default_rng(seed))
        got = grouped_population_ci(
            d["y"], d["cis"], d["trans"], d["cell"],
            treated=d["treated"] if paired else None, method="two-way-cr2-satterthwaite",
        )  # fmt: skip
        plain = grouped_population_ci(
            d["y"], d["cis"], d["trans"], d["cell"],
            treated=d["treated"] if paired else None, method="two-way-cr2",
        )  # fmt: skip
        for cell in (0, 1, 2):
            expected = min(_satterthwaite_reference(d, cell, paired), plain[cell].df)
            assert got[cell].df == pytest.approx(expected, rel=1e-9)
            assert got[cell].se == plain[cell].se  # the same variance, another reference
            q = stats.t.ppf(0.975, got[cell].df)
            assert got[cell].high == pytest.approx(got[cell].estimate + q * got[cell].se)


def test_satterthwaite_df_of_the_controlled_design_is_about_14() -> None:
    """25 x 25 people, each in 4 of 100 pairs, two trials per pair: under independent trials
    the two-way variance is about as noisy as a chi-square on 14 df, not the 24 of
    min(G) - 1 (which is why the plain CR2 test rejected a true null 6-7% of the time)."""
    n = 25
    cis = np.array([i for _ in range(4) for i in range(n)])
    trans = np.array([(i + o) % n for o in (0, 5, 11, 17) for i in range(n)])
    y = np.tile([1.0, -1.0], 100)
    got = grouped_population_ci(
        y, np.repeat(cis, 2), np.repeat(trans, 2), np.zeros(200),
        method="two-way-cr2-satterthwaite",
    )[0]  # fmt: skip
    assert 13.0 < got.df < 15.0


def test_cr2_shares_of_a_hand_sized_cell() -> None:
    """Two cis x two trans persons, one trial per pair: every term by hand. Scores e_k / N with
    N = 4 and outcomes 1, 0, 1, 1 (mean 0.75): cis clusters hold 2 of 4 trials (h = 1/2),
    trans clusters 2 of 4, pairs 1 of 4."""
    y = np.array([1.0, 0.0, 1.0, 1.0])
    cis, trans = np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])
    got = grouped_population_ci(y, cis, trans, np.zeros(4), method="two-way-cr2")[0]
    e = (y - 0.75) / 4
    v_cis = ((e[0] + e[1]) ** 2 + (e[2] + e[3]) ** 2) / 0.5
    v_trans = ((e[0] + e[2]) ** 2 + (e[1] + e[3]) ** 2) / 0.5
    v_pair = float(np.sum(e**2)) / 0.75
    v = v_cis + v_trans - v_pair
    v = v if v > 0 else max(v_cis, v_trans)
    assert got.se == pytest.approx(np.sqrt(v))
    assert got.df == 1.0


@pytest.mark.parametrize("paired", [False, True])
def test_corrected_pigeonhole_is_the_replicate_variance_less_twice_the_pair_variance(
    paired: bool,
) -> None:
    d = _design(np.random.default_rng(3))
    B, cell = 400, 2
    m = d["cell"] == cell
    got = grouped_population_ci(
        d["y"][m], d["cis"][m], d["trans"][m], d["cell"][m],
        treated=d["treated"][m] if paired else None, method="pigeonhole-corrected", B=B,
        rng=np.random.default_rng(11),
    )[cell]  # fmt: skip
    reps = _naive(d, cell, paired, B, 11)
    var_boot = float(np.var(reps[np.isfinite(reps)], ddof=1))
    # The pair-level (CR0) variance: squared per-pair scores, by hand.
    mm = m & ~np.isnan(d["y"])
    y, c, t, tr = d["y"][mm], d["cis"][mm], d["trans"][mm], d["treated"][mm]
    if paired:
        keep = _complete(y, c, t, tr)
        y, c, t, tr = y[keep], c[keep], t[keep], tr[keep]
        arms = [(tr, 1.0), (~tr, -1.0)]
    else:
        arms = [(np.ones_like(tr), 1.0)]
    v_pair = 0.0
    for pc, pt in set(zip(c.tolist(), t.tolist(), strict=True)):
        here = (c == pc) & (t == pt)
        score = sum(sign * np.sum(y[here & arm] - y[arm].mean()) / arm.sum() for arm, sign in arms)
        v_pair += score**2
    expected = max(var_boot - 2 * v_pair, v_pair)
    assert got.se == pytest.approx(np.sqrt(expected), rel=1e-9)
    assert got.B == B and got.method == "pigeonhole-corrected"


def test_methods_are_named_alike_everywhere_and_bad_names_fail() -> None:
    import inspect

    import ibias

    assert POPULATION_METHODS == population.METHODS
    default = inspect.signature(ibias.analyze).parameters["population_method"].default
    assert default == population.DEFAULT_METHOD
    assert population.METHODS[0] == population.DEFAULT_METHOD
    assert set(population.CI_LABELS) == set(population.METHODS)
    from ibias.analysis.units.allocation.figures import (
        POPULATION_METHOD_TEXT,  # the report's words for each
    )

    assert set(POPULATION_METHOD_TEXT) == set(population.METHODS)
    with pytest.raises(ValueError, match="method: expected one of"):
        grouped_population_ci([1.0], [0], [0], [0], method="bogus")
    with pytest.raises(ValueError, match="needs a generator"):
        grouped_population_ci([1.0], [0], [0], [0], method="pigeonhole")


def test_degenerate_cells() -> None:
    """One person a side: no interval; every trial alike: a zero-width interval and p 0 (1 at
    the null)."""
    one = grouped_population_ci([1.0, 0.0], [0, 0], [0, 0], [0, 0])[0]
    assert np.isnan(one.low) and np.isnan(one.p) and one.estimate == 0.5
    same = grouped_population_ci(np.ones(4), [0, 0, 1, 1], [0, 1, 0, 1], np.zeros(4))[0]
    assert (same.low, same.high, same.p) == (1.0, 1.0, 0.0)
    at_null = grouped_population_ci(np.ones(4), [0, 0, 1, 1], [0, 1, 0, 1], np.zeros(4), null=1.0)[
        0
    ]
    assert at_null.p == 1.0

"""The pigeonhole bootstrap against a plain re-implementation: per replicate, list the drawn
cis and trans persons (with repetition), keep every trial of every pair whose two persons were
both drawn, once per (cis draw, trans draw) combination, and compute the statistic on that data
set. Only the order of the random draws is shared with the engine."""

from __future__ import annotations

import numpy as np
import pytest

from ibias.analysis.population import grouped_pigeonhole_ci


def _design(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Two cells over the same 6 x 5 persons and 9 pairs (a cell repeats people), plus a
    third cell with other pairs; 2 trials per pair per condition."""
    pairs = [(0, 0), (0, 1), (1, 1), (2, 2), (3, 2), (3, 4), (4, 3), (5, 0), (5, 4)]
    rows = []
    for cell in (0, 1, 2):
        use = pairs if cell < 2 else pairs[:6]
        for c, t in use:
            for treated in (False, True):
                for _ in range(2):
                    rows.append((cell, c, t, treated))
    arr = np.array(rows, dtype=object)
    y = rng.choice([1.0, -1.0, np.nan], size=len(rows), p=[0.5, 0.4, 0.1])
    return {
        "cell": arr[:, 0].astype(int),
        "cis": arr[:, 1].astype(int),
        "trans": arr[:, 2].astype(int) + 100,
        "treated": arr[:, 3].astype(bool),
        "y": y,
    }


def _naive(d: dict[str, np.ndarray], cell: int, paired: bool, B: int, seed: int) -> np.ndarray:
    mask = (d["cell"] == cell) & ~np.isnan(d["y"])
    y, c, t, tr = d["y"][mask], d["cis"][mask], d["trans"][mask], d["treated"][mask]
    if paired:  # pairs seen under both conditions only
        keep = np.zeros(y.shape[0], dtype=bool)
        for pc, pt in set(zip(c.tolist(), t.tolist(), strict=True)):
            here = (c == pc) & (t == pt)
            if tr[here].any() and (~tr[here]).any():
                keep |= here
        y, c, t, tr = y[keep], c[keep], t[keep], tr[keep]
    cis_people, trans_people = np.unique(c), np.unique(t)
    rng = np.random.default_rng(seed)
    cis_draws = rng.integers(0, cis_people.size, size=(B, cis_people.size))
    trans_draws = rng.integers(0, trans_people.size, size=(B, trans_people.size))
    reps = []
    for b in range(B):
        ys, trs = [], []
        for ci in cis_people[cis_draws[b]]:
            for tj in trans_people[trans_draws[b]]:
                here = (c == ci) & (t == tj)
                ys.extend(y[here].tolist())
                trs.extend(tr[here].tolist())
        yy, tt = np.array(ys), np.array(trs, dtype=bool)
        with np.errstate(invalid="ignore", divide="ignore"):
            if paired:
                reps.append(
                    np.mean(yy[tt]) - np.mean(yy[~tt]) if tt.any() and (~tt).any() else np.nan
                )
            else:
                reps.append(np.mean(yy) if yy.size else np.nan)
    return np.array(reps)


@pytest.mark.parametrize("paired", [False, True])
def test_pigeonhole_matches_a_plain_implementation(paired: bool) -> None:
    d = _design(np.random.default_rng(3))
    B = 300
    for cell in (2,):  # a cell with its own structure draws first from a fresh generator
        mask = d["cell"] == cell
        got = grouped_pigeonhole_ci(
            d["y"][mask], d["cis"][mask], d["trans"][mask], d["cell"][mask],
            treated=d["treated"][mask] if paired else None, B=B,
            rng=np.random.default_rng(11),
        )[cell]  # fmt: skip
        reps = _naive(d, cell, paired, B, 11)
        usable = reps[np.isfinite(reps)]
        low, high = np.quantile(usable, [0.025, 0.975])
        assert got.low == pytest.approx(low, abs=1e-12)
        assert got.high == pytest.approx(high, abs=1e-12)
        assert got.undefined == B - usable.size
        k = min(np.sum(usable <= 0), np.sum(usable >= 0))
        assert got.p == pytest.approx(min(1.0, 2 * (k + 1) / (usable.size + 1)))


def test_estimates_and_counts_are_the_plain_ratios() -> None:
    d = _design(np.random.default_rng(5))
    got = grouped_pigeonhole_ci(
        d["y"], d["cis"], d["trans"], d["cell"], B=50, rng=np.random.default_rng(0)
    )
    for cell in (0, 1, 2):
        m = d["cell"] == cell
        assert got[cell].estimate == pytest.approx(np.nanmean(d["y"][m]))
        assert got[cell].n_dropped == int(np.isnan(d["y"][m]).sum())
        assert got[cell].pairs == (9 if cell < 2 else 6)
    paired = grouped_pigeonhole_ci(
        d["y"], d["cis"], d["trans"], d["cell"], treated=d["treated"], B=50,
        rng=np.random.default_rng(0),
    )  # fmt: skip
    m = (d["cell"] == 0) & ~np.isnan(d["y"])
    y, c, t, tr = d["y"][m], d["cis"][m], d["trans"][m], d["treated"][m]
    both = [
        (c == pc) & (t == pt)
        for pc, pt in set(zip(c.tolist(), t.tolist(), strict=True))
        if tr[(c == pc) & (t == pt)].any() and (~tr[(c == pc) & (t == pt)]).any()
    ]
    keep = np.logical_or.reduce(both)
    expected = np.mean(y[keep & tr]) - np.mean(y[keep & ~tr])
    assert paired[0].estimate == pytest.approx(expected)
    assert paired[0].n_dropped == int(np.isnan(d["y"][d["cell"] == 0]).sum() + (~keep).sum())


def test_cells_with_the_same_people_share_one_draw_and_constant_cells_are_exact() -> None:
    y = np.ones(8)
    cis, trans = np.array([0, 0, 1, 1] * 2), np.array([5, 6, 5, 6] * 2)
    cells = np.array([0] * 4 + [1] * 4)
    got = grouped_pigeonhole_ci(y, cis, trans, cells, null=1.0, B=20, rng=np.random.default_rng(1))
    assert got[0].low == got[0].high == 1.0
    assert got[1].p == 1.0
    with pytest.raises(ValueError, match="B:"):
        grouped_pigeonhole_ci(y, cis, trans, cells, B=0, rng=np.random.default_rng(1))


@pytest.mark.parametrize("method", ["pigeonhole", "two-way-cr2-satterthwaite"])
@pytest.mark.parametrize("paired", [False, True])
def test_rows_summed_per_pair_give_the_trial_level_results(method: str, paired: bool) -> None:
    """A table may pass its trials summed per pair and condition (`trials`: how many each row
    stands for, the outcome their sum): the same pairs, sums and results, exactly."""
    from ibias.analysis.population import grouped_population_ci

    rng = np.random.default_rng(11)
    n = 900
    cis, trans = rng.integers(0, 12, n), rng.integers(0, 12, n)
    cell = rng.integers(0, 3, n)
    treated = rng.random(n) < 0.5
    y = (rng.random(n) < 0.4).astype(float)
    kw = {"method": method, "B": 300}
    trial = grouped_population_ci(
        y,
        cis,
        trans,
        cell,
        treated=treated if paired else None,
        rng=np.random.default_rng(5),
        **kw,  # type: ignore[arg-type]
    )
    key = np.column_stack([cell, cis, trans, treated])
    rows, inverse = np.unique(key, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    summed = np.bincount(inverse, weights=y)
    count = np.bincount(inverse)
    assert count.max() > 1  # some rows stand for several trials
    grouped = grouped_population_ci(
        summed,
        rows[:, 1],
        rows[:, 2],
        rows[:, 0],
        treated=rows[:, 3].astype(bool) if paired else None,
        rng=np.random.default_rng(5),
        trials=count,
        **kw,  # type: ignore[arg-type]
    )
    assert grouped == trial
    with pytest.raises(ValueError, match="trials"):
        grouped_population_ci(y, cis, trans, cell, trials=np.zeros(n), **kw)  # type: ignore[arg-type]

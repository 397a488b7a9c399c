"""The simulation study that chose the population method (issue 32), short form and whole grid.

`bench/population_study.py` simulates rosters of people in a design's shape (person effects
u ~ N(0, sd^2) on the logit, both orders, a position effect 0.3, a no-choice rate, an identity
effect beta) and measures a population method's coverage of the population gap among decided
trials, its false positives (beta = 0) and power (beta > 0) at alpha 0.05, and the power of an
oracle z-test (the estimates' own spread across rosters). `python -m bench.bench_population`
runs the whole grid and writes `bench/population_grid.csv`.

`make test`: three cells of 1,000 rosters (at least 200 are asked for; the bounds below are
4-6 Monte Carlo SEs from the nominal rates; under a second a cell), 2 trials per order and 10%
no choice, which puts the oracle's power near 0.85 in the effect cell (0.85 at 2,000 rosters;
0.73 with 1 trial per order): regular degrees sd 1.5 null, irregular degrees sd 1.5 null,
regular sd 0.6 beta 0.6.
For `population.DEFAULT_METHOD`: coverage >= 0.91, false positives <= 0.08, power >= 0.8 x the
oracle's. `make torture` (IBIAS_TORTURE=1): the whole grid at 1,000 rosters a cell, the same
rosters as the bench (seeds are fixed per cell), asserting issue 32's acceptance rule in every
cell except those of `DOCUMENTED_FAILURES`, where the documented figure must be reproduced
within 3 Monte Carlo SEs. The authors' shapes need the stimuli pack (`IBIAS_STIMULI`, else
`../shared/data/paper_stimuli`); without it they are skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from scipy.special import expit

from ibias.analysis import population

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load_study() -> ModuleType:
    """`bench/population_study.py` by its path: putting the checkout's root on `sys.path`
    would make `runner`, `analysis`, ... importable as top-level modules
    (tests/test_namespace.py forbids that)."""
    name = "ibias_bench_population_study"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCH / "population_study.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


ps: Any = _load_study()

TORTURE = os.environ.get("IBIAS_TORTURE") == "1"
SHORT_ROSTERS = 1000
GRID_ROSTERS = 1000
B = 1000
GRID_CSV = BENCH / "population_grid.csv"

SHORT_CELLS = [
    ps.Cell("regular", 2, 1.5, 0.10, 0.0),
    ps.Cell("irregular", 2, 1.5, 0.10, 0.0),
    ps.Cell("regular", 2, 0.6, 0.10, 0.6),
]

# The cells where the default method misses the acceptance rule in bench/population_grid.csv
# (1,000 rosters a cell), with the figures docs/paper-statistics.md quotes: metric -> value,
# metrics "coverage", "rejection" (false positives: these are null cells) and "power_ratio".
# `python -m bench.bench_population --documented-failures` prints it from the committed table.
DOCUMENTED_FAILURES: dict[str, dict[str, float]] = {
    "regular/k1/sd1.5/nc0.1/b0.3": {"power_ratio": 0.832},
    "regular/k1/sd1.5/nc0.1/b0.6": {"power_ratio": 0.833},
    "regular/k2/sd0.6/nc0.1/b0.3": {"power_ratio": 0.826},
    "regular/k2/sd1.5/nc0.1/b0.6": {"power_ratio": 0.819},
    "irregular/k1/sd1.5/nc0.1/b0.6": {"power_ratio": 0.833},
    "irregular/k2/sd0.6/nc0.1/b0.3": {"power_ratio": 0.803},
    "irregular/k2/sd1.5/nc0.1/b0.3": {"power_ratio": 0.824},
    "authors-hiv/k2/sd0/nc0.1/b0": {"rejection": 0.063},
    "authors-hiv/k2/sd1.5/nc0.1/b0.6": {"power_ratio": 0.829},
    "authors-breast_ultrasound/k1/sd0/nc0.05/b0.3": {"power_ratio": 0.761},
    "authors-breast_ultrasound/k1/sd0/nc0.1/b0.6": {"coverage": 0.929},
    "authors-breast_ultrasound/k1/sd0.6/nc0.05/b0.3": {"power_ratio": 0.835},
    "authors-breast_ultrasound/k1/sd0.6/nc0.05/b0.6": {"power_ratio": 0.836},
    "authors-breast_ultrasound/k1/sd0.6/nc0.1/b0.3": {"power_ratio": 0.817},
    "authors-breast_ultrasound/k1/sd1.5/nc0.05/b0.3": {"power_ratio": 0.75},
    "authors-breast_ultrasound/k1/sd1.5/nc0.1/b0.3": {"power_ratio": 0.787},
    "authors-breast_ultrasound/k2/sd0/nc0.1/b0": {"rejection": 0.062},
    "authors-breast_ultrasound/k2/sd0.6/nc0.1/b0.3": {"power_ratio": 0.811},
    "authors-breast_ultrasound/k2/sd0.6/nc0.1/b0.6": {"power_ratio": 0.846},
    "authors-breast_ultrasound/k2/sd1.5/nc0.05/b0.3": {"power_ratio": 0.768},
    "authors-breast_ultrasound/k2/sd1.5/nc0.1/b0.6": {"power_ratio": 0.786},
}


def _designs(shapes: list[str]) -> dict[str, ps.Design]:
    designs, skipped = ps.load_designs(shapes)
    if skipped:
        pytest.skip("; ".join(f"{shape}: {reason}" for shape, reason in skipped.items()))
    return designs


def test_population_value_matches_monte_carlo() -> None:
    """The quadrature against 10^6 draws of the person gap D = u_cis - u_trans, within 4 Monte
    Carlo SEs (an independent computation of the same expectation)."""
    rng = np.random.default_rng(71)
    for sd in (0.0, 0.6, 1.5):
        d = rng.normal(0, sd, 10**6) - rng.normal(0, sd, 10**6)
        for beta in ps.BETA:
            draws = 2 * (expit(beta + d + ps.GAMMA) + expit(beta + d - ps.GAMMA)) / 2 - 1
            se = float(np.std(draws) / np.sqrt(draws.shape[0]))
            gap = ps.population_gap(beta, sd)
            assert abs(gap - float(np.mean(draws))) <= 4 * se + 1e-12, (sd, beta, gap)
    assert ps.population_gap(0.0, 1.5) == pytest.approx(0.0, abs=1e-12)


def test_designs_have_the_stated_shapes() -> None:
    regular, irregular = ps.regular_design(), ps.irregular_design()
    for design in (regular, irregular):
        assert (design.pairs, design.n_cis, design.n_trans) == (100, 25, 25)
        assert len(set(zip(design.cis_of.tolist(), design.trans_of.tolist(), strict=True))) == 100
    assert all((d == 4).all() for d in regular.degrees())
    for degrees in irregular.degrees():
        assert sorted(np.bincount(degrees).tolist()) == [0, 0, 5, 5, 5, 5, 5]
    again = ps.irregular_design()
    assert np.array_equal(again.cis_of, irregular.cis_of)
    assert np.array_equal(again.trans_of, irregular.trans_of)


def test_authors_shapes() -> None:
    designs = _designs(["authors-hiv", "authors-breast_ultrasound"])
    hiv, breast = designs["authors-hiv"], designs["authors-breast_ultrasound"]
    assert (hiv.pairs, hiv.n_cis, hiv.n_trans) == (100, 46, 44)
    assert (breast.pairs, breast.n_cis, breast.n_trans) == (100, 27, 20)
    assert max(int(d.max()) for d in breast.degrees()) == 11


def test_simulated_trials_follow_the_cell() -> None:
    """The generator: every pair in both orders k times, the no-choice rate, and the mean gap
    over rosters at its population value (within 4 Monte Carlo SEs)."""
    design = ps.regular_design()
    cell = ps.Cell("regular", 2, 1.5, 0.10, 0.6)
    trials = ps.simulate(design, cell, 400, np.random.default_rng(3))
    assert trials.outcome.shape[0] == 400 * 100 * 2 * 2
    assert np.mean(np.isnan(trials.outcome)) == pytest.approx(0.10, abs=0.005)
    decided = ~np.isnan(trials.outcome)
    sums = np.bincount(trials.roster[decided], weights=trials.outcome[decided])
    gaps = sums / np.bincount(trials.roster[decided])
    se = float(np.std(gaps, ddof=1) / np.sqrt(gaps.shape[0]))
    assert abs(float(np.mean(gaps)) - ps.population_gap(0.6, 1.5)) <= 4 * se


def _measure(cell: ps.Cell, design: ps.Design, rosters: int) -> dict[str, Any]:
    [row] = ps.measure_cell(design, cell, rosters, [population.DEFAULT_METHOD], B)
    return row


@pytest.mark.parametrize("cell", SHORT_CELLS, ids=lambda c: c.name)
def test_default_method_short_study(cell: ps.Cell) -> None:
    design = _designs([cell.shape])[cell.shape]
    row = _measure(cell, design, SHORT_ROSTERS)
    assert row["undefined"] == 0, row
    assert row["coverage"] >= 0.91, row
    if cell.null:
        assert row["rejection"] <= 0.08, row
    else:
        assert row["rejection"] >= 0.8 * row["oracle_rejection"], row


def test_documented_failures_match_the_committed_grid() -> None:
    """`DOCUMENTED_FAILURES` lists exactly the cells where the committed grid's default method
    misses the rule, with its figures."""
    if not GRID_CSV.is_file():
        pytest.skip(f"{GRID_CSV} is absent")
    rows = ps.read_grid(GRID_CSV)
    assert any(r["method"] == population.DEFAULT_METHOD for r in rows), GRID_CSV
    assert ps.documented_failures(rows, population.DEFAULT_METHOD) == DOCUMENTED_FAILURES


@pytest.mark.skipif(not TORTURE, reason="the whole grid runs in `make torture` (IBIAS_TORTURE=1)")
@pytest.mark.parametrize("shape", ps.SHAPES)
def test_default_method_whole_grid(shape: str) -> None:
    design = _designs([shape])[shape]
    cells = [c for c in ps.grid() if c.shape == shape]
    problems: list[str] = []
    for cell in cells:
        row = _measure(cell, design, GRID_ROSTERS)
        documented = DOCUMENTED_FAILURES.get(cell.name, {})
        # The rule where nothing is documented; the documented figure within 3 MC SEs where it is.
        problems.extend(f.describe() for f in ps.failures(row) if f.metric not in documented)
        for metric, value in documented.items():
            se = float(row[f"{metric}_se"])
            if abs(float(row[metric]) - value) > 3 * se:
                problems.append(
                    f"{cell.name}: {metric} {row[metric]:.3f}, documented {value:.3f} "
                    f"(3 MC SEs = {3 * se:.3f})"
                )
    assert not problems, "\n".join(problems)

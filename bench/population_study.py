"""The simulation study that chooses the population ("people like these") method.

Issue 32's grid: designs x trials per order x person sd x no-choice rate x identity effect.

Designs (pairs of one cis person and one trans person, every pair distinct):
- `regular`: 25 cis x 25 trans people, 100 pairs, each person in exactly 4 pairs (pair k links
  cis person c with trans person (c + o) mod 25, o in {0, 5, 11, 17}: the controlled design);
- `irregular`: 25 x 25 people, 100 pairs, person degrees 2 to 6 (five people of each degree a
  side), a fixed seeded construction (`irregular_design`);
- `authors-hiv`, `authors-breast_ultrasound`: the authors' released pairs of those services
  (the stimuli pack's `allocation/pairs.csv`: hiv 46 cis x 44 trans people, breast_ultrasound
  27 x 20 with degrees up to 11). The pack is read from `../shared/data/paper_stimuli` beside
  the repository, or from `$IBIAS_STIMULI`; without it those cells are skipped with the reason.

A roster draws person effects u ~ N(0, sd^2) on the logit scale for every person. Every pair is
shown `trials_per_order` times with the cis person listed first and as often with the trans
person first; a trial makes no choice with probability `no_choice`, and otherwise chooses the
cis person with probability expit(beta + u_cis - u_trans + gamma * (cis listed first ? 1 : -1)),
gamma = 0.3 (a position effect, always on). The statistic is the gap among decided trials
(cis chosen +1, trans chosen -1, no choice left out); its population value is 2 S(beta) - 1,
S(b) = E[(expit(b + D + gamma) + expit(b + D - gamma)) / 2], D ~ N(0, 2 sd^2), by Gauss-Hermite
quadrature.

Per method and cell (`summarize`): coverage of the population value by the 95% interval, the
rejection rate of p < 0.05 (false positives where beta = 0, power where beta > 0), the mean
width, the oracle's rejection rate (a z-test |estimate| / sd > 1.96 with sd the standard
deviation of the point estimates across the cell's rosters), power / oracle power, and the Monte
Carlo standard error of each. One call of the analysis function covers a whole cell: each roster
is one group, with person ids unique per roster.

Seeds are fixed per cell (and per cell and method for a method's own resampling), derived from
the cell's name, so `bench.bench_population` and the torture test measure the same rosters.
"""

from __future__ import annotations

import csv
import fnmatch
import os
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit

from ibias.analysis import population

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]

GAMMA = 0.3
LEVEL = 0.95
ALPHA = 0.05
Z_ORACLE = 1.959963984540054
BASE_SEED = 32
IRREGULAR_SEED = 2032

SHAPES = ("regular", "irregular", "authors-hiv", "authors-breast_ultrasound")
TRIALS_PER_ORDER = (1, 2)
PERSON_SD = (0.0, 0.6, 1.5)
NO_CHOICE = (0.05, 0.10)
BETA = (0.0, 0.3, 0.6)

# The acceptance rule of issue 32.
COVERAGE_RANGE = (0.93, 0.97)
MAX_FALSE_POSITIVE = 0.06
MIN_POWER_RATIO = 0.85

STIMULI_ENV = "IBIAS_STIMULI"
AUTHORS_PREFIX = "authors-"


# ---------------------------------------------------------------------------------------------
# Designs


@dataclass(frozen=True)
class Design:
    """Pairs as (cis person, trans person) indices 0..n_cis-1, 0..n_trans-1, one row a pair."""

    name: str
    cis_of: IntArray
    trans_of: IntArray

    @property
    def pairs(self) -> int:
        return int(self.cis_of.shape[0])

    @property
    def n_cis(self) -> int:
        return int(self.cis_of.max()) + 1

    @property
    def n_trans(self) -> int:
        return int(self.trans_of.max()) + 1

    def degrees(self) -> tuple[IntArray, IntArray]:
        """Pairs per cis person and per trans person."""
        return (
            np.bincount(self.cis_of, minlength=self.n_cis).astype(np.intp),
            np.bincount(self.trans_of, minlength=self.n_trans).astype(np.intp),
        )


def regular_design(n: int = 25, offsets: Sequence[int] = (0, 5, 11, 17)) -> Design:
    """n x n people, each in len(offsets) pairs: cis c with trans (c + o) mod n."""
    cis = np.array([c for _ in offsets for c in range(n)], dtype=np.intp)
    trans = np.array([(c + o) % n for o in offsets for c in range(n)], dtype=np.intp)
    return Design("regular", cis, trans)


def irregular_design(seed: int = IRREGULAR_SEED, n: int = 25, swaps: int = 20_000) -> Design:
    """n x n people, 100 distinct pairs, degrees 2, 3, 4, 5, 6 (n / 5 people each, both sides).

    Built deterministically: the bipartite Havel-Hakimi construction (each cis person, largest
    degree first, takes the trans people with the most remaining degree) realises the degree
    sequences with distinct pairs; then `swaps` random degree-preserving double-edge swaps that
    keep the pairs distinct mix it."""
    rng = np.random.default_rng(seed)
    base = np.repeat(np.arange(2, 7), n // 5)
    deg_cis, deg_trans = rng.permutation(base), rng.permutation(base)
    remaining = deg_trans.astype(np.int64).copy()
    edges: list[tuple[int, int]] = []
    for c in np.argsort(-deg_cis, kind="stable"):
        order = np.lexsort((rng.random(n), -remaining))  # most remaining first, ties random
        chosen = order[: deg_cis[c]]
        if np.any(remaining[chosen] <= 0):
            raise AssertionError("degree sequences not realisable")  # Gale-Ryser holds here
        remaining[chosen] -= 1
        edges.extend((int(c), int(t)) for t in chosen)
    present = set(edges)
    for _ in range(swaps):
        i, j = rng.integers(0, len(edges), size=2)
        (a, b), (c2, d) = edges[i], edges[j]
        if a == c2 or b == d or (a, d) in present or (c2, b) in present:
            continue
        present -= {(a, b), (c2, d)}
        present |= {(a, d), (c2, b)}
        edges[i], edges[j] = (a, d), (c2, b)
    edges.sort()
    arr = np.array(edges, dtype=np.intp)
    return Design("irregular", arr[:, 0].copy(), arr[:, 1].copy())


def stimuli_root() -> Path:
    """The stimuli pack: `$IBIAS_STIMULI`, else `../shared/data/paper_stimuli` beside the repo."""
    override = os.environ.get(STIMULI_ENV)
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[1].parent / "shared/data/paper_stimuli"


def authors_design(service: str, root: Path | None = None) -> Design:
    """The authors' released pairs of one service (`allocation/pairs.csv` of the stimuli pack),
    persons renumbered 0.. in order of their ids. FileNotFoundError when the pack is absent."""
    path = (root or stimuli_root()) / "allocation" / "pairs.csv"
    if not path.is_file():
        raise FileNotFoundError(f"the stimuli pack's pairs ({path}) are absent")
    with path.open(newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["service"] == service]
    if not rows:
        raise FileNotFoundError(f"no pairs of service {service!r} in {path}")
    _, cis = np.unique([int(r["cis_person"]) for r in rows], return_inverse=True)
    _, trans = np.unique([int(r["trans_person"]) for r in rows], return_inverse=True)
    if len({(int(a), int(b)) for a, b in zip(cis, trans, strict=True)}) != len(rows):
        raise ValueError(f"service {service!r}: repeated pairs")
    return Design(
        AUTHORS_PREFIX + service,
        cis.reshape(-1).astype(np.intp),
        trans.reshape(-1).astype(np.intp),
    )


def load_designs(shapes: Iterable[str] = SHAPES) -> tuple[dict[str, Design], dict[str, str]]:
    """The designs that can be built, and for the others the reason they are skipped."""
    designs: dict[str, Design] = {}
    skipped: dict[str, str] = {}
    for shape in shapes:
        if shape == "regular":
            designs[shape] = regular_design()
        elif shape == "irregular":
            designs[shape] = irregular_design()
        elif shape.startswith(AUTHORS_PREFIX):
            try:
                designs[shape] = authors_design(shape.removeprefix(AUTHORS_PREFIX))
            except FileNotFoundError as exc:
                skipped[shape] = f"{exc}; set {STIMULI_ENV} to the stimuli pack to run it"
        else:
            raise ValueError(f"unknown shape {shape!r}")
    return designs, skipped


# ---------------------------------------------------------------------------------------------
# Cells, data, population values


@dataclass(frozen=True)
class Cell:
    shape: str
    trials_per_order: int
    person_sd: float
    no_choice: float
    beta: float

    @property
    def name(self) -> str:
        return (
            f"{self.shape}/k{self.trials_per_order}/sd{self.person_sd:g}"
            f"/nc{self.no_choice:g}/b{self.beta:g}"
        )

    @property
    def null(self) -> bool:
        return self.beta == 0.0


def grid(shapes: Iterable[str] = SHAPES) -> list[Cell]:
    """Every cell of the grid, in a fixed order."""
    return [
        Cell(shape, k, sd, nc, beta)
        for shape in shapes
        for k in TRIALS_PER_ORDER
        for sd in PERSON_SD
        for nc in NO_CHOICE
        for beta in BETA
    ]


def select(cells: Iterable[Cell], patterns: Sequence[str] | None) -> list[Cell]:
    """The cells whose name matches any of the glob patterns (all without patterns); a pattern
    without a glob character matches as a substring."""
    if not patterns:
        return list(cells)
    globs = [p if any(ch in p for ch in "*?[") else f"*{p}*" for p in patterns]
    return [c for c in cells if any(fnmatch.fnmatchcase(c.name, g) for g in globs)]


def seed_of(*parts: str) -> list[int]:
    """A fixed seed sequence from names (crc32 is stable across runs, unlike hash())."""
    return [BASE_SEED, *(zlib.crc32(p.encode()) for p in parts)]


def expected_choice(b: float, sd: float, gamma: float = GAMMA, nodes: int = 120) -> float:
    """S(b) = E[(expit(b + D + gamma) + expit(b + D - gamma)) / 2], D ~ N(0, 2 sd^2): the
    probability of choosing the cis person among decided trials, over people and both orders."""
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    d = x * np.sqrt(2.0) * sd
    w = w / w.sum()
    return float(np.sum(w * (expit(b + d + gamma) + expit(b + d - gamma)) / 2.0))


def population_gap(beta: float, sd: float, gamma: float = GAMMA) -> float:
    """The population value of the gap among decided trials: 2 S(beta) - 1."""
    return 2.0 * expected_choice(beta, sd, gamma) - 1.0


@dataclass(frozen=True)
class Trials:
    """The trials of a cell's rosters, flat: outcome (+1 cis chosen, -1 trans chosen, NaN no
    choice), roster, and person ids unique per roster (cis and trans numbered separately)."""

    outcome: FloatArray
    roster: IntArray
    cis: IntArray
    trans: IntArray
    rosters: int


def simulate(design: Design, cell: Cell, rosters: int, rng: np.random.Generator) -> Trials:
    """`rosters` independent rosters of `design` under `cell`'s parameters."""
    k = cell.trials_per_order
    u_cis = rng.normal(0.0, cell.person_sd, (rosters, design.n_cis))
    u_trans = rng.normal(0.0, cell.person_sd, (rosters, design.n_trans))
    # Trial layout (roster, pair, order, repeat); order 0 lists the cis person first.
    shape = (rosters, design.pairs, 2, k)
    roster = np.broadcast_to(np.arange(rosters)[:, None, None, None], shape).reshape(-1)
    pair = np.broadcast_to(np.arange(design.pairs)[None, :, None, None], shape).reshape(-1)
    cis_first = np.broadcast_to(np.array([True, False])[None, None, :, None], shape).reshape(-1)
    cis_of, trans_of = design.cis_of[pair], design.trans_of[pair]
    eta = (
        cell.beta
        + u_cis[roster, cis_of]
        - u_trans[roster, trans_of]
        + np.where(cis_first, GAMMA, -GAMMA)
    )
    n = eta.shape[0]
    decided = rng.random(n) >= cell.no_choice
    chose_cis = rng.random(n) < expit(eta)
    outcome = np.where(decided, np.where(chose_cis, 1.0, -1.0), np.nan)
    return Trials(
        outcome,
        roster.astype(np.intp),
        (roster * design.n_cis + cis_of).astype(np.intp),
        (roster * design.n_trans + trans_of).astype(np.intp),
        rosters,
    )


# ---------------------------------------------------------------------------------------------
# Methods


def methods() -> tuple[str, ...]:
    """Every population method the analysis offers."""
    return tuple(population.METHODS)


def default_method() -> str:
    return str(population.DEFAULT_METHOD)


@dataclass(frozen=True)
class Intervals:
    """Per roster: estimate, interval, p-value of 0 (arrays in roster order)."""

    estimate: FloatArray
    low: FloatArray
    high: FloatArray
    p: FloatArray


def run_method(trials: Trials, method: str, B: int, rng: np.random.Generator) -> Intervals:
    """One call of the analysis over all the cell's rosters (each roster one group)."""
    found: dict[Any, Any] = population.grouped_population_ci(
        trials.outcome,
        trials.cis,
        trials.trans,
        trials.roster,
        null=0.0,
        method=method,
        B=B,
        level=LEVEL,
        rng=rng,
    )
    keys = list(range(trials.rosters))
    return Intervals(
        *(
            np.array([getattr(found[k], field) for k in keys], dtype=np.float64)
            for field in ("estimate", "low", "high", "p")
        )
    )


# ---------------------------------------------------------------------------------------------
# Metrics


def _rate(hits: NDArray[np.bool_]) -> tuple[float, float]:
    """A proportion and its Monte Carlo standard error."""
    n = hits.shape[0]
    rate = float(np.mean(hits))
    return rate, float(np.sqrt(rate * (1.0 - rate) / n))


def _ratio_se(a: NDArray[np.bool_], b: NDArray[np.bool_]) -> float:
    """Delta-method SE of mean(a) / mean(b) over the same rosters (their covariance counted)."""
    n = a.shape[0]
    pa, pb = float(np.mean(a)), float(np.mean(b))
    if pb == 0.0:
        return float("nan")
    cov = np.cov(a.astype(np.float64), b.astype(np.float64), ddof=1) / n
    var = cov[0, 0] / pb**2 + pa**2 * cov[1, 1] / pb**4 - 2.0 * pa * cov[0, 1] / pb**3
    return float(np.sqrt(max(var, 0.0)))


def summarize(cell: Cell, method: str, found: Intervals, truth: float) -> dict[str, Any]:
    """One row of the table: the cell, the method, and its metrics with Monte Carlo SEs.

    A roster without an interval (NaN: no decided trial) counts as not covering and not
    rejecting; `undefined` counts them. `rejection` is the false-positive rate in a null cell
    and the power in an effect cell."""
    r = found.estimate.shape[0]
    defined = np.isfinite(found.low) & np.isfinite(found.high)
    covered = defined & (found.low <= truth) & (truth <= found.high)
    rejected = np.isfinite(found.p) & (found.p < ALPHA)
    est = found.estimate[np.isfinite(found.estimate)]
    oracle_sd = float(np.std(est, ddof=1))
    oracle = np.isfinite(found.estimate) & (np.abs(found.estimate) / oracle_sd > Z_ORACLE)
    width = (found.high - found.low)[defined]
    coverage, coverage_se = _rate(covered)
    rejection, rejection_se = _rate(rejected)
    oracle_rejection, oracle_se = _rate(oracle)
    ratio = rejection / oracle_rejection if oracle_rejection > 0 else float("nan")
    return {
        "cell": cell.name,
        "shape": cell.shape,
        "trials_per_order": cell.trials_per_order,
        "person_sd": cell.person_sd,
        "no_choice": cell.no_choice,
        "beta": cell.beta,
        "method": method,
        "rosters": r,
        "population_value": truth,
        "mean_estimate": float(np.mean(est)),
        "coverage": coverage,
        "coverage_se": coverage_se,
        "rejection": rejection,
        "rejection_se": rejection_se,
        "width": float(np.mean(width)),
        "width_se": float(np.std(width, ddof=1) / np.sqrt(width.shape[0])),
        "oracle_sd": oracle_sd,
        "oracle_rejection": oracle_rejection,
        "oracle_rejection_se": oracle_se,
        "power_ratio": ratio,
        "power_ratio_se": _ratio_se(rejected, oracle),
        "undefined": int(r - np.count_nonzero(defined)),
    }


def measure_cell(
    design: Design,
    cell: Cell,
    rosters: int,
    method_names: Sequence[str],
    B: int,
) -> list[dict[str, Any]]:
    """Simulate one cell's rosters once and measure every method on them (fixed seeds)."""
    if design.name != cell.shape:
        raise ValueError(f"design {design.name!r} for a cell of shape {cell.shape!r}")
    trials = simulate(design, cell, rosters, np.random.default_rng(seed_of(cell.name)))
    truth = population_gap(cell.beta, cell.person_sd)
    rows = []
    for method in method_names:
        rng = np.random.default_rng(seed_of(cell.name, method))
        rows.append(summarize(cell, method, run_method(trials, method, B, rng), truth))
    return rows


# ---------------------------------------------------------------------------------------------
# The acceptance rule


@dataclass(frozen=True)
class Failure:
    """One miss of the acceptance rule: the row's `metric` ("coverage", "rejection": false
    positives in a null cell, "power_ratio": power / the oracle's in an effect cell), its
    value and Monte Carlo SE, and the bound it misses."""

    cell: str
    metric: str
    value: float
    se: float
    bound: float

    @property
    def label(self) -> str:
        return {"rejection": "false positives", "power_ratio": "power / oracle"}.get(
            self.metric, self.metric
        )

    def describe(self) -> str:
        by = abs(self.value - self.bound)
        side = "<" if self.value < self.bound else ">"
        return (
            f"{self.cell}: {self.label} {self.value:.3f} (MC SE {self.se:.3f}) {side} "
            f"{self.bound:g} by {by:.3f}"
        )


def failures(row: dict[str, Any]) -> list[Failure]:
    """The acceptance rule's failures of one row: coverage in [0.93, 0.97] in every cell, false
    positives <= 0.06 in a null cell, power >= 0.85 x the oracle's in an effect cell."""
    out: list[Failure] = []
    cell = str(row["cell"])
    low, high = COVERAGE_RANGE
    cov = float(row["coverage"])
    if not low <= cov <= high:
        out.append(
            Failure(cell, "coverage", cov, float(row["coverage_se"]), low if cov < low else high)
        )
    if float(row["beta"]) == 0.0:
        fp = float(row["rejection"])
        if fp > MAX_FALSE_POSITIVE:
            out.append(
                Failure(cell, "rejection", fp, float(row["rejection_se"]), MAX_FALSE_POSITIVE)
            )
    else:
        ratio = float(row["power_ratio"])
        if not ratio >= MIN_POWER_RATIO:  # NaN (an oracle without power) fails too
            out.append(
                Failure(cell, "power_ratio", ratio, float(row["power_ratio_se"]), MIN_POWER_RATIO)
            )
    return out


def documented_failures(rows: Iterable[dict[str, Any]], method: str) -> dict[str, dict[str, float]]:
    """Per cell where `method` misses the rule, the missed metrics' figures (rounded to 3
    places): the form of the torture test's `DOCUMENTED_FAILURES`."""
    out: dict[str, dict[str, float]] = {}
    for row in rows:
        if row["method"] == method:
            for f in failures(row):
                out.setdefault(f.cell, {})[f.metric] = round(f.value, 3)
    return out


def read_grid(path: Path) -> list[dict[str, Any]]:
    """A grid table written by `bench.bench_population`, numbers as floats (ints for counts)."""
    ints = {"trials_per_order", "rosters", "B", "undefined"}
    texts = {"cell", "shape", "method"}
    with path.open(newline="", encoding="utf-8") as fh:
        return [
            {k: v if k in texts else int(v) if k in ints else float(v) for k, v in row.items()}
            for row in csv.DictReader(fh)
        ]

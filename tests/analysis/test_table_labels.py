"""Every table `ibias analyze` writes says what each of its intervals and p-values is, under the
naming rule of docs/paper-statistics.md ("Tables that explain themselves"):

- interval columns come in pairs `<stem>_low` / `<stem>_high`, and the end of the name gives the
  interval's family: `wilson_low` / `..._wilson_low` -> Wilson, labelled by `wilson_ci_method`
  (= "wilson") and `wilson_ci_level`; `..._population_ci_low` -> population, labelled by
  `population_ci_method`, `population_ci_level` (and `population_resampled`,
  `population_target`); any other `ci_low` / `..._ci_low` -> `ci_method`, `ci_level` (and
  `resampled`, `target`). No other column ends in `_low` / `_high`.
- p-value columns are `p`, `*_p`, `*_p_holm` or a one-sided test named by its direction,
  `p_<what>_greater` / `p_<what>_less`; each has `<column>_null` (sidedness, then "H0: ..."),
  except that a Holm column `X_holm` shares the `X_null` of the raw `X` it adjusts.

The store: the demo's seven simulated models (configs/demo.toml) with logprobs asked of one of
them, on a small grid with every condition and the identity-swap control on, so that every
table of the controlled design, the planted check and the population tables are written; and,
with the stimuli pack, a paper-design store (the `_paper` tables and `paper_organ_pairs`). Every
table file of the output folder is read, whatever its name: a new table is checked without
being listed here. Each Wilson bound is recomputed from the table's own counts with the score
formula written out below (not analysis/stats.py), itself checked against scipy.
"""

from __future__ import annotations

import math
import re
from statistics import NormalDist
from typing import Any

import polars as pl
import pytest
from scipy.stats import binomtest

from ibias.analysis.analyze import AnalysisResult, analyze
from tests.analysis.conftest import build_store
from tests.analysis.test_planted import _demo_models
from tests.conftest import PAPER_PACK, _needed

# --------------------------------------------------------------------------------------------
# The stores
# --------------------------------------------------------------------------------------------

LOGPROBS = 'provider = "simulator"\nlogprobs = true\ntop_logprobs = 3\n'

CONTROLLED = """
[experiments.word_association]
languages = ["en", "es"]
categories = ["emotions", "risk"]
trials_per_category = 6
explicit_per_category = 2

[experiments.allocation]
languages = ["en"]
services = ["gynecology", "hiv_testing"]
roster_size = 100
pairs_per_service = 6
explanation = [false, true]
symptoms = ["none", "high", "low"]
explicit_per_service = 2
identity_swap = true
"""

PAPER = """
[experiments.word_association]
design = "paper"
stimuli = "{pack}"
languages = ["en"]
categories = ["emotions"]
trials_per_category = 6
explicit_per_category = 0

[experiments.allocation]
design = "paper"
stimuli = "{pack}"
languages = ["en"]
services = ["gynecology", "hiv", "prostate_study"]
pairs_per_service = 6
identity_swap = true
"""


def _models() -> str:
    """The demo's models, the first asking for logprobs."""
    return _demo_models().replace('provider = "simulator"\n', LOGPROBS, 1)


def _read_tables(result: AnalysisResult) -> dict[str, pl.DataFrame]:
    """Every table file written, by stem; each CSV has the columns of its Parquet twin."""
    parquet = {p.stem: p for p in result.tables if p.suffix == ".parquet"}
    csv = {p.stem: p for p in result.tables if p.suffix == ".csv"}
    assert set(parquet) == set(csv)
    on_disk = {p.stem for p in result.out_dir.glob("*.parquet")}
    assert on_disk == set(parquet), "a table file the result does not list"
    tables = {name: pl.read_parquet(path) for name, path in sorted(parquet.items())}
    for name, frame in tables.items():
        header = csv[name].read_text("utf-8").splitlines()[0]
        assert header == ",".join(frame.columns), name
    return tables


@pytest.fixture(scope="module")
def controlled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pl.DataFrame]:
    store = build_store(tmp_path_factory.mktemp("labels"), _models() + CONTROLLED, seed=20260213)
    return _read_tables(analyze(store, tmp_path_factory.mktemp("labels-out"), bootstrap=100))


@pytest.fixture(scope="module")
def paper(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pl.DataFrame]:
    pack = _needed(PAPER_PACK, "the shared stimuli pack")
    body = _models() + PAPER.format(pack=pack)
    store = build_store(tmp_path_factory.mktemp("labels-paper"), body, seed=7)
    return _read_tables(analyze(store, tmp_path_factory.mktemp("labels-paper-out"), bootstrap=50))


@pytest.fixture(params=["controlled", "paper"])
def written(request: pytest.FixtureRequest) -> dict[str, pl.DataFrame]:
    tables: dict[str, pl.DataFrame] = request.getfixturevalue(request.param)
    return tables


# --------------------------------------------------------------------------------------------
# The rule, written out
# --------------------------------------------------------------------------------------------

WILSON, POPULATION, CI = "wilson", "population", "ci"
FAMILY_LABELS: dict[str, tuple[str, ...]] = {
    # family -> (method, level, then the labels saying its resampling unit and target)
    WILSON: ("wilson_ci_method", "wilson_ci_level"),
    POPULATION: (
        "population_ci_method",
        "population_ci_level",
        "population_resampled",
        "population_target",
    ),
    CI: ("ci_method", "ci_level", "resampled", "target"),
}
P_VALUE = re.compile(r"^(p|.+_p|p_holm|.+_p_holm|p_.+_(greater|less))$")
NULL_TEXT = re.compile(r"^(two-sided|one-sided|omnibus)\b[^;]*; H0: \S.*$")


def family(stem: str) -> str | None:
    """The family of the interval `<stem>_low` / `<stem>_high`, None when the name has none."""
    for end, name in (("wilson", WILSON), ("population_ci", POPULATION), ("ci", CI)):
        if stem == end or stem.endswith(f"_{end}"):
            return name
    return None


def intervals(frame: pl.DataFrame) -> dict[str, str]:
    """`<stem>` -> family for every `<stem>_low` / `<stem>_high` pair of `frame`."""
    stems = {c.removesuffix("_low") for c in frame.columns if c.endswith("_low")}
    return {s: f for s in sorted(stems) if (f := family(s)) is not None}


def null_column(p: str) -> str:
    """The column saying the null hypothesis of p-value column `p` (Holm shares the raw one's)."""
    return (
        f"{p.removesuffix('_holm')}_null" if p.endswith("_p_holm") or p == "p_holm" else f"{p}_null"
    )


def present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _base(name: str) -> str:
    return name.removesuffix("_paper")


# --------------------------------------------------------------------------------------------
# Wilson, independently of analysis/stats.py
# --------------------------------------------------------------------------------------------


def wilson(k: int, n: int, level: float) -> tuple[float, float]:
    """The Wilson score interval (no continuity correction): the p with
    |k/n - p| <= z sqrt(p (1 - p) / n), solved: (k + z^2/2 +- z sqrt(k (n - k) / n + z^2/4))
    / (n + z^2)."""
    z = NormalDist().inv_cdf(0.5 + level / 2)
    centre = (k + z * z / 2) / (n + z * z)
    half = z * math.sqrt(k * (n - k) / n + z * z / 4) / (n + z * z)
    return max(0.0, centre - half), min(1.0, centre + half)


#: (table without its design suffix, interval stem) -> (successes, trials) columns of that table.
WILSON_COUNTS: dict[tuple[str, str], tuple[str, str]] = {
    ("allocation_cells", "cis_wilson"): ("n_cis", "trials"),
    ("allocation_cells", "trans_wilson"): ("n_trans", "trials"),
    ("position_bias", "wilson"): ("n_first", "decided"),
    ("allocation_authors_view", "trans_wilson"): ("n_trans", "decided"),
}


def test_the_wilson_formula_here_is_scipys() -> None:
    for k, n, level in ((0, 7, 0.95), (3, 7, 0.95), (7, 7, 0.9), (41, 97, 0.99)):
        ci = binomtest(k, n).proportion_ci(confidence_level=level, method="wilson")
        assert wilson(k, n, level) == pytest.approx((ci.low, ci.high), abs=1e-12)


# --------------------------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------------------------


def test_every_low_and_high_column_is_one_end_of_an_interval_of_a_known_family(
    written: dict[str, pl.DataFrame],
) -> None:
    wrong = []
    for name, frame in written.items():
        columns = set(frame.columns)
        wrong += [f"{name}.{c}: no stem" for c in ("low", "high") if c in columns]
        for c in sorted(columns):
            for end, other in (("_low", "_high"), ("_high", "_low")):
                if c.endswith(end):
                    stem = c.removesuffix(end)
                    if family(stem) is None:
                        wrong.append(f"{name}.{c}: not an interval of a known family")
                    if f"{stem}{other}" not in columns:
                        wrong.append(f"{name}.{c}: no {stem}{other}")
                    elif frame[c].dtype != pl.Float64:
                        wrong.append(f"{name}.{c}: {frame[c].dtype}, not Float64")
    assert not wrong, "\n".join(wrong)


def test_every_interval_family_has_its_label_columns(written: dict[str, pl.DataFrame]) -> None:
    wrong = []
    for name, frame in written.items():
        for stem, fam in intervals(frame).items():
            labels = FAMILY_LABELS[fam]
            missing = [c for c in labels if c not in frame.columns]
            if missing:
                wrong.append(f"{name}.{stem}_low/_high ({fam}): no {', '.join(missing)}")
                continue
            method, level = labels[0], labels[1]
            for i, row in enumerate(frame.iter_rows(named=True)):
                if not (present(row[f"{stem}_low"]) or present(row[f"{stem}_high"])):
                    continue
                unlabelled = [c for c in labels if not present(row[c])]
                if unlabelled:
                    wrong.append(f"{name} row {i}: {stem} has null {', '.join(unlabelled)}")
                    break
                if not (isinstance(row[level], float) and 0.0 < row[level] < 1.0):
                    wrong.append(f"{name} row {i}: {level} = {row[level]!r}")
                    break
                # A Wilson interval is named as one: the other families are not Wilson's.
                if (row[method] == "wilson") != (fam == WILSON):
                    wrong.append(f"{name} row {i}: {stem} ({fam}) has {method} = {row[method]}")
                    break
    assert not wrong, "\n".join(wrong)


def test_every_wilson_bound_is_the_wilson_interval_of_the_tables_counts(
    written: dict[str, pl.DataFrame],
) -> None:
    checked = 0
    for name, frame in written.items():
        for stem, fam in intervals(frame).items():
            if fam != WILSON:
                continue
            key = (_base(name), stem)
            assert key in WILSON_COUNTS, f"{name}.{stem}_low: which counts is it an interval of?"
            k_col, n_col = WILSON_COUNTS[key]
            for row in frame.iter_rows(named=True):
                assert row.get("wilson_ci_method") == "wilson", (name, stem)
                assert present(row.get("wilson_ci_level")), (name, stem)
                low, high = row[f"{stem}_low"], row[f"{stem}_high"]
                k, n = row[k_col], row[n_col]
                if not n:
                    assert not present(low) and not present(high), (name, stem, row)
                    continue
                expected = wilson(k, n, row["wilson_ci_level"])
                assert (low, high) == pytest.approx(expected, abs=1e-12), (name, stem, k, n)
                checked += 1
    assert checked > 0


def test_every_p_value_column_has_its_null_hypothesis(written: dict[str, pl.DataFrame]) -> None:
    wrong = []
    for name, frame in written.items():
        columns = set(frame.columns)
        wrong += [f"{name}.{c}: a p-value named outside the rule" for c in columns
                  if "pvalue" in c.lower() or "p_value" in c.lower()]  # fmt: skip
        p_columns = {c for c in columns if P_VALUE.match(c) and frame[c].dtype.is_float()}
        for p in sorted(p_columns):
            null = null_column(p)
            raw = null.removesuffix("_null")
            if raw not in p_columns:
                wrong.append(f"{name}.{p}: adjusts {raw}, which the table lacks")
            if null not in columns or frame[null].dtype != pl.String:
                wrong.append(f"{name}.{p}: no {null}")
                continue
            for i, (value, text) in enumerate(zip(frame[p], frame[null], strict=True)):
                if present(value) and not (text and NULL_TEXT.match(text)):
                    wrong.append(f"{name} row {i}: {null} = {text!r} (p = {value})")
                    break
        # No null hypothesis without its p-value.
        for c in sorted(columns):
            raw = c.removesuffix("_null")
            if c.endswith("_null") and frame[c].dtype == pl.String and raw not in p_columns:
                wrong.append(f"{name}.{c}: no p-value column {raw}")
    assert not wrong, "\n".join(wrong)


def test_the_checks_see_every_kind_of_interval_and_test(
    controlled: dict[str, pl.DataFrame],
) -> None:
    """Not vacuous: the tables and columns the rule was written for are among those checked."""
    found = {
        (name, stem, fam)
        for name, frame in controlled.items()
        for stem, fam in intervals(frame).items()
    }
    for expected in [
        ("allocation_cells", "cis_wilson", WILSON),
        ("allocation_cells", "gap_ci", CI),
        ("position_bias", "wilson", WILSON),
        ("position_bias", "ci", CI),
        ("allocation_authors_view", "trans_wilson", WILSON),
        ("allocation_identity_swap", "identity_ci", CI),
        ("allocation_logprob_shares", "p_cis_ci", CI),
        ("allocation_population", "gap_ci", CI),
        ("planted_allocation", "cis_population_ci", POPULATION),
        ("planted_effects", "population_ci", POPULATION),
        ("word_association_scores", "pooled_ci", CI),
        ("implicit_vs_decision_summary", "ci", CI),
    ]:
        assert expected in found, expected
    p_values = {
        (name, c) for name, frame in controlled.items() for c in frame.columns if P_VALUE.match(c)
    }
    for expected_p in [
        ("allocation_cells", "sign_p_holm"),
        ("allocation_authors_view", "p_cis_greater"),
        ("allocation_authors_view", "p_cis_less"),
        ("position_bias", "binomial_p"),
        ("word_association_cells", "sign_flip_p"),
        ("word_association_templates", "kruskal_p"),
        ("allocation_population", "gap_p"),
        ("implicit_vs_decision_summary", "perm_p"),
    ]:
        assert expected_p in p_values, expected_p
    assert all(
        not controlled[name].is_empty()
        for name in ("allocation_logprob_shares", "allocation_identity_swap", "planted_allocation")
    )


def test_the_paper_design_tables_are_checked(paper: dict[str, pl.DataFrame]) -> None:
    """The `_paper` tables are read by the same checks (and organ pairs, which has none)."""
    for name, stem in [
        ("allocation_authors_view_paper", "trans_wilson"),
        ("allocation_cells_paper", "trans_wilson"),
        ("position_bias_paper", "wilson"),
        ("allocation_identity_swap_paper", "identity_ci"),
        ("word_association_cells_paper", "ci"),
    ]:
        assert not paper[name].is_empty() and stem in intervals(paper[name]), name
    assert not paper["paper_organ_pairs"].is_empty()

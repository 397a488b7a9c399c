"""The population tables of `ibias analyze`: estimates recounted from the view, each pair's two
people read from the trials' items, every interval labelled with its target, and
`--no-population` leaving them empty while the roster-conditional tables stay the same."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from ibias.analysis import population
from ibias.analysis.analyze import AnalysisResult, analyze
from ibias.analysis.load import load_store
from ibias.analysis.units.allocation.load import PAIR_PEOPLE
from tests.analysis.conftest import query
from tests.analysis.test_tables import CELL_KEYS, by_key, table

POPULATION = (
    "allocation_population",
    "allocation_effects_population",
    "allocation_identity_swap_population",
    "position_bias_population",
    "allocation_logprob_shares_population",
)
DEFAULT_LABELS = population.CI_LABELS[population.DEFAULT_METHOD]


def test_pair_people_come_from_the_items(sim_store: Path) -> None:
    people = load_store(sim_store).extras[PAIR_PEOPLE]
    rows = query(
        sim_store,
        "SELECT item FROM trials WHERE experiment = 'allocation' "
        "AND coalesce(coords->>'$.identity_swap', 'false') <> 'true' LIMIT 200",
    )
    mapping = {r["pair_id"]: (r["cis_person"], r["trans_person"]) for r in people.to_dicts()}
    assert people["pair_id"].n_unique() == people.height
    for (item,) in rows:
        item = json.loads(item) if isinstance(item, str) else item
        by_identity = {c["identity"]: c["person_id"] for c in item["candidates"]}
        assert mapping[item["pair_id"]] == (by_identity["cis"], by_identity["trans"])


def test_population_cells_recount_and_are_labelled(
    analysed: AnalysisResult, sim_store: Path
) -> None:
    pop = table(analysed, "allocation_population")
    assert not pop.is_empty()
    assert set(pop["target"].to_list()) == {"people like these"}
    assert set(pop["ci_method"].to_list()) == {DEFAULT_LABELS[0]}
    assert set(pop["resampled"].to_list()) == {DEFAULT_LABELS[1]}
    assert set(pop["population_method"].to_list()) == {population.DEFAULT_METHOD}
    assert set(pop["B"].to_list()) == {None}  # a t interval: nothing drawn
    # Satterthwaite degrees of freedom, capped at min(G_cis, G_trans) - 1.
    cap = pop.select(pl.min_horizontal("cis_persons", "trans_persons") - 1).to_series()
    assert ((pop["df"] > 0) & (pop["df"] <= cap)).all()
    cells = by_key(table(analysed, "allocation_cells"), CELL_KEYS)
    assert set(table(analysed, "allocation_cells")["target"].to_list()) == {"these people"}
    for row in pop.to_dicts():
        conditional = cells[tuple(row[k] for k in CELL_KEYS)]
        assert row["share_cis"] == pytest.approx(conditional["share_cis"], rel=1e-12)
        assert row["share_trans"] == pytest.approx(conditional["share_trans"], rel=1e-12)
        if row["gap"] is not None:
            assert row["gap"] == pytest.approx(conditional["gap"], rel=1e-12)
            assert row["gap_ci_low"] <= row["gap"] <= row["gap_ci_high"]
            # People recur: never narrower than resampling pairs, up to Monte Carlo noise.
            assert (row["gap_ci_high"] - row["gap_ci_low"]) >= 0.8 * (
                conditional["gap_ci_high"] - conditional["gap_ci_low"]
            )
        assert row["pairs"] == conditional["pairs"]
        assert row["cis_persons"] <= row["pairs"] and row["trans_persons"] <= row["pairs"]
        assert 0.0 < row["gap_p"] <= 1.0 and row["gap_p_holm"] >= row["gap_p"]


def test_population_effects_match_the_conditional_estimates(analysed: AnalysisResult) -> None:
    keys = ("model_id", "language", "service", "effect", "stratum")
    pop = table(analysed, "allocation_effects_population")
    conditional = by_key(table(analysed, "allocation_effects"), keys)
    assert not pop.is_empty()
    for row in pop.to_dicts():
        other = conditional[tuple(row[k] for k in keys)]
        assert row["difference"] == pytest.approx(other["difference"], rel=1e-12, abs=1e-15)
        assert row["pairs"] == other["pairs"]
        assert row["target"] == "people like these"


def test_no_population_skips_only_the_population_tables(
    sim_store: Path, tmp_path: Path, analysed: AnalysisResult
) -> None:
    result = analyze(sim_store, tmp_path, bootstrap=2000, seed=3, population=False)
    for name in POPULATION:
        assert pl.read_parquet(tmp_path / f"{name}.parquet").is_empty()
    for name in ("allocation_cells", "allocation_effects", "position_bias"):
        a = pl.read_parquet(tmp_path / f"{name}.parquet")
        b = table(analysed, name)
        assert a.equals(b), name
    html = result.report.read_text("utf-8")
    assert "analyze --no-population" in html
    full = analysed.report.read_text("utf-8")
    assert full.index("For people like these") < full.index("Selection shares and tests")
    assert np.isfinite(
        table(analysed, "allocation_population")["gap_ci_low"].drop_nulls().to_numpy()
    ).all()


def test_planted_population_values_are_checked_against_population_intervals(
    analysed: AnalysisResult,
) -> None:
    """The recovery check for both targets: each planted cell's population value against the
    population interval, recounted here; the coverage rows say their target."""
    planted = table(analysed, "planted_allocation")
    if planted.is_empty():
        pytest.skip("no simulated model in this store")
    pop = by_key(table(analysed, "allocation_population"), CELL_KEYS)
    for row in planted.to_dicts():
        other = pop[tuple(row[k] for k in CELL_KEYS)]
        low, high = other["cis_ci_low"], other["cis_ci_high"]
        assert row["cis_inside_population_ci"] == (low <= row["expected_cis_share"] <= high)
        assert row["population_target"] == "people like these"
        assert row["target"] == "these people"
        assert row["population_B"] == other["B"] and row["B"] == 2000
    coverage = table(analysed, "planted_coverage")
    targets = dict(zip(coverage["value"], coverage["target"], strict=True))
    assert targets["allocation cis share (people like these)"] == "people like these"
    assert targets["allocation cis share (given the people shown)"] == "these people"
    flags = planted["cis_inside_population_ci"].to_list()
    row = coverage.filter(pl.col("value") == "allocation cis share (people like these)").row(
        0, named=True
    )
    assert row["intervals"] == len(flags) and row["inside"] == sum(flags)


def test_captions_and_methods_note_say_method_and_b(analysed: AnalysisResult) -> None:
    from ibias.analysis import figures

    cells = table(analysed, "allocation_cells")
    note = figures.interval_note(cells, "resampling pairs")
    assert note == "95% percentile bootstrap intervals (resampling pairs, B = 2,000 resamples)"
    html = analysed.report.read_text("utf-8")
    assert html.count("percentile bootstrap intervals (resampling") >= 2
    methods = html[html.index("id='methods'") :]
    assert "people like these" in methods and "cluster-robust" in methods
    assert "Wilson intervals (<code>*_wilson_low</code>" in methods
    assert "wilson_ci_method" in methods


def test_population_swap_effects_on_a_hand_count() -> None:
    """The identity-swap hand count of test_identity_swap, with people: p1 and p2 share their
    cis person; the estimates are the roster-conditional ones, the intervals persons'."""
    from ibias.analysis.units.allocation import identity_swap
    from ibias.analysis.units.allocation import population_tables as allocation_population
    from tests.analysis.units.allocation.test_identity_swap import HAND

    people = pl.DataFrame(
        {
            "pair_id": ["p1", "p2", "p3", "p4"],
            "cis_person": ["a", "a", "b", "c"],
            "trans_person": ["x", "y", "z", "z"],
        }
    )
    settings = allocation_population.Settings("pigeonhole", 300, np.random.default_rng(0))
    got = allocation_population.swap_table(HAND, people, settings)
    ref = identity_swap.swap_table(HAND, B=300, method="percentile", rng=np.random.default_rng(0))
    g, r = got.row(0, named=True), ref.row(0, named=True)
    assert g["identity_effect"] == pytest.approx(r["identity_effect"])  # 0.4167
    assert g["person_effect"] == pytest.approx(r["person_effect"])  # 0.25
    assert (g["pairs"], g["cis_persons"], g["trans_persons"]) == (3, 2, 3)
    assert g["identity_ci_low"] <= g["identity_effect"] <= g["identity_ci_high"]
    assert (g["target"], g["resampled"], g["ci_method"]) == (
        "people like these",
        *population.CI_LABELS["pigeonhole"][1::-1],
    )


TARGETS = {
    "allocation_cells": ("these people", "pair"),
    "position_bias": ("these people", "pair"),
    "allocation_effects": ("these people", "pair"),
    "allocation_population": ("people like these", DEFAULT_LABELS[1]),
    "allocation_effects_population": ("people like these", DEFAULT_LABELS[1]),
    "position_bias_population": ("people like these", DEFAULT_LABELS[1]),
    "allocation_authors_view": ("these people", "none"),
    "word_association_cells": ("these stimuli", "trial"),
    "word_association_overall": ("these stimuli", "trial"),
    "word_association_scores": ("these stimuli", "trial"),
}


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_interval_table_says_its_target_method_and_unit(
    analysed: AnalysisResult, name: str
) -> None:
    frame = table(analysed, name)
    assert not frame.is_empty()
    target, unit = TARGETS[name]
    assert set(frame["target"].to_list()) == {target}
    assert set(frame["resampled"].to_list()) == {unit}
    assert set(frame["ci_level"].to_list()) == {0.95}
    methods = set(frame["ci_method"].to_list())
    if unit == DEFAULT_LABELS[1]:  # the default population method: a t interval, no replicates
        assert methods == {DEFAULT_LABELS[0]}
        assert set(frame["B"].to_list()) == {None}
        return
    assert methods == ({"wilson"} if unit == "none" else {"percentile"})
    assert set(frame["B"].to_list()) == ({None} if unit == "none" else {2000})

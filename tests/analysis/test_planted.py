"""Planted values in the report, and the demo's must-show: the planted structure is recovered.

The store: the demo's seven simulated models (configs/demo.toml's `[[models]]` blocks, with
their planted person, name, explanation, urgency and template effects) on a smaller grid run
through the simulator in-process (loopback only): English, six services including every one
with a planted condition effect, 15 pairs per service under all six conditions, 10
word-association trials per category; B = 500.

Must show (the issue's tolerance): among the intervals of each kind, the share containing its
planted value (allocation cis shares and gaps given the people shown, planted condition
effects) and the share of null effects' intervals containing 0 are each within a binomial bound
of 0.95: |share - 0.95| <= z sqrt(0.95 x 0.05 / n), z = 3.89 (two-sided 99.99%), n the number
of intervals of that kind. The intervals of one kind are not independent (strata overlap, a
model's cells share its people), so the bound is a yardstick rather than an exact test; the
run is fixed by its seed, not chosen. On the full demo store (configs/demo.toml, 142,240
trials) the same shares are 14/14 word-association scores, 643/672 cis shares (0.957), 639/672
gaps (0.951), 42/48 planted effects (0.875) and 1,017/1,072 null effects (0.949): every one
within its bound.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import duckdb
import polars as pl
import pytest

from ibias.analysis.analyze import AnalysisResult, analyze
from ibias.analysis.experiment import PLANTED_PEOPLE
from ibias.analysis.load import load_store
from ibias.analysis.planted import simulated_models
from ibias.analysis.units.allocation.planted import trial_probabilities
from ibias.prompts.allocation.simulate import cis_probability, read_allocation
from ibias.prompts.word_association.simulate import expected_word_score
from ibias.runner.simulator.profile import model_profile_from_dict
from tests.analysis.conftest import build_store
from tests.analysis.test_tables import table

ROOT = Path(__file__).resolve().parents[2]
Z = 3.89
EXPERIMENTS = """
[experiments.word_association]
languages = ["en"]
categories = "all"
trials_per_category = 10

[experiments.allocation]
languages = ["en"]
services = ["gynecology", "mental_health", "hiv_testing", "sti_testing", "mastectomy",
            "prostate_study"]
roster_size = 100
pairs_per_service = 15
explanation = [false, true]
symptoms = ["none", "high", "low"]
"""


def _demo_models() -> str:
    text = (ROOT / "configs" / "demo.toml").read_text()
    start = text.index("[[models]]")
    end = text.index("[experiments.")
    return text[start:end]


@pytest.fixture(scope="module")
def demo_like(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, AnalysisResult]:
    store = build_store(
        tmp_path_factory.mktemp("planted"), _demo_models() + EXPERIMENTS, seed=20260213
    )
    return store, analyze(store, tmp_path_factory.mktemp("planted-out"), bootstrap=500, seed=1)


def _bound(n: int) -> float:
    return Z * math.sqrt(0.95 * 0.05 / n)


def test_planted_structure_is_recovered_within_a_binomial_bound(
    demo_like: tuple[Path, AnalysisResult],
) -> None:
    _, result = demo_like
    coverage = {r["value"]: r for r in table(result, "planted_coverage").iter_rows(named=True)}
    assert set(coverage) == {
        "word-association mean score",
        "allocation cis share (given the people shown)",
        "allocation gap among decided (given the people shown)",
        "planted condition effects",
        "null condition effects: interval contains 0",
        # The population target (analysis/units/allocation/planted.py): pigeonhole intervals.
        "allocation cis share (people like these)",
        "allocation gap among decided (people like these)",
        "planted condition effects (people like these)",
        "null condition effects: population interval contains 0",
    }
    report = []
    for name, row in coverage.items():
        n, share = row["intervals"], row["share_inside"]
        report.append(f"{name}: {row['inside']}/{n} = {share:.3f} (bound {_bound(n):.3f})")
    for row in coverage.values():
        assert row["intervals"] > 0
        if row["target"] == "people like these":
            # The pigeonhole bootstrap is conservative by design: bounded below only.
            assert row["share_inside"] >= 0.95 - _bound(row["intervals"]), report
        else:
            assert abs(row["share_inside"] - 0.95) <= _bound(row["intervals"]), report
    # the recount: the summary is the share of the tables' flags
    effects = table(result, "planted_effects")
    planted = effects.filter(~pl.col("null_effect"))
    assert planted.height == coverage["planted condition effects"]["intervals"]
    assert int(planted["inside_ci"].sum()) == coverage["planted condition effects"]["inside"]
    # every planted effect of the demo's profiles is there (2 services x 2 models with an
    # explanation effect, 3 urgency effects): none is mistaken for a null one
    assert set(planted.select("model_id", "service").unique().iter_rows()) == {
        ("sim-gpt-4o-mini", "gynecology"),
        ("sim-gpt-4o-mini", "mental_health"),
        ("sim-gpt-4o", "hiv_testing"),
        ("sim-gpt-4o", "sti_testing"),
        ("sim-grok-3", "prostate_study"),
        ("sim-grok-3", "mastectomy"),
    }


def test_planted_word_scores_are_the_profiles_expected_scores(
    demo_like: tuple[Path, AnalysisResult],
) -> None:
    """Expected scores from the config's profiles directly (not 2p - 1)."""
    _, result = demo_like
    wa = table(result, "planted_word_association")
    text = (ROOT / "configs" / "demo.toml").read_text()
    import tomllib

    blocks = {b["id"]: b for b in tomllib.loads(text)["models"]}
    assert set(wa["model_id"].to_list()) == set(blocks)
    for row in wa.iter_rows(named=True):
        persona = model_profile_from_dict(blocks[row["model_id"]]["sim"]).persona
        assert row["planted_word_bias"] == persona.word_bias
        assert row["expected_score"] == pytest.approx(expected_word_score(persona), rel=1e-12)
        assert row["expected_score"] != pytest.approx(2 * persona.word_bias - 1, abs=1e-3)
        for t in (1, 2, 3):
            assert row[f"expected_template_{t}"] == pytest.approx(
                expected_word_score(persona, t), rel=1e-12
            )


def test_conditional_probabilities_match_the_simulator_reading_the_prompts(
    demo_like: tuple[Path, AnalysisResult],
) -> None:
    """The analysis's per-trial P(cis), built from stored items, equals what the simulator's
    `cis_probability` gives for the same trial's prompt text (read back by `read_allocation`),
    on every trial of three models with person, name and condition effects."""
    store, _ = demo_like
    data = load_store(store)
    shown = {"sim-gpt-4o-mini", "sim-gpt-4o", "sim-grok-3"}
    models = [m for m in simulated_models(data.runs["config"].to_list()) if m.model_id in shown]
    decisions = data.views["allocation"].drop("design")
    probabilities = trial_probabilities(models, decisions, data.extras[PLANTED_PEOPLE])
    by_model = {m.model_id: m for m in models}
    con = duckdb.connect(str(store), read_only=True)
    try:
        texts = dict(
            con.execute(
                "SELECT trial_key, messages FROM trials WHERE experiment = 'allocation'"
            ).fetchall()
        )
    finally:
        con.close()
    got = probabilities.filter(pl.col("model_id").is_in(list(by_model)))
    assert got.height == 3 * 6 * 6 * 30
    for key, model, p in got.select("trial_key", "model_id", "p_cis").iter_rows():
        seen = read_allocation(json.loads(texts[key])[0]["content"])
        assert seen is not None
        assert p == pytest.approx(cis_probability(seen, by_model[model].answering), abs=1e-12)


def test_simulated_models_come_from_the_latest_parsable_config() -> None:
    old = (
        '[run]\nseed = 1\n[[models]]\nid = "a"\nprovider = "simulator"\n'
        "[models.sim]\nword_bias = 0.9\n"
    )
    new = (
        '[run]\nseed = 7\n[[models]]\nid = "b"\nprovider = "simulator"\nmodel = "bee"\n'
        "[models.sim]\nperson_sd = 0.5\n"
        '[[models]]\nid = "real"\nprovider = "openai"\n'
    )
    found = simulated_models([old, new, "not toml ["])
    assert [(m.model_id, m.provider_model, m.seed) for m in found] == [("b", "bee", 7)]
    assert found[0].persona.person_sd == 0.5
    assert found[0].answering.effects_key == (7, "bee")
    assert simulated_models(['[[models]]\nid = "x"\nprovider = "openai"\n']) == ()


def test_the_report_states_planted_values_next_to_estimates(
    demo_like: tuple[Path, AnalysisResult],
) -> None:
    _, result = demo_like
    html = (result.out_dir / "report.html").read_text()
    assert "Planted values (simulated models)" in html
    assert "expected score" in html and "given people shown" in html
    assert re.search(r"sim-grok-3-mini", html)
    conditional = table(result, "planted_allocation")["conditional_cis_share"]
    assert conditional.null_count() == 0 and conditional.is_finite().all()

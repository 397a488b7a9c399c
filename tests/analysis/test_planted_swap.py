"""The planted truth with the identity-swap control on: each arm from its own trials and people.

The store: two simulated models with person and name effects, position bias, refusals and a
planted explanation and urgency effect, English and Spanish, two services, every condition,
the identity-swap control on (so every pair is shown in both arms). The truth is recomputed
here from the prompt texts alone, with the simulator's own `cis_probability` (the probability
it draws each answer with), never from the analysis's people table: per cell of the original
arm, the mean of (1 - refusal rate) P(cis) and 2 mean P(cis) - 1; per effect row, the mean
expected trans share of the treated trials minus the control trials.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

from ibias.analysis.analyze import AnalysisResult, analyze
from ibias.analysis.experiment import PLANTED_PEOPLE
from ibias.analysis.load import load_store
from ibias.analysis.planted import simulated_models
from ibias.analysis.units.allocation.planted import trial_probabilities
from ibias.prompts.allocation.simulate import cis_probability, read_allocation
from tests.analysis.conftest import build_store, query
from tests.analysis.test_tables import table

BODY = """
[[models]]
id = "sim-p"
provider = "simulator"
max_concurrency = 16

[models.sim]
position_bias = 0.05
refusal_rate = 0.03
person_sd = 0.8
name_sd = 0.4
explanation_effect = { gynecology = -0.7 }
urgency_effect = { hiv_testing = { high = -1.0 } }
allocation_cis = { gynecology = 0.75, hiv_testing = 0.35 }

[[models]]
id = "sim-q"
provider = "simulator"
max_concurrency = 16

[models.sim]
position_bias = 0.1
person_sd = 0.6
allocation_cis_default = 0.5

[experiments.allocation]
languages = ["en", "es"]
services = ["gynecology", "hiv_testing"]
pairs_per_service = 8
explanation = [false, true]
symptoms = ["none", "high", "low"]
identity_swap = true
"""

CELL = ("model_id", "language", "service", "explanation", "symptoms")


@pytest.fixture(scope="module")
def swap_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, AnalysisResult]:
    store = build_store(tmp_path_factory.mktemp("planted-swap"), BODY, seed=11)
    return store, analyze(store, tmp_path_factory.mktemp("planted-swap-out"), bootstrap=50, seed=1)


def _per_trial(store: Path) -> list[dict[str, object]]:
    """Every allocation trial: its cell, arm, order, pair and the simulator's P(cis) read from
    its prompt text with the answering persona of its model."""
    models = {m.model_id: m for m in simulated_models(load_store(store).runs["config"].to_list())}
    rows = query(
        store,
        "SELECT d.trial_key, d.model_id, d.language, d.service, d.explanation, d.symptoms, "
        "d.pair_id, coalesce(d.identity_swap, false), t.messages "
        "FROM allocation_decisions d JOIN trials t USING (trial_key)",
    )
    out = []
    for key, model, language, service, explanation, symptoms, pair, swapped, messages in rows:
        seen = read_allocation(json.loads(messages)[0]["content"])
        assert seen is not None
        persona = models[model].answering
        out.append(
            {
                "trial_key": key,
                "cell": (model, language, service, explanation, symptoms),
                "swapped": swapped,
                "pair_id": pair,
                "p": cis_probability(seen, persona),
                "answered": 1.0 - persona.refusal_rate,
            }
        )
    return out


def _cell_truth(trials: list[dict[str, object]], *, swapped: bool) -> dict[tuple, tuple]:
    grouped: dict[tuple, list[dict[str, object]]] = defaultdict(list)
    for t in trials:
        if t["swapped"] == swapped:
            grouped[t["cell"]].append(t)  # type: ignore[index]
    truth = {}
    for cell, ts in grouped.items():
        share = sum(t["answered"] * t["p"] for t in ts) / len(ts)  # type: ignore[operator]
        gap = 2.0 * sum(t["p"] for t in ts) / len(ts) - 1.0  # type: ignore[misc]
        truth[cell] = (share, gap)
    return truth


def test_each_arms_trial_probabilities_are_the_simulators(
    swap_store: tuple[Path, AnalysisResult],
) -> None:
    """Every trial's P(cis), swapped ones included, is what the simulator drew with: each arm
    takes its own people (the swapped arm shows the other person as cisgender)."""
    store, _ = swap_store
    data = load_store(store)
    got = trial_probabilities(
        list(simulated_models(data.runs["config"].to_list())),
        data.views["allocation"],
        data.extras[PLANTED_PEOPLE],
    )
    expected = {t["trial_key"]: (t["p"], t["swapped"]) for t in _per_trial(store)}
    assert got.height == len(expected) == 2 * 2 * 2 * 8 * 6 * 2 * 2
    for key, p, swapped in got.select("trial_key", "p_cis", "identity_swap").iter_rows():
        assert swapped == expected[key][1]
        assert p == pytest.approx(expected[key][0], abs=1e-12)


def test_planted_cells_with_the_swap_on_equal_the_truth_from_the_prompts(
    swap_store: tuple[Path, AnalysisResult],
) -> None:
    store, result = swap_store
    trials = _per_trial(store)
    truth = _cell_truth(trials, swapped=False)
    planted = table(result, "planted_allocation")
    assert planted.height == len(truth) == 2 * 2 * 2 * 6
    for row in planted.iter_rows(named=True):
        share, gap = truth[tuple(row[k] for k in CELL)]
        assert row["conditional_cis_share"] == pytest.approx(share, abs=1e-12)
        assert row["conditional_gap"] == pytest.approx(gap, abs=1e-12)
    # the control matters here: pooling both arms (the old truth) is wrong in most cells
    pooled = defaultdict(list)
    for t in trials:
        pooled[t["cell"]].append(t["p"])
    moved = sum(
        abs(2.0 * sum(ps) / len(ps) - 1.0 - truth[cell][1]) > 1e-6  # type: ignore[arg-type]
        for cell, ps in pooled.items()
    )
    assert moved > len(truth) // 2


def test_planted_effects_with_the_swap_on_equal_the_truth_from_the_prompts(
    swap_store: tuple[Path, AnalysisResult],
) -> None:
    store, result = swap_store
    x: dict[tuple, list[tuple[bool, str, float]]] = defaultdict(list)
    for t in _per_trial(store):
        if t["swapped"]:
            continue
        model, language, service, explanation, symptoms = t["cell"]  # type: ignore[misc]
        trans = t["answered"] * (1.0 - t["p"])  # type: ignore[operator]
        x[(model, language, service)].append((explanation, symptoms, trans))

    def difference(rows: list[tuple[bool, str, float]], effect: str, stratum: str) -> float:
        if effect == "explanation":
            keep = [r for r in rows if stratum in ("all", r[1])]
            treated = [v for e, _, v in keep if e]
            control = [v for e, _, v in keep if not e]
        else:
            level = effect.removeprefix("symptoms_")
            keep = [
                r
                for r in rows
                if r[1] in ("none", level)
                and stratum in ("all", f"explanation={'yes' if r[0] else 'no'}")
            ]
            treated = [v for _, s, v in keep if s == level]
            control = [v for _, s, v in keep if s == "none"]
        return sum(treated) / len(treated) - sum(control) / len(control)

    effects = table(result, "planted_effects")
    assert effects.height > 0
    for row in effects.iter_rows(named=True):
        rows = x[(row["model_id"], row["language"], row["service"])]
        assert row["conditional_difference"] == pytest.approx(
            difference(rows, row["effect"], row["stratum"]), abs=1e-12
        ), row
    assert effects.filter(~pl.col("null_effect")).height > 0

"""The simulator's allocation structure: person and name effects, explanation and urgency
effects per service, all read from the visible prompt, and the functions giving the values they
imply (checked against scipy and against simulated counts).

Statistical checks use z = 3.29 (two-sided 99.9%): correct code fails one with probability
about 0.001; the seeds are fixed, so the outcome is reproducible.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import expit, logit

from ibias.prompts.allocation.experiment import build
from ibias.prompts.allocation.parse import parse_allocation
from ibias.prompts.allocation.simulate import (
    SeenAllocation,
    SeenCandidate,
    cis_probability,
    conditional_cis_share,
    expected_cis_share,
    person_effect,
    read_allocation,
    simulate_allocation,
)
from ibias.prompts.base import Persona, TrialSpec, rng_for
from ibias.prompts.codes import CIS, TRANS

HERE = Path(".")
Z = 3.29
SMALL = {"roster_size": 100, "pairs_per_service": 3, "explicit_per_service": 0}
STRUCTURED = Persona(
    allocation_cis={"gynecology": 0.7, "hiv_testing": 0.4},
    position_bias=0.1,
    person_sd=1.2,
    name_sd=0.6,
    explanation_effect={"gynecology": -0.8, "hiv_testing": 0.5},
    urgency_effect={"gynecology": {"high": -1.5, "low": 0.7}, "hiv_testing": {"high": 1.0}},
).answering_as(7, "sim-s")


def _specs(table: dict[str, Any], seed: int = 1) -> list[TrialSpec]:
    return list(build(table, seed, HERE)[0].specs())


def _seen(spec: TrialSpec) -> SeenAllocation:
    seen = read_allocation(spec.messages[0]["content"])
    assert seen is not None
    return seen


def test_reads_age_identity_symptom_and_urgency_from_every_prompt() -> None:
    for spec in _specs(SMALL):
        seen = _seen(spec)
        cands = spec.item["candidates"]
        assert [(c.age, c.gender_identity, c.symptom) for c in seen.candidates] == [
            (str(c["age"]), c["gender_identity"], c.get("symptom")) for c in cands
        ]
        symptoms = spec.item["symptoms"]
        assert seen.urgency == (None if symptoms == "none" else symptoms)


def test_the_paper_design_shows_ages_and_identities(paper_pack_dir: Path) -> None:
    table = {"design": "paper", "stimuli": str(paper_pack_dir), "pairs_per_service": 2}
    for spec in _specs(table):
        seen = _seen(spec)
        assert [c.age for c in seen.candidates] == [str(c["age"]) for c in spec.item["candidates"]]
        assert all(c.gender_identity for c in seen.candidates) and seen.urgency is None


@pytest.mark.parametrize(
    "persona",
    [
        Persona(),
        Persona(allocation_cis={"gynecology": 0.8}, position_bias=0.05),
        Persona(allocation_cis_default=0.35, position_bias=-0.2),
        Persona(allocation_cis={"gynecology": 1.0}, position_bias=0.3),
    ],
)
def test_without_effects_the_probability_is_clip_q_plus_minus_b(persona: Persona) -> None:
    """Exactly (not approximately) the old rule, so profiles without effects answer as before."""
    for spec in _specs({**SMALL, "services": ["gynecology", "hiv_testing"]}):
        seen = _seen(spec)
        q = persona.allocation_cis.get(spec.item["service"], persona.allocation_cis_default)
        b = persona.position_bias if spec.item["first"] == CIS else -persona.position_bias
        assert cis_probability(seen, persona.answering_as(3, "m")) == min(1.0, max(0.0, q + b))


def test_the_probability_follows_the_documented_logit_model() -> None:
    """eta = logit(q_s) + e_s [explanation] + h_s,k [urgency k] + (u_c + v_c) - (u_t + v_t), then
    clip(sigmoid(eta) +- b), recomputed here with scipy from what the item says."""
    p = STRUCTURED
    for spec in _specs({**SMALL, "services": ["gynecology", "hiv_testing", "mastectomy"]}):
        seen = _seen(spec)
        item = spec.item
        service = item["service"]
        q = p.allocation_cis.get(service, p.allocation_cis_default)
        eta = float(logit(q))
        if item["explanation"]:
            eta += p.explanation_effect.get(service, 0.0)
        if item["symptoms"] != "none":
            eta += p.urgency_effect.get(service, {}).get(item["symptoms"], 0.0)
        by_group = {c.identity: person_effect(c, p) for c in seen.candidates}
        eta += by_group[CIS] - by_group[TRANS]
        b = p.position_bias if item["first"] == CIS else -p.position_bias
        expected = min(1.0, max(0.0, float(expit(eta)) + b))
        assert cis_probability(seen, p) == pytest.approx(expected, abs=1e-12)


def test_a_person_keeps_their_effect_and_a_name_keeps_its_own() -> None:
    """The person effect is keyed on name, age and identity as shown: the same in both orders,
    every service and condition; the name effect follows the name alone (an identity swap keeps
    it and redraws the person effect)."""
    effects: dict[tuple[str, str, str], set[float]] = {}
    for spec in _specs({**SMALL, "pairs_per_service": 10}):
        for c in _seen(spec).candidates:
            key = (c.name, c.age, c.gender_identity)
            effects.setdefault(key, set()).add(person_effect(c, STRUCTURED))
    assert all(len(v) == 1 for v in effects.values())
    assert len({next(iter(v)) for v in effects.values()}) == len(effects)  # people differ

    ana = SeenCandidate(1, "Ana Ruiz", CIS, "34", "cis_woman")
    swapped = SeenCandidate(2, "Ana Ruiz", TRANS, "34", "trans_woman")
    older = replace(ana, age="35")
    names_only = Persona(name_sd=1.0).answering_as(7, "sim-s")
    people_only = Persona(person_sd=1.0).answering_as(7, "sim-s")
    assert person_effect(ana, names_only) == person_effect(swapped, names_only) != 0
    assert person_effect(ana, names_only) == person_effect(older, names_only)
    assert len({person_effect(c, people_only) for c in (ana, swapped, older)}) == 3
    # position and symptoms are not part of the person
    moved = replace(ana, position=2, symptom="fever")
    assert person_effect(moved, STRUCTURED) == person_effect(ana, STRUCTURED)


def test_person_and_name_effects_are_independent_normals_with_their_sd() -> None:
    """4,000 distinct people: Kolmogorov-Smirnov against N(0, sd^2) (p > 0.001), and the person
    and name effects of the same people uncorrelated (|r| < 3.29 / sqrt(n))."""
    people = [
        SeenCandidate(1, f"Person {i}", CIS if i % 2 else TRANS, str(18 + i % 60), "cis_woman")
        for i in range(4000)
    ]
    u = np.array([person_effect(c, Persona(person_sd=2.0).answering_as(1, "m")) for c in people])
    v = np.array([person_effect(c, Persona(name_sd=0.5).answering_as(1, "m")) for c in people])
    assert stats.kstest(u / 2.0, "norm").pvalue > 0.001
    assert stats.kstest(v / 0.5, "norm").pvalue > 0.001
    assert abs(np.corrcoef(u, v)[0, 1]) < Z / math.sqrt(len(people))
    both = Persona(person_sd=2.0, name_sd=0.5).answering_as(1, "m")
    assert [person_effect(c, both) for c in people[:50]] == pytest.approx(list(u[:50] + v[:50]))


def _scipy_share(persona: Persona, service: str, shift: float) -> float:
    """(1 - r) E[(clip(q + b) + clip(q - b)) / 2], q = sigmoid(logit(q_s) + shift + D),
    D ~ N(0, 2 (person_sd^2 + name_sd^2)), by scipy's adaptive quadrature."""
    q_s = persona.allocation_cis.get(service, persona.allocation_cis_default)
    b = persona.position_bias
    tau = math.sqrt(2 * (persona.person_sd**2 + persona.name_sd**2))

    def f(d: float) -> float:
        q = float(expit(float(logit(q_s)) + shift + d))
        return (min(1.0, max(0.0, q + b)) + min(1.0, max(0.0, q - b))) / 2

    if tau == 0:
        return (1 - persona.refusal_rate) * f(0.0)
    value, _ = integrate.quad(
        lambda d: f(d) * float(stats.norm.pdf(d, scale=tau)), -12 * tau, 12 * tau, limit=500
    )
    return (1 - persona.refusal_rate) * float(value)


@pytest.mark.parametrize(
    ("persona", "explanation", "urgency", "shift"),
    [
        (Persona(allocation_cis={"gynecology": 0.7}), False, None, 0.0),
        (Persona(allocation_cis={"gynecology": 0.7}, position_bias=0.2), True, "high", 0.0),
        (Persona(allocation_cis={"gynecology": 0.7}, person_sd=2.0), False, None, 0.0),
        (STRUCTURED, False, None, 0.0),
        (STRUCTURED, True, None, -0.8),
        (STRUCTURED, True, "high", -2.3),
        (STRUCTURED, False, "low", 0.7),
        (replace(STRUCTURED, position_bias=0.35, refusal_rate=0.1), True, "low", -0.1),
        (Persona(allocation_cis={"gynecology": 0.95}, position_bias=-0.3, name_sd=3.0), 0, 0, 0),
    ],
)
def test_expected_share_against_scipy(
    persona: Persona, explanation: bool, urgency: str | None, shift: float
) -> None:
    got = expected_cis_share(persona, "gynecology", explanation=explanation, urgency=urgency)
    assert got == pytest.approx(_scipy_share(persona, "gynecology", shift), abs=1e-7)


def test_expected_share_edges() -> None:
    no_effects = Persona(allocation_cis={"gynecology": 0.7}, position_bias=0.1, refusal_rate=0.2)
    assert expected_cis_share(no_effects, "gynecology") == pytest.approx(0.8 * 0.7)
    assert expected_cis_share(no_effects, "gynecology", among_answered=True) == pytest.approx(0.7)
    certain = Persona(allocation_cis={"gynecology": 1.0}, person_sd=3.0)
    assert expected_cis_share(certain, "gynecology", explanation=True) == 1.0
    # an unlisted service uses the default preference and has no condition effects
    assert expected_cis_share(STRUCTURED, "dermatology", explanation=True) == pytest.approx(
        _scipy_share(STRUCTURED, "dermatology", 0.0), abs=1e-7
    )


def test_simulated_choices_match_the_conditional_share_per_condition() -> None:
    """Given the people shown, trials are independent draws with `cis_probability`: in each
    service x explanation x symptoms cell (150 pairs x 2 orders), the count of cis choices is
    within 3.29 standard deviations (sqrt(sum p (1 - p))) of n x `conditional_cis_share`, and
    the parser reads every simulated choice back."""
    table = {
        "services": ["gynecology", "hiv_testing"],
        "languages": ["en"],
        "roster_size": 200,
        "pairs_per_service": 150,
        "explicit_per_service": 0,
    }
    cells: dict[tuple[str, bool, str], list[tuple[str, float, bool]]] = {}
    for spec in _specs(table, seed=11):
        text = spec.messages[0]["content"]
        seen = _seen(spec)
        reply, position = simulate_allocation(seen, STRUCTURED, rng_for(2, dict(spec.coords)))
        parsed = parse_allocation(spec.item, reply)
        assert parsed.chosen_position == position
        key = (spec.item["service"], spec.item["explanation"], spec.item["symptoms"])
        cells.setdefault(key, []).append(
            (text, cis_probability(seen, STRUCTURED), parsed.chosen == CIS)
        )
    assert len(cells) == 12
    shares = {}
    for key, trials in cells.items():
        n = len(trials)
        expected = conditional_cis_share([t for t, _, _ in trials], STRUCTURED)
        sd = math.sqrt(sum(p * (1 - p) for _, p, _ in trials))
        observed = sum(chose for _, _, chose in trials)
        assert abs(observed - n * expected) < Z * sd, key
        shares[key] = expected
    # the planted condition effects move the shares the way they were planted
    assert shares[("gynecology", True, "none")] < shares[("gynecology", False, "none")]
    assert shares[("gynecology", False, "high")] < shares[("gynecology", False, "none")]
    assert shares[("gynecology", False, "low")] > shares[("gynecology", False, "none")]
    assert shares[("hiv_testing", True, "none")] > shares[("hiv_testing", False, "none")]


def test_the_two_orders_of_a_pair_share_the_pair_s_effects() -> None:
    """Without position bias, both orders of a pair have the same P(cis) (they show the same
    two people, so the same u and v), and it varies from pair to pair; without effects it is
    q_s for every pair."""
    table = {**SMALL, "services": ["gynecology"], "roster_size": 200, "pairs_per_service": 150}
    table.update(languages=["en"], symptoms=["none"], explanation=[False])
    specs = _specs(table)
    unbiased = replace(STRUCTURED, position_bias=0.0)
    by_pair: dict[int, dict[int, float]] = {}
    for spec in specs:
        p = cis_probability(_seen(spec), unbiased)
        by_pair.setdefault(spec.coords["pair_index"], {})[spec.coords["order"]] = p
    assert all(o[0] == o[1] for o in by_pair.values())
    assert np.std([o[0] for o in by_pair.values()]) > 0.15
    flat = Persona(allocation_cis={"gynecology": 0.7})
    assert {cis_probability(_seen(s), flat) for s in specs} == {0.7}


def test_conditional_share_rejects_what_is_not_an_allocation_prompt() -> None:
    with pytest.raises(ValueError, match="not an allocation prompt"):
        conditional_cis_share(["hello"], STRUCTURED)
    with pytest.raises(ValueError, match="no prompts"):
        conditional_cis_share([], STRUCTURED)


def test_effects_change_no_draw_but_the_choice() -> None:
    """With effects, the reply's wording draws are the same as without: only the choice moves
    (the same rng, the same number of draws), so a structured profile's other answers keep
    their format."""
    spec = _specs({**SMALL, "services": ["gynecology"]})[0]
    seen = _seen(spec)
    flat = Persona(allocation_cis={"gynecology": 0.5})
    for s in range(50):
        a, b = random.Random(s), random.Random(s)
        simulate_allocation(seen, flat, a)
        simulate_allocation(seen, STRUCTURED, b)
        assert a.random() == b.random()

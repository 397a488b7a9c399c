"""The simulated model: recognises only its prompts, answers from the visible text, and its
answers parse back to the bias it was given."""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path

from scipy.stats import binom

from ibias.prompts.base import Persona, TrialSpec, rng_for, stable_hash
from ibias.prompts.registry import responders, units
from ibias.prompts.word_association.experiment import build
from ibias.prompts.word_association.parse import parse_explicit, parse_trial
from ibias.prompts.word_association.simulate import respond, target_index

HERE = Path(__file__).parent


def _rng(spec: TrialSpec, model: str = "sim-a") -> random.Random:
    """What the simulator does: an rng from (model, prompt, seed)."""
    return rng_for(0, model, stable_hash(list(spec.messages)))


def _plan(trials: int, **extra: object) -> tuple[list[TrialSpec], list[TrialSpec]]:
    table = {"trials_per_category": trials, "explicit_per_category": 4, **extra}
    experiments = build(table, 99, HERE)
    implicit, explicit = experiments[0], experiments[1:]
    return list(implicit.specs()), [s for e in explicit for s in e.specs()]


def test_the_simulator_answers_every_planned_prompt_with_this_responder() -> None:
    """The simulator asks its responders in turn and sends the first answer: a word-association
    prompt, implicit or explicit, must be answered here and by no other responder, or a
    simulated run would parse another task's reply."""
    implicit, explicit = _plan(2)
    persona = Persona(word_bias=0.5)
    simulated = [u for u in units() if u.simulation is not None]
    assert [u.simulation.respond for u in simulated if u.name == "word_association"] == [respond]
    registered = responders()
    for spec in implicit + explicit:
        answered = [r(spec.messages, persona, _rng(spec)) is not None for r in registered]
        assert answered == [u.name == "word_association" for u in simulated], spec.item


def test_foreign_prompts_get_none() -> None:
    persona = Persona()
    rng = random.Random(0)
    assert respond(({"role": "user", "content": "What is 2 + 2?"},), persona, rng) is None
    assert respond(({"role": "system", "content": "Hi"},), persona, rng) is None
    assert respond((), persona, rng) is None


def test_same_rng_same_reply_and_only_the_given_rng_is_used() -> None:
    specs, _ = _plan(1)
    persona = Persona(word_bias=0.6, refusal_rate=0.1)
    for spec in specs:
        random.seed(1)
        a = respond(spec.messages, persona, _rng(spec))
        random.seed(2)  # global state must not matter
        b = respond(spec.messages, persona, _rng(spec))
        assert a == b and a is not None


def test_extreme_biases_parse_back_exactly_in_every_template_and_language() -> None:
    """At p = 1 every negative word goes to the target and every positive one to the
    reference, so each reply's truth is known: the parser must read all ten words right
    (bias exactly +1), whatever format the simulator chose. p = 0 mirrors it (-1)."""
    specs, _ = _plan(25)
    assert {(s.language, s.item["template"]) for s in specs} == {
        (lang, t) for lang in ("en", "es") for t in (1, 2, 3)
    }
    for p, expected in ((1.0, 1.0), (0.0, -1.0)):
        persona = Persona(word_bias=p)
        for spec in specs:
            reply = respond(spec.messages, persona, _rng(spec))
            result = parse_trial(spec.item, reply)
            assert result.n_unassigned == 0, reply
            assert result.bias == expected, reply


def test_replies_come_in_varied_formats() -> None:
    specs, _ = _plan(25)
    persona = Persona(word_bias=0.5)
    replies = [respond(s.messages, persona, _rng(s)) or "" for s in specs]
    features = {
        "numbered": any("1. " in r or "1) " in r for r in replies),
        "bold": any("**" in r for r in replies),
        "table": any("|---|" in r for r in replies),
        "fence": any("```" in r for r in replies),
        "tab": any("\t" in r for r in replies),
        "preamble": any(r.startswith(("Here", "Sure", "Aquí", "¡Claro")) for r in replies),
        "one line": any("\n" not in r.strip() for r in replies),
    }
    assert all(features.values()), features


def _expected_bias(p: float) -> float:
    """E[bias | bias defined] by enumerating N_t ~ Bin(5, p), P_t ~ Bin(5, 1 - p), all ten
    words assigned: N_r = 5 - N_t, P_r = 5 - P_t; undefined when a group gets no word."""
    total = weight = 0.0
    for nt in range(6):
        for pt in range(6):
            t = nt + pt
            if t in (0, 10):
                continue
            w = binom.pmf(nt, 5, p) * binom.pmf(pt, 5, 1 - p)
            total += w * (nt / t + (5 - pt) / (10 - t) - 1)
            weight += w
    return total / weight


def test_mean_bias_matches_the_exact_expectation() -> None:
    """6,400 simulated trials at p = 0.7. E[bias] = 0.4352 (enumerated), not 2p - 1 = 0.4,
    because trials where one group gets no word are undefined and excluded. The per-trial
    sd is about 0.31, so the standard error of the mean is about 0.0039; we accept the mean
    within 4 standard errors (two-sided false-alarm probability 6e-5 under the normal
    approximation, which is excellent at n = 6,400), and 2p - 1 lies about 9 standard errors
    away, so the test also tells the two apart."""
    p = 0.7
    specs, _ = _plan(400)
    persona = Persona(word_bias=p)
    scores = []
    for spec in specs:
        result = parse_trial(spec.item, respond(spec.messages, persona, _rng(spec)))
        assert result.n_unassigned == 0
        if result.bias is not None:
            scores.append(result.bias)
    n = len(scores)
    mean = sum(scores) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in scores) / (n - 1))
    se = sd / math.sqrt(n)
    expected = _expected_bias(p)
    assert abs(expected - 0.43515) < 1e-4
    assert abs(mean - expected) < 4 * se
    assert abs(mean - (2 * p - 1)) > 4 * se
    assert len(specs) - n < 20  # undefined trials are rare at p = 0.7 (P = 0.0008 each)


def test_refusal_rate() -> None:
    """2 x 8 x 100 = 1,600 replies at refusal rate 0.25: the refused share is within 4.5
    binomial standard errors (sqrt(.25 * .75 / 1600) = 0.011) of 0.25."""
    specs, _ = _plan(100)
    persona = Persona(word_bias=0.5, refusal_rate=0.25)
    refused = [parse_trial(s.item, respond(s.messages, persona, _rng(s))).refused for s in specs]
    share = sum(refused) / len(refused)
    assert abs(share - 0.25) < 4.5 * math.sqrt(0.25 * 0.75 / len(refused))


def test_explicit_prompts_are_answered_neither() -> None:
    _, questions = _plan(1)
    answers = Counter(
        parse_explicit(q.item, respond(q.messages, Persona(), _rng(q))) for q in questions
    )
    assert answers == {"neither": len(questions)}
    refusing = Persona(refusal_rate=1.0)
    assert {parse_explicit(q.item, respond(q.messages, refusing, _rng(q))) for q in questions} == {
        "refused"
    }


def test_target_is_the_label_that_is_not_cisgender() -> None:
    assert target_index(["cisgender", "transgender"]) == 1
    assert target_index(["Transgénero", "cisgénero"]) == 0
    assert target_index(["non-binary", "cisgender"]) == 0
    assert target_index(["cis", "agender"]) == 1
    assert target_index(["transgender", "non-binary"]) == 0
    # Two unknown groups: the one that sorts last, whatever the order shown.
    assert target_index(["binary", "non-binary"]) == 1
    assert target_index(["non-binary", "binary"]) == 0


def test_configured_groups_are_biased_against_the_non_cisgender_label() -> None:
    specs, _ = _plan(
        5, target="non-binary", labels={"es": {"target": "no binario"}}, explicit_per_category=0
    )
    for spec in specs:
        result = parse_trial(spec.item, respond(spec.messages, Persona(word_bias=1.0), _rng(spec)))
        assert result.bias == 1.0


def test_custom_templates_are_not_recognised(tmp_path: Path) -> None:
    (tmp_path / "en").mkdir()
    (tmp_path / "en" / "implicit_1.txt").write_text("Pair {words} with {label_1} or {label_2}.")
    (implicit,) = build(
        {"templates_dir": str(tmp_path), "languages": ["en"], "explicit_per_category": 0}, 1, HERE
    )
    spec = next(iter(implicit.specs()))
    assert respond(spec.messages, Persona(), random.Random(0)) is None

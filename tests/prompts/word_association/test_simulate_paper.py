"""The simulated model on the paper design: it recognises the authors' prompts by their
structure, answers them in free formats with the persona's word bias, and the parser recovers
what it planted.

The prompts are rendered here from the authors' templates in the shared stimuli pack (beside the
repository checkout; ibias ships none of their texts), filled as the pack's README says: the
template stripped, `{option_words}` the two labels in the trial's order joined by " or "
(Spanish " o "), `{word_list}` the words joined by ", ", `{len}` 10, `{len_labels}` 2. The
authors released no Spanish templates; the Spanish ones are ours (the paper design's
`prompts/data/word_association/paper_es/`).
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from ibias.prompts.base import Persona, rng_for, stable_hash
from ibias.prompts.word_association.data import shipped_word_sets
from ibias.prompts.word_association.paper import spanish_templates
from ibias.prompts.word_association.parse import parse_trial
from ibias.prompts.word_association.simulate import (
    paper_prompt,
    paper_reply,
    respond,
    target_index,
)
from tests.conftest import PAPER_PACK

PAPER_WA = PAPER_PACK / "word_association"

LABELS = {"en": ("transgender", "cisgender"), "es": ("transgénero", "cisgénero")}
JOINERS = {"en": " or ", "es": " o "}


@pytest.fixture(scope="module")
def templates() -> dict[str, dict[int, str]]:
    if not PAPER_WA.is_dir():
        message = f"the shared stimuli pack is missing: {PAPER_WA}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    english = {n: (PAPER_WA / f"template_{n}.txt").read_text("utf-8") for n in (1, 2, 3)}
    return {"en": english, "es": dict(spanish_templates())}


@dataclass(frozen=True)
class Trial:
    item: dict[str, Any]
    messages: tuple[dict[str, str], ...]


def _trials(templates: dict[str, dict[int, str]], n: int, seed: int = 5) -> list[Trial]:
    """n paper-design trials: categories and languages in turn, 5 + 5 words of the category
    shuffled, label order and template drawn, as the paper's planner does."""
    categories = sorted(shipped_word_sets().values(), key=lambda c: c.slug)
    out = []
    for i in range(n):
        category = categories[i % len(categories)]
        language = ("en", "es")[(i // len(categories)) % 2]
        rng = rng_for(seed, "paper-trial", i)
        chosen = rng.sample(category.pool("positive"), 5) + rng.sample(category.pool("negative"), 5)
        rng.shuffle(chosen)
        words = [
            {
                "word": category.concepts[c].forms[language],
                "sentiment": category.concepts[c].sentiment,
            }
            for c in chosen
        ]
        target, reference = LABELS[language]
        order = [target, reference] if rng.random() < 0.5 else [reference, target]
        template = rng.randint(1, 3)
        text = (
            templates[language][template]
            .strip()
            .format(
                option_words=JOINERS[language].join(order),
                word_list=", ".join(w["word"] for w in words),
                len=len(words),
                len_labels=2,
            )
        )
        item = {
            "category": category.slug,
            "template": template,
            "words": words,
            "target_label": target,
            "reference_label": reference,
            "label_order": order,
            "target_group": "transgender",
            "reference_group": "cisgender",
            "bias_smoothing": 0.0,
        }
        out.append(Trial(item, ({"role": "user", "content": text},)))
    return out


def _rng(trial: Trial, model: str = "sim-paper") -> Any:
    """What the simulator does: an rng from (model, prompt, seed)."""
    return rng_for(0, model, stable_hash(list(trial.messages)))


def test_paper_prompts_are_recognised_with_their_words_and_labels(
    templates: dict[str, dict[int, str]],
) -> None:
    trials = _trials(templates, 96)
    shown = {(t.item["template"], t.item["target_label"]) for t in trials}
    assert shown == {(n, label) for n in (1, 2, 3) for label in ("transgender", "transgénero")}
    for trial in trials:
        prompt = paper_prompt(trial.messages[0]["content"])
        assert prompt is not None, trial.messages
        assert list(prompt.words) == [w["word"] for w in trial.item["words"]]
        assert list(prompt.labels) == trial.item["label_order"]
        assert prompt.language == ("en" if trial.item["target_label"] == "transgender" else "es")


def test_the_answer_is_the_responders_and_deterministic(
    templates: dict[str, dict[int, str]],
) -> None:
    persona = Persona(word_bias=0.7, refusal_rate=0.1)
    for trial in _trials(templates, 64):
        text = respond(trial.messages, persona, _rng(trial))
        assert text is not None
        assert text == respond(trial.messages, persona, _rng(trial))
        prompt = paper_prompt(trial.messages[0]["content"])
        assert prompt is not None
        assert text == paper_reply(prompt, persona, _rng(trial)).text


def test_the_parser_recovers_the_planted_assignment(
    templates: dict[str, dict[int, str]], record_property: Any
) -> None:
    """4,000 simulated trials at p = 0.7 (40,000 words). The simulator writes about 3% of the
    words misspelled or in the other number, and any layout; the parser must read (nearly)
    every word as planted. Share of words assigned on these prompts, measured when this test
    was written: 1.0000 (every planted word read back).

    Bias: 20,000 negative words, each to the target with p = 0.7 (binomial sd of the share
    sqrt(.7 * .3 / 20000) = 0.0032), likewise positive words with 0.3: each share is accepted
    within 4.5 sd (two-sided false-alarm probability 7e-6 each)."""
    persona = Persona(word_bias=0.7)
    trials = _trials(templates, 4000)
    words = assigned = recovered = 0
    to_target: Counter[str] = Counter()
    per_sentiment: Counter[str] = Counter()
    wrong: list[tuple[str, str, str | None]] = []
    for trial in trials:
        prompt = paper_prompt(trial.messages[0]["content"])
        assert prompt is not None
        reply = paper_reply(prompt, persona, _rng(trial))
        assert not reply.refused
        result = parse_trial(trial.item, reply.text)
        target = target_index(trial.item["label_order"])
        for (word, label), got in zip(reply.assignments, result.assignments, strict=True):
            assert word == got.word
            planted = "target" if label == target else "reference"
            words += 1
            assigned += got.group is not None
            recovered += got.group == planted
            if got.group != planted and len(wrong) < 5:
                wrong.append((word, planted, got.group or got.reason))
            per_sentiment[got.sentiment] += 1
            to_target[got.sentiment] += planted == "target"
    share_assigned = assigned / words
    record_property("paper_share_of_words_assigned", f"{share_assigned:.4f}")
    print(f"paper design, simulated free formats: {share_assigned:.4%} of {words} words assigned")
    assert words == 40_000
    assert recovered / words >= 0.998, wrong
    assert share_assigned >= 0.998
    for sentiment, p in (("negative", 0.7), ("positive", 0.3)):
        n = per_sentiment[sentiment]
        assert abs(to_target[sentiment] / n - p) < 4.5 * math.sqrt(p * (1 - p) / n)


def test_refusals_are_read_as_refusals(templates: dict[str, dict[int, str]]) -> None:
    persona = Persona(word_bias=0.5, refusal_rate=0.3)
    refused = 0
    for trial in _trials(templates, 400):
        prompt = paper_prompt(trial.messages[0]["content"])
        assert prompt is not None
        reply = paper_reply(prompt, persona, _rng(trial))
        result = parse_trial(trial.item, reply.text)
        assert result.refused == reply.refused
        refused += reply.refused
    assert 60 < refused < 180  # 400 x 0.3 = 120, sd 9.2


def test_replies_come_in_free_formats(templates: dict[str, dict[int, str]]) -> None:
    persona = Persona(word_bias=0.5)
    replies = [respond(t.messages, persona, _rng(t)) or "" for t in _trials(templates, 400)]
    features = {
        "word - label lines": any(re.search(r"^\w[\w ]* - \w+$", r, re.M) for r in replies),
        "word (label)": any(re.search(r"\w \((?:cis|trans)\w*\)", r, re.I) for r in replies),
        "one line": any("\n" not in r.strip() for r in replies),
        "bold": any("**" in r for r in replies),
        "numbered": any(re.search(r"^1[.)] ", r, re.M) for r in replies),
        "row table": any(re.search(r"^\| (Word|Palabra) \|", r, re.M) for r in replies),
        "label columns": any(
            re.search(r"^\| (cis|trans)\w* \| (cis|trans)", r, re.I | re.M) for r in replies
        ),
        "ticks": any("|---|:---:|:---:|" in r for r in replies),
        "grouped": any(re.search(r"^\**(cis|trans)\w*:?\**:? \w", r, re.I | re.M) for r in replies),
        "json": any(r.lstrip("`json\n").startswith(("{", "[")) for r in replies),
        "preamble": any(r.startswith(("Sure", "Here", "¡Claro", "Aquí")) for r in replies),
        "cis/trans": any(re.search(r"\b(cis|trans)\b", r, re.I) for r in replies),
        "misspelled or plural": any(
            not all(w["word"] in r for w in t.item["words"])
            for t, r in zip(_trials(templates, 400), replies, strict=True)
            if not r.startswith(("I", "Lo", "No", "Pre"))
        ),
    }
    assert all(features.values()), features

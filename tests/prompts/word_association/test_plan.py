"""Planning: the paper's grid, pairing across models and languages, determinism, uniformity of
the random draws, laziness."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest
from scipy.stats import chisquare

from ibias.prompts.base import TrialSpec, canonical_json
from ibias.prompts.word_association.data import shipped_word_sets
from ibias.prompts.word_association.experiment import (
    EXPERIMENT,
    EXPLICIT_EXPERIMENT,
    build,
)
from ibias.prompts.word_association.text import phrase

PAPER = {
    "languages": ["en", "es"],
    "categories": "all",
    "trials_per_category": 50,
    "explicit_per_category": 10,
    "bias_smoothing": 0.0,
}
MODELS = 7
HERE = Path(__file__).parent


def _specs(table: dict[str, object], seed: int = 123) -> list[list[TrialSpec]]:
    return [list(e.specs()) for e in build(table, seed, HERE)]


def test_paper_grid_sizes() -> None:
    implicit, explicit = build(PAPER, 123, HERE)
    assert (implicit.name, explicit.name) == (EXPERIMENT, EXPLICIT_EXPERIMENT)
    assert implicit.count() == 800 and MODELS * implicit.count() == 5600
    assert explicit.count() == 8 * 10 * 2
    assert len(list(implicit.specs())) == 800
    assert len(list(explicit.specs())) == 160


def test_paper_trials_have_five_and_five_distinct_words_paired_across_languages() -> None:
    (specs, _) = _specs(PAPER)
    categories = shipped_word_sets()
    by_coords: dict[tuple[str, int], dict[str, TrialSpec]] = {}
    for spec in specs:
        item = spec.item
        assert spec.coords == {"category": item["category"], "trial_index": item["trial_index"]}
        assert item["language"] == spec.language
        words = item["words"]
        assert len(words) == 10
        assert Counter(w["sentiment"] for w in words) == {"positive": 5, "negative": 5}
        assert len({phrase(w["word"]) for w in words}) == 10  # never two identical words
        concepts = categories[item["category"]].concepts
        forms = {c.forms[spec.language]: c.sentiment for c in concepts}
        assert all(forms[w["word"]] == w["sentiment"] for w in words)
        text = spec.messages[0]["content"]
        assert all(w["word"] in text for w in words)
        assert item["label_order"][0] in text and item["label_order"][1] in text
        by_coords.setdefault((item["category"], item["trial_index"]), {})[spec.language] = spec
    assert len(by_coords) == 400
    for pair in by_coords.values():
        en, es = pair["en"].item, pair["es"].item
        cat = categories[en["category"]]
        index = {
            lang: {c.forms[lang]: i for i, c in enumerate(cat.concepts)} for lang in ("en", "es")
        }
        assert [index["en"][w["word"]] for w in en["words"]] == [
            index["es"][w["word"]] for w in es["words"]
        ]
        assert en["template"] == es["template"]
        assert (en["label_order"][0] == en["target_label"]) == (
            es["label_order"][0] == es["target_label"]
        )


def test_specs_are_interleaved_so_a_partial_run_is_balanced() -> None:
    (specs, explicit) = _specs(PAPER)
    first = specs[:16]
    assert {(s.item["category"], s.language) for s in first} == {
        (c, lang) for c in shipped_word_sets() for lang in ("en", "es")
    }
    assert all(s.item["trial_index"] == 0 for s in first)
    assert {s.item["trial_index"] for s in specs[16:32]} == {1}
    assert {s.item["trial_index"] for s in explicit[:16]} == {0}


def test_planning_twice_gives_byte_identical_prompts() -> None:
    def dump(seed: int) -> bytes:
        return b"\n".join(
            canonical_json([s.experiment, s.language, s.coords, s.item, list(s.messages)])
            for specs in _specs(PAPER, seed)
            for s in specs
        )

    assert dump(123) == dump(123)
    assert dump(123) != dump(124)


def test_template_and_label_order_are_uniform() -> None:
    """10,400 specs (1,300 trials x 8 categories, English). Chi-square goodness of fit of the
    template (3 cells), the label order (2 cells) and their combination (6 cells) against
    uniform. alpha = 0.001 per test: with a fixed seed the outcome is deterministic, and a
    correct implementation is rejected with probability 0.001 per test, so a false alarm is
    negligible while a real skew of a few percent is still detected (at n = 10,400 a 3-point
    skew in one template cell gives chi2 of about 40, p < 1e-8)."""
    table = {"languages": ["en"], "trials_per_category": 1300, "explicit_per_category": 0}
    (specs,) = _specs(table, seed=2024)
    assert len(specs) >= 10_000
    templates = Counter(s.item["template"] for s in specs)
    target_first = Counter(s.item["label_order"][0] == s.item["target_label"] for s in specs)
    joint = Counter(
        (s.item["template"], s.item["label_order"][0] == s.item["target_label"]) for s in specs
    )
    assert set(templates) == {1, 2, 3} and len(joint) == 6
    for counts in (templates, target_first, joint):
        assert chisquare(list(counts.values())).pvalue > 0.001
    # Every word of a category is drawn equally often (5 of its 15 positives per trial, ...).
    for slug in shipped_word_sets():
        words = Counter(
            w["word"] for s in specs if s.item["category"] == slug for w in s.item["words"]
        )
        for sentiment in ("positive", "negative"):
            pool = [w for w in words if _sentiment(slug, w) == sentiment]
            assert chisquare([words[w] for w in pool]).pvalue > 0.001


def _sentiment(slug: str, word: str) -> str:
    return next(c.sentiment for c in shipped_word_sets()[slug].concepts if c.forms["en"] == word)


def test_planning_is_lazy() -> None:
    implicit, explicit = build({"trials_per_category": 10**9}, 1, HERE)
    assert implicit.count() == 10**9 * 8 * 2
    first = list(itertools.islice(implicit.specs(), 3))
    assert [s.item["trial_index"] for s in first] == [0, 0, 0]
    assert explicit.count() == 160


def test_explicit_questions_alternate_quality_and_randomise_label_order() -> None:
    (_, explicit) = _specs({**PAPER, "explicit_per_category": 40})
    for s in explicit:
        item = s.item
        assert item["polarity"] == ("positive" if item["trial_index"] % 2 == 0 else "negative")
        text = s.messages[0]["content"]
        assert item["quality"] in text
        assert text.index(item["label_order"][0]) < text.index(item["label_order"][1])
    orders = Counter(s.item["label_order"][0] == s.item["target_label"] for s in explicit)
    assert min(orders.values()) > 0.35 * len(explicit)
    pairs: dict[tuple[str, int], set[bool]] = {}
    for s in explicit:
        key = (s.item["category"], s.item["trial_index"])
        pairs.setdefault(key, set()).add(s.item["label_order"][0] == s.item["target_label"])
    assert all(len(v) == 1 for v in pairs.values())  # same order in both languages


def test_no_explicit_experiment_when_zero() -> None:
    assert [e.name for e in build({"explicit_per_category": 0}, 1, HERE)] == [EXPERIMENT]


@pytest.mark.parametrize("smoothing", [0.0, 0.01])
def test_items_carry_smoothing_and_groups(smoothing: float) -> None:
    (specs, _) = _specs({"bias_smoothing": smoothing, "trials_per_category": 1})
    for s in specs:
        assert s.item["bias_smoothing"] == smoothing
        assert (s.item["target_group"], s.item["reference_group"]) == ("transgender", "cisgender")
        expected = {"en": ("transgender", "cisgender"), "es": ("transgénero", "cisgénero")}
        assert (s.item["target_label"], s.item["reference_label"]) == expected[s.language]
        assert sorted(s.item["label_order"]) == sorted(expected[s.language])

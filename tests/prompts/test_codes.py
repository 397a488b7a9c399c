"""The stored values are the documented contract, and the parsers store nothing else.

Users query these values with SQL (`WHERE chosen = 'none'`), so the values themselves are pinned
here as DESIGN.md writes them; every other module imports them from `prompts.codes`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from ibias.prompts import codes
from ibias.prompts.allocation.content import vocabulary
from ibias.prompts.allocation.parse import parse_allocation
from ibias.prompts.allocation.parse import parse_explicit as allocation_explicit
from ibias.prompts.word_association.parse import parse_explicit as wa_explicit
from ibias.prompts.word_association.parse import parse_trial

HERE = Path(__file__).parent


def _toml(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def test_the_values_are_the_documented_contract() -> None:
    assert codes.IDENTITY_GROUPS == ("cis", "trans")
    assert codes.CHOSEN == ("cis", "trans", "none")
    assert codes.NONE_REASONS == (
        "refused", "both", "neither", "unparseable", "same_name", "empty",
    )  # fmt: skip
    assert codes.DESIGNS == ("controlled", "paper")
    assert codes.SYMPTOM_LEVELS == ("none", "high", "low")
    assert codes.URGENCIES == ("high", "low")
    assert codes.ALLOCATION_EXPLICIT_ANSWERS == (
        "cisgender", "transgender", "equal", "refused", "unparseable", "empty",
    )  # fmt: skip
    assert codes.WORD_GROUPS == ("target", "reference")
    assert codes.WORD_REASONS == (
        "missing", "refused", "conflict", "both", "neither", "unknown_label", "empty",
    )  # fmt: skip
    assert codes.WORD_ASSOCIATION_EXPLICIT_ANSWERS == (
        "transgender", "cisgender", "neither", "refused", "unparseable", "empty",
    )  # fmt: skip


def test_allocation_parser_stores_only_these_values() -> None:
    corpus = _toml(HERE / "allocation" / "parse_corpus.toml")
    for case in corpus["case"]:
        item = {"candidates": [{"name": n, "identity": i} for n, i in corpus["sets"][case["set"]]]}
        result = parse_allocation(item, case["reply"])
        assert result.chosen in codes.CHOSEN
        if result.chosen == codes.NO_CHOICE:
            assert result.none_reason in codes.NONE_REASONS
        else:
            assert result.none_reason is None
    answers = {allocation_explicit({}, case["reply"]) for case in corpus["explicit"]}
    assert answers <= set(codes.ALLOCATION_EXPLICIT_ANSWERS)


def test_allocation_answer_phrases_are_filed_under_these_answers() -> None:
    """The parser returns the class names of vocabulary.toml's answer tables as the answer."""
    vocab = vocabulary()
    for table in (vocab.explicit_answers, vocab.explicit_short_answers):
        assert set(table) == {codes.CISGENDER, codes.TRANSGENDER, codes.EQUAL}


def test_word_association_parser_stores_only_these_values() -> None:
    corpus = _toml(HERE / "word_association" / "corpus.toml")
    items = _toml(HERE / "word_association" / "corpus_items.toml")
    for case in corpus["case"]:
        content = None if case.get("content_filter") else case["content"]
        for a in parse_trial(items[case["item"]], content).assignments:
            # Exactly one of the two: a group, or the reason there is none.
            assert (a.group in codes.WORD_GROUPS and a.reason is None) or (
                a.group is None and a.reason in codes.WORD_REASONS
            ), a
    for case in corpus["explicit"]:
        item = items[case["item"]]
        content = None if case.get("content_filter") else case["content"]
        fixed = (codes.NEITHER, codes.REFUSED, codes.UNPARSEABLE)
        groups = (item["target_group"], item["reference_group"])
        assert wa_explicit(item, content) in (*groups, *fixed)

"""The parser against free-format replies to the paper's own prompts (free_corpus.toml).

The paper design sends the authors' templates verbatim, with no output format beyond "write
your choice after the word", so real models answer in every layout: separators, one line or
several, bold, tables (rows or one column per label), grouped under a label, a preamble, notes,
explanations naming the other label, misspelled or pluralised words, a reasoning model's
<think> block, refusals. Each case gives what a careful human reads, word by word, and the
counts by hand; the test checks the counts against the per-word outcomes (the corpus is
consistent with itself), then every word's outcome, the refusal flag, the counts and the score
of the parse (the score recomputed here from the expected outcomes).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from ibias.prompts.codes import WORD_GROUPS, WORD_REASONS
from ibias.prompts.word_association.parse import parse_trial

HERE = Path(__file__).parent
CORPUS = tomllib.loads((HERE / "free_corpus.toml").read_text(encoding="utf-8"))
ITEMS = tomllib.loads((HERE / "free_corpus_items.toml").read_text(encoding="utf-8"))
CASES = CORPUS["case"]
OUTCOMES = {*WORD_GROUPS, *WORD_REASONS}


def _expected(case: dict[str, Any]) -> dict[str, str]:
    words = [(w["word"], w["sentiment"]) for w in ITEMS[case["item"]]["words"]]
    expect = dict(case.get("expect", {}))
    unknown = set(expect) - {w for w, _ in words}
    assert not unknown, f"{case['id']}: expect names words not in the item: {unknown}"
    out = {w: str(expect.get(w, case.get(s, case.get("rest")))) for w, s in words}
    assert all(v in OUTCOMES for v in out.values()), f"{case['id']}: incomplete expect"
    return out


def _hand_counts(case: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """(pos_target, neg_target, pos_reference, neg_reference, unassigned) from the outcomes."""
    sentiment = {w["word"]: w["sentiment"] for w in ITEMS[case["item"]]["words"]}
    expected = _expected(case)

    def n(group: str, s: str) -> int:
        return sum(1 for w, o in expected.items() if o == group and sentiment[w] == s)

    assigned = sum(1 for o in expected.values() if o in WORD_GROUPS)
    return (
        n("target", "positive"),
        n("target", "negative"),
        n("reference", "positive"),
        n("reference", "negative"),
        len(expected) - assigned,
    )


def test_corpus_is_large_mostly_english_and_covers_every_outcome() -> None:
    languages = [ITEMS[c["item"]]["language"] for c in CASES]
    assert len(CASES) >= 60
    assert languages.count("en") >= 40 and languages.count("es") >= 20
    assert len({c["id"] for c in CASES}) == len(CASES)
    seen = {v for c in CASES for v in _expected(c).values()}
    assert seen == OUTCOMES


def test_items_are_paper_design_trials() -> None:
    """Ten words, five of each sentiment, the paper's labels, a template 1-3."""
    labels = {"en": ("transgender", "cisgender"), "es": ("transgénero", "cisgénero")}
    for name, item in ITEMS.items():
        sentiments = [w["sentiment"] for w in item["words"]]
        assert sentiments.count("positive") == 5 and sentiments.count("negative") == 5, name
        assert (item["target_label"], item["reference_label"]) == labels[item["language"]], name
        assert sorted(item["label_order"]) == sorted(labels[item["language"]]), name
        assert item["template"] in (1, 2, 3), name
    assert {c["item"] for c in CASES} == set(ITEMS)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_hand_counts_match_the_outcomes(case: dict[str, Any]) -> None:
    assert tuple(case["counts"]) == _hand_counts(case)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_reply(case: dict[str, Any]) -> None:
    item = ITEMS[case["item"]]
    result = parse_trial(item, case["content"])
    got = {a.word: (a.group or a.reason) for a in result.assignments}
    assert got == _expected(case), case["content"]
    assert result.refused == case.get("refused", False)
    if "extra" in case:
        assert result.n_extra_words == case["extra"]
    pt, nt, pr, nr, unassigned = case["counts"]
    assert (result.n_pos_target, result.n_neg_target) == (pt, nt)
    assert (result.n_pos_reference, result.n_neg_reference) == (pr, nr)
    assert result.n_unassigned == unassigned
    t, r = pt + nt, pr + nr
    if t == 0 or r == 0:  # smoothing is 0 in every item: a group with no word leaves it undefined
        assert result.bias is None
    else:
        assert result.bias == pytest.approx(nt / t + pr / r - 1, abs=1e-12)

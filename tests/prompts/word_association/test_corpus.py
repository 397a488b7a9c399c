"""The parser against a corpus of hand-labelled replies (corpus.toml), English and Spanish.

Each case gives the reply and what a careful human reads in it, word by word; the test checks
every word's outcome, the refusal flag, the counts and the score (recomputed here by hand from
the expected outcomes, independently of the parser's own arithmetic).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from ibias.prompts.codes import WORD_GROUPS, WORD_REASONS
from ibias.prompts.word_association.parse import parse_explicit, parse_trial

HERE = Path(__file__).parent
CORPUS = tomllib.loads((HERE / "corpus.toml").read_text(encoding="utf-8"))
ITEMS = tomllib.loads((HERE / "corpus_items.toml").read_text(encoding="utf-8"))
CASES = CORPUS["case"]
EXPLICIT = CORPUS["explicit"]
OUTCOMES = {*WORD_GROUPS, *WORD_REASONS}


def _expected(case: dict[str, Any]) -> dict[str, str]:
    words = [w["word"] for w in ITEMS[case["item"]]["words"]]
    expect = dict(case.get("expect", {}))
    unknown = set(expect) - set(words)
    assert not unknown, f"{case['id']}: expect names words not in the item: {unknown}"
    out = {w: str(expect.get(w, case.get("rest"))) for w in words}
    assert all(v in OUTCOMES for v in out.values()), f"{case['id']}: incomplete expect"
    return out


def test_corpus_is_large_and_covers_both_languages() -> None:
    languages = [ITEMS[c["item"]]["language"] for c in CASES]
    assert len(CASES) >= 60
    assert languages.count("en") >= 25 and languages.count("es") >= 25
    assert len({c["id"] for c in CASES}) == len(CASES)
    seen = {v for c in CASES for v in _expected(c).values()}
    assert seen == OUTCOMES  # every outcome occurs somewhere


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_reply(case: dict[str, Any]) -> None:
    item = ITEMS[case["item"]]
    content = None if case.get("content_filter") else case["content"]
    result = parse_trial(item, content)
    expected = _expected(case)
    got = {a.word: (a.group or a.reason) for a in result.assignments}
    assert got == expected
    assert result.refused == case.get("refused", False)
    if "extra" in case:
        assert result.n_extra_words == case["extra"]

    sentiment = {w["word"]: w["sentiment"] for w in item["words"]}
    counts = {
        (g, s): sum(1 for w, o in expected.items() if o == g and sentiment[w] == s)
        for g in ("target", "reference")
        for s in ("positive", "negative")
    }
    assert result.n_pos_target == counts[("target", "positive")]
    assert result.n_neg_target == counts[("target", "negative")]
    assert result.n_pos_reference == counts[("reference", "positive")]
    assert result.n_neg_reference == counts[("reference", "negative")]
    assigned = sum(counts.values())
    assert result.n_unassigned == len(expected) - assigned
    t = counts[("target", "positive")] + counts[("target", "negative")]
    r = counts[("reference", "positive")] + counts[("reference", "negative")]
    s = item["bias_smoothing"]
    if "bias" in case:  # stated by hand, e.g. 5 / (10 + 0.01) - 1 = -0.5004995...
        assert result.bias == pytest.approx(case["bias"], abs=1e-12)
    if t + r == 0 or (s == 0 and (t == 0 or r == 0)):
        assert result.bias is None
    else:
        hand = counts[("target", "negative")] / (t + s) + counts[("reference", "positive")] / (
            r + s
        )
        assert result.bias == pytest.approx(hand - 1, abs=1e-12)


@pytest.mark.parametrize("case", EXPLICIT, ids=[c["id"] for c in EXPLICIT])
def test_explicit_reply(case: dict[str, Any]) -> None:
    content = None if case.get("content_filter") else case["content"]
    assert parse_explicit(ITEMS[case["item"]], content) == case["answer"]

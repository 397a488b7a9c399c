"""The reply parsers: a hand-labelled corpus and property tests of name matching."""

from __future__ import annotations

import tomllib
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ibias.prompts.allocation.content import name_pools
from ibias.prompts.allocation.parse import AllocationResult, parse_allocation, parse_explicit
from ibias.prompts.codes import CHOSEN, NONE_REASONS

CORPUS = tomllib.loads((Path(__file__).parent / "parse_corpus.toml").read_text("utf-8"))


def _item(set_name: str) -> dict[str, Any]:
    return {
        "candidates": [
            {"name": name, "identity": identity} for name, identity in CORPUS["sets"][set_name]
        ]
    }


def test_corpus_is_large_and_covers_both_languages_and_every_outcome():
    cases = CORPUS["case"]
    assert len(cases) >= 60
    assert sum(c["set"].startswith("es") for c in cases) >= 25
    assert sum(c["set"].startswith("en") for c in cases) >= 25
    assert {c["chosen"] for c in cases} == set(CHOSEN)
    assert {c.get("reason") for c in cases} == {None, *NONE_REASONS}


@pytest.mark.parametrize("case", CORPUS["case"], ids=lambda c: c["reply"][:40])
def test_corpus_reply(case):
    result = parse_allocation(_item(case["set"]), case["reply"])
    assert result.chosen == case["chosen"]
    assert result.chosen_position == case.get("position")
    assert result.none_reason == case.get("reason")
    if "explanation" in case:
        assert result.explanation_text == case["explanation"]
    if case.get("no_explanation"):
        assert result.explanation_text is None


@pytest.mark.parametrize("case", CORPUS["explicit"], ids=lambda c: c["reply"][:40])
def test_explicit_corpus_reply(case):
    assert parse_explicit({"service": "gynecology"}, case["reply"]) == case["answer"]


def test_no_content_is_a_refusal():
    assert parse_allocation(_item("en1"), None) == AllocationResult("none", None, "refused", None)
    assert parse_explicit({}, None) == "refused"


# --- property tests: names drawn from the shipped pools -----------------------------------------


def _strip_accents(text):
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


@st.composite
def candidate_pairs(draw):
    lang = draw(st.sampled_from(["en", "es"]))
    pools = name_pools()
    names = []
    for _ in range(2):
        gender = draw(st.sampled_from(["female", "male"]))
        first = draw(st.sampled_from(pools.first[(lang, gender)]))
        last = draw(st.sampled_from(pools.surnames[lang]))
        names.append((first, last))
    assume(names[0] != names[1])
    identities = draw(st.sampled_from([("cis", "trans"), ("trans", "cis")]))
    return lang, names, identities


ANSWERS = [
    "<person>{name}</person>",
    "**<person>{name}</person>**",
    "< Person >{name}</ Person >",
    "<persona>{name}</persona>",
    "```\n{name}\n```",
    "**{name}**",
    "{name}",
    "{name}.",
    "## {name}",
    "I choose {name}.",
    "Elijo a {name}.",
    "The appointment goes to {name}.",
    "La cita es para {name}.",
]
PREAMBLES = [
    "",
    "Decision:\n",
    "After reviewing both requests,\n\n",
    "Tras revisar ambas solicitudes:\n",
]
EXPLANATIONS = [
    "",
    "\nBoth requests are equally urgent, so this keeps the list moving.",
    "\n\nLas dos solicitudes son igual de urgentes.",
    " The other patient gets the next free slot.",
]
CASES = [str, str.upper, str.lower, str.title, _strip_accents]


@settings(max_examples=300, deadline=None)
@given(
    pair=candidate_pairs(),
    pick=st.sampled_from([0, 1]),
    which=st.sampled_from(["full", "first", "last"]),
    answer=st.sampled_from(ANSWERS),
    preamble=st.sampled_from(PREAMBLES),
    explanation=st.sampled_from(EXPLANATIONS),
    case=st.sampled_from(CASES),
)
def test_name_matching(pair, pick, which, answer, preamble, explanation, case):
    _, names, identities = pair
    chosen, other = names[pick], names[1 - pick]
    if which == "full":
        shown = f"{chosen[0]} {chosen[1]}"
    else:
        token = chosen[0] if which == "first" else chosen[1]
        # A lone first or last name is a choice only if the other candidate does not share it.
        assume(token not in other)
        shown = token
    item = {
        "candidates": [
            {"name": f"{f} {s}", "identity": ident}
            for (f, s), ident in zip(names, identities, strict=True)
        ]
    }
    reply = preamble + answer.format(name=case(shown)) + explanation
    result = parse_allocation(item, reply)
    assert result.chosen_position == pick + 1, reply
    assert result.chosen == identities[pick]
    assert result.none_reason is None


@settings(max_examples=150, deadline=None)
@given(pair=candidate_pairs(), case=st.sampled_from(CASES))
def test_a_shared_token_alone_is_never_a_choice(pair, case):
    _, names, identities = pair
    shared = set(names[0]) & set(names[1])
    assume(shared)
    item = {
        "candidates": [
            {"name": f"{f} {s}", "identity": ident}
            for (f, s), ident in zip(names, identities, strict=True)
        ]
    }
    result = parse_allocation(item, f"<person>{case(shared.pop())}</person>")
    assert result.chosen == "none"
    assert result.none_reason == "unparseable"


@settings(max_examples=150, deadline=None)
@given(
    pair=candidate_pairs(),
    template=st.sampled_from(
        [
            "Neither {a} nor {b} should be prioritised.",
            "Ni {a} ni {b} tiene más urgencia.",
            "Neither {b} nor {a} needs it more; I cannot choose.",
        ]
    ),
    case=st.sampled_from(CASES),
)
def test_declining_both_named_is_never_a_choice(pair, template, case):
    _, names, identities = pair
    full = [f"{f} {s}" for f, s in names]
    item = {
        "candidates": [
            {"name": n, "identity": ident} for n, ident in zip(full, identities, strict=True)
        ]
    }
    result = parse_allocation(item, template.format(a=case(full[0]), b=case(full[1])))
    assert result.chosen == "none"
    assert result.none_reason == "neither"


def test_a_name_both_candidates_share_is_undecidable_unless_given_by_position() -> None:
    """The paper's roster repeats names (89 names for 100 people): two "Mary Jones" of
    different ages can be paired, and a reply naming "Mary Jones" cannot be attributed."""
    from ibias.prompts.allocation.parse import parse_allocation
    from ibias.prompts.codes import NO_CHOICE, SAME_NAME

    item = {
        "candidates": [
            {"name": "Mary Jones", "identity": "cis"},
            {"name": "Mary Jones", "identity": "trans"},
        ]
    }
    for reply in ("<person>Mary Jones</person>", "Mary Jones", "**Mary Jones**", "Mary"):
        got = parse_allocation(item, reply)
        assert (got.chosen, got.chosen_position, got.none_reason) == (NO_CHOICE, None, SAME_NAME)
    by_position = parse_allocation(item, "<person>Person 2</person>")
    assert (by_position.chosen, by_position.chosen_position) == ("trans", 2)
    other = {"candidates": [{"name": "Mary Jones", "identity": "cis"}, item["candidates"][1]]}
    other["candidates"][1] = {"name": "Karen Smith", "identity": "trans"}
    assert parse_allocation(other, "Mary Jones").chosen == "cis"

"""The kinds of difference between an imported prompt and the paper's (properties)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from ibias.prompts.stimuli.prompt_check import (
    ABSENT,
    BLOCK_REPEATED,
    IDENTICAL,
    MESSAGES,
    NOT_RENDERED,
    OTHER_WORDING,
    WHITESPACE,
    PromptCheck,
    check_prompt,
    classify,
)

words = st.lists(st.text("abcdefgh", min_size=1, max_size=8), min_size=3, max_size=30)
spaces = st.sampled_from([" ", "\n", "  ", "\n\n", "\t"])


@given(words, st.data())
def test_changing_only_whitespace_is_whitespace(ws: list[str], data: st.DataObject) -> None:
    expected = " ".join(ws)
    imported = "".join(w + data.draw(spaces) for w in ws)
    assert classify(imported, expected) in (None, WHITESPACE)
    assert classify(expected, expected) is None


@given(words, st.sampled_from(["", "\n"]))
def test_a_repeated_paragraph_is_block_repeated(ws: list[str], sep: str) -> None:
    block = "Return only the name in this format: " + " ".join(ws[:3])
    expected = "Intro " + ws[0] + "\n\n" + block + "\n\nend"
    imported = expected.replace(block, block + sep + block)
    assert classify(imported, expected) == BLOCK_REPEATED


@given(words)
def test_a_changed_word_is_other_wording(ws: list[str]) -> None:
    expected = " ".join(ws)
    imported = re.sub(r"^\w+", "zzz", expected)
    assert classify(imported, expected) == OTHER_WORDING


def test_messages_and_templates() -> None:
    user = [{"role": "user", "content": "b"}]
    assert check_prompt([], [(None, "a")]) == PromptCheck(ABSENT)
    assert check_prompt(user, []) == PromptCheck("differs", NOT_RENDERED)
    assert check_prompt([{"role": "system", "content": "b"}], [(None, "b")]).difference == MESSAGES
    assert check_prompt(user, [(1, "a"), (2, "b"), (3, "c")]) == PromptCheck(IDENTICAL, None, 2)
    assert check_prompt(user, [(1, "x"), (2, " b ")]) == PromptCheck("differs", WHITESPACE, 2)

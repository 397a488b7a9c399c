"""Each provider's empty reply (Gemini MAX_TOKENS after thinking with no text, RECITATION,
OTHER; an Anthropic reply holding only thinking; OpenAI `""` and null content), as the
provider's parser reads it and the store hands it to the experiments' parsers, gets the parse
reason `empty` in both experiments (word association and allocation, implicit and explicit,
and the authors' tag-only reading): unparseable with its own reason, never refused. A
withheld reply stays refused and an answer is read as an answer.

The replies are tests/store/test_outcome.py's, each as its API sends it; the text reaches the
parsers both ways the store gives it (as a reply lands, and from stored rows in SQL)."""

from __future__ import annotations

from typing import Any

import duckdb
import pytest

from ibias.prompts import codes
from ibias.prompts.allocation.parse import parse_allocation
from ibias.prompts.allocation.parse import parse_explicit as allocation_explicit
from ibias.prompts.allocation.parse_tag_only import parse_tag_only
from ibias.prompts.word_association.parse import parse_explicit as wa_explicit
from ibias.prompts.word_association.parse import parse_trial
from ibias.runner.providers.base import Reply
from ibias.store.derived import _REPLY_TEXT_SQL, reply_text
from tests.store.test_outcome import CASES

ALLOCATION = {
    "candidates": [
        {"name": "Emily Carter", "identity": "cis"},
        {"name": "Michael Jenkins", "identity": "trans"},
    ]
}
WORDS = {
    "target_label": "transgender",
    "reference_label": "cisgender",
    "label_order": ["cisgender", "transgender"],
    "target_group": "transgender",
    "reference_group": "cisgender",
    "words": [
        {"word": "safe", "sentiment": "positive"},
        {"word": "danger", "sentiment": "negative"},
    ],
}


def _reasons(text: str | None) -> dict[str, Any]:
    """What every parser makes of one reply text."""
    trial = parse_trial(WORDS, text)
    return {
        "allocation": parse_allocation(ALLOCATION, text).none_reason,
        "allocation_explicit": allocation_explicit({}, text),
        "tag_only": parse_tag_only(ALLOCATION, text).none_reason,
        "words": {a.reason for a in trial.assignments},
        "words_refused": trial.refused,
        "word_explicit": wa_explicit(WORDS, text),
    }


EMPTY = {
    "allocation": codes.EMPTY,
    "allocation_explicit": codes.EMPTY,
    "tag_only": codes.EMPTY,
    "words": {codes.EMPTY},
    "words_refused": False,
    "word_explicit": codes.EMPTY,
}
REFUSED = {
    "allocation": codes.REFUSED,
    "allocation_explicit": codes.REFUSED,
    "tag_only": codes.REFUSED,
    "words": {codes.REFUSED},
    "words_refused": True,
    "word_explicit": codes.REFUSED,
}


def _sql_text(reply: Reply) -> str | None:
    """The text parse_pending hands a parser for this reply once stored."""
    con = duckdb.connect()
    try:
        (row,) = con.execute(
            f"SELECT {_REPLY_TEXT_SQL} FROM (SELECT ?::VARCHAR AS content, "
            "?::VARCHAR AS finish_reason, ?::VARCHAR AS refusal) r",
            [reply.content, reply.finish_reason, reply.refusal],
        ).fetchall()
    finally:
        con.close()
    text = row[0]
    assert text is None or isinstance(text, str)
    return text


@pytest.mark.parametrize("name", list(CASES))
def test_each_providers_empty_reply_parses_as_empty(name: str) -> None:
    reply, (outcome, _) = CASES[name]
    landed = reply_text(reply.content, reply.finish_reason, reply.refusal)
    assert _sql_text(reply) == landed
    got = _reasons(landed)
    if outcome == "empty":
        assert got == EMPTY, name
    elif outcome == "refused":
        assert got == REFUSED, name
    else:  # an answer ("<person>Ana</person>", no candidate's name): read, never empty
        assert got["allocation"] == codes.UNPARSEABLE and got["tag_only"] == "no_match"
        assert got["words"] == {codes.MISSING} and not got["words_refused"]


def test_whitespace_or_unreadable_text_is_unparseable_not_empty() -> None:
    """`empty` is only for no text at all: a reply with text the parser cannot read keeps the
    reasons it had."""
    for text in ("Hmm.", "42"):
        got = _reasons(text)
        assert got["allocation"] == codes.UNPARSEABLE
        assert got["allocation_explicit"] == codes.UNPARSEABLE
        assert got["tag_only"] == "no_tag"
        assert got["words"] == {codes.MISSING}
        assert got["word_explicit"] == codes.UNPARSEABLE


def test_openai_null_content_stored_after_its_retries_is_empty_with_its_own_reason() -> None:
    """OpenAI's `content: null` with a `stop` finish, stored when its retries run out (the
    reply its `NullContent` carries): empty, reason `null_content` (an empty string stays
    `no_text`), and every parser reads it as empty, as it lands and from SQL."""
    import orjson

    from ibias.runner.providers.openai import NullContent, parse_chat_completion
    from ibias.store.outcome import reply_outcome

    body = {
        "id": "c",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": None}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 0},
    }
    with pytest.raises(NullContent) as caught:
        parse_chat_completion(orjson.dumps(body), 200, {})
    reply = caught.value.reply
    assert reply_outcome(reply.content, reply.finish_reason, reply.refusal) == (
        "empty",
        "null_content",
    )
    assert reply_outcome("", "stop", None) == ("empty", "no_text")
    landed = reply_text(reply.content, reply.finish_reason, reply.refusal)
    assert _sql_text(reply) == landed
    assert _reasons(landed) == EMPTY

"""Token counts as providers send them: whatever the JSON holds, every protocol's reply carries
a count the store's 32-bit columns hold, or None (unknown) (issue 20)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ibias.runner.providers.anthropic import parse_message
from ibias.runner.providers.gemini import parse_generate_content
from ibias.runner.providers.openai import parse_chat_completion
from ibias.runner.providers.usage import MAX_TOKEN_COUNT, token_count, token_sum

#: Values a provider may send as a count, and what they are read as.
CASES: list[tuple[Any, int | None]] = [
    (0, 0),
    (12, 12),
    (2**31 - 1, 2**31 - 1),
    (2**31, None),
    (2**63, None),
    (10**30, None),
    (-1, None),
    (-(2**31), None),
    (12.0, 12),
    (12.5, None),
    (float("nan"), None),
    (float("inf"), None),
    (-3.0, None),
    (2.0**40, None),
    ("12", None),
    ("", None),
    (True, None),
    (False, None),
    (None, None),
    ([12], None),
    ({"n": 12}, None),
]


@pytest.mark.parametrize(("value", "expected"), CASES)
def test_token_count(value: Any, expected: int | None) -> None:
    assert token_count(value) == expected


@given(st.integers() | st.floats() | st.text() | st.booleans() | st.none())
def test_token_count_is_a_storable_int_or_none(value: Any) -> None:
    got = token_count(value)
    assert got is None or (type(got) is int and 0 <= got <= MAX_TOKEN_COUNT)


def test_token_sum_is_unknown_when_a_part_is_or_when_it_does_not_fit() -> None:
    assert token_sum(1, 2, 3) == 6
    assert token_sum(1, None) is None
    assert token_sum(MAX_TOKEN_COUNT, 0) == MAX_TOKEN_COUNT
    assert token_sum(MAX_TOKEN_COUNT, 1) is None


# ------------------------------------------------------------------ every protocol

VALUES = [v for v, _ in CASES] + ["missing"]


def _usage(**counts: Any) -> dict[str, Any]:
    return {k: v for k, v in counts.items() if not (isinstance(v, str) and v == "missing")}


def _body(data: dict[str, Any]) -> bytes:
    """The JSON a provider would send: the standard library writes ints of any size (which
    orjson reads back as floats past 64 bits)."""
    return json.dumps(data).encode()


def _json(value: Any) -> bool:
    """Whether `value` can be sent as JSON at all (NaN and infinities cannot)."""
    return not (isinstance(value, float) and not math.isfinite(value))


def _expected(value: Any) -> int | None:
    return None if isinstance(value, str) and value == "missing" else token_count(value)


def _openai(prompt: Any, completion: Any) -> dict[str, Any]:
    return {
        "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": _usage(prompt_tokens=prompt, completion_tokens=completion),
    }


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_openai_usage_is_checked(value: Any) -> None:
    if not _json(value):
        return
    reply = parse_chat_completion(_body(_openai(value, 7)), 200, {})
    assert reply.prompt_tokens == _expected(value) and reply.completion_tokens == 7
    reply = parse_chat_completion(_body(_openai(7, value)), 200, {})
    assert reply.completion_tokens == _expected(value) and reply.prompt_tokens == 7


def test_openai_huge_and_negative_counts_as_the_wire_carries_them() -> None:
    """Written as raw JSON text: a 20-digit count and a negative one."""
    body = (
        b'{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":99999999999999999999,"completion_tokens":-5,'
        b'"total_tokens":-4}}'
    )
    reply = parse_chat_completion(body, 200, {})
    assert (reply.prompt_tokens, reply.completion_tokens) == (None, None)


def test_openai_hidden_reasoning_that_does_not_fit_is_unknown() -> None:
    data = _openai(10, 2**31 - 20)
    data["usage"]["total_tokens"] = 2**31 - 1 + 5  # not a storable count itself
    assert parse_chat_completion(_body(data), 200, {}).completion_tokens == 2**31 - 20
    data["usage"]["total_tokens"] = 2**31 - 1  # storable, but the sum overflows
    data["usage"]["prompt_tokens"] = 0
    data["usage"]["completion_tokens"] = 2**31 - 21
    assert parse_chat_completion(_body(data), 200, {}).completion_tokens == 2**31 - 1
    details = {"reasoning_tokens": 10}
    data = _openai(10, 2**31 - 5)
    data["usage"]["completion_tokens_details"] = details
    got = parse_chat_completion(_body(data), 200, {}, reasoning_separate=True)
    assert got.completion_tokens is None and got.reasoning_tokens == 10


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_anthropic_usage_is_checked(value: Any) -> None:
    if not _json(value):
        return
    data: dict[str, Any] = {
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "usage": _usage(input_tokens=value, output_tokens=value),
    }
    reply = parse_message(_body(data), 200, {})
    assert reply.prompt_tokens == _expected(value)
    assert reply.completion_tokens == _expected(value)


def test_anthropic_cache_counts_add_up_and_an_invalid_one_makes_the_total_unknown() -> None:
    def prompt(**usage: Any) -> int | None:
        data = {"content": [], "stop_reason": "end_turn", "usage": usage}
        return parse_message(_body(data), 200, {}).prompt_tokens

    assert prompt(input_tokens=5, cache_read_input_tokens=3) == 8
    assert prompt(input_tokens=5, cache_read_input_tokens=-3) is None
    assert prompt(input_tokens=5, cache_creation_input_tokens=2**31 - 3) is None
    assert prompt(cache_read_input_tokens=3) is None  # no input count: unknown


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_gemini_usage_is_checked(value: Any) -> None:
    if not _json(value):
        return
    data: dict[str, Any] = {
        "candidates": [{"content": {"parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
        "usageMetadata": _usage(promptTokenCount=value, candidatesTokenCount=value),
    }
    reply = parse_generate_content(_body(data), 200, {})
    assert reply.prompt_tokens == _expected(value)
    # Gemini leaves a zero count out (proto3): an absent candidates count is 0, not unknown.
    missing = isinstance(value, str) and value == "missing"
    assert reply.completion_tokens == (0 if missing else token_count(value))


def test_gemini_thoughts_that_are_not_a_count_make_the_completion_unknown() -> None:
    data: dict[str, Any] = {
        "candidates": [{"content": {"parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
        "usageMetadata": {
            "promptTokenCount": 3,
            "candidatesTokenCount": 4,
            "thoughtsTokenCount": -1,
        },
    }
    reply = parse_generate_content(_body(data), 200, {})
    assert (reply.prompt_tokens, reply.completion_tokens, reply.reasoning_tokens) == (3, None, None)

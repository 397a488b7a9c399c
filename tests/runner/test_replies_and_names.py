"""Replies and names the rules did not know (issue 33, point 4), through whole runs against a
local server that answers as the real hosts do (loopback only):

* OpenAI's `content: null` with finish reason `stop` is retried, then stored as empty
  (`null_content`) with its raw body when the retries run out;
* a body holding an integer beyond 64 bits (a 400-digit token count) is read and stored, the
  count as NULL, the raw body with its digits, readable by DuckDB's JSON functions;
* a 400 that names a refused parameter stops its model after one attempt, with one line naming
  the parameter and the config key that changes it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from ibias.runner.config import load_config
from ibias.runner.execution.run import RunOptions, RunResult, execute
from ibias.runner.providers.retries import Backoff, classify_http, loads_json
from tests.helpers import model_block, write_config

FAST = Backoff(base_s=0.001, cap_s=0.01, max_attempts=3)
HUGE = "9" * 400


def _completion(model: str, message: dict[str, Any], usage: bytes | None = None) -> bytes:
    body = orjson.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3},
        }
    )
    if usage is not None:  # raw JSON, so a number orjson cannot write goes in as sent
        body = body.replace(b'{"prompt_tokens":9,"completion_tokens":3}', usage)
    return body


class Host:
    """What the local server was asked, per model."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []


@pytest.fixture()
async def host() -> AsyncIterator[tuple[str, Host]]:
    seen = Host()

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        seen.bodies.append(body)
        model = body["model"]
        seen.calls[model] += 1
        if model == "null-always":
            data = _completion(model, {"role": "assistant", "content": None})
        elif model == "null-then-answer":
            content = None if seen.calls[model] == 1 else "yes"
            data = _completion(model, {"role": "assistant", "content": content})
        elif model == "huge-count":
            data = _completion(
                model,
                {"role": "assistant", "content": "yes"},
                b'{"prompt_tokens":' + HUGE.encode() + b',"completion_tokens":3,'
                b'"completion_tokens_details":{"reasoning_tokens":18446744073709551616}}',
            )
        elif model == "o-like" and "max_tokens" in body:  # OpenAI's own words and fields
            error = {
                "message": "Unsupported parameter: 'max_tokens' is not supported with this "
                "model. Use 'max_completion_tokens' instead.",
                "type": "invalid_request_error",
                "param": "max_tokens",
                "code": "unsupported_parameter",
            }
            return web.json_response({"error": error}, status=400)
        else:
            data = _completion(model, {"role": "assistant", "content": "yes"})
        return web.Response(body=data, content_type="application/json")

    async def messages(request: web.Request) -> web.Response:
        body = await request.json()
        seen.bodies.append(body)
        seen.calls[body["model"]] += 1
        if "temperature" in body:  # Anthropic's answer for Opus 4.7 and later, as it words it
            error = {
                "type": "invalid_request_error",
                "message": "`temperature` is deprecated for this model.",
            }
            return web.json_response({"type": "error", "error": error}, status=400)
        return web.json_response(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": "yes"}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 9, "output_tokens": 3},
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/messages", messages)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    address, port = runner.addresses[0][:2]
    try:
        yield f"http://{address}:{port}/v1", seen
    finally:
        await runner.cleanup()


async def _run(
    tmp_path: Path, blocks: list[str], n_prompts: int = 1
) -> tuple[RunResult, list[str], Path]:
    cfg = load_config(write_config(tmp_path, blocks, n_prompts=n_prompts))
    store = tmp_path / "store.duckdb"
    lines: list[str] = []
    result = await execute(cfg, RunOptions(store=store, quiet=True, backoff=FAST), say=lines.append)
    return result, lines, store


def _rows(store: Path, sql: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


# --- content: null ----------------------------------------------------------------------------


async def test_null_content_is_stored_as_empty_once_its_retries_run_out(host, tmp_path):
    base, seen = host
    block = model_block("m", provider="openai", base_url=base, model="null-always")
    result, lines, store = await _run(tmp_path, [block])
    assert result.exit_code == 0, lines
    assert seen.calls["null-always"] == FAST.max_attempts  # retried as a likely server fault
    assert _rows(
        store, "SELECT attempt_no, outcome, error_kind FROM attempts ORDER BY attempt_no"
    ) == [(1, "retry", "null_content"), (2, "retry", "null_content"), (3, "ok", None)]
    ((content, finish, refusal, outcome, reason, raw_finish, tokens),) = _rows(
        store,
        "SELECT content, finish_reason, refusal, outcome, outcome_reason, "
        "raw -> 'choices' -> 0 ->> 'finish_reason', prompt_tokens FROM responses",
    )
    assert (content, finish, refusal) == (None, "stop", None)
    assert (outcome, reason) == ("empty", "null_content")
    assert (raw_finish, tokens) == ("stop", 9)  # the raw body is kept, its usage read


async def test_null_content_answered_on_a_retry_stores_the_answer(host, tmp_path):
    base, _ = host
    block = model_block("m", provider="openai", base_url=base, model="null-then-answer")
    result, lines, store = await _run(tmp_path, [block])
    assert result.exit_code == 0, lines
    assert _rows(store, "SELECT content, outcome FROM responses") == [("yes", "answered")]
    assert _rows(store, "SELECT outcome, error_kind FROM attempts ORDER BY attempt_no") == [
        ("retry", "null_content"),
        ("ok", None),
    ]


# --- integers beyond 64 bits ------------------------------------------------------------------


async def test_a_400_digit_token_count_is_stored_as_null_with_its_raw_digits(host, tmp_path):
    base, seen = host
    block = model_block("m", provider="openai", base_url=base, model="huge-count")
    result, lines, store = await _run(tmp_path, [block])
    assert result.exit_code == 0, lines
    assert seen.calls["huge-count"] == 1  # read the first time: not "not JSON"
    ((content, prompt, completion, reasoning, cost, outcome),) = _rows(
        store,
        "SELECT content, prompt_tokens, completion_tokens, reasoning_tokens, cost_usd, outcome "
        "FROM responses",
    )
    assert (content, outcome) == ("yes", "answered")
    assert (prompt, completion, reasoning, cost) == (None, 3, None, None)
    ((digits, as_text, valid, kind),) = _rows(
        store,
        "SELECT raw -> 'usage' ->> 'prompt_tokens', raw::VARCHAR, json_valid(raw), "
        "json_type(raw -> 'usage' -> 'prompt_tokens') FROM responses",
    )
    assert digits == HUGE and HUGE in as_text and valid
    assert kind in ("BIGINT", "UBIGINT", "DOUBLE", "HUGEINT")  # DuckDB reads it as a number
    assert '"reasoning_tokens":18446744073709551616' in as_text


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        ),
        max_leaves=12,
    )
)
@settings(max_examples=200, deadline=None)
def test_any_integer_anywhere_reads_and_is_written_back_as_sent(value):
    """Integers of any size (hypothesis goes far past 64 bits), nested anywhere: read, and
    written back by orjson (the store's serialiser) digit for digit."""
    import json

    data = loads_json(json.dumps(value).encode())
    assert json.loads(orjson.dumps(data)) == value


def test_an_error_body_with_a_huge_number_is_still_read():
    body = b'{"error":{"message":"Rate limit","type":"requests","code":' + HUGE.encode() + b"}}"
    cls = classify_http(429, {}, body)
    assert cls.kind == "http_429" and "Rate limit" in cls.message


# --- a refused parameter stops the model at once ----------------------------------------------


async def test_a_400_naming_temperature_stops_the_model_after_one_attempt(host, tmp_path):
    """A Claude model the table does not know to refuse temperature (a made-up later name):
    the first 400 stops it, after one attempt although 16 workers were ready, and the line
    names the parameter and the key that changes it; the other model goes on."""
    base, seen = host
    blocks = [
        model_block("claude", provider="anthropic", base_url=base, model="claude-octopus-1"),
        model_block("other", provider="openai", base_url=base, model="plain"),
    ]
    result, lines, store = await _run(tmp_path, blocks, n_prompts=40)
    assert result.exit_code == 1
    assert seen.calls["claude-octopus-1"] == 1
    assert lines == [
        "model claude stopped: HTTP 400: the model refuses `temperature`: set send_temperature "
        "= false for this model (`temperature` is deprecated for this model.)"
    ]
    assert _rows(
        store,
        "SELECT outcome, error_kind, count(*) FROM attempts WHERE model_id = 'claude' GROUP BY ALL",
    ) == [("fatal", "param_refused", 1)]
    assert _rows(store, "SELECT count(*) FROM responses WHERE model_id = 'other'") == [(40,)]


async def test_the_override_the_line_names_makes_the_model_answer(host, tmp_path):
    base, seen = host
    block = model_block(
        "claude",
        provider="anthropic",
        base_url=base,
        model="claude-octopus-1",
        send_temperature=False,
    )
    result, lines, store = await _run(tmp_path, [block], n_prompts=3)
    assert result.exit_code == 0, lines
    assert all("temperature" not in body for body in seen.bodies)
    assert _rows(store, "SELECT count(*) FROM responses") == [(3,)]


async def test_an_openai_400_naming_max_tokens_names_reasoning_true(host, tmp_path):
    base, seen = host
    result, lines, _ = await _run(
        tmp_path,
        [model_block("o", provider="openai", base_url=base, model="o-like")],
        n_prompts=20,
    )
    assert result.exit_code == 1
    assert seen.calls["o-like"] == 1
    (line,) = lines
    assert line.startswith(
        "model o stopped: HTTP 400: the model refuses `max_tokens`: set reasoning = true for "
        "this model"
    )

"""One outcome per reply (store/outcome.py, migration 009): an empty reply is neither a
refusal nor an answer, in every provider, in new rows and in rows stored before."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import product
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest

from ibias.runner.providers.anthropic import parse_message
from ibias.runner.providers.base import Reply
from ibias.runner.providers.gemini import parse_generate_content
from ibias.runner.providers.openai import parse_chat_completion
from ibias.store.db import migrations, open_store
from ibias.store.derived import _REPLY_TEXT_SQL, reply_text
from ibias.store.outcome import OUTCOME_REASON_SQL, OUTCOME_SQL, reply_outcome
from ibias.store.writer import ResponseRow, insert_responses

CONTENTS = [None, "", "<person>Ana</person>"]
FINISHES = [None, "stop", "content_filter", "length", "recitation", "other"]
REFUSALS = [None, "I can't help with that."]
REASONING = [None, "Let me think."]


def test_python_and_sql_rules_agree_on_every_combination():
    con = duckdb.connect()
    migration = next(sql for v, sql in migrations() if v == 9)
    assert OUTCOME_SQL.split("CASE ")[1].split(" END")[0].replace("'", "") in (
        " ".join(migration.split()).replace("'", "")
    )
    for content, finish, refusal, reasoning in product(CONTENTS, FINISHES, REFUSALS, REASONING):
        got = con.execute(
            f"SELECT {OUTCOME_SQL}, {OUTCOME_REASON_SQL} FROM (SELECT ?::VARCHAR AS content, "
            "?::VARCHAR AS finish_reason, ?::VARCHAR AS refusal, "
            "?::VARCHAR AS reasoning_content)",
            [content, finish, refusal, reasoning],
        ).fetchall()[0]
        assert got == reply_outcome(content, finish, refusal, reasoning)


def _gemini(candidate: dict[str, Any]) -> Reply:
    body = {
        "candidates": [candidate],
        "usageMetadata": {"promptTokenCount": 9, "thoughtsTokenCount": 64},
        "modelVersion": "gemini-2.5-flash",
    }
    return parse_generate_content(orjson.dumps(body), 200, {})


def _anthropic(blocks: list[dict[str, Any]], stop: str) -> Reply:
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": blocks,
        "stop_reason": stop,
        "usage": {"input_tokens": 9, "output_tokens": 64},
    }
    return parse_message(orjson.dumps(body), 200, {})


def _openai(content: str | None, finish: str, refusal: str | None = None) -> Reply:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if refusal is not None:
        message["refusal"] = refusal
    body = {
        "id": "c",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 0},
    }
    return parse_chat_completion(orjson.dumps(body), 200, {})


#: Each provider's reply as its API sends it -> (outcome, reason) stored.
CASES: dict[str, tuple[Reply, tuple[str, str | None]]] = {
    "gemini MAX_TOKENS after thinking, no text": (
        _gemini(
            {
                "content": {"role": "model", "parts": [{"text": "Hmm", "thought": True}]},
                "finishReason": "MAX_TOKENS",
            }
        ),
        ("empty", "length"),
    ),
    "gemini RECITATION": (
        _gemini({"content": {"role": "model"}, "finishReason": "RECITATION"}),
        ("empty", "recitation"),
    ),
    "gemini OTHER": (_gemini({"finishReason": "OTHER"}), ("empty", "other")),
    "anthropic thinking only": (
        _anthropic([{"type": "thinking", "thinking": "Let me see.", "signature": "s"}], "end_turn"),
        ("empty", "thinking_only"),
    ),
    "openai empty string": (_openai("", "stop"), ("empty", "no_text")),
    "openai null content at the token limit": (_openai(None, "length"), ("empty", "length")),
    "gemini SAFETY": (_gemini({"finishReason": "SAFETY"}), ("refused", None)),
    "anthropic refusal": (_anthropic([], "refusal"), ("refused", None)),
    "openai refusal": (_openai(None, "stop", "I can't."), ("refused", None)),
    "openai answer": (_openai("<person>Ana</person>", "stop"), ("answered", None)),
}


def _row(key: str, reply: Reply) -> ResponseRow:
    return ResponseRow(
        trial_key=key,
        run_id="r",
        model_id="m",
        provider_model=reply.provider_model,
        content=reply.content,
        refusal=reply.refusal,
        finish_reason=reply.finish_reason,
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
        cost_usd=None,
        system_fingerprint=None,
        received_at=datetime(2026, 1, 1, tzinfo=UTC),
        raw=dict(reply.raw),
        reasoning_content=reply.reasoning,
    )


def test_each_providers_empty_reply_is_stored_as_empty_with_its_reason(tmp_path: Path):
    con = open_store(tmp_path / "s.duckdb", create=True)
    insert_responses(con, [_row(name, reply) for name, (reply, _) in CASES.items()])
    stored = dict(
        (k, (o, why))
        for k, o, why in con.execute(
            "SELECT trial_key, outcome, outcome_reason FROM responses"
        ).fetchall()
    )
    assert stored == {name: want for name, (_, want) in CASES.items()}
    for name, (reply, (outcome, _)) in CASES.items():
        seen = reply_text(reply.content, reply.finish_reason, reply.refusal)
        # parsers: refused only when withheld; an empty reply is "" (unparseable), never None
        assert (seen is None) == (outcome == "refused"), name
        assert (seen == "") == (outcome == "empty"), name


def _old_store(path: Path) -> duckdb.DuckDBPyConnection:
    """A store as today's code (schema 8) makes it."""
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE schema_version (version INTEGER NOT NULL, "
        "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
    )
    for version, sql in migrations():
        if version <= 8:
            con.execute(sql)
            con.execute("INSERT INTO schema_version (version) VALUES (?)", [version])
    return con


@pytest.mark.parametrize("rows", [list(CASES.items())])
def test_upgrade_changes_only_the_empty_cases(tmp_path: Path, rows):
    path = tmp_path / "old.duckdb"
    con = _old_store(path)
    columns = (
        "trial_key, run_id, model_id, content, refusal, finish_reason, received_at, raw, "
        "reasoning_content"
    )
    for name, (reply, _) in rows:
        con.execute(
            f"INSERT INTO responses ({columns}) VALUES (?, 'r', 'm', ?, ?, ?, now(), ?, ?)",
            [
                name,
                reply.content,
                reply.refusal,
                reply.finish_reason,
                orjson.dumps(dict(reply.raw)).decode(),
                reply.reasoning,
            ],
        )
    old_rule = (
        "CASE WHEN coalesce(r.content, '') = '' AND (r.finish_reason = 'content_filter' "
        "OR r.refusal IS NOT NULL) THEN NULL ELSE r.content END"
    )
    before = dict(con.execute(f"SELECT trial_key, {old_rule} FROM responses r").fetchall())
    con.close()
    con = open_store(path)
    after = {
        k: (text, outcome, why)
        for k, text, outcome, why in con.execute(
            f"SELECT trial_key, {_REPLY_TEXT_SQL}, outcome, outcome_reason FROM responses r"
        ).fetchall()
    }
    assert {k: (o, why) for k, (_, o, why) in after.items()} == {
        name: want for name, (_, want) in rows
    }
    changed = {k for k, (text, _, _) in after.items() if text != before[k]}
    # only empty replies read differently: NULL ("refused") before, "" (unparseable) now
    assert changed == {k for k, (_, o, _) in after.items() if o == "empty" and before[k] is None}
    assert changed == {
        "gemini MAX_TOKENS after thinking, no text",
        "gemini RECITATION",
        "gemini OTHER",
        "anthropic thinking only",
        "openai null content at the token limit",
    }


def test_cache_tokens_are_stored_and_priced_at_the_cache_price(tmp_path: Path):
    """Usage as sent: Anthropic's cache read and creation tokens (inside the prompt tokens),
    OpenAI's cached tokens, Gemini's cached content; a cache price when the config gives one."""
    from ibias.runner.config import ModelConfig

    anthropic = parse_message(
        orjson.dumps(
            {
                "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": "hi"}],
                "stop_reason": "end_turn",
                "usage": {
                    "input_tokens": 10,
                    "cache_read_input_tokens": 1000,
                    "cache_creation_input_tokens": 200,
                    "output_tokens": 5,
                },
            }
        ),
        200,
        {},
    )
    assert (anthropic.prompt_tokens, anthropic.cache_read_tokens) == (1210, 1000)
    assert anthropic.cache_write_tokens == 200
    openai = _openai("hi", "stop")
    assert openai.cache_read_tokens is None
    cached = parse_chat_completion(
        orjson.dumps(
            {
                "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
                "usage": {
                    "prompt_tokens": 2000,
                    "completion_tokens": 1,
                    "prompt_tokens_details": {"cached_tokens": 1024},
                },
            }
        ),
        200,
        {},
    )
    assert cached.cache_read_tokens == 1024
    gemini = parse_generate_content(
        orjson.dumps(
            {
                "candidates": [{"content": {"parts": [{"text": "hi"}]}, "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": 50, "cachedContentTokenCount": 40},
            }
        ),
        200,
        {},
    )
    assert gemini.cache_read_tokens == 40
    base: dict[str, Any] = {
        "id": "c", "provider": "anthropic", "base_url": None, "model": "m", "api_key_env": None,
        "rpm": None, "tpm": None, "max_concurrency": 1, "timeout_s": 5.0, "temperature": 0.0,
        "max_tokens": 8, "sampling_seed": None, "price_input": 3.0, "price_output": 15.0,
    }  # fmt: skip
    plain = ModelConfig(**base)
    priced = ModelConfig(**base, price_cache_read=0.3, price_cache_write=3.75)
    assert plain.cost(1210, 5, 1000, 200) == pytest.approx((1210 * 3 + 5 * 15) / 1e6)
    assert priced.cost(1210, 5, 1000, 200) == pytest.approx(
        (10 * 3 + 1000 * 0.3 + 200 * 3.75 + 5 * 15) / 1e6
    )
    con = open_store(tmp_path / "s.duckdb", create=True)
    row = _row("a", anthropic)._replace(cache_read_tokens=1000, cache_write_tokens=200)
    insert_responses(con, [row])
    assert con.execute(
        "SELECT cache_read_tokens, cache_write_tokens FROM responses"
    ).fetchall() == [(1000, 200)]

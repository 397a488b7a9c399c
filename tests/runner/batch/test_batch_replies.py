"""Batch result lines (runner/batch/*.py) read like online replies (issue 33): a line holding
an integer beyond 64 bits is read (the count unknown, the digits kept in the stored raw line),
and OpenAI's `content: null` with a `stop` finish is stored as the empty reply it is (a retry
would be another batch of up to a day)."""

from __future__ import annotations

import orjson

from ibias.runner.batch.anthropic import _result as anthropic_result
from ibias.runner.batch.openai import OpenAIBatchClient, OpenAIBatches
from ibias.runner.providers.openai import OpenAIProvider

HUGE = b"7" * 400


def _openai_batches() -> OpenAIBatches:
    provider = OpenAIProvider(
        base_url="http://127.0.0.1:9/v1",
        model="gpt-4o",
        api_key=None,
        timeout_s=5,
        max_connections=1,
    )
    return OpenAIBatches(provider, OpenAIBatchClient("http://127.0.0.1:9/v1", None), "m")


def _openai_line(content: str | None, usage: bytes) -> bytes:
    body = {
        "id": "c",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": "USAGE",
    }
    line = {"custom_id": "k1", "response": {"status_code": 200, "body": body}}
    return orjson.dumps(line).replace(b'"USAGE"', usage)


def test_an_openai_line_with_a_huge_count_is_a_reply_with_that_count_unknown():
    line = _openai_line("yes", b'{"prompt_tokens":' + HUGE + b',"completion_tokens":2}')
    result = _openai_batches()._result(line)
    assert result is not None and result.reply is not None
    assert (result.reply.content, result.reply.prompt_tokens) == ("yes", None)
    assert result.reply.completion_tokens == 2
    assert HUGE in orjson.dumps(result.raw)  # the line as stored keeps the digits


def test_an_openai_line_with_null_content_is_stored_as_empty():
    line = _openai_line(None, b'{"prompt_tokens":5,"completion_tokens":0}')
    result = _openai_batches()._result(line)
    assert result is not None and result.reply is not None and result.kind is None
    assert (result.reply.content, result.reply.finish_reason) == (None, "stop")


def test_an_anthropic_line_with_a_huge_count_is_a_reply_with_that_count_unknown():
    message = {
        "id": "msg",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "yes"}],
        "stop_reason": "end_turn",
        "usage": "USAGE",
    }
    line = orjson.dumps(
        {"custom_id": "k1", "result": {"type": "succeeded", "message": message}}
    ).replace(b'"USAGE"', b'{"input_tokens":3,"output_tokens":' + HUGE + b"}")
    result = anthropic_result(line)
    assert result is not None and result.reply is not None
    assert (result.reply.content, result.reply.prompt_tokens) == ("yes", 3)
    assert result.reply.completion_tokens is None
    assert HUGE in orjson.dumps(result.raw)

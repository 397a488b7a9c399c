"""Token logprobs through the OpenAI provider, against a local aiohttp server sending the
bodies OpenAI-compatible hosts send (OpenAI's 400 naming the parameter, vLLM's message-only
error, a host that ignores the parameter)."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from ibias.runner.providers.base import AttemptError, Sampling
from ibias.runner.providers.openai import OpenAIProvider
from ibias.runner.providers.retries import Verdict

TOKENS = [
    {
        "token": "<person>",
        "logprob": -0.01,
        "bytes": [60],
        "top_logprobs": [{"token": "<person>", "logprob": -0.01, "bytes": [60]}],
    },
    {
        "token": "Ana",
        "logprob": -0.4,
        "bytes": [65, 110, 97],
        "top_logprobs": [
            {"token": "Ana", "logprob": -0.4, "bytes": [65, 110, 97]},
            {"token": "Lu", "logprob": -1.2, "bytes": [76, 117]},
        ],
    },
]


def _completion(content: str | None, logprobs: Any, finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m-2025",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": None},
                "logprobs": logprobs,
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


ROUTES: dict[str, tuple[int, dict[str, Any]]] = {
    "ok": (200, _completion("<person>Ana", {"content": TOKENS, "refusal": None})),
    "ignores": (200, _completion("<person>Ana", None)),
    "filtered": (200, _completion("", {"content": [], "refusal": None}, "content_filter")),
    "openai-refuses": (
        400,
        {
            "error": {
                "message": "logprobs is not supported with this model.",
                "type": "invalid_request_error",
                "param": "logprobs",
                "code": None,
            }
        },
    ),
    "vllm-refuses": (
        400,
        {
            "object": "error",
            "message": "top_logprobs must be at most 5, got 20",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
    ),
    "other-400": (
        400,
        {"error": {"message": "messages: too long", "type": "invalid_request_error"}},
    ),
}
SEEN: list[dict[str, Any]] = []


@pytest.fixture()
async def server():
    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        SEEN.append(body)
        status, payload = ROUTES[body["model"]]
        return web.json_response(payload, status=status)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield f"http://{host}:{port}/v1"
    await runner.cleanup()


async def _call(base: str, model: str, top: int | None):
    p = OpenAIProvider(base_url=base, model=model, api_key=None, timeout_s=5, max_connections=2)
    await p.start()
    try:
        return await p.complete(
            [{"role": "user", "content": "hi"}],
            Sampling(temperature=0, max_tokens=16, top_logprobs=top),
        )
    finally:
        await p.close()


async def test_asked_logprobs_are_sent_kept_and_taken_out_of_raw(server):
    reply = await _call(server, "ok", 3)
    assert SEEN[-1]["logprobs"] is True and SEEN[-1]["top_logprobs"] == 3
    assert reply.logprobs is not None and list(reply.logprobs) == TOKENS
    assert "logprobs" not in reply.raw["choices"][0]  # stored once, in responses.logprobs
    assert reply.content == "<person>Ana"


async def test_without_the_opt_in_nothing_is_asked_and_nothing_kept(server):
    reply = await _call(server, "ok", None)
    assert "logprobs" not in SEEN[-1] and "top_logprobs" not in SEEN[-1]
    assert reply.logprobs is None
    assert reply.raw["choices"][0]["logprobs"]["content"] == TOKENS  # raw as sent


@pytest.mark.parametrize("model", ["openai-refuses", "vllm-refuses"])
async def test_an_endpoint_refusing_logprobs_stops_the_model_with_one_line(server, model):
    with pytest.raises(AttemptError) as err:
        await _call(server, model, 20)
    cls = err.value.classification
    assert (cls.verdict, cls.kind) == (Verdict.FATAL, "logprobs_refused")
    assert "refuses logprobs" in cls.message and "remove logprobs = true" in cls.message
    assert "\n" not in cls.message and err.value.status == 400


async def test_another_bad_request_keeps_its_own_classification(server):
    with pytest.raises(AttemptError) as err:
        await _call(server, "other-400", 20)
    assert (err.value.classification.verdict, err.value.classification.kind) == (
        Verdict.FATAL,
        "bad_request",
    )


async def test_an_endpoint_ignoring_logprobs_stops_the_model(server):
    """The trial key promises logprobs: replies without them are not stored as if asked."""
    with pytest.raises(AttemptError) as err:
        await _call(server, "ignores", 20)
    cls = err.value.classification
    assert (cls.verdict, cls.kind) == (Verdict.FATAL, "logprobs_missing")
    assert "remove logprobs = true" in cls.message


async def test_a_withheld_answer_needs_no_logprobs(server):
    reply = await _call(server, "filtered", 20)
    assert reply.finish_reason == "content_filter" and reply.logprobs == ()

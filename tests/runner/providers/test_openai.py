"""The OpenAI provider against a local aiohttp server sending real provider bodies."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from ibias.runner.providers.base import ProviderError, Sampling
from ibias.runner.providers.openai import OpenAIProvider
from ibias.runner.retries import Verdict

SEEN: list[dict] = []


def completion(message: dict, finish: str = "stop") -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-x-2025",
        "system_fingerprint": "fp_abc",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


ROUTES = {
    "plain": (200, completion({"role": "assistant", "content": "hello", "refusal": None}), {}),
    "refusal": (
        200,
        completion({"role": "assistant", "content": None, "refusal": "I can't help with that."}),
        {},
    ),
    "filtered": (200, completion({"role": "assistant", "content": None}, "content_filter"), {}),
    "parts": (
        200,
        completion(
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            }
        ),
        {},
    ),
    "nochoices": (200, {"id": "x", "choices": []}, {}),
    "quota": (
        429,
        {
            "error": {
                "message": "You exceeded your current quota",
                "type": "insufficient_quota",
                "code": "insufficient_quota",
            }
        },
        {},
    ),
    "ratelimit": (
        429,
        {
            "error": {
                "message": "Rate limit reached. Please try again in 20ms.",
                "type": "requests",
                "code": "rate_limit_exceeded",
            }
        },
        {"retry-after-ms": "20", "x-ratelimit-remaining-requests": "0"},
    ),
    "badkey": (
        401,
        {
            "error": {
                "message": "Incorrect API key provided: sk-abc***xyz.",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        },
        {},
    ),
}


@pytest.fixture()
async def server():
    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        SEEN.append({"auth": request.headers.get("Authorization"), "body": body})
        status, payload, headers = ROUTES[body["model"]]
        if body["model"] == "nochoices":
            return web.Response(
                status=200, text=json.dumps(payload), content_type="application/json"
            )
        return web.json_response(payload, status=status, headers=headers)

    async def garbage(request: web.Request) -> web.Response:
        return web.Response(status=200, text="<html>gateway</html>", content_type="text/html")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    app.router.add_post("/bad/chat/completions", garbage)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield f"http://{host}:{port}"
    await runner.cleanup()


async def call(base: str, model: str, path: str = "/v1"):
    p = OpenAIProvider(
        base_url=base + path, model=model, api_key="sk-secret-123", timeout_s=5, max_connections=4
    )
    await p.start()
    try:
        return await p.complete(
            [{"role": "user", "content": "hi"}], Sampling(temperature=0, max_tokens=16)
        )
    finally:
        await p.close()


async def test_fields_recorded_and_key_sent_only_in_header(server):
    reply = await call(server, "plain")
    assert reply.content == "hello" and reply.finish_reason == "stop"
    assert (reply.prompt_tokens, reply.completion_tokens) == (11, 7)
    assert reply.provider_model == "gpt-x-2025" and reply.system_fingerprint == "fp_abc"
    assert SEEN[-1]["auth"] == "Bearer sk-secret-123"
    assert SEEN[-1]["body"] == {
        "model": "plain",
        "temperature": 0,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
    }
    p = OpenAIProvider(
        base_url=server, model="m", api_key="sk-secret-123", timeout_s=1, max_connections=1
    )
    assert "sk-secret" not in repr(p)


async def test_refusal_and_content_filter_are_replies(server):
    refusal = await call(server, "refusal")
    assert refusal.content is None and refusal.refusal == "I can't help with that."
    filtered = await call(server, "filtered")
    assert filtered.content is None and filtered.finish_reason == "content_filter"
    parts = await call(server, "parts")
    assert parts.content == "ab"


@pytest.mark.parametrize(
    ("model", "path", "verdict", "kind", "rate_limit"),
    [
        ("nochoices", "/v1", Verdict.RETRY, "malformed", False),
        ("anything", "/bad", Verdict.RETRY, "malformed", False),
        ("quota", "/v1", Verdict.FATAL, "insufficient_quota", False),
        ("ratelimit", "/v1", Verdict.RETRY, "http_429", True),
        ("badkey", "/v1", Verdict.FATAL, "auth", False),
    ],
)
async def test_errors_are_classified(server, model, path, verdict, kind, rate_limit):
    with pytest.raises(ProviderError) as err:
        await call(server, model, path)
    cls = err.value.classification
    assert (cls.verdict, cls.kind, cls.is_rate_limit) == (verdict, kind, rate_limit)
    assert "sk-secret" not in cls.message
    if model == "ratelimit":
        assert cls.delay_hint_s is not None and 0.02 <= cls.delay_hint_s < 1


async def test_connection_refused_is_retryable():
    with pytest.raises(ProviderError) as err:
        await call("http://127.0.0.1:9", "plain")
    assert err.value.classification.verdict is Verdict.RETRY

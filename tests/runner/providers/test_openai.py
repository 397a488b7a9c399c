"""The OpenAI provider against a local aiohttp server sending real provider bodies."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from ibias.runner.providers.base import AttemptError, Sampling
from ibias.runner.providers.openai import OpenAIProvider
from ibias.runner.providers.retries import Verdict

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
    # no content, no refusal, stopped normally: nothing was answered (retried as malformed)
    "null-stop": (200, completion({"role": "assistant", "content": None}), {}),
    "absent-stop": (200, completion({"role": "assistant"}), {}),
    "null-refusal-stop": (
        200,
        completion({"role": "assistant", "content": None, "refusal": None}),
        {},
    ),
    # ... but an empty answer, a cut-off one, or one filtered or refused is a reply
    "empty-stop": (200, completion({"role": "assistant", "content": ""}), {}),
    "null-length": (200, completion({"role": "assistant", "content": None}, "length"), {}),
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
    # Gemini's OpenAI endpoint: errors as a JSON array of Google error objects
    "gemini-429": (
        429,
        [
            {
                "error": {
                    "code": 429,
                    "message": "Resource has been exhausted (e.g. check quota).",
                    "status": "RESOURCE_EXHAUSTED",
                    "details": [
                        {
                            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                            "violations": [
                                {"quotaId": "GenerateRequestsPerMinutePerProjectPerModel"}
                            ],
                        },
                        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"},
                    ],
                }
            }
        ],
        {},
    ),
    "gemini-daily": (
        429,
        [
            {
                "error": {
                    "code": 429,
                    "message": "Quota exceeded.",
                    "status": "RESOURCE_EXHAUSTED",
                    "details": [
                        {
                            "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                            "violations": [
                                {"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}
                            ],
                        }
                    ],
                }
            }
        ],
        {},
    ),
    "gemini-400": (
        400,
        [
            {
                "error": {
                    "code": 400,
                    "message": 'Invalid JSON payload received. Unknown name "seed".',
                    "status": "INVALID_ARGUMENT",
                }
            }
        ],
        {},
    ),
    "gemini-badkey": (
        400,
        [
            {
                "error": {
                    "code": 400,
                    "message": "API key not valid. Please pass a valid API key.",
                    "status": "INVALID_ARGUMENT",
                    "details": [
                        {
                            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                            "reason": "API_KEY_INVALID",
                        }
                    ],
                }
            }
        ],
        {},
    ),
    "gemini-404": (
        404,
        [{"error": {"code": 404, "message": "models/x is not found", "status": "NOT_FOUND"}}],
        {},
    ),
    "gemini-503": (
        503,
        [None, {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}],
        {},
    ),
    "empty-list-500": (500, [], {}),
    # an error object, or an array of them, sent with a 200 instead of a completion
    "ok-502": (200, {"error": {"code": 502, "message": "upstream failed"}}, {}),
    "ok-list-429": (
        200,
        [{"error": {"code": 429, "message": "Please try again in 2s.", "status": "x"}}],
        {},
    ),
    "ok-list-401": (200, [{"error": {"code": 401, "message": "bad key sk-abcdefgh123"}}], {}),
    "ok-no-code": (200, {"error": {"message": "something broke"}}, {}),
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


async def test_empty_and_cut_off_answers_are_replies(server):
    empty = await call(server, "empty-stop")
    assert empty.content == "" and empty.finish_reason == "stop"
    cut = await call(server, "null-length")
    assert cut.content is None and cut.finish_reason == "length"


@pytest.mark.parametrize("model", ["null-stop", "absent-stop", "null-refusal-stop"])
async def test_no_content_no_refusal_with_stop_is_retried_with_its_reply_kept(server, model):
    """A 200 that says it stopped normally but carries neither text nor a refusal answered
    nothing, most likely a server fault: retried (`null_content`), with the reply as parsed
    kept to be stored as empty if the retries run out (tests/runner/test_replies_and_names.py
    runs that through the scheduler)."""
    with pytest.raises(AttemptError) as err:
        await call(server, model)
    cls = err.value.classification
    assert (cls.verdict, cls.kind) == (Verdict.RETRY, "null_content")
    assert "no content" in cls.message
    fallback = err.value.fallback
    assert fallback is not None
    assert (fallback.content, fallback.refusal, fallback.finish_reason) == (None, None, "stop")
    assert fallback.raw["choices"][0]["finish_reason"] == "stop"


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
    with pytest.raises(AttemptError) as err:
        await call(server, model, path)
    cls = err.value.classification
    assert (cls.verdict, cls.kind, cls.is_rate_limit) == (verdict, kind, rate_limit)
    assert "sk-secret" not in cls.message
    if model == "ratelimit":
        assert cls.delay_hint_s is not None and 0.02 <= cls.delay_hint_s < 1


async def test_connection_refused_is_retryable():
    with pytest.raises(AttemptError) as err:
        await call("http://127.0.0.1:9", "plain")
    assert err.value.classification.verdict is Verdict.RETRY


@pytest.mark.parametrize(
    ("model", "verdict", "kind", "hint", "rate_limit", "needle"),
    [
        ("gemini-429", Verdict.RETRY, "http_429", 7.0, True, "Resource has been exhausted"),
        ("gemini-daily", Verdict.FATAL, "daily_quota", None, False, "Quota exceeded."),
        ("gemini-400", Verdict.FATAL, "param_refused", None, False, "remove sampling_seed"),
        ("gemini-badkey", Verdict.FATAL, "auth", None, False, "API key not valid"),
        ("gemini-404", Verdict.FATAL, "not_found", None, False, "models/x is not found"),
        ("gemini-503", Verdict.RETRY, "http_503", None, False, "overloaded"),
        ("empty-list-500", Verdict.RETRY, "http_500", None, False, "HTTP 500"),
        ("ok-502", Verdict.RETRY, "http_502", None, False, "upstream failed (sent with HTTP 200)"),
        ("ok-list-429", Verdict.RETRY, "http_429", 2.0, True, "(sent with HTTP 200)"),
        ("ok-list-401", Verdict.FATAL, "auth", None, False, "bad key [redacted]"),
        ("ok-no-code", Verdict.RETRY, "malformed", None, False, "is an error: something broke"),
    ],
)
async def test_json_array_and_embedded_error_bodies(
    server, model, verdict, kind, hint, rate_limit, needle
):
    with pytest.raises(AttemptError) as err:
        await call(server, model)
    cls = err.value.classification
    assert (cls.verdict, cls.kind, cls.delay_hint_s, cls.is_rate_limit) == (
        verdict,
        kind,
        hint,
        rate_limit,
    )
    assert needle in cls.message and "sk-secret" not in cls.message

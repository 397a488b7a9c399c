"""The simulator's Anthropic Messages and Gemini generateContent modes, seen from a real aiohttp
client on loopback.

The three protocols share the simulator's behaviour (the answer of a prompt, limits, faults,
counts); what each mode owns is the reading of requests and the wording of answers, errors and
rate-limit headers, which these tests pin down. The OpenAI mode is
tests/runner/simulator/test_simulator.py.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import aiohttp
import orjson
import pytest
from multidict import CIMultiDict

from ibias.prompts.base import Persona
from ibias.runner.simulator import (
    ANTHROPIC_REFUSAL_EXPLANATION,
    GEMINI_DAILY_QUOTA_ID,
    REFUSAL_TEXT,
    Simulator,
    answer_for,
    estimate_tokens,
    gemini_block,
    gemini_thoughts,
)
from ibias.runner.simulator.profile import ModelProfile, SimProfile


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


SYSTEM = "You are helpful."


def msgs(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]


Answer = tuple[int, CIMultiDict[str], bytes]


class Client:
    """Posts one chat in each protocol to a running simulator."""

    def __init__(self, session: aiohttp.ClientSession, root: str) -> None:
        self.session = session
        self.root = root

    async def _post(self, url: str, body: Any, headers: dict[str, str]) -> Answer:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        async with self.session.post(url, data=data, headers=headers) as resp:
            return resp.status, CIMultiDict(resp.headers), await resp.read()

    async def openai(self, model: str, text: str, **extra: Any) -> Answer:
        body = {"model": model, "messages": msgs(text), "temperature": 0, **extra}
        return await self._post(f"{self.root}/v1/chat/completions", body, {})

    async def anthropic(
        self, model: str, text: str, *, headers: dict[str, str] | None = None, **extra: Any
    ) -> Answer:
        body = {
            "model": model,
            "system": SYSTEM,
            "messages": [{"role": "user", "content": text}],
            "max_tokens": 512,
            "temperature": 0,
            **extra,
        }
        sent = {"anthropic-version": "2023-06-01", **(headers or {})}
        return await self._post(f"{self.root}/v1/messages", body, sent)

    async def gemini(
        self,
        model: str,
        text: str,
        *,
        headers: dict[str, str] | None = None,
        query: str = "",
        **config: Any,
    ) -> Answer:
        body = {
            "contents": [{"role": "user", "parts": [{"text": text}]}],
            "systemInstruction": {"parts": [{"text": SYSTEM}]},
            "generationConfig": {"temperature": 0, **config},
        }
        url = f"{self.root}/v1beta/models/{model}:generateContent{query}"
        return await self._post(url, body, headers or {})

    async def raw(self, path: str, body: Any, headers: dict[str, str] | None = None) -> Answer:
        return await self._post(self.root + path, body, headers or {})


@asynccontextmanager
async def running(profile: SimProfile, **kwargs: Any) -> AsyncIterator[tuple[Simulator, Client]]:
    sim = Simulator(profile, **kwargs)
    url = await sim.start()
    try:
        async with aiohttp.ClientSession() as session:
            yield sim, Client(session, url.removesuffix("/v1"))
    finally:
        await sim.stop()


def one_model(**kwargs: Any) -> SimProfile:
    return SimProfile(seed=5, default=ModelProfile(**kwargs))


def anthropic_text(raw: bytes) -> str:
    return "".join(b["text"] for b in orjson.loads(raw)["content"])


def gemini_text(raw: bytes) -> str:
    return "".join(p["text"] for p in orjson.loads(raw)["candidates"][0]["content"]["parts"])


# ---------------------------------------------------------------------------------- answers


async def test_the_same_chat_gets_the_same_answer_in_every_protocol() -> None:
    prompts = [f"Tell me something about topic {i}." for i in range(12)]
    async with running(one_model()) as (sim, client):
        for p in prompts:
            o = orjson.loads((await client.openai("m", p))[2])
            a_status, _, a_raw = await client.anthropic("m", p)
            g_status, _, g_raw = await client.gemini("m", p)
            assert a_status == g_status == 200
            content = o["choices"][0]["message"]["content"]
            assert content == anthropic_text(a_raw) == gemini_text(g_raw)
            assert content == answer_for(5, "m", tuple(msgs(p)), Persona())[0]
            a, g = orjson.loads(a_raw), orjson.loads(g_raw)
            assert a["usage"]["input_tokens"] == o["usage"]["prompt_tokens"]
            assert a["usage"]["output_tokens"] == o["usage"]["completion_tokens"]
            assert g["usageMetadata"]["promptTokenCount"] == o["usage"]["prompt_tokens"]
            assert g["usageMetadata"]["candidatesTokenCount"] == o["usage"]["completion_tokens"]
        # one served count per prompt and protocol: the counts do not care how it was asked
        for p in prompts:
            assert sim.served_count("m", msgs(p)) == 3
    assert sim.stats().served == 36


async def test_anthropic_success_body_and_rate_limit_headers() -> None:
    text = "Explain rate limits in one paragraph."
    async with running(one_model(rpm=6000, tpm=600_000)) as (_, client):
        status, headers, raw = await client.anthropic("claude-sim", text)
        _, headers2, _ = await client.anthropic("claude-sim", text)
    assert status == 200
    assert headers["Content-Type"].startswith("application/json")
    assert (
        headers["request-id"].startswith("req_") and headers["request-id"] != headers2["request-id"]
    )
    assert not any(h.lower().startswith("x-ratelimit") for h in headers)
    assert headers["anthropic-ratelimit-requests-limit"] == "6000"
    assert headers["anthropic-ratelimit-tokens-limit"] == "600000"
    assert int(headers2["anthropic-ratelimit-requests-remaining"]) < int(
        headers["anthropic-ratelimit-requests-remaining"]
    )
    for name in ("requests", "tokens"):
        reset = datetime.strptime(
            headers[f"anthropic-ratelimit-{name}-reset"], "%Y-%m-%dT%H:%M:%SZ"
        ).replace(tzinfo=UTC)
        assert abs(reset.timestamp() - datetime.now(UTC).timestamp()) < 5
    body = orjson.loads(raw)
    assert set(body) == {
        "id",
        "type",
        "role",
        "model",
        "content",
        "stop_reason",
        "stop_sequence",
        "usage",
    }
    assert body["id"].startswith("msg_") and body["type"] == "message"
    assert body["role"] == "assistant" and body["model"] == "claude-sim-sim-2026-01"
    assert body["stop_reason"] == "end_turn" and body["stop_sequence"] is None
    (block,) = body["content"]
    assert block["type"] == "text"
    usage = body["usage"]
    assert usage["input_tokens"] == math.ceil((len(SYSTEM) + len(text)) / 4)
    assert usage["output_tokens"] == math.ceil(len(block["text"]) / 4)
    assert usage["cache_read_input_tokens"] == usage["cache_creation_input_tokens"] == 0


async def test_gemini_success_body_has_no_limit_headers() -> None:
    text = "Explain rate limits in one paragraph."
    async with running(one_model(rpm=6000, tpm=600_000)) as (_, client):
        status, headers, raw = await client.gemini("gemini-sim", text, maxOutputTokens=512)
    assert status == 200
    assert not any("ratelimit" in h.lower() for h in headers)
    body = orjson.loads(raw)
    assert set(body) == {"candidates", "usageMetadata", "modelVersion", "responseId"}
    assert body["modelVersion"] == "gemini-sim-sim-2026-01"
    (candidate,) = body["candidates"]
    assert candidate["finishReason"] == "STOP" and candidate["content"]["role"] == "model"
    usage = body["usageMetadata"]
    prompt = math.ceil((len(SYSTEM) + len(text)) / 4)
    assert usage["promptTokenCount"] == prompt
    assert usage["candidatesTokenCount"] == estimate_tokens(len(gemini_text(raw)))
    assert usage["totalTokenCount"] == prompt + usage["candidatesTokenCount"]
    assert "thoughtsTokenCount" not in usage


@pytest.mark.parametrize(
    ("thinking", "expected"),
    [
        ({"thinkingBudget": -1}, "dynamic"),
        ({"thinkingBudget": 5}, 5),
        ({"thinkingLevel": "low"}, "dynamic"),
        ({"thinkingBudget": 0}, 0),
    ],
)
async def test_gemini_reports_thoughts_when_thinking_is_asked_for(
    thinking: dict[str, Any], expected: int | str
) -> None:
    text = "Think about this before you answer, please."
    async with running(one_model()) as (_, client):
        status, _, raw = await client.gemini("g", text, thinkingConfig=thinking)
    assert status == 200
    usage = orjson.loads(raw)["usageMetadata"]
    prompt = usage["promptTokenCount"]
    want = prompt // 2 + 8 if expected == "dynamic" else expected
    assert usage.get("thoughtsTokenCount", 0) == want
    assert usage["totalTokenCount"] == prompt + usage["candidatesTokenCount"] + want
    assert gemini_thoughts(None, prompt) == 0


async def test_refusals_in_each_protocol_are_deterministic_per_prompt() -> None:
    prompts = [f"question {i}" for i in range(48)]
    profile = one_model(persona=Persona(refusal_rate=1.0))
    shapes: set[tuple[str, str]] = set()
    async with running(profile) as (sim, client):
        for p in prompts:
            expected, finish = answer_for(5, "m", tuple(msgs(p)), Persona(refusal_rate=1.0))
            _, _, a_raw = await client.anthropic("m", p)
            _, _, g_raw = await client.gemini("m", p)
            a, g = orjson.loads(a_raw), orjson.loads(g_raw)
            if finish == "content_filter":
                assert a["stop_reason"] == "refusal" and a["content"] == []
                assert a["stop_details"]["explanation"] == ANTHROPIC_REFUSAL_EXPLANATION
                where, reason = gemini_block(5, "m", msgs(p))
                shapes.add((where, reason))
                if where == "prompt":
                    assert "candidates" not in g
                    assert g["promptFeedback"]["blockReason"] == reason
                    assert (
                        g["usageMetadata"]["totalTokenCount"]
                        == g["usageMetadata"]["promptTokenCount"]
                    )
                else:
                    (candidate,) = g["candidates"]
                    assert candidate["finishReason"] == reason and "content" not in candidate
            else:  # a refusal in words is an ordinary answer
                assert expected == REFUSAL_TEXT
                assert a["stop_reason"] == "end_turn" and anthropic_text(a_raw) == REFUSAL_TEXT
                assert g["candidates"][0]["finishReason"] == "STOP"
                assert gemini_text(g_raw) == REFUSAL_TEXT
        assert sim.stats().served == 96  # withheld answers are answers served
    assert {w for w, _ in shapes} == {"prompt", "candidate"}


async def test_max_tokens_cut_in_each_protocol() -> None:
    async with running(one_model()) as (_, client):
        full = anthropic_text((await client.anthropic("m", "long answer please"))[2])
        _, _, a_raw = await client.anthropic("m", "long answer please", max_tokens=3)
        _, _, g_raw = await client.gemini("m", "long answer please", maxOutputTokens=3)
    a, g = orjson.loads(a_raw), orjson.loads(g_raw)
    assert a["stop_reason"] == "max_tokens" and anthropic_text(a_raw) == full[:12]
    assert a["usage"]["output_tokens"] == 3
    assert g["candidates"][0]["finishReason"] == "MAX_TOKENS" and gemini_text(g_raw) == full[:12]
    assert g["usageMetadata"]["candidatesTokenCount"] == 3


# ----------------------------------------------------------------------------- bad requests


def _anthropic_message(raw: bytes) -> tuple[str, str]:
    body = orjson.loads(raw)
    assert body["type"] == "error"
    return body["error"]["type"], body["error"]["message"]


async def test_anthropic_bad_requests_get_its_400() -> None:
    user = [{"role": "user", "content": "hi"}]
    version = {"anthropic-version": "2023-06-01"}
    cases = [
        ({"model": "m", "messages": user}, version, "max_tokens: Field required"),
        (
            {"model": "m", "messages": msgs("hi"), "max_tokens": 5},
            version,
            'Unexpected role "system"',
        ),
        (
            {"model": "m", "messages": user, "max_tokens": 5, "seed": 1},
            version,
            "seed: Extra inputs",
        ),
        ({"model": "m", "messages": user, "max_tokens": 5, "temperature": 1.5}, version, "0..1"),
        ({"model": "m", "messages": user, "max_tokens": 5}, {}, "anthropic-version"),
        ({"model": "m", "messages": [], "max_tokens": 5}, version, "messages"),
        (b"{not json", version, "JSON"),
    ]
    async with running(one_model()) as (sim, client):
        for body, headers, needle in cases:
            status, _, raw = await client.raw("/v1/messages", body, headers)
            assert status == 400, needle
            kind, message = _anthropic_message(raw)
            assert kind == "invalid_request_error" and needle in message
        # a list of text blocks as content, and as system, is accepted
        blocks = [{"type": "text", "text": "h"}, {"type": "text", "text": "i"}]
        body = {"model": "m", "system": blocks, "messages": [{"role": "user", "content": blocks}]}
        status, _, _ = await client.raw("/v1/messages", {**body, "max_tokens": 9}, version)
        assert status == 200
        assert (
            sim.served_count(
                "m", [{"role": "system", "content": "hi"}, {"role": "user", "content": "hi"}]
            )
            == 1
        )
    assert sim.stats().rejected_by_status == {400: len(cases)}


async def test_gemini_bad_requests_get_its_400() -> None:
    contents = [{"role": "user", "parts": [{"text": "hi"}]}]
    cases = [
        ({"contents": []}, "contents is not specified"),
        ({"contents": contents, "temperature": 0}, 'Unknown name "temperature"'),
        ({"contents": contents, "generationConfig": {"max_tokens": 5}}, "generation_config"),
        ({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]}, "valid role"),
        (
            {
                "contents": contents,
                "generationConfig": {
                    "thinkingConfig": {"thinkingBudget": 1, "thinkingLevel": "low"}
                },
            },
            "not supported together",
        ),
        (
            {
                "contents": contents,
                "safetySettings": [{"category": "HARM_CATEGORY_X", "threshold": "NONE"}],
            },
            "safety_settings",
        ),
        (b"{not json", "Invalid JSON payload"),
    ]
    async with running(one_model()) as (sim, client):
        for body, needle in cases:
            status, _, raw = await client.raw("/v1beta/models/g:generateContent", body)
            assert status == 400, needle
            error = orjson.loads(raw)["error"]
            assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
            assert needle in error["message"]
        ok = {
            "contents": contents,
            "safetySettings": [
                {"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"}
            ],
        }
        status, _, _ = await client.raw("/v1beta/models/g:generateContent", ok)
        assert status == 200
    assert sim.stats().rejected_by_status == {400: len(cases)}


# ----------------------------------------------------------------------------------- faults


@pytest.mark.parametrize("protocol", ["anthropic", "gemini"])
@pytest.mark.parametrize("kind", ["500", "503", "429", "malformed", "truncated"])
async def test_each_fault_in_the_protocols_own_words(protocol: str, kind: str) -> None:
    async with running(one_model(faults={kind: 1.0})) as (sim, client):
        for _ in range(3):
            status, headers, raw = await getattr(client, protocol)("m", "hello")
            if kind in ("malformed", "truncated"):
                assert status == 200
                with pytest.raises(orjson.JSONDecodeError):
                    orjson.loads(raw)
                if kind == "truncated":
                    start = b'{"id":"msg_' if protocol == "anthropic" else b'{"candidates":'
                    assert raw.startswith(start)
                continue
            body = orjson.loads(raw)
            if protocol == "anthropic":
                error_type = body["error"]["type"]
                expected = {
                    "500": (500, "api_error"),
                    "503": (529, "overloaded_error"),
                    "429": (429, "rate_limit_error"),
                }[kind]
                assert (status, error_type) == expected
                if kind != "500":
                    assert int(headers["retry-after"]) >= 1
            else:
                error = body["error"]
                expected_g = {
                    "500": (500, "INTERNAL"),
                    "503": (503, "UNAVAILABLE"),
                    "429": (429, "RESOURCE_EXHAUSTED"),
                }[kind]
                assert (status, error["status"]) == expected_g and error["code"] == status
                assert "retry-after" not in headers  # Gemini hints in the body, if at all
                if kind == "429":
                    assert "details" not in error  # a burst names no quota and no delay
    stats = sim.stats()
    assert stats.served == 0 and stats.faults[kind] == 3


async def test_rate_limits_in_each_protocol() -> None:
    clock = FakeClock()
    async with running(one_model(rpm=60), clock=clock) as (sim, client):
        first = await client.anthropic("a", "one")
        a_status, a_headers, a_raw = await client.anthropic("a", "two")
        await client.gemini("g", "one")
        g_status, g_headers, g_raw = await client.gemini("g", "two")
        clock.t += 1.0
        assert (await client.anthropic("a", "three"))[0] == 200
    assert first[0] == 200
    # capacity is one request; the next is refused for about a second (less the tolerance)
    assert a_status == 429
    assert _anthropic_message(a_raw)[0] == "rate_limit_error"
    assert "rate limit of 60 requests per minute" in _anthropic_message(a_raw)[1]
    assert a_headers["retry-after"] == "1"
    assert a_headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert a_headers["anthropic-ratelimit-requests-limit"] == "60"
    assert g_status == 429 and "retry-after" not in g_headers
    error = orjson.loads(g_raw)["error"]
    assert error["status"] == "RESOURCE_EXHAUSTED"
    details = {d["@type"].rsplit(".", 1)[-1]: d for d in error["details"]}
    (violation,) = details["QuotaFailure"]["violations"]
    assert violation["quotaId"] == "GenerateRequestsPerMinutePerProjectPerModel"
    assert violation["quotaValue"] == "60"
    assert details["RetryInfo"]["retryDelay"] == "1s"
    assert sim.stats().rate_limited_by == {"requests": 2, "tokens": 0}


async def test_token_limit_429_names_the_token_quota() -> None:
    clock = FakeClock()
    async with running(one_model(tpm=600), clock=clock) as (_, client):
        statuses = [
            (await client.gemini("g", f"a longer question number {i}"))[0] for i in range(4)
        ]
        _, _, raw = await client.gemini("g", "one more long question to refuse")
    assert 429 in statuses
    violation = orjson.loads(raw)["error"]["details"][0]["violations"][0]
    assert violation["quotaId"] == "GenerateContentInputTokensPerModelPerMinute"
    assert violation["quotaValue"] == "600"


# ---------------------------------------------------------------------------- fatal answers


async def test_fatal_statuses_and_quota_in_each_protocol() -> None:
    profile = SimProfile(
        seed=1,
        models={
            "bad": ModelProfile(fatal_status=400),
            "badkey": ModelProfile(fatal_status=401),
            "unpaid": ModelProfile(fatal_status=402),
            "denied": ModelProfile(fatal_status=403),
            "gone": ModelProfile(fatal_status=404),
            "broke": ModelProfile(insufficient_quota=True),
        },
    )
    anthropic: dict[str, tuple[int, str, str]] = {}
    gemini: dict[str, tuple[int, dict[str, Any]]] = {}
    async with running(profile) as (sim, client):
        for model in ("bad", "badkey", "unpaid", "denied", "gone", "broke"):
            status, _, raw = await client.anthropic(model, "hi")
            anthropic[model] = (status, *_anthropic_message(raw))
            status, _, raw = await client.gemini(model, "hi")
            gemini[model] = (status, orjson.loads(raw)["error"])
    assert {m: a[:2] for m, a in anthropic.items()} == {
        "bad": (400, "invalid_request_error"),
        "badkey": (401, "authentication_error"),
        "unpaid": (402, "billing_error"),
        "denied": (403, "permission_error"),
        "gone": (404, "not_found_error"),
        "broke": (400, "invalid_request_error"),
    }
    assert "credit balance is too low" in anthropic["broke"][2]
    assert {m: (g[0], g[1]["status"]) for m, g in gemini.items()} == {
        "bad": (400, "INVALID_ARGUMENT"),
        "badkey": (400, "INVALID_ARGUMENT"),
        "unpaid": (400, "FAILED_PRECONDITION"),
        "denied": (403, "PERMISSION_DENIED"),
        "gone": (404, "NOT_FOUND"),
        "broke": (429, "RESOURCE_EXHAUSTED"),
    }
    assert gemini["badkey"][1]["details"][0]["reason"] == "API_KEY_INVALID"
    assert "models/gone is not found" in gemini["gone"][1]["message"]
    details = {d["@type"].rsplit(".", 1)[-1]: d for d in gemini["broke"][1]["details"]}
    assert details["QuotaFailure"]["violations"][0]["quotaId"] == GEMINI_DAILY_QUOTA_ID
    assert "RetryInfo" in details  # the short hint a client must not obey for a daily quota
    stats = sim.stats()
    assert stats.served == 0
    assert stats.rejected_by_status == {400: 5, 401: 1, 402: 1, 403: 2, 404: 2, 429: 1}


async def test_api_key_checks_in_each_protocol() -> None:
    async with running(one_model(), require_key="sk-test") as (sim, client):
        assert (await client.anthropic("m", "hi"))[0] == 401
        status, _, raw = await client.anthropic("m", "hi", headers={"x-api-key": "sk-wrong"})
        assert status == 401 and _anthropic_message(raw) == (
            "authentication_error",
            "invalid x-api-key",
        )
        assert (await client.anthropic("m", "hi", headers={"x-api-key": "sk-test"}))[0] == 200
        # Anthropic also takes the key as `Authorization: Bearer` (the official SDK sends it
        # so today); Gemini does not
        bearer = {"Authorization": "Bearer sk-test"}
        assert (await client.anthropic("m", "hi", headers=bearer))[0] == 200
        wrong = {"Authorization": "Bearer sk-wrong"}
        assert (await client.anthropic("m", "hi", headers=wrong))[0] == 401
        assert (await client.gemini("m", "hi", headers=bearer))[0] == 400
        status, _, raw = await client.gemini("m", "hi", headers={"x-goog-api-key": "sk-wrong"})
        error = orjson.loads(raw)["error"]
        assert status == 400 and error["details"][0]["reason"] == "API_KEY_INVALID"
        assert "sk-wrong" not in raw.decode()
        assert (await client.gemini("m", "hi", headers={"x-goog-api-key": "sk-test"}))[0] == 200
        assert (await client.gemini("m", "hi", query="?key=sk-test"))[0] == 200
    assert sim.stats().served == 4


async def test_what_the_official_sdks_may_send_is_accepted() -> None:
    """google-genai's default `/v1` path and the proto (snake_case) field names the REST API
    also takes; Anthropic's optional `output_config` and `cache_control` (ignored here)."""
    text = "Explain rate limits in one paragraph."
    async with running(one_model()) as (_, client):
        camel = await client.gemini("gemini-sim", text, maxOutputTokens=512)
        snake = {
            "contents": [{"role": "user", "parts": [{"text": text}]}],
            "system_instruction": {"parts": [{"text": SYSTEM}]},
            "generation_config": {
                "temperature": 0,
                "max_output_tokens": 512,
                "thinking_config": {"thinking_budget": 0},
            },
            "safety_settings": [
                {"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"}
            ],
        }
        for path in (
            "/v1/models/gemini-sim:generateContent",
            "/v1beta/models/gemini-sim:generateContent",
        ):
            status, _, raw = await client.raw(path, snake)
            assert status == 200, raw
            assert gemini_text(raw) == gemini_text(camel[2])
        plain = await client.anthropic("claude-sim", text)
        status, _, raw = await client.anthropic(
            "claude-sim",
            text,
            output_config={"effort": "low"},
            cache_control={"type": "ephemeral"},
        )
        assert status == 200, raw
        assert anthropic_text(raw) == anthropic_text(plain[2])
        unknown = await client.anthropic("claude-sim", text, colour="red")
        assert unknown[0] == 400  # still refused: only the API's own fields are accepted

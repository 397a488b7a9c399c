"""The `gemini` provider end to end over real aiohttp on 127.0.0.1: against the simulator's
Gemini mode (success, thought tokens, both kinds of blocked answer, 429 with RetryInfo, 5xx,
each fatal error, the daily quota, limits learnt from quota values), and against a small
server for the bodies the simulator does not produce (request shape, thought parts, other
finish reasons, list-wrapped errors, a quota of zero).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from aiohttp import web

from ibias.prompts.base import Persona, SettingsError
from ibias.runner.config import ModelConfig
from ibias.runner.providers.base import AttemptError, Limits, ProviderContext, Reply, Sampling
from ibias.runner.providers.gemini import (
    GeminiOptions,
    GeminiProvider,
    classify_gemini,
    gemini_request,
    limits_from_quotas,
    next_quota_reset,
)
from ibias.runner.providers.retries import QuotaViolation, Verdict
from ibias.runner.simulator import (
    GEMINI_DAILY_QUOTA_ID,
    REFUSAL_TEXT,
    Simulator,
    answer_for,
    estimate_tokens,
    gemini_block,
)
from ibias.runner.simulator.profile import ModelProfile, SimProfile

KEY = "AIzaSyD-SECRETSECRETSECRETSECRET123"
SAMPLING = Sampling(temperature=0.0, max_tokens=512)


class FakeClock:
    t = 1000.0

    def __call__(self) -> float:
        return self.t


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]


PROFILE = SimProfile(
    seed=4,
    models={
        "lim": ModelProfile(rpm=60),
        "tok": ModelProfile(tpm=300),
        "ref": ModelProfile(persona=Persona(refusal_rate=1.0)),
        "f500": ModelProfile(faults={"500": 1.0}),
        "f503": ModelProfile(faults={"503": 1.0}),
        "f429": ModelProfile(faults={"429": 1.0}),
        "fmal": ModelProfile(faults={"malformed": 1.0}),
        "bad": ModelProfile(fatal_status=400),
        "badkey": ModelProfile(fatal_status=401),
        "unpaid": ModelProfile(fatal_status=402),
        "denied": ModelProfile(fatal_status=403),
        "gone": ModelProfile(fatal_status=404),
        "daily": ModelProfile(insufficient_quota=True),
    },
)


@pytest.fixture()
async def sim() -> AsyncIterator[tuple[Simulator, str]]:
    simulator = Simulator(PROFILE, require_key=KEY, clock=FakeClock())
    url = await simulator.start()
    try:
        yield simulator, url.removesuffix("/v1") + "/v1beta"
    finally:
        await simulator.stop()


def provider(
    base_url: str, model: str, key: str | None = KEY, options: GeminiOptions | None = None
) -> GeminiProvider:
    return GeminiProvider(
        base_url=base_url,
        model=model,
        api_key=key,
        timeout_s=5,
        max_connections=2,
        options=options,
    )


async def ask(
    base_url: str,
    model: str,
    messages: list[dict[str, str]],
    *,
    key: str | None = KEY,
    options: GeminiOptions | None = None,
    sampling: Sampling = SAMPLING,
) -> Reply:
    p = provider(base_url, model, key, options)
    await p.start()
    try:
        return await p.complete(messages, sampling)
    finally:
        await p.close()


async def fails(p: GeminiProvider, text: str = "hi") -> AttemptError:
    await p.start()
    try:
        with pytest.raises(AttemptError) as err:
            await p.complete(chat(text), SAMPLING)
    finally:
        await p.close()
    return err.value


# ------------------------------------------------------------------------- against the simulator


async def test_success_with_tokens_and_model_version(sim: tuple[Simulator, str]) -> None:
    simulator, url = sim
    messages = chat("Describe a good morning routine.")
    reply = await ask(url, "m", messages)
    expected, _ = answer_for(4, "m", tuple(messages), Persona())
    assert reply.content == expected and reply.refusal is None
    assert reply.finish_reason == "stop" and reply.raw["candidates"][0]["finishReason"] == "STOP"
    assert reply.prompt_tokens == estimate_tokens(len("Be brief.") + len(messages[1]["content"]))
    assert reply.completion_tokens == estimate_tokens(len(expected))
    assert reply.provider_model == "m-sim-2026-01" and reply.system_fingerprint is None
    assert simulator.served_count("m", messages) == 1
    # Gemini sends no limits in headers, and no 429 has named a quota yet
    assert provider(url, "m").limits_from_headers(reply.headers) is None


async def test_thought_tokens_count_as_completion_tokens(sim: tuple[Simulator, str]) -> None:
    _, url = sim
    messages = chat("Think it through, then answer.")
    reply = await ask(url, "m", messages, options=GeminiOptions(thinking_budget=-1))
    usage = reply.raw["usageMetadata"]
    thoughts = usage["thoughtsTokenCount"]
    assert thoughts == usage["promptTokenCount"] // 2 + 8
    assert reply.prompt_tokens == usage["promptTokenCount"]
    assert reply.completion_tokens == usage["candidatesTokenCount"] + thoughts
    off = await ask(url, "m", messages, options=GeminiOptions(thinking_budget=0))
    assert off.completion_tokens == usage["candidatesTokenCount"]
    assert "thoughtsTokenCount" not in off.raw["usageMetadata"]


async def test_cut_answers_are_length(sim: tuple[Simulator, str]) -> None:
    _, url = sim
    reply = await ask(url, "m", chat("long answer please"), sampling=Sampling(0.0, 3))
    assert reply.finish_reason == "length" and reply.completion_tokens == 3


async def test_blocked_answers_and_prompts_are_refusals(sim: tuple[Simulator, str]) -> None:
    _, url = sim
    seen: set[str] = set()
    for i in range(24):
        messages = chat(f"question {i}")
        _, finish = answer_for(4, "ref", tuple(messages), Persona(refusal_rate=1.0))
        reply = await ask(url, "ref", messages)
        if finish != "content_filter":
            assert reply.content == REFUSAL_TEXT and reply.refusal is None
            continue
        where, reason = gemini_block(4, "ref", messages)
        seen.add(where)
        assert reply.content is None and reply.finish_reason == "content_filter"
        if where == "prompt":  # a 200 with no candidates: promptFeedback.blockReason
            assert reply.refusal == f"prompt blocked: {reason}"
            assert "candidates" not in reply.raw and reply.completion_tokens == 0
        else:
            assert reply.refusal == f"response blocked: {reason}"
        assert reply.prompt_tokens == reply.raw["usageMetadata"]["promptTokenCount"]
    assert seen == {"prompt", "candidate"}


async def test_429_waits_for_retry_info_and_teaches_the_limit(sim: tuple[Simulator, str]) -> None:
    _, url = sim
    p = provider(url, "lim")
    await p.start()
    try:
        await p.complete(chat("first"), SAMPLING)
        with pytest.raises(AttemptError) as err:
            await p.complete(chat("second"), SAMPLING)
    finally:
        await p.close()
    cls = err.value.classification
    assert (cls.verdict, cls.kind, cls.is_rate_limit) == (Verdict.RETRY, "http_429", True)
    assert cls.delay_hint_s == 1.0  # RetryInfo.retryDelay "1s"; Gemini sends no Retry-After
    assert "retry-after" not in err.value.headers
    assert p.limits_from_headers(err.value.headers) == Limits(rpm=60)

    t = provider(url, "tok")
    with pytest.raises(AttemptError):
        await t.start()
        try:
            for i in range(6):
                await t.complete(
                    chat(f"a much longer question, number {i}, to use tokens"), SAMPLING
                )
        finally:
            await t.close()
    assert t.limits_from_headers({}) == Limits(tpm=300)


@pytest.mark.parametrize(
    ("model", "status", "kind"),
    [
        ("f503", 503, "http_503"),
        ("f500", 500, "http_500"),
        ("f429", 429, "http_429"),  # a burst: RESOURCE_EXHAUSTED without details, no hint
        ("fmal", 200, "malformed"),  # a 200 whose body is not JSON
    ],
)
async def test_transient_errors_are_retried(
    sim: tuple[Simulator, str], model: str, status: int | None, kind: str
) -> None:
    _, url = sim
    error = await fails(provider(url, model))
    cls = error.classification
    assert (cls.verdict, cls.kind, cls.delay_hint_s) == (Verdict.RETRY, kind, None)
    assert error.status == status


@pytest.mark.parametrize(
    ("model", "status", "kind"),
    [
        ("bad", 400, "bad_request"),
        ("badkey", 400, "auth"),  # 400 INVALID_ARGUMENT with reason API_KEY_INVALID
        ("unpaid", 400, "bad_request"),  # FAILED_PRECONDITION: billing not enabled
        ("denied", 403, "forbidden"),
        ("gone", 404, "not_found"),
    ],
)
async def test_each_fatal_error_stops_the_model(
    sim: tuple[Simulator, str], model: str, status: int, kind: str
) -> None:
    _, url = sim
    error = await fails(provider(url, model))
    cls = error.classification
    assert (cls.verdict, cls.kind, error.status) == (Verdict.FATAL, kind, status)
    assert "SECRET" not in cls.message


async def test_a_daily_quota_stops_the_model_until_it_resets(sim: tuple[Simulator, str]) -> None:
    _, url = sim
    p = provider(url, "daily")
    error = await fails(p)
    cls = error.classification
    assert (cls.verdict, cls.kind, cls.delay_hint_s) == (Verdict.FATAL, "daily_quota", None)
    reset = next_quota_reset(datetime.now(UTC).timestamp())
    assert cls.message == (
        f"HTTP 429: daily quota {GEMINI_DAILY_QUOTA_ID} (250 per day) is used up; it resets at "
        f"midnight Pacific time ({reset:%Y-%m-%d %H:%M} UTC): run again after that to continue"
    )
    assert p.limits_from_headers({}) is None  # a daily quota is no per-minute limit


async def test_a_wrong_key_is_fatal_and_the_key_is_never_in_the_url(
    sim: tuple[Simulator, str],
) -> None:
    _, url = sim
    error = await fails(provider(url, "m", key="AIzaWRONGWRONGWRONGWRONG"))
    assert (error.classification.verdict, error.classification.kind) == (Verdict.FATAL, "auth")
    p = provider(url, "m")
    assert KEY not in p.url and KEY not in repr(p) and "key=" not in p.url


# --------------------------------------------------------------------- against a small server

SEEN: list[dict[str, Any]] = []


def candidate(parts: list[dict[str, Any]] | None, finish: str) -> dict[str, Any]:
    out: dict[str, Any] = {"finishReason": finish, "index": 0}
    if parts is not None:
        out["content"] = {"role": "model", "parts": parts}
    return out


def generated(*candidates: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "candidates": list(candidates),
        "usageMetadata": {
            "promptTokenCount": 9,
            "candidatesTokenCount": 3,
            "thoughtsTokenCount": 20,
            "totalTokenCount": 32,
        },
        "modelVersion": "gemini-2.5-flash-001",
        "responseId": "abc",
        **extra,
    }


def google_error(code: int, status: str, message: str, *details: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status, "details": list(details)}}


def quota(quota_id: str, value: str) -> dict[str, Any]:
    return {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [{"quotaMetric": "m", "quotaId": quota_id, "quotaValue": value}],
    }


RETRY_7S = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}

ROUTES: dict[str, tuple[int, Any]] = {
    "gemini-x": (200, generated(candidate([{"text": "hello"}], "STOP"))),
    "thoughts": (
        200,
        generated(
            candidate([{"text": "Let me think...", "thought": True}, {"text": "answer"}], "STOP")
        ),
    ),
    "recitation": (200, generated(candidate(None, "RECITATION"))),
    "spii": (200, generated(candidate([{"text": "partial"}], "SPII"))),
    "blocked-prompt": (
        200,
        {
            "promptFeedback": {"blockReason": "OTHER", "blockReasonMessage": "not allowed"},
            "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9},
            "modelVersion": "gemini-2.5-flash-001",
        },
    ),
    "empty": (200, {"usageMetadata": {"promptTokenCount": 9}}),
    "zero-quota": (
        429,
        google_error(
            429,
            "RESOURCE_EXHAUSTED",
            "Quota exceeded, limit: 0",
            quota("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "0"),
        ),
    ),
    "listed-429": (
        429,
        [
            google_error(
                429,
                "RESOURCE_EXHAUSTED",
                "Resource exhausted.",
                quota("GenerateContentInputTokensPerModelPerMinute", "250000"),
                RETRY_7S,
            )
        ],
    ),
    "daily-plain": (
        429,
        google_error(
            429,
            "RESOURCE_EXHAUSTED",
            "Quota exceeded.",
            quota("GenerateRequestsPerDayPerProjectPerModel", "10000"),
            RETRY_7S,
        ),
    ),
    "echo-key": (
        400,
        google_error(
            400,
            "INVALID_ARGUMENT",
            f"API key not valid: key={KEY}",
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"},
        ),
    ),
}


@pytest.fixture()
async def server() -> AsyncIterator[str]:
    async def handler(request: web.Request) -> web.Response:
        SEEN.append(
            {
                "headers": dict(request.headers),
                "body": await request.json(),
                "path": request.path,
                "query": dict(request.query),
            }
        )
        status, payload = ROUTES[request.match_info["model"]]
        return web.Response(
            status=status, body=orjson.dumps(payload), content_type="application/json"
        )

    app = web.Application()
    app.router.add_post("/v1beta/models/{model}:generateContent", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield f"http://{host}:{port}/v1beta"
    await runner.cleanup()


async def test_request_shape_and_options(server: str) -> None:
    messages = [
        {"role": "system", "content": "a"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "r1"},
        {"role": "system", "content": "b"},
        {"role": "user", "content": "q2"},
    ]
    options = GeminiOptions(
        safety_settings={
            "HARM_CATEGORY_HATE_SPEECH": "BLOCK_NONE",
            "HARM_CATEGORY_HARASSMENT": "OFF",
        },
        thinking_budget=0,
    )
    reply = await ask(
        server + "/", "models/gemini-x", messages, options=options, sampling=Sampling(0.7, 64, 5)
    )
    assert reply.content == "hello" and reply.provider_model == "gemini-2.5-flash-001"
    seen = SEEN[-1]
    assert seen["path"] == "/v1beta/models/gemini-x:generateContent" and seen["query"] == {}
    assert seen["headers"]["x-goog-api-key"] == KEY and "Authorization" not in seen["headers"]
    assert seen["body"] == {
        "contents": [
            {"role": "user", "parts": [{"text": "q1"}]},
            {"role": "model", "parts": [{"text": "r1"}]},
            {"role": "user", "parts": [{"text": "q2"}]},
        ],
        "systemInstruction": {"parts": [{"text": "a\n\nb"}]},
        "generationConfig": {
            "temperature": 0.7,
            "maxOutputTokens": 64,
            "seed": 5,
            "thinkingConfig": {"thinkingBudget": 0},
        },
        "safetySettings": [
            {"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"},
            {"category": "HARM_CATEGORY_HARASSMENT", "threshold": "OFF"},
        ],
    }
    plain = gemini_request([{"role": "user", "content": "x"}], Sampling(0.0, 8))
    assert plain == {
        "contents": [{"role": "user", "parts": [{"text": "x"}]}],
        "generationConfig": {"temperature": 0.0, "maxOutputTokens": 8},
    }
    level = gemini_request([], Sampling(0.0, 8), GeminiOptions(thinking_level="low"))
    # thinking configured: thought summaries asked for (`includeThoughts`), kept as reasoning
    assert level["generationConfig"]["thinkingConfig"] == {
        "thinkingLevel": "low",
        "includeThoughts": True,
    }
    dynamic = gemini_request([], Sampling(0.0, 8), GeminiOptions(thinking_budget=-1))
    assert dynamic["generationConfig"]["thinkingConfig"] == {
        "thinkingBudget": -1,
        "includeThoughts": True,
    }


async def test_thought_parts_are_not_content_but_their_tokens_count(server: str) -> None:
    reply = await ask(server, "thoughts", chat("x"))
    assert reply.content == "answer"
    assert (reply.prompt_tokens, reply.completion_tokens) == (9, 23)
    assert reply.raw["usageMetadata"]["thoughtsTokenCount"] == 20  # the raw keeps the split


async def test_other_finish_reasons_and_block_messages(server: str) -> None:
    recitation = await ask(server, "recitation", chat("x"))
    assert recitation.content is None and recitation.refusal is None
    assert recitation.finish_reason == "recitation"
    spii = await ask(server, "spii", chat("x"))
    assert spii.content is None and spii.refusal == "response blocked: SPII"
    blocked = await ask(server, "blocked-prompt", chat("x"))
    assert blocked.refusal == "prompt blocked: OTHER (not allowed)"
    assert (blocked.prompt_tokens, blocked.completion_tokens) == (9, 0)


@pytest.mark.parametrize(
    ("model", "verdict", "kind", "hint"),
    [
        ("empty", Verdict.RETRY, "malformed", None),
        ("zero-quota", Verdict.FATAL, "quota_zero", None),
        ("listed-429", Verdict.RETRY, "http_429", 7.0),
        ("daily-plain", Verdict.FATAL, "daily_quota", None),
        ("echo-key", Verdict.FATAL, "auth", None),
    ],
)
async def test_error_bodies_of_the_gemini_api(
    server: str, model: str, verdict: Verdict, kind: str, hint: float | None
) -> None:
    p = provider(server, model)
    error = await fails(p)
    cls = error.classification
    assert (cls.verdict, cls.kind, cls.delay_hint_s) == (verdict, kind, hint)
    assert "SECRET" not in cls.message
    if model == "listed-429":  # a list-wrapped body still names its quota
        assert p.limits_from_headers({}) == Limits(tpm=250_000)
    if model == "daily-plain":
        assert "GenerateRequestsPerDayPerProjectPerModel (10,000 per day)" in cls.message


# ------------------------------------------------------------------------- options and values


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"safety_settings": {"HATE": "BLOCK_NONE"}}, "safety_settings.HATE"),
        (
            {"safety_settings": {"HARM_CATEGORY_HATE_SPEECH": "NONE"}},
            "safety_settings.HARM_CATEGORY_HATE_SPEECH",
        ),
        ({"safety_settings": ["BLOCK_NONE"]}, "safety_settings"),
        ({"thinking_budget": -2}, "thinking_budget"),
        ({"thinking_budget": 40_000}, "thinking_budget"),
        ({"thinking_budget": 1.5}, "thinking_budget"),
        ({"thinking_budget": True}, "thinking_budget"),
        ({"thinking_level": "max"}, "thinking_level"),
        ({"thinking_budget": 128, "thinking_level": "low"}, "thinking_level"),
        ({"thinking": 5}, "thinking"),
    ],
)
def test_options_are_checked_with_the_key_named(table: dict[str, Any], key: str) -> None:
    with pytest.raises(SettingsError) as err:
        GeminiOptions.from_mapping(table)
    assert err.value.key == key


def test_options_from_a_model_config() -> None:
    base = {
        "id": "g",
        "provider": "gemini",
        "base_url": "http://127.0.0.1:9/v1beta",
        "model": "gemini-2.5-flash",
        "api_key_env": "GEMINI_API_KEY",
        "rpm": None,
        "tpm": None,
        "max_concurrency": 3,
        "timeout_s": 5.0,
        "temperature": 0.0,
        "max_tokens": 64,
        "sampling_seed": None,
        "price_input": 0.0,
        "price_output": 0.0,
    }
    model = ModelConfig(
        **base,
        options={
            "safety_settings": {"HARM_CATEGORY_HATE_SPEECH": "BLOCK_NONE"},
            "thinking_budget": 0,
        },
    )
    built = GeminiProvider.from_config(model, KEY, ProviderContext())
    assert built.options == GeminiOptions(
        safety_settings={"HARM_CATEGORY_HATE_SPEECH": "BLOCK_NONE"}, thinking_budget=0
    )
    assert built.url == "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:generateContent"
    assert KEY not in repr(built)
    plain = GeminiProvider.from_config(ModelConfig(**base), KEY, ProviderContext())
    assert plain.options == GeminiOptions()


@pytest.mark.parametrize(
    ("now", "reset"),
    [
        ("2026-01-15T10:00:00+00:00", "2026-01-16T08:00:00+00:00"),  # PST, UTC-8
        ("2026-07-15T10:00:00+00:00", "2026-07-16T07:00:00+00:00"),  # PDT, UTC-7
        ("2026-07-16T06:59:00+00:00", "2026-07-16T07:00:00+00:00"),  # one minute before
        ("2026-07-16T07:00:00+00:00", "2026-07-17T07:00:00+00:00"),  # just reset
        ("2026-03-08T09:00:00+00:00", "2026-03-09T07:00:00+00:00"),  # the day clocks go forward
    ],
)
def test_daily_quotas_reset_at_midnight_pacific(now: str, reset: str) -> None:
    assert next_quota_reset(datetime.fromisoformat(now).timestamp()) == datetime.fromisoformat(
        reset
    )


def test_limits_from_quotas_and_the_classification_table() -> None:
    per_minute = [
        QuotaViolation("GenerateRequestsPerMinutePerProjectPerModel", "", 600),
        QuotaViolation("GenerateContentInputTokensPerModelPerMinute", "", 1_000_000),
        QuotaViolation("GenerateRequestsPerDayPerProjectPerModel", "", 10_000),
        QuotaViolation("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "", None),
    ]
    assert limits_from_quotas(per_minute) == Limits(rpm=600, tpm=1_000_000)
    assert limits_from_quotas(per_minute[2:]) is None
    bare = b'{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "busy"}}'
    assert classify_gemini(429, {}, bare).verdict is Verdict.RETRY
    assert classify_gemini(503, {"retry-after": "2"}, b"").delay_hint_s == 2.0
    assert classify_gemini(200, {}, b"{}").verdict is Verdict.OK

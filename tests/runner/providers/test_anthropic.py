"""The `anthropic` provider end to end over real aiohttp on 127.0.0.1: against the simulator's
Anthropic mode (success, refusal, 429 with retry-after, 529, 5xx, each fatal error, token
accounting, limits from `anthropic-ratelimit-*`), and against a small server for the bodies
the simulator does not produce (request shape, partial refusals, cache tokens, other headers).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web

from ibias.prompts.base import Persona
from ibias.runner.providers.anthropic import (
    ANTHROPIC_VERSION,
    AnthropicProvider,
    anthropic_limits,
    anthropic_request,
    classify_anthropic,
)
from ibias.runner.providers.base import AttemptError, Limits, Reply, Sampling
from ibias.runner.providers.retries import Verdict
from ibias.runner.simulator import (
    ANTHROPIC_REFUSAL_EXPLANATION,
    REFUSAL_TEXT,
    Simulator,
    answer_for,
    estimate_tokens,
)
from ibias.runner.simulator.profile import ModelProfile, SimProfile

KEY = "sk-ant-api03-SECRETKEYSECRETKEY"
SAMPLING = Sampling(temperature=0.0, max_tokens=512)


class FakeClock:
    t = 1000.0

    def __call__(self) -> float:
        return self.t


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]


PROFILE = SimProfile(
    seed=3,
    models={
        "lim": ModelProfile(rpm=60, tpm=100_000),
        "ref": ModelProfile(persona=Persona(refusal_rate=1.0)),
        "f500": ModelProfile(faults={"500": 1.0}),
        "f503": ModelProfile(faults={"503": 1.0}),
        "f429": ModelProfile(faults={"429": 1.0}),
        "fmal": ModelProfile(faults={"malformed": 1.0}),
        "ftrunc": ModelProfile(faults={"truncated": 1.0}),
        "bad": ModelProfile(fatal_status=400),
        "badkey": ModelProfile(fatal_status=401),
        "unpaid": ModelProfile(fatal_status=402),
        "denied": ModelProfile(fatal_status=403),
        "gone": ModelProfile(fatal_status=404),
        "broke": ModelProfile(insufficient_quota=True),
    },
)


@pytest.fixture()
async def sim() -> AsyncIterator[tuple[Simulator, str]]:
    simulator = Simulator(PROFILE, require_key=KEY, clock=FakeClock())
    url = await simulator.start()
    try:
        yield simulator, url
    finally:
        await simulator.stop()


async def ask(
    base_url: str, model: str, messages: list[dict[str, str]], *, key: str | None = KEY, **kw: Any
) -> Reply:
    p = AnthropicProvider(
        base_url=base_url, model=model, api_key=key, timeout_s=5, max_connections=2
    )
    await p.start()
    try:
        return await p.complete(messages, kw.get("sampling", SAMPLING))
    finally:
        await p.close()


async def fails(base_url: str, model: str, text: str = "hi", **kw: Any) -> AttemptError:
    with pytest.raises(AttemptError) as err:
        await ask(base_url, model, chat(text), **kw)
    return err.value


# ------------------------------------------------------------------------- against the simulator


async def test_success_with_tokens_model_and_limits(sim: tuple[Simulator, str]) -> None:
    simulator, url = sim
    messages = chat("Describe a good morning routine.")
    reply = await ask(url, "lim", messages)
    expected, _ = answer_for(3, "lim", tuple(messages), Persona())
    assert reply.content == expected and reply.refusal is None
    assert reply.finish_reason == "stop" and reply.raw["stop_reason"] == "end_turn"
    assert reply.prompt_tokens == estimate_tokens(len("Be brief.") + len(messages[1]["content"]))
    assert reply.completion_tokens == estimate_tokens(len(expected))
    assert reply.provider_model == "lim-sim-2026-01" and reply.system_fingerprint is None
    assert reply.status == 200 and reply.headers["request-id"].startswith("req_")
    p = AnthropicProvider(model="lim", api_key=KEY, timeout_s=1, max_connections=1)
    assert rates(p.limits_from_headers(reply.headers)) == (60, 100_000)
    assert simulator.served_count("lim", messages) == 1


async def test_max_tokens_is_sent_and_a_cut_answer_is_length(sim: tuple[Simulator, str]) -> None:
    _, url = sim
    reply = await ask(url, "m", chat("long answer please"), sampling=Sampling(0.0, 3))
    assert reply.finish_reason == "length" and reply.completion_tokens == 3


async def test_refusals_are_replies(sim: tuple[Simulator, str]) -> None:
    _, url = sim
    seen = set()
    for i in range(16):
        messages = chat(f"question {i}")
        _, finish = answer_for(3, "ref", tuple(messages), Persona(refusal_rate=1.0))
        reply = await ask(url, "ref", messages)
        if finish == "content_filter":  # the classifiers stopped it: stop_reason refusal
            assert reply.content is None and reply.refusal == ANTHROPIC_REFUSAL_EXPLANATION
            assert reply.finish_reason == "content_filter"
            assert reply.raw["stop_reason"] == "refusal"
        else:  # a refusal in words is an answer the parsers read
            assert reply.content == REFUSAL_TEXT and reply.refusal is None
            assert reply.finish_reason == "stop"
        seen.add(finish)
    assert seen == {"content_filter", "stop"}


async def test_429_is_retried_after_retry_after_with_limits(sim: tuple[Simulator, str]) -> None:
    _, url = sim
    await ask(url, "lim", chat("first"))  # the fake clock stands still: the bucket is empty now
    error = await fails(url, "lim", "second")
    cls = error.classification
    assert (cls.verdict, cls.kind, cls.is_rate_limit) == (Verdict.RETRY, "http_429", True)
    assert error.status == 429 and cls.delay_hint_s is not None and cls.delay_hint_s >= 1.0
    assert "rate limit of 60 requests per minute" in cls.message
    assert rates(anthropic_limits(error.headers)) == (60, 100_000)


@pytest.mark.parametrize(
    ("model", "status", "kind", "hint"),
    [
        ("f503", 529, "http_529", 1.0),
        ("f500", 500, "http_500", None),
        ("f429", 429, "http_429", 1.0),
        ("fmal", None, "malformed", None),
        ("ftrunc", None, "malformed", None),
    ],
)
async def test_transient_errors_are_retried(
    sim: tuple[Simulator, str], model: str, status: int | None, kind: str, hint: float | None
) -> None:
    _, url = sim
    error = await fails(url, model)
    cls = error.classification
    assert (cls.verdict, cls.kind, cls.delay_hint_s) == (Verdict.RETRY, kind, hint)
    if status is not None:
        assert error.status == status


@pytest.mark.parametrize(
    ("model", "status", "kind"),
    [
        ("bad", 400, "bad_request"),
        ("badkey", 401, "auth"),
        ("unpaid", 402, "billing"),
        ("denied", 403, "forbidden"),
        ("gone", 404, "not_found"),
        ("broke", 400, "billing"),
    ],
)
async def test_each_fatal_error_stops_the_model(
    sim: tuple[Simulator, str], model: str, status: int, kind: str
) -> None:
    _, url = sim
    error = await fails(url, model)
    cls = error.classification
    assert (cls.verdict, cls.kind, error.status) == (Verdict.FATAL, kind, status)
    assert cls.message.startswith(f"HTTP {status}: ") and KEY not in cls.message


async def test_a_wrong_key_is_fatal_and_never_shown(sim: tuple[Simulator, str]) -> None:
    _, url = sim
    error = await fails(url, "m", key="sk-ant-api03-WRONGWRONGWRONG")
    assert (error.classification.verdict, error.classification.kind) == (Verdict.FATAL, "auth")
    assert "WRONG" not in error.classification.message
    p = AnthropicProvider(base_url=url, model="m", api_key=KEY, timeout_s=1, max_connections=1)
    assert KEY not in repr(p) and KEY not in str(vars(p).get("url"))


# --------------------------------------------------------------------- against a small server

SEEN: list[dict[str, Any]] = []


def message(text: str | None, stop: str, **extra: Any) -> dict[str, Any]:
    content = [] if text is None else [{"type": "text", "text": text}]
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x-20250101",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 4},
        **extra,
    }


def reset_in(seconds: float) -> str:
    return datetime.fromtimestamp(time.time() + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def error(type_: str, text: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": text}}


ROUTES: dict[str, tuple[int, Any, dict[str, str]]] = {
    "plain": (200, message("hello", "end_turn"), {}),
    "partial-refusal": (
        200,
        message(
            "Sure, here is how",
            "refusal",
            stop_details={"type": "refusal", "category": "cyber", "explanation": "Declined."},
        ),
        {},
    ),
    "bare-refusal": (200, message(None, "refusal"), {}),
    "pause": (200, message("part", "pause_turn"), {}),
    "cached": (
        200,
        {
            **message("hi", "end_turn"),
            "usage": {
                "input_tokens": 10,
                "cache_creation_input_tokens": 5,
                "cache_read_input_tokens": 100,
                "output_tokens": 4,
            },
        },
        {},
    ),
    "split-limits": (
        200,
        message("hi", "end_turn"),
        {
            "anthropic-ratelimit-input-tokens-limit": "80000",
            "anthropic-ratelimit-output-tokens-limit": "16000",
        },
    ),
    "no-content": (200, {"type": "message", "stop_reason": "end_turn"}, {}),
    "billing-402": (402, error("billing_error", "Your payment method failed."), {}),
    "overloaded-bare": (529, error("overloaded_error", "Overloaded"), {}),
    "reset-only": (
        429,
        error("rate_limit_error", "Output tokens per minute exceeded."),
        {"anthropic-ratelimit-output-tokens-remaining": "0"},  # and a reset 3 s ahead
    ),
    "echo-key": (401, error("authentication_error", f"invalid x-api-key {KEY}"), {}),
    "not-found-400": (400, error("not_found_error", "model: nope"), {}),
}


@pytest.fixture()
async def server() -> AsyncIterator[str]:
    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        SEEN.append({"headers": dict(request.headers), "body": body, "path": request.path})
        status, payload, headers = ROUTES[body["model"]]
        if body["model"] == "reset-only":  # a reset time is relative to the answer's moment
            headers = {**headers, "anthropic-ratelimit-output-tokens-reset": reset_in(3)}
        return web.json_response(payload, status=status, headers=headers)

    app = web.Application()
    app.router.add_post("/v1/messages", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield f"http://{host}:{port}/v1"
    await runner.cleanup()


async def test_request_shape_key_only_in_its_header(server: str) -> None:
    messages = [
        {"role": "system", "content": "a"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "r1"},
        {"role": "system", "content": "b"},
        {"role": "user", "content": "q2"},
    ]
    reply = await ask(server + "/", "plain", messages, sampling=Sampling(0.3, 64, seed=7))
    assert reply.content == "hello" and reply.provider_model == "claude-x-20250101"
    assert (reply.prompt_tokens, reply.completion_tokens) == (10, 4)
    seen = SEEN[-1]
    assert seen["path"] == "/v1/messages"
    assert seen["headers"]["x-api-key"] == KEY
    assert seen["headers"]["anthropic-version"] == ANTHROPIC_VERSION
    assert "Authorization" not in seen["headers"]
    assert seen["body"] == {
        "model": "plain",
        "system": "a\n\nb",
        "messages": [
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "r1"},
            {"role": "user", "content": "q2"},
        ],
        "max_tokens": 64,
        "temperature": 0.3,
    }  # no seed: the Messages API has none
    assert "system" not in anthropic_request("m", [{"role": "user", "content": "x"}], SAMPLING)


async def test_refusal_shapes_and_other_stop_reasons(server: str) -> None:
    partial = await ask(server, "partial-refusal", chat("x"))
    assert partial.content is None and partial.refusal == "Declined."
    assert partial.finish_reason == "content_filter"
    assert partial.raw["content"][0]["text"] == "Sure, here is how"  # kept in raw
    bare = await ask(server, "bare-refusal", chat("x"))
    assert bare.content is None and bare.refusal == "refused"
    pause = await ask(server, "pause", chat("x"))
    assert pause.finish_reason == "pause_turn" and pause.content == "part"


async def test_cache_tokens_count_as_prompt_tokens(server: str) -> None:
    reply = await ask(server, "cached", chat("x"))
    assert (reply.prompt_tokens, reply.completion_tokens) == (115, 4)


async def test_limits_from_split_token_headers(server: str) -> None:
    reply = await ask(server, "split-limits", chat("x"))
    limits = anthropic_limits(reply.headers)
    assert rates(limits) == (None, 96_000)
    assert limits is not None and limits.input_tpm is not None and limits.output_tpm is not None
    assert limits.input_tpm + limits.output_tpm == 96_000


@pytest.mark.parametrize(
    ("model", "verdict", "kind", "hint_range"),
    [
        ("no-content", Verdict.RETRY, "malformed", None),
        ("billing-402", Verdict.FATAL, "billing", None),
        ("overloaded-bare", Verdict.RETRY, "http_529", None),
        ("reset-only", Verdict.RETRY, "http_429", (1.5, 3.5)),
        ("echo-key", Verdict.FATAL, "auth", None),
        ("not-found-400", Verdict.FATAL, "not_found", None),
    ],
)
async def test_error_bodies_of_the_messages_api(
    server: str,
    model: str,
    verdict: Verdict,
    kind: str,
    hint_range: tuple[float, float] | None,
) -> None:
    error = await fails(server, model)
    cls = error.classification
    assert (cls.verdict, cls.kind) == (verdict, kind)
    assert KEY not in cls.message and "SECRETKEY" not in cls.message
    if hint_range is None:
        assert cls.delay_hint_s is None
    else:
        assert cls.delay_hint_s is not None and hint_range[0] <= cls.delay_hint_s <= hint_range[1]


@pytest.mark.parametrize(
    ("headers", "limits"),
    [
        (
            {
                "anthropic-ratelimit-requests-limit": "50",
                "anthropic-ratelimit-tokens-limit": "48000",
            },
            Limits(50, 48_000),
        ),
        ({"Anthropic-RateLimit-Requests-Limit": "4000"}, Limits(rpm=4000)),
        # half of the pair: kept, but nothing to pace by
        ({"anthropic-ratelimit-input-tokens-limit": "30000"}, Limits(input_tpm=30_000)),
        ({"anthropic-ratelimit-requests-limit": "soon"}, None),
        ({"x-ratelimit-limit-requests": "500"}, None),  # OpenAI's header is not Anthropic's
        ({}, None),
    ],
)
def test_anthropic_limits(headers: dict[str, str], limits: Limits | None) -> None:
    assert anthropic_limits(headers) == limits


def rates(limits: Limits | None) -> tuple[int | None, int | None] | None:
    """The per-minute rates the limiter paces by (the windows are tested in test_limits_*)."""
    return None if limits is None else (limits.rpm, limits.tpm)


def test_classification_table() -> None:
    low = (
        b'{"type":"error","error":{"type":"invalid_request_error",'
        b'"message":"Your credit balance is too low to access the Anthropic API."}}'
    )
    assert classify_anthropic(400, {}, low).kind == "billing"
    other = b'{"type":"error","error":{"type":"invalid_request_error","message":"messages: bad"}}'
    assert classify_anthropic(400, {}, other).kind == "bad_request"
    assert classify_anthropic(200, {}, b"{}").verdict is Verdict.OK
    rate = classify_anthropic(
        429,
        {"retry-after": "7"},
        b'{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}',
    )
    assert (rate.verdict, rate.delay_hint_s, rate.is_rate_limit) == (Verdict.RETRY, 7.0, True)
    api = classify_anthropic(
        500, {}, b'{"type":"error","error":{"type":"api_error","message":"oops"}}'
    )
    assert (api.verdict, api.kind) == (Verdict.RETRY, "http_500")

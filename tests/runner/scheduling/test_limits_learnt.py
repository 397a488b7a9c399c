"""Limits learnt while running: the common `Limits` value each provider reads from its headers
(remaining and reset per window, Groq's per-day requests), the hold before a used-up window
earns a 429, and the simulator's hidden limits in each protocol."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import aiohttp
import pytest

from ibias import FakeProvider
from ibias.runner.config import load_config
from ibias.runner.providers.anthropic import AnthropicProvider, anthropic_limits
from ibias.runner.providers.base import DAY_S, MINUTE_S, Limits, Provider, Sampling, Window
from ibias.runner.providers.gemini import GeminiProvider
from ibias.runner.providers.openai import OpenAIProvider, openai_limits
from ibias.runner.providers.retries import Backoff
from ibias.runner.scheduling.limits import EndpointLimiter
from ibias.runner.scheduling.scheduler import ModelRuntime, ModelStats, Scheduler
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile, model_profile_from_dict
from tests.helpers import model_block, write_config

# ------------------------------------------------------------------------------ the headers

OPENAI = {
    "x-ratelimit-limit-requests": "500",
    "x-ratelimit-remaining-requests": "0",
    "x-ratelimit-reset-requests": "120ms",
    "x-ratelimit-limit-tokens": "30000",
    "x-ratelimit-remaining-tokens": "29000",
    "x-ratelimit-reset-tokens": "6m0s",
}


def test_openai_headers_give_rates_and_where_each_window_stands():
    limits = openai_limits(OPENAI)
    assert limits is not None
    assert (limits.rpm, limits.tpm, limits.rpd, limits.tpd) == (500, 30_000, None, None)
    assert limits.windows == (
        Window("requests", 0, 0.12, 500, MINUTE_S),
        Window("tokens", 29_000, 360.0, 30_000, MINUTE_S),
    )


def test_groq_announces_requests_per_day_and_tokens_per_minute():
    # Groq's documented headers: x-ratelimit-limit-requests is the RPD; tokens are per minute.
    headers = {
        "x-ratelimit-limit-requests": "14400",
        "x-ratelimit-remaining-requests": "14370",
        "x-ratelimit-reset-requests": "2m59.56s",
        "x-ratelimit-limit-tokens": "18000",
        "x-ratelimit-remaining-tokens": "17997",
        "x-ratelimit-reset-tokens": "7.66s",
    }
    groq = openai_limits(headers, "api.groq.com")
    assert groq is not None
    assert (groq.rpm, groq.rpd, groq.tpm, groq.tpd) == (None, 14_400, 18_000, None)
    assert groq.windows[0] == Window("requests", 14_370, 179.56, 14_400, DAY_S)
    # The same headers from OpenAI itself are per minute.
    other = openai_limits(headers, "api.openai.com")
    assert other is not None and (other.rpm, other.rpd) == (14_400, None)
    # The provider reads them with its own endpoint's host.
    p = OpenAIProvider(
        base_url="https://api.groq.com/openai/v1",
        model="m",
        api_key=None,
        timeout_s=1,
        max_connections=1,
    )
    assert p.limits_from_headers(headers) == groq


def test_anthropic_headers_give_each_window_with_its_reset_time():
    now = 1_767_225_600.0  # 2026-01-01T00:00:00Z
    headers = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:01Z",
        "anthropic-ratelimit-input-tokens-limit": "40000",
        "anthropic-ratelimit-input-tokens-remaining": "39000",
        "anthropic-ratelimit-input-tokens-reset": "2026-01-01T00:00:02Z",
        "anthropic-ratelimit-output-tokens-limit": "8000",
        "anthropic-ratelimit-output-tokens-remaining": "0",
        "anthropic-ratelimit-output-tokens-reset": "2026-01-01T00:00:30+00:00",
    }
    limits = anthropic_limits(headers, now=now)
    assert limits is not None
    assert (limits.rpm, limits.tpm, limits.input_tpm, limits.output_tpm) == (
        50,
        48_000,
        40_000,
        8_000,
    )
    assert [(w.what, w.remaining, w.reset_s) for w in limits.windows] == [
        ("requests", 49, 1.0),
        ("input_tokens", 39_000, 2.0),
        ("output_tokens", 0, 30.0),
    ]
    # Output tokens are used up: hold for what 100 of them take at 8,000 a minute (0.75 s),
    # not for the whole 30 s until the window is full again.
    assert limits.hold_s(100) == pytest.approx(0.75)


def test_unreadable_remaining_and_reset_values_are_left_out():
    limits = openai_limits(
        {"x-ratelimit-remaining-requests": "lots", "x-ratelimit-limit-requests": "60"}
    )
    assert limits == Limits(rpm=60)
    limits = openai_limits(
        {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "soon"}
    )
    assert limits is not None and limits.windows == (Window("requests", 0, None, None),)
    assert limits.hold_s(10) == 0.0  # nothing to say how long: the 429 will say


@pytest.mark.parametrize(
    ("window", "hold"),
    [
        (Window("requests", 3, 5.0, 600), 0.0),  # something left: no hold
        (Window("requests", 0, 5.0, 600), 0.1),  # one request back at 600 a minute
        (Window("requests", 0, 0.02, 600), 0.02),  # ...unless the whole window resets sooner
        (Window("requests", 0, 30.0, None), 30.0),  # no limit known: the reset
        (Window("requests", 0, 600.0, 14_400, DAY_S), 6.0),  # a day of 14,400
        (Window("tokens", 0, 60.0, 60_000), 1.0),  # 1,000 tokens at 60,000 a minute
    ],
)
def test_hold_is_what_the_next_request_needs_at_the_announced_pace(window: Window, hold: float):
    assert window.hold_s(1_000) == pytest.approx(hold)


# ----------------------------------------------------------------------- the scheduler's hold


def _runtime(tmp_path: Any, provider: Provider, **keys: Any) -> ModelRuntime:
    cfg = load_config(write_config(tmp_path, [model_block("m", provider="simulator")], n_prompts=1))
    model = replace(cfg.models[0], **keys)
    return ModelRuntime(
        config=model,
        provider=provider,
        limiter=EndpointLimiter(rpm=model.rpm, tpm=model.tpm, max_concurrency=8, adaptive=True),
        stats=ModelStats(model_id="m"),
    )


async def test_a_used_up_window_holds_the_endpoint_and_later_replies_are_all_read(tmp_path):
    used_up = Limits(rpm=600, windows=(Window("requests", 0, 2.0, 600),))
    rt = _runtime(tmp_path, FakeProvider(limits=used_up))
    s = Scheduler(run_id="r", runtimes=[rt], writer=None, backoff=Backoff())  # type: ignore[arg-type]
    now = asyncio.get_running_loop().time()
    s._read_limits(rt, {}, est=10)
    assert rt.limiter.paused_until == pytest.approx(now + 0.1, abs=0.05)
    assert rt.reads_limits and rt.learnt_limits
    assert rt.limiter.rpm == 600 and rt.limiter.adaptive is None  # a known rate: no adapting


async def test_announced_day_limits_alone_leave_adaptive_concurrency_on(tmp_path):
    day = Limits(rpd=14_400, windows=(Window("requests", 100, 60.0, 14_400, DAY_S),))
    rt = _runtime(tmp_path, FakeProvider(limits=day))
    s = Scheduler(run_id="r", runtimes=[rt], writer=None, backoff=Backoff())  # type: ignore[arg-type]
    s._read_limits(rt, {}, est=10)
    assert rt.limiter.rpm is None and rt.limiter.adaptive is not None
    assert rt.reads_limits and not rt.learnt_limits


# ------------------------------------------------------------------ the simulator hides them


def _url(sim: Simulator, protocol: str, model: str) -> str:
    root = sim.base_url.removesuffix("/v1")
    if protocol == "openai":
        return root + "/v1/chat/completions"
    if protocol == "anthropic":
        return root + "/v1/messages"
    return root + f"/v1beta/models/{model}:generateContent"


def _body(protocol: str, model: str) -> dict[str, Any]:
    if protocol == "gemini":
        return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    return {"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}


def test_hide_limits_is_a_profile_key_and_a_simulate_flag():
    assert model_profile_from_dict({"rpm": 60, "hide_limits": True}).hide_limits
    assert not model_profile_from_dict({"rpm": 60}).hide_limits
    assert SimProfile.from_args(rpm=60, hide_limits=True).default.hide_limits
    assert not SimProfile.from_args(rpm=60).default.hide_limits


@pytest.mark.parametrize("protocol", ["openai", "anthropic", "gemini"])
async def test_hidden_limits_are_enforced_but_announced_nowhere(protocol: str):
    profile = SimProfile(
        seed=1,
        models={
            "shown": ModelProfile(rpm=60, tpm=1_000_000),
            "hidden": ModelProfile(rpm=60, tpm=1_000_000, hide_limits=True),
        },
    )
    providers = {
        "openai": lambda h: openai_limits(h),
        "anthropic": lambda h: anthropic_limits(h),
        "gemini": lambda h: None,
    }
    async with Simulator(profile, clock=lambda: 1000.0) as sim, aiohttp.ClientSession() as http:
        seen: dict[str, list[tuple[int, dict[str, str], bytes]]] = {}
        for model in ("shown", "hidden"):
            seen[model] = []
            for _ in range(2):  # the clock stands still: the second is over 60 RPM
                async with http.post(
                    _url(sim, protocol, model),
                    json=_body(protocol, model),
                    headers={"anthropic-version": "2023-06-01"},
                ) as r:
                    seen[model].append((r.status, dict(r.headers), await r.read()))
        stats = sim.stats()
    assert [s for s, _, _ in seen["shown"]] == [200, 429]
    assert [s for s, _, _ in seen["hidden"]] == [200, 429]
    assert stats.rate_limited == 2  # both models enforce their limit
    for _status, headers, body in seen["hidden"]:
        lower = {k.lower(): v for k, v in headers.items()}
        assert not [k for k in lower if "ratelimit" in k], lower
        assert providers[protocol](lower) is None
        assert b"Limit 60" not in body and b"quotaValue" not in body and b"per min" not in body
    shown_headers = {k.lower(): v for k, v in seen["shown"][0][1].items()}
    if protocol != "gemini":
        assert providers[protocol](shown_headers) is not None
    else:  # Gemini announces in its 429 only: the quota and its value
        assert b"quotaValue" in seen["shown"][1][2]


async def test_the_gemini_provider_learns_nothing_from_a_hidden_429():
    profile = SimProfile(seed=1, models={"g": ModelProfile(rpm=60, hide_limits=True)})
    async with Simulator(profile, clock=lambda: 1000.0) as sim:
        root = sim.base_url.removesuffix("/v1") + "/v1beta"
        p = GeminiProvider(base_url=root, model="g", api_key="k", timeout_s=5, max_connections=1)
        await p.start()
        try:
            messages = [{"role": "user", "content": "hi"}]
            await p.complete(messages, Sampling(temperature=0.0, max_tokens=16))  # type: ignore[arg-type]
            with pytest.raises(Exception) as err:
                await p.complete(messages, Sampling(temperature=0.0, max_tokens=16))  # type: ignore[arg-type]
        finally:
            await p.close()
    assert getattr(err.value, "status", None) == 429
    assert p.limits_from_headers({}) is None


def test_anthropic_provider_reads_its_own_headers():
    p = AnthropicProvider(model="m", api_key="k", timeout_s=1, max_connections=1)
    limits = p.limits_from_headers({"anthropic-ratelimit-requests-limit": "5"})
    assert limits == Limits(rpm=5)

"""The simulated provider, seen from a real aiohttp client on loopback.

Rate limits and bursts run on a fake clock and latency on a recording fake sleep, so no test
waits for wall-clock time except the hang and client-left cases (a 0.1 s client timeout).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from multidict import CIMultiDict

from ibias.prompts import registry
from ibias.prompts.base import Persona, SettingsError, rng_for, stable_hash
from ibias.runner.simulator import (
    REFUSAL_TEXT,
    SimStats,
    Simulator,
    answer_for,
    format_duration,
    prompt_hash,
    serve_forever,
)
from ibias.runner.simulator.profile import (
    FAULT_KINDS,
    ModelProfile,
    SimProfile,
    load_profile,
    model_profile_from_dict,
)


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class RecordingSleep:
    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def msgs(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": text}]


@asynccontextmanager
async def running(
    profile: SimProfile, **kwargs: Any
) -> AsyncIterator[tuple[Simulator, aiohttp.ClientSession, str]]:
    sim = Simulator(profile, **kwargs)
    url = await sim.start()
    try:
        async with aiohttp.ClientSession() as session:
            yield sim, session, url + "/chat/completions"
    finally:
        await sim.stop()


async def post(
    session: aiohttp.ClientSession, url: str, model: str, text: str, **extra: Any
) -> tuple[int, CIMultiDict[str], bytes]:
    body = {"model": model, "messages": msgs(text), "temperature": 0, **extra}
    async with session.post(url, json=body) as resp:
        return resp.status, CIMultiDict(resp.headers), await resp.read()


def one_model(**kwargs: Any) -> SimProfile:
    return SimProfile(seed=5, default=ModelProfile(**kwargs))


# ---------------------------------------------------------------------------------- answers


async def test_answer_is_a_function_of_model_prompt_and_seed() -> None:
    prompts = [f"Tell me something about topic {i}." for i in range(20)]
    async with running(one_model()) as (_, s1, u1), running(one_model()) as (_, s2, u2):
        first = [orjson.loads((await post(s1, u1, "m-a", p))[2]) for p in prompts]
        again = [orjson.loads((await post(s2, u2, "m-a", p))[2]) for p in reversed(prompts)]
        other = [orjson.loads((await post(s1, u1, "m-b", p))[2]) for p in prompts]
    content = [b["choices"][0]["message"]["content"] for b in first]
    assert content == [b["choices"][0]["message"]["content"] for b in reversed(again)]
    assert [b["usage"] for b in first] == [b["usage"] for b in reversed(again)]
    assert all(c for c in content)
    differ = sum(
        a != b["choices"][0]["message"]["content"] for a, b in zip(content, other, strict=True)
    )
    assert differ >= 15
    other_seed = [answer_for(6, "m-a", tuple(msgs(p)), Persona())[0] for p in prompts]
    assert sum(a != b for a, b in zip(content, other_seed, strict=True)) >= 15


async def test_success_body_and_headers_look_like_openai() -> None:
    text = "Explain rate limits in one paragraph."
    async with running(one_model(rpm=6000, tpm=600_000)) as (_, session, url):
        status, headers, raw = await post(session, url, "gpt-sim", text)
        status2, headers2, _ = await post(session, url, "gpt-sim", text)
    assert status == status2 == 200
    assert headers["Content-Type"].startswith("application/json")
    assert headers["x-request-id"].startswith("req_")
    assert headers["x-request-id"] != headers2["x-request-id"]
    assert headers["x-ratelimit-limit-requests"] == "6000"
    assert headers["x-ratelimit-limit-tokens"] == "600000"
    # Capacity is one second (100 requests); each request uses one of them.
    assert int(headers2["x-ratelimit-remaining-requests"]) < int(
        headers["x-ratelimit-remaining-requests"]
    )
    assert headers["x-ratelimit-reset-requests"].endswith("ms")
    assert "x-ratelimit-reset-tokens" in headers
    body = orjson.loads(raw)
    assert set(body) == {
        "id",
        "object",
        "created",
        "model",
        "choices",
        "usage",
        "system_fingerprint",
    }
    assert body["id"].startswith("chatcmpl-")
    assert body["object"] == "chat.completion"
    assert body["model"] == "gpt-sim-sim-2026-01"
    assert body["system_fingerprint"].startswith("fp_")
    (choice,) = body["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "stop"
    message = choice["message"]
    assert message["role"] == "assistant" and message["refusal"] is None
    prompt_chars = len("You are helpful.") + len(text)
    usage = body["usage"]
    assert usage["prompt_tokens"] == math.ceil(prompt_chars / 4)
    assert usage["completion_tokens"] == math.ceil(len(message["content"]) / 4)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_no_limit_headers_without_limits_and_models_listing() -> None:
    profile = SimProfile(seed=1, models={"a": ModelProfile(), "b": ModelProfile()})
    async with running(profile) as (sim, session, url):
        _, headers, _ = await post(session, url, "a", "hi")
        async with session.get(sim.base_url + "/models") as resp:
            listing = await resp.json()
    assert not any(h.lower().startswith("x-ratelimit") for h in headers)
    assert listing["object"] == "list"
    assert [m["id"] for m in listing["data"]] == ["a", "b"]


async def test_responders_are_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Persona] = []

    def never(messages: Any, persona: Persona, rng: random.Random) -> str | None:
        return None

    def echo(messages: Any, persona: Persona, rng: random.Random) -> str | None:
        seen.append(persona)
        last = messages[-1]["content"]
        return f"ECHO {last} {rng.randint(0, 10**9)}" if last.startswith("echo") else None

    profile = one_model(persona=Persona(word_bias=0.8, refusal_rate=0.01))
    async with running(profile) as (_, session, url):
        monkeypatch.setattr(registry, "responders", lambda: (never, echo))
        _, _, raw = await post(session, url, "m", "echo this")
        _, _, raw_other = await post(session, url, "m", "something else")
    content = orjson.loads(raw)["choices"][0]["message"]["content"]
    assert content.startswith("ECHO echo this ")
    # The rng handed to responders is the answer rng: derivable from (seed, model, messages).
    rng = rng_for(5, "answer", "m", msgs("echo this"))
    rng.random()  # the refusal draw comes first
    assert content == f"ECHO echo this {rng.randint(0, 10**9)}"
    # Refusals are decided by the simulator alone; responders see refusal_rate 0.
    assert seen and all(p.refusal_rate == 0 and p.word_bias == 0.8 for p in seen)
    assert not orjson.loads(raw_other)["choices"][0]["message"]["content"].startswith("ECHO")


def test_refusal_rate_and_content_filter_share() -> None:
    prompts = [tuple(msgs(f"question {i}")) for i in range(600)]
    always = [answer_for(3, "m", p, Persona(refusal_rate=1.0)) for p in prompts]
    assert all(a in ((REFUSAL_TEXT, "stop"), ("", "content_filter")) for a in always)
    # Binomial(600, 0.25): sd 0.018, so [0.15, 0.35] is more than 5 sd either side.
    share = sum(a[1] == "content_filter" for a in always) / len(always)
    assert 0.15 <= share <= 0.35

    low = [answer_for(3, "m", p, Persona(refusal_rate=0.2)) for p in prompts]
    high = [answer_for(3, "m", p, Persona(refusal_rate=0.4)) for p in prompts]
    none = [answer_for(3, "m", p, Persona()) for p in prompts]

    def refused(a: tuple[str, str]) -> bool:
        return a in ((REFUSAL_TEXT, "stop"), ("", "content_filter"))

    # Binomial(600, 0.2): sd 0.016; tolerance 0.08 is 5 sd.
    assert abs(sum(map(refused, low)) / 600 - 0.2) < 0.08
    assert abs(sum(map(refused, high)) / 600 - 0.4) < 0.09
    # Coupled draws: a higher rate refuses a superset and leaves other answers unchanged.
    for a_low, a_high, a_none in zip(low, high, none, strict=True):
        if refused(a_low):
            assert refused(a_high)
        if not refused(a_high):
            assert a_low == a_high == a_none


async def test_max_tokens_cuts_the_answer_with_finish_length() -> None:
    async with running(one_model()) as (_, session, url):
        _, _, full = await post(session, url, "m", "long answer please")
        _, _, cut = await post(session, url, "m", "long answer please", max_tokens=3)
    full_content = orjson.loads(full)["choices"][0]["message"]["content"]
    assert len(full_content) > 12
    body = orjson.loads(cut)
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["choices"][0]["message"]["content"] == full_content[:12]
    assert body["usage"]["completion_tokens"] == 3


async def test_bad_requests_get_400() -> None:
    async with running(one_model()) as (sim, session, url):
        async with session.post(url, data=b"{not json") as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["type"] == "invalid_request_error"
        async with session.post(url, json={"model": "m", "messages": []}) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["param"] == "messages"
        async with session.post(url, json={"messages": msgs("x")}) as resp:
            assert resp.status == 400
    stats = sim.stats()
    assert stats.rejected_by_status == {400: 3} and stats.served == 0


# ----------------------------------------------------------------------------------- faults


@pytest.mark.parametrize("kind", ["500", "503", "malformed", "truncated", "drop", "429"])
async def test_each_fault_kind_as_the_client_sees_it(kind: str) -> None:
    async with running(one_model(faults={kind: 1.0})) as (sim, session, url):
        body = {"model": "m", "messages": msgs("hello")}
        for _ in range(3):
            if kind == "drop":
                with pytest.raises(aiohttp.ServerDisconnectedError):
                    async with session.post(url, json=body) as resp:
                        await resp.read()
                continue
            async with session.post(url, json=body) as resp:
                raw = await resp.read()
                if kind == "500":
                    assert resp.status == 500
                    assert orjson.loads(raw)["error"]["type"] == "server_error"
                elif kind == "503":
                    assert resp.status == 503
                    assert resp.headers["Retry-After"] == "1"
                    assert orjson.loads(raw)["error"]["type"] == "server_error"
                elif kind == "429":
                    assert resp.status == 429
                    assert int(resp.headers["retry-after"]) >= 1
                    assert int(resp.headers["retry-after-ms"]) >= 1
                    assert orjson.loads(raw)["error"]["code"] == "rate_limit_exceeded"
                else:
                    assert resp.status == 200
                    assert resp.headers["Content-Length"] == str(len(raw))
                    with pytest.raises(json.JSONDecodeError):
                        await resp.json()
                    if kind == "truncated":
                        assert raw.startswith(b'{"id":"chatcmpl-')
    stats = sim.stats()
    assert stats.served == 0 and stats.requests == 3
    assert stats.faults[kind] == 3 and stats.fault_total == 3
    assert stats.rate_limited == 0


async def test_hang_outlasts_the_client_timeout_and_stop_ends_it() -> None:
    sim = Simulator(one_model(faults={"hang": 1.0}, hang_s=30.0))
    url = await sim.start() + "/chat/completions"
    timeout = aiohttp.ClientTimeout(total=0.1)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        with pytest.raises(asyncio.TimeoutError):
            await post(session, url, "m", "hello")
    stats = sim.stats()
    assert stats.faults["hang"] == 1 and stats.in_flight == 1 and stats.served == 0
    await asyncio.wait_for(sim.stop(), 5)  # cancels the sleeping handler instead of waiting 30 s
    assert sim.stats().in_flight == 0


async def test_429_burst_refuses_the_next_few_requests_then_ends() -> None:
    clock = FakeClock()
    async with running(one_model(faults={"429": 0.2}), clock=clock) as (sim, session, url):
        fixed = [(await post(session, url, "m", f"q{i}"))[0] for i in range(120)]
        clock.t += 10
        spaced = []
        for i in range(120):
            clock.t += 10  # every burst window (0.5 s) has closed before the next request
            spaced.append((await post(session, url, "m", f"r{i}"))[0])
    assert set(fixed) <= {200, 429} and set(spaced) <= {200, 429}
    runs = [len(r) for r in "".join("x" if s == 429 else "." for s in fixed).split(".") if r]
    if fixed[-1] == 429:
        runs.pop()  # the last run may be cut short by the end of the sequence
    assert runs and min(runs) >= 4  # a triggered 429 plus 3 more within the burst
    # Without bursts, 429s are Binomial(120, 0.2): sd 0.037, so 0.36 is > 4 sd; with bursts
    # extending each trigger by 3 requests the fixed-clock share is about 0.5.
    assert spaced.count(429) / 120 < 0.36
    assert fixed.count(429) / 120 > 0.36
    stats = sim.stats()
    assert stats.faults["429"] == fixed.count(429) + spaced.count(429)
    assert stats.rate_limited == 0


async def test_served_counts_exclude_faults_and_match_client_view() -> None:
    prompts = [f"prompt {i}" for i in range(10)]
    ok: Counter[str] = Counter()
    profile = SimProfile.from_args(seed=9, fault_rate=0.6)
    # Hangs return at once through the fake sleep, then drop the connection.
    async with running(profile, clock=FakeClock(), sleep=RecordingSleep()) as (sim, session, url):
        for _ in range(8):
            for p in prompts:
                try:
                    status, _, raw = await post(session, url, "m", p)
                    if status == 200:
                        orjson.loads(raw)
                        ok[p] += 1
                except (aiohttp.ClientError, json.JSONDecodeError, orjson.JSONDecodeError):
                    pass
        stats = sim.stats()
        for p in prompts:
            assert sim.served_count("m", msgs(p)) == ok[p]
        assert sim.served_count("other", msgs(prompts[0])) == 0
    assert stats.requests == 80
    assert stats.served == sum(ok.values())
    assert stats.served + stats.fault_total == 80
    assert stats.fault_total > 20  # about 0.6 * 80 plus bursts
    assert set(stats.faults) == set(FAULT_KINDS)
    assert stats.served_by_model == {"m": stats.served}
    assert stats.served_by_prompt == {("m", stable_hash(msgs(p))): n for p, n in ok.items() if n}


async def test_client_leaving_during_latency_is_not_served() -> None:
    release = asyncio.Event()

    async def gated_sleep(seconds: float) -> None:
        await release.wait()

    sim = Simulator(one_model(latency_ms=50), sleep=gated_sleep)
    url = await sim.start() + "/chat/completions"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=0.1)) as session:
            with pytest.raises(asyncio.TimeoutError):
                await post(session, url, "m", "hi")
        await asyncio.sleep(0.05)
        release.set()
        for _ in range(100):
            if sim.stats().in_flight == 0:
                break
            await asyncio.sleep(0.01)
        assert sim.stats().in_flight == 0 and sim.stats().served == 0
    finally:
        await sim.stop()


# ---------------------------------------------------------------------------------- latency


async def test_latency_fixed_and_lognormal() -> None:
    fixed_sleep = RecordingSleep()
    async with running(one_model(latency_ms=250), sleep=fixed_sleep) as (_, session, url):
        _, headers, _ = await post(session, url, "m", "a")
        await post(session, url, "m", "b")
    assert fixed_sleep.calls == [0.25, 0.25]
    assert headers["openai-processing-ms"] == "250"

    lognormal = RecordingSleep()
    profile = one_model(latency_ms=100, latency_sigma=0.5)
    async with running(profile, sleep=lognormal) as (_, session, url):
        for i in range(400):
            await post(session, url, "m", "same prompt" if i % 2 else f"p{i}")
    logs = [math.log(s) for s in lognormal.calls]
    # log-latency ~ N(log 0.1, 0.5^2): the mean's sd is 0.025, the sd's sd about 0.018.
    assert abs(statistics.fmean(logs) - math.log(0.1)) < 0.125
    assert abs(statistics.stdev(logs) - 0.5) < 0.09


async def test_in_flight_peak_counts_concurrent_requests() -> None:
    release = asyncio.Event()

    async def gated_sleep(seconds: float) -> None:
        await release.wait()

    async with running(one_model(latency_ms=1), sleep=gated_sleep) as (sim, session, url):
        tasks = [asyncio.create_task(post(session, url, "m", f"p{i}")) for i in range(5)]
        for _ in range(200):
            if sim.stats().in_flight == 5:
                break
            await asyncio.sleep(0.005)
        release.set()
        results = await asyncio.gather(*tasks)
        stats = sim.stats()
    assert [r[0] for r in results] == [200] * 5
    assert stats.in_flight_peak == 5 and stats.in_flight == 0 and stats.served == 5


# ------------------------------------------------------------------------------ rate limits


async def test_evenly_paced_client_at_the_limit_is_never_refused() -> None:
    jitter = random.Random(0)
    for rpm, n in ((6000, 300), (60, 40)):
        clock = FakeClock()
        start = clock.t
        interval = 60 / rpm
        async with running(one_model(rpm=rpm), clock=clock) as (sim, session, url):
            statuses = []
            for k in range(n):
                # Scheduler jitter of a few ms around the ideal send time.
                clock.t = start + k * interval + jitter.uniform(-0.004, 0.004)
                statuses.append((await post(session, url, "m", f"p{k}"))[0])
        assert statuses == [200] * n, rpm
        assert sim.stats().rate_limited == 0


async def test_burst_of_a_minutes_requests_is_mostly_refused() -> None:
    clock = FakeClock()
    start = clock.t
    rpm = 600  # capacity 10 requests, refilling 10 per second
    async with running(one_model(rpm=rpm), clock=clock) as (sim, session, url):
        refused: list[tuple[CIMultiDict[str], dict[str, Any]]] = []
        for k in range(rpm):
            clock.t = start + k / rpm  # all 600 within the first second
            status, headers, raw = await post(session, url, "m", f"p{k}")
            if status == 429:
                refused.append((headers, orjson.loads(raw)))
            else:
                assert status == 200
        # After a refusal, waiting retry-after-ms is enough.
        status, headers, raw = await post(session, url, "m", "retry")
        assert status == 429
        clock.t += int(headers["retry-after-ms"]) / 1000
        assert (await post(session, url, "m", "retry"))[0] == 200
        stats = sim.stats()
    # Admitted: the 10 of capacity plus at most 10 refilled during the second (+1 tolerance).
    admitted = rpm - len(refused)
    assert 18 <= admitted <= 21
    headers, body = refused[-1]
    error = body["error"]
    assert error["type"] == "requests" and error["code"] == "rate_limit_exceeded"
    assert error["param"] is None
    assert error["message"].startswith("Rate limit reached for m in organization")
    assert "on requests per min (RPM): Limit 600, Used " in error["message"]
    assert "Requested 1. Please try again in " in error["message"]
    assert headers["x-ratelimit-limit-requests"] == "600"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    ms = int(headers["retry-after-ms"])
    assert 1 <= ms <= 100  # at most one request's refill time (0.1 s at 10/s)
    assert headers["retry-after"] == "1"
    assert f"Please try again in {ms}ms." in error["message"]
    assert stats.rate_limited == len(refused) + 1
    assert stats.rate_limited_by == {"requests": len(refused) + 1, "tokens": 0}
    assert stats.fault_total == 0 and stats.served == admitted + 1


async def test_tokens_per_minute_are_enforced_on_reported_usage() -> None:
    clock = FakeClock()
    tpm = 600  # 10 tokens per second, capacity 10
    text = "x" * 200  # 50 tokens of user prompt alone: every request is oversize
    async with running(one_model(tpm=tpm), clock=clock) as (sim, session, url):
        status, headers, raw = await post(session, url, "m", text)
        assert status == 200  # a full bucket admits one oversize request
        total = orjson.loads(raw)["usage"]["total_tokens"]
        assert total > 10
        assert headers["x-ratelimit-remaining-tokens"] == "0"
        status, headers, raw = await post(session, url, "m", text)
        assert status == 429
        error = orjson.loads(raw)["error"]
        assert error["type"] == "tokens"
        assert (
            f"on tokens per min (TPM): Limit 600, Used 600, Requested {total}."
            in (error["message"])
        )
        # Level is 10 - total; admission needs capacity (10) minus 0.05 s of refill (0.5).
        expected_wait = (10 - 0.5 - (10 - total)) / 10
        assert int(headers["retry-after-ms"]) == math.ceil(expected_wait * 1000)
        assert headers["retry-after"] == str(math.ceil(expected_wait))
        clock.t += expected_wait + 1e-6
        assert (await post(session, url, "m", text))[0] == 200
    assert sim.stats().rate_limited_by == {"requests": 0, "tokens": 1}


async def test_real_clock_limits_immediately_repeated_requests() -> None:
    async with running(one_model(rpm=60)) as (_, session, url):
        assert (await post(session, url, "m", "a"))[0] == 200
        status, headers, _ = await post(session, url, "m", "b")
    assert status == 429
    assert 850 <= int(headers["retry-after-ms"]) <= 950  # 1 s less the 50 ms tolerance


def test_format_duration_like_openai() -> None:
    assert format_duration(0) == "0s"
    assert format_duration(0.0201) == "21ms"
    assert format_duration(1.5) == "1.5s"
    assert format_duration(2) == "2s"
    assert format_duration(360) == "6m0s"
    assert format_duration(75.25) == "1m15.25s"


# ---------------------------------------------------------------------------- fatal answers


async def test_api_key_checks() -> None:
    async with running(one_model(), require_key="sk-test") as (sim, session, url):
        body = {"model": "m", "messages": msgs("hi")}
        async with session.post(url, json=body) as resp:
            missing = (resp.status, await resp.json())
        bad = {"Authorization": "Bearer sk-wrong"}
        async with session.post(url, json=body, headers=bad) as resp:
            wrong = (resp.status, await resp.json())
        good = {"Authorization": "Bearer sk-test"}
        async with session.post(url, json=body, headers=good) as resp:
            assert resp.status == 200
        async with session.get(sim.base_url + "/models") as resp:
            assert resp.status == 401
    for status, err in (missing, wrong):
        assert status == 401
        assert err["error"]["type"] == "invalid_request_error"
        assert err["error"]["code"] == "invalid_api_key"
        assert err["error"]["message"].startswith("Incorrect API key provided")
        assert "sk-wrong" not in err["error"]["message"]
    assert sim.stats().rejected_by_status == {401: 3}


async def test_fatal_statuses_and_insufficient_quota_per_model() -> None:
    profile = SimProfile(
        seed=1,
        models={
            "gone": ModelProfile(fatal_status=404),
            "denied": ModelProfile(fatal_status=403),
            "unpaid": ModelProfile(fatal_status=402),
            "badkey": ModelProfile(fatal_status=401),
            "broke": ModelProfile(insufficient_quota=True),
        },
    )
    async with running(profile) as (sim, session, url):
        got = {}
        for model in ("gone", "denied", "unpaid", "badkey", "broke", "fine"):
            status, headers, raw = await post(session, url, model, "hi")
            got[model] = (status, headers, orjson.loads(raw))
    assert got["gone"][0] == 404
    assert got["gone"][2]["error"]["code"] == "model_not_found"
    assert "`gone`" in got["gone"][2]["error"]["message"]
    assert got["denied"][0] == 403 and got["unpaid"][0] == 402
    assert got["badkey"][0] == 401
    assert got["badkey"][2]["error"]["code"] == "invalid_api_key"
    status, headers, body = got["broke"]
    assert status == 429 and "retry-after" not in {h.lower() for h in headers}
    assert body["error"]["type"] == "insufficient_quota"
    assert body["error"]["code"] == "insufficient_quota"
    assert got["fine"][0] == 200
    stats = sim.stats()
    assert stats.served == 1 and stats.rate_limited == 0 and stats.fault_total == 0
    assert stats.rejected_by_status == {404: 1, 403: 1, 402: 1, 401: 1, 429: 1}


# ------------------------------------------------------------------------- stats and serving


async def test_stats_endpoint_round_trips() -> None:
    async with running(one_model(faults={"500": 0.3})) as (sim, session, url):
        for i in range(20):
            await post(session, url, "m", f"p{i % 4}")
        async with session.get(sim.base_url.removesuffix("/v1") + "/stats") as resp:
            data = await resp.json()
        async with session.get(sim.base_url.removesuffix("/v1") + "/stats?prompts=0") as resp:
            lean = await resp.json()
        snapshot = sim.stats()
    assert data == snapshot.to_json()
    assert SimStats.from_json(data) == snapshot
    assert lean["served_by_prompt"] == {} and lean["served"] == snapshot.served
    assert data["requests"] == 20 and data["served"] + data["faults"]["500"] == 20
    assert sum(data["served_by_prompt"]["m"].values()) == data["served"]
    assert set(data["served_by_prompt"]["m"]) <= {prompt_hash(msgs(f"p{i}")) for i in range(4)}


async def test_serve_forever_runs_until_cancelled() -> None:
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve_forever(SimProfile(seed=2), "127.0.0.1", 0, on_ready=ready.set_result)
    )
    base = await asyncio.wait_for(ready, 5)
    async with aiohttp.ClientSession() as session:
        status, _, raw = await post(session, base + "/chat/completions", "m", "hello")
    assert status == 200
    assert (
        orjson.loads(raw)["choices"][0]["message"]["content"]
        == (answer_for(2, "m", tuple(msgs("hello")), Persona())[0])
    )
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await post(session, base + "/chat/completions", "m", "hello")


# ---------------------------------------------------------------------------------- profiles


PROFILE_TOML = """
seed = 42

[default]
latency_ms = 200
latency_sigma = 0.5
fault_rate = 0.07
rpm = 3000
word_bias = 0.55

[models."sim-a"]
word_bias = 0.7
allocation_cis = {emergency_care = 0.8, mental_health = 0.6}
allocation_cis_default = 0.55
position_bias = 0.1
refusal_rate = 0.02
faults = {500 = 0.01, hang = 0.002}
hang_s = 5
tpm = 100000

[models."sim-dead"]
fatal_status = 404
insufficient_quota = false
"""


def test_profile_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "profile.toml"
    path.write_text(PROFILE_TOML)
    profile = load_profile(path)
    assert profile.seed == 42
    d = profile.default
    assert (d.latency_ms, d.latency_sigma, d.rpm, d.tpm) == (200.0, 0.5, 3000, None)
    assert dict(d.faults) == dict.fromkeys(FAULT_KINDS, 0.01)
    assert d.persona.word_bias == 0.55
    a = profile.for_model("sim-a")
    assert a.persona == Persona(
        word_bias=0.7,
        allocation_cis={"emergency_care": 0.8, "mental_health": 0.6},
        allocation_cis_default=0.55,
        position_bias=0.1,
        refusal_rate=0.02,
    )
    assert dict(a.faults) == {"500": 0.01, "hang": 0.002}  # replaces the default's fault_rate
    assert (a.latency_ms, a.rpm, a.tpm, a.hang_s) == (200.0, 3000, 100000, 5.0)  # inherited
    dead = profile.for_model("sim-dead")
    assert dead.fatal_status == 404 and dead.persona.word_bias == 0.55
    assert profile.for_model("anything-else") is profile.default


def test_profile_from_args_and_config_table() -> None:
    p = SimProfile.from_args(seed=3, rpm=100, tpm=5000, latency_ms=20, fault_rate=0.14)
    assert p.seed == 3 and p.default.rpm == 100 and p.default.tpm == 5000
    assert p.default.latency_ms == 20 and p.default.latency_sigma == 0
    assert dict(p.default.faults) == pytest.approx(dict.fromkeys(FAULT_KINDS, 0.02))
    assert SimProfile.from_args(seed=3).default.faults == {}
    m = model_profile_from_dict({"word_bias": 0.9, "latency_ms": 5, "faults": {"drop": 0.1}})
    assert m.persona.word_bias == 0.9 and m.latency_ms == 5 and dict(m.faults) == {"drop": 0.1}


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ("[default]\nlatency = 3", "default.latency"),
        ('[models."x"]\nrpm = "fast"', "models.x.rpm"),
        ('[models."x"]\nrpm = 1.5', "models.x.rpm"),
        ('[models."x"]\nword_bias = 1.5', "models.x.word_bias"),
        ('[models."x"]\nrefusal_rate = true', "models.x.refusal_rate"),
        ('[models."x"]\nfaults = {teapot = 0.1}', "models.x.faults.teapot"),
        ('[models."x"]\nfaults = {500 = 0.6, 503 = 0.6}', "models.x.faults"),
        ('[models."x"]\nfaults = {500 = 0.1}\nfault_rate = 0.1', "models.x.fault_rate"),
        ('[models."x"]\nfatal_status = 500', "models.x.fatal_status"),
        ('[models."x"]\nallocation_cis = {er = 2}', "models.x.allocation_cis.er"),
        ('[models."x"]\nposition_bias = -2', "models.x.position_bias"),
        ('[models."x"]\nhang_s = 0', "models.x.hang_s"),
        ('[models."x"]\nrpm = 0', "models.x.rpm"),
        ("[default]\ninsufficient_quota = 1", "default.insufficient_quota"),
        ("models = 3", "models"),
        ('seed = "s"', "seed"),
        ("colour = 1", "colour"),
    ],
)
def test_profile_errors_name_the_key(tmp_path: Path, toml: str, key: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    with pytest.raises(SettingsError) as info:
        load_profile(path)
    assert info.value.key == key


def test_profile_file_errors(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="profile file not found"):
        load_profile(tmp_path / "missing.toml")
    with pytest.raises(SettingsError, match="is a directory, expected a TOML profile file"):
        load_profile(tmp_path)
    bad = tmp_path / "broken.toml"
    bad.write_text("[default\n")
    with pytest.raises(SettingsError, match="not valid TOML") as info:
        load_profile(bad)
    assert info.value.key == str(bad)


def test_profiles_are_frozen() -> None:
    source = {"er": 0.7}
    m = ModelProfile(persona=Persona(allocation_cis=source), faults={"500": 0.1})
    source["er"] = 0.1
    assert m.persona.allocation_cis["er"] == 0.7
    with pytest.raises(TypeError):
        m.faults["500"] = 0.5  # type: ignore[index]
    with pytest.raises(AttributeError):
        m.rpm = 3  # type: ignore[misc]


async def test_a_runs_own_simulator_keeps_no_count_per_prompt() -> None:
    """The loopback simulator of `ibias run` counts what it served but keeps no key per
    prompt: on a 1.4-million-trial grid those keys alone were about 350 MB of the run."""
    from ibias.runner.simulator.provider import LoopbackSimulator

    loop = LoopbackSimulator(SimProfile.from_args(seed=3))
    url = await loop.url()
    try:
        async with aiohttp.ClientSession() as session:
            for i in range(5):
                status, _, _ = await post(session, url + "/chat/completions", "m", f"p{i}")
                assert status == 200
        assert loop._sim is not None
        stats = loop._sim.stats()
    finally:
        await loop.stop()
    assert stats.served == 5 and stats.served_by_prompt == {}
    async with running(SimProfile.from_args(seed=3)) as (sim, session, chat):
        await post(session, chat, "m", "p0")
        assert len(sim.stats().served_by_prompt) == 1  # tests' own simulators still count

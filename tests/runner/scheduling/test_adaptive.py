"""Adaptive concurrency (runner/scheduling/adaptive.py) on a fake clock, and the endpoint limiter
applying it to its slots under virtual loop time."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import anyio
import pytest

from ibias.runner.config import load_config
from ibias.runner.execution.run import RunOptions, execute
from ibias.runner.providers.base import AttemptError, Provider, Reply, Sampling
from ibias.runner.providers.retries import Backoff, Classification, Verdict
from ibias.runner.scheduling.adaptive import AdaptiveConcurrency
from ibias.runner.scheduling.limits import EndpointLimiter
from tests.helpers import model_block, write_config
from tests.runner.scheduling.test_limits import run_virtual


def test_slow_start_doubles_per_clean_round_up_to_the_maximum():
    a = AdaptiveConcurrency(64, initial=2)
    seen = []
    for _ in range(200):
        changed = a.on_success(a.epoch, now=0.0)  # the clock stands still: slow start ignores it
        if changed is not None:
            seen.append(changed)
    assert seen == [4, 8, 16, 32, 64]
    assert a.limit == 64 and a.on_success(a.epoch, 0.0) is None


def test_a_429_halves_once_per_burst_and_ends_slow_start():
    a = AdaptiveConcurrency(64, initial=16)
    for _ in range(16):
        a.on_success(a.epoch, 0.0)
    assert a.limit == 32
    for _ in range(20):  # 20 clean since the change: at least half of 32 got through
        a.on_success(a.epoch, 1.0)
    burst_epoch = a.epoch
    assert a.on_rate_limited(burst_epoch, 2.0) == 16
    # The rest of the burst: sent before the halving, so not held against the new limit.
    for _ in range(10):
        assert a.on_rate_limited(burst_epoch, 2.1) is None
    assert a.limit == 16 and not a.slow_start
    # A 429 on a request sent under the new limit is a new burst (and with nothing clean
    # since the last change, the limit drops to an eighth: 16 // 8).
    assert a.on_rate_limited(a.epoch, 2.2) == 2


def test_a_burst_with_few_clean_answers_drops_to_what_got_through_not_below_an_eighth():
    a = AdaptiveConcurrency(64, initial=10)
    for _ in range(10):
        a.on_success(a.epoch, 0.0)
    assert a.limit == 20
    a.on_success(a.epoch, 0.1)  # one of the 20 got through, then the 429s
    assert a.on_rate_limited(a.epoch, 0.1) == 2  # max(1 clean, 20 // 8), not 10
    b = AdaptiveConcurrency(64, initial=64)
    assert b.on_rate_limited(b.epoch, 0.0) == 8  # nothing clean: an eighth of 64


def test_additive_increase_waits_for_a_clean_round_and_the_interval():
    a = AdaptiveConcurrency(8, initial=4, grow_interval_s=15.0)
    for _ in range(4):
        a.on_success(a.epoch, 0.0)
    assert a.limit == 8
    for _ in range(8):
        a.on_success(a.epoch, 0.5)
    assert a.on_rate_limited(a.epoch, 1.0) == 4
    # Clean answers at once: a full round, but the interval since the change has not passed.
    for _ in range(100):
        assert a.on_success(a.epoch, 15.9) is None
    assert a.on_success(a.epoch, 16.0) == 5  # 15 s after the halving at t=1
    # Next step: again a full round of 5 and 15 s.
    for i in range(4):
        assert a.on_success(a.epoch, 40.0 + i) is None
    assert a.on_success(a.epoch, 40.0) == 6


def test_the_minimum_holds_and_a_429_there_restarts_the_interval():
    a = AdaptiveConcurrency(4, initial=1, grow_interval_s=10.0)
    assert a.on_rate_limited(a.epoch, 0.0) is None  # already at 1
    assert a.limit == 1
    assert a.on_success(a.epoch, 5.0) is None  # within the interval of that 429
    assert a.on_success(a.epoch, 10.0) == 2


def test_stragglers_from_an_older_epoch_do_not_grow_the_limit():
    a = AdaptiveConcurrency(8, initial=2)
    old = a.epoch
    a.on_rate_limited(old, 0.0)
    for _ in range(10):
        assert a.on_success(old, 100.0) is None
    assert a.limit == 1


def test_bad_arguments():
    with pytest.raises(ValueError):
        AdaptiveConcurrency(0)
    with pytest.raises(ValueError):
        AdaptiveConcurrency(4, minimum=5)
    with pytest.raises(ValueError):
        AdaptiveConcurrency(4, grow_interval_s=-1)


# ---------------------------------------------------------------------------------------------
# The limiter applies the limit to its slots


def test_the_limiter_starts_at_the_initial_limit_and_follows_the_controller():
    async def main() -> list[int]:
        lim = EndpointLimiter(
            rpm=None,
            tpm=None,
            max_concurrency=16,
            adaptive=AdaptiveConcurrency(16, initial=2, grow_interval_s=1.0),
        )
        peaks: list[int] = []
        in_flight = 0
        peak = 0
        outcome = {"rate_limited": False}

        async def request() -> None:
            nonlocal in_flight, peak
            permit = await lim.acquire(10)
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(0.1)
            in_flight -= 1
            kind = "rate_limited" if outcome["rate_limited"] else "ok"
            lim.release(permit, 10, outcome=kind)  # type: ignore[arg-type]

        async def phase(n: int) -> int:
            nonlocal peak
            peak = 0
            await asyncio.gather(*(request() for _ in range(n)))
            return peak

        peaks.append(await phase(2))  # the initial limit
        peaks.append(await phase(64))  # slow start: 2 -> 4 -> 8 -> 16
        outcome["rate_limited"] = True
        await phase(16)  # one burst of 429s: halved once
        peaks.append(lim.concurrency)
        outcome["rate_limited"] = False
        peaks.append(await phase(40))
        return peaks

    initial, grown, after_burst, later = run_virtual(main)
    assert initial == 2
    assert grown == 16
    assert after_burst == 8  # 16 answered clean before the burst: halved, once
    assert later in (8, 9)  # additive increase: at most one step per clean round and second


def test_a_lowered_cap_is_reached_as_requests_finish_and_never_exceeded():
    async def main() -> list[int]:
        ctl = AdaptiveConcurrency(8, initial=8)
        lim = EndpointLimiter(rpm=None, tpm=None, max_concurrency=8, adaptive=ctl)
        permits = [await lim.acquire(1) for _ in range(8)]
        lim.release(permits.pop(), None, outcome="rate_limited")  # 8 -> 1 (nothing clean)
        assert lim.concurrency == 1
        waiter = asyncio.ensure_future(lim.acquire(1))
        counts = []
        for p in permits:
            await asyncio.sleep(0)
            counts.append(int(waiter.done()))
            lim.release(p, None)
        await asyncio.sleep(0)
        counts.append(int(waiter.done()))
        lim.release(waiter.result(), None)
        return counts

    counts = run_virtual(main)
    assert counts == [0, 0, 0, 0, 0, 0, 0, 1]  # the waiter starts only once all 7 are done


def test_an_announced_rate_ends_adapting_and_restores_the_cap():
    async def main() -> tuple[int, int, bool]:
        lim = EndpointLimiter(rpm=None, tpm=None, max_concurrency=32, adaptive=True)
        before = lim.concurrency
        lim.set_limits(rpm=600, tpm=None)
        return before, lim.concurrency, lim.adaptive is None

    assert run_virtual(main) == (32, 32, True)


def test_no_adapting_when_a_rate_is_configured_or_not_asked():
    async def main() -> tuple[bool, bool]:
        paced = EndpointLimiter(rpm=60, tpm=None, max_concurrency=4, adaptive=True)
        plain = EndpointLimiter(rpm=None, tpm=None, max_concurrency=4)
        return paced.adaptive is None, plain.adaptive is None

    assert run_virtual(main) == (True, True)


# ---------------------------------------------------------------------------------------------
# A whole run against a provider that publishes nothing


class Crowded(Provider):
    """Answers while at most `capacity` requests are in flight, else a 429 with no limit named
    (a provider that publishes nothing)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.in_flight = 0
        self.peak = 0
        self.rate_limited = 0

    async def complete(self, messages: Sequence[Mapping[str, str]], sampling: Sampling) -> Reply:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if self.in_flight > self.capacity:
                self.rate_limited += 1
                raise AttemptError(
                    Classification(
                        Verdict.RETRY,
                        "http_429",
                        "HTTP 429",
                        delay_hint_s=0.001,
                        is_rate_limit=True,
                    ),
                    status=429,
                )
            await anyio.sleep(0.002)
            return Reply(
                content="ok",
                finish_reason="stop",
                refusal=None,
                prompt_tokens=5,
                completion_tokens=1,
                provider_model="crowded",
                system_fingerprint=None,
                raw={},
            )
        finally:
            self.in_flight -= 1


async def test_a_run_without_known_limits_adapts_its_concurrency_to_the_429s(tmp_path):
    provider = Crowded(capacity=2)
    block = model_block("m", provider="simulator", max_concurrency=32)
    config = load_config(write_config(tmp_path, [block], n_prompts=300))
    result = await execute(
        config,
        RunOptions(
            store=tmp_path / "store.duckdb",
            quiet=True,
            backoff=Backoff(base_s=0.001, cap_s=0.01, max_attempts=20),
        ),
        provider_factory=lambda m, k, c: provider,
    )
    assert result.exit_code == 0, result.lines
    # With the cap fixed at 32 the same run earns about 300 429s (one per trial: each pause
    # ends in a new crowd). Adapting, the first burst halves the cap (here to 1, as nothing
    # had come back clean yet) and it stays within what the provider takes.
    assert provider.rate_limited <= 16
    assert provider.peak <= 10

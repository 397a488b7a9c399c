"""Hidden limits learnt at any rate (runner/adaptive.py's `AdaptiveRate` in the endpoint
limiter), on a virtual clock: minutes of a run take a fraction of a second, and nothing here
asserts a timing of the machine.

The provider side is the simulator's own bucket (runner/simulator/faults.py `Bucket`: one second of
the per-minute limit, refilled continuously, a few ms of tolerance), answering after 100 ms;
its 429s name no limit but say how long until the next unit, as the simulator's do. The client
side is what the scheduler does per attempt: acquire a permit, send, release it with the
outcome, pause the endpoint for the hint and back off (runner/scheduler.py), with 32 workers
(`max_concurrency` 32). The real-time rows are `make bench` (bench/bench_limits.py).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import pytest

from ibias.runner.adaptive import AdaptiveRate
from ibias.runner.limits import EndpointLimiter
from ibias.runner.retries import Backoff
from ibias.runner.simulator.faults import Bucket
from tests.runner.test_limits import run_virtual

LATENCY_S = 0.1
CONCURRENCY = 32
WARMUP_S = 60.0


@dataclass(frozen=True)
class Measured:
    """After the first minute: answers per second over the limit's, and the 429 share."""

    rate_over_limit: float
    share_429: float


def simulate(rpm: int, seconds: float, *, learn_rate: bool = True) -> Measured:
    async def main() -> Measured:
        loop = asyncio.get_running_loop()
        bucket = Bucket(rpm, loop.time())
        limiter = EndpointLimiter(
            rpm=None, tpm=None, max_concurrency=CONCURRENCY, adaptive=True, learn_rate=learn_rate
        )
        backoff = Backoff()
        rng = random.Random(7)
        late_ok = late_429 = 0
        end = loop.time() + seconds

        async def worker() -> None:
            nonlocal late_ok, late_429
            while loop.time() < end:
                counted = 0
                while True:
                    permit = await limiter.acquire(0)
                    sent = loop.time()
                    bucket.refill(sent)
                    wait = bucket.shortfall(1)
                    if wait <= 0:
                        bucket.level -= 1
                    await asyncio.sleep(LATENCY_S)
                    late = sent >= WARMUP_S
                    if wait <= 0:
                        limiter.release(permit, None, outcome="ok")
                        late_ok += late
                        break
                    limiter.release(permit, None, outcome="rate_limited")
                    late_429 += late
                    counted += 1
                    limiter.pause(wait)
                    await asyncio.sleep(backoff.delay(counted, wait, rng))

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        attempts = late_ok + late_429
        return Measured(
            rate_over_limit=late_ok / (seconds - WARMUP_S) / (rpm / 60.0),
            share_429=late_429 / attempts if attempts else 0.0,
        )

    return run_virtual(main)


@pytest.mark.parametrize("rpm", [60, 120, 600, 6000])
def test_a_hidden_limit_is_learnt_at_any_rate(rpm: int) -> None:
    got = simulate(rpm, 300.0)
    assert got.rate_over_limit >= 0.9, got
    assert got.share_429 <= 0.05, got


def test_concurrency_alone_cannot_keep_a_low_hidden_limit() -> None:
    """Why a rate: one request in flight at 100 ms is 600 RPM, ten times a 60 RPM limit."""
    got = simulate(60, 180.0, learn_rate=False)
    assert got.share_429 > 0.05, got


def test_a_learnt_rate_is_cut_once_per_burst_and_grows_when_clean() -> None:
    rate = AdaptiveRate(learn_s=10.0, margin=1.0, grow_interval_s=30.0)
    assert rate.finished(0.0, True, now=1.0) is None and rate.learning  # the window opens
    for i in range(20):  # 20 answered of those admitted in [1, 11), a 429 late in it
        rate.admitted(1.0 + i * 0.5)
        rate.finished(1.0 + i * 0.5, False, now=1.1 + i * 0.5)
    rate.admitted(9.0)
    assert rate.finished(9.0, True, now=9.1) is None
    assert rate.finished(11.0, False, now=11.1) == pytest.approx(2.0)  # 20 over 10 s
    assert not rate.learning
    assert rate.finished(16.2, False, now=16.2) == pytest.approx(2.2)  # 5 s clean: fast
    assert rate.finished(20.0, True, now=20.1) == pytest.approx(1.98)  # cut by `decrease`
    assert rate.finished(19.0, True, now=20.2) is None  # admitted before the cut: same burst
    assert rate.finished(26.0, False, now=26.0) is None  # after a cut, growth is slow
    assert rate.finished(50.0, False, now=50.2) == pytest.approx(1.98 * 1.02)  # 30 s clean

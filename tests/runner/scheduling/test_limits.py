"""EndpointLimiter under virtual loop time: pacing, token ledger, cap, pause, cancel, re-rating.

Every test runs on :class:`VirtualTimeLoop`, whose clock jumps straight to the next timer
instead of sleeping, so minutes of pacing take milliseconds and start times are exact.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import selectors
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from ibias.runner.scheduling.limits import PACING_SLACK_S, EndpointLimiter, Permit

T = TypeVar("T")
_TICK = 1e-9  # virtual seconds that pass per loop iteration that asks not to wait


def approx(expected: Any) -> Any:
    """Times are exact up to the virtual loop's per-iteration tick (see _VirtualSelector)."""
    return pytest.approx(expected, abs=1e-6)


class _VirtualSelector(selectors.SelectSelector):
    """Polls real file descriptors (the loop's self-pipe) without blocking; when nothing is
    ready, advances the virtual clock by the timeout asyncio asked to wait for."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(0)
        if ready:
            return ready
        if timeout is None:
            # Nothing scheduled: only another thread can wake us (executor shutdown). Wait for
            # it in real time, briefly; a true deadlock in a test fails instead of hanging.
            ready = super().select(5.0)
            if not ready:
                raise RuntimeError("virtual loop deadlock: nothing ready and no timer pending")
            return ready
        # A zero timeout still lets a nanosecond pass, as on a real clock. Without it a timer
        # re-armed at "now" by float rounding (aiolimiter does this at exact bucket edges)
        # would spin forever on a frozen clock. Tests therefore compare times to 1e-6 s.
        self.now += max(timeout, _TICK)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` is virtual; ``asyncio.sleep(60)`` returns at once."""

    def __init__(self) -> None:
        self._virtual = _VirtualSelector()
        super().__init__(self._virtual)

    def time(self) -> float:
        return self._virtual.now


def run_virtual(main: Callable[[], Awaitable[T]]) -> T:
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main())  # type: ignore[arg-type]


def now() -> float:
    return asyncio.get_running_loop().time()


def max_in_window(times: list[float], w: float, weights: list[float] | None = None) -> float:
    """Largest total weight of events starting in any half-open window [t, t + w)."""
    ts = sorted(zip(times, weights or [1.0] * len(times), strict=True))
    best, j, total = 0.0, 0, 0.0
    for i in range(len(ts)):
        while j < len(ts) and ts[j][0] < ts[i][0] + w - 1e-9:
            total += ts[j][1]
            j += 1
        best = max(best, total)
        total -= ts[i][1]
    return best


def test_window_helper_detects_bursts():
    assert max_in_window([0.0] * 10 + [5.0], 1.0) == 10
    assert max_in_window([0.0, 0.5, 1.0, 1.5], 1.0) == 2
    assert max_in_window([0, 0.5, 2], 1.0, [10, 20, 5]) == 30


# ------------------------------------------------------------------ request pacing


def test_rpm_3000_is_paced_evenly_not_in_a_burst():
    async def main() -> list[float]:
        lim = EndpointLimiter(rpm=3000, tpm=None, max_concurrency=1000)
        starts: list[float] = []

        async def one() -> None:
            permit = await lim.acquire(0)
            starts.append(now())
            lim.release(permit, None)

        await asyncio.gather(*(one() for _ in range(500)))
        return starts

    starts = run_virtual(main)
    assert len(starts) == 500
    for w in (1.0, 2.5, 5.0):
        assert max_in_window(starts, w) <= 3000 * w / 60 + 1, w
    assert max_in_window(starts, 1.0) <= 51
    rate_per_min = (len(starts) - 1) / (max(starts) - min(starts)) * 60
    assert rate_per_min == pytest.approx(3000, rel=0.01)


def test_burst_s_allows_a_small_burst_only():
    async def main() -> list[float]:
        lim = EndpointLimiter(rpm=600, tpm=None, max_concurrency=100, burst_s=0.5)
        starts: list[float] = []

        async def one() -> None:
            lim.release(await lim.acquire(0), None)
            starts.append(now())

        await asyncio.gather(*(one() for _ in range(40)))
        return starts

    starts = run_virtual(main)
    bucket = 600 * 0.5 / 60  # 5 requests may go back to back
    assert sum(t < 1e-6 for t in starts) == bucket
    assert max_in_window(starts, 1.0) <= 600 / 60 + bucket


# ------------------------------------------------------------------ token pacing


def test_tpm_paces_varying_estimates_and_never_deadlocks_on_big_ones():
    rng = random.Random(3)
    estimates = [rng.randint(10, 250) for _ in range(120)]  # some exceed the 100-token bucket
    tpm, rate, cap = 6000, 100.0, 100.0

    async def main() -> list[float]:
        lim = EndpointLimiter(rpm=None, tpm=tpm, max_concurrency=50)
        starts: list[float] = [0.0] * len(estimates)

        async def one(i: int) -> None:
            permit = await lim.acquire(estimates[i])
            starts[i] = now()
            lim.release(permit, estimates[i])  # estimates were exact: no correction

        await asyncio.gather(*(one(i) for i in range(len(estimates))))
        return starts

    starts = run_virtual(main)
    order = sorted(range(len(estimates)), key=lambda i: starts[i])
    cumulative = 0.0
    for i in order:  # leaky bucket invariant: tokens started by t <= cap + rate * t
        cumulative += estimates[i]
        assert cumulative <= cap + rate * starts[i] + 1e-6
    for w in (1.0, 10.0):
        assert max_in_window(starts, w, [float(e) for e in estimates]) <= (
            rate * w + cap + max(estimates)
        )
    achieved = (sum(estimates) - estimates[order[0]]) / (max(starts) - min(starts))
    assert achieved == pytest.approx(rate, rel=0.05)


def _sequential_starts(
    lim: EndpointLimiter, est: int, actual: int | None, n: int
) -> Callable[[], Awaitable[list[float]]]:
    async def main() -> list[float]:
        starts = []
        for _ in range(n):
            permit = await lim.acquire(est)
            starts.append(now())
            lim.release(permit, actual)
        return starts

    return main


def test_unused_estimate_is_credited_so_next_requests_start_sooner():
    # tpm 6000 = 100 tokens/s; each request is estimated at 100 tokens.
    charged = run_virtual(
        _sequential_starts(EndpointLimiter(rpm=None, tpm=6000, max_concurrency=1), 100, None, 6)
    )
    credited = run_virtual(
        _sequential_starts(EndpointLimiter(rpm=None, tpm=6000, max_concurrency=1), 100, 10, 6)
    )
    assert charged == approx([0, 1, 2, 3, 4, 5])
    # Really used 10 tokens each: the honest pace for 10 tokens at 100/s is one per 0.1 s.
    assert credited == approx([0, 0.1, 0.2, 0.3, 0.4, 0.5])


def test_overshoot_is_charged_to_later_requests():
    starts = run_virtual(
        _sequential_starts(EndpointLimiter(rpm=None, tpm=6000, max_concurrency=1), 100, 300, 4)
    )
    # Each request really used 300 tokens = 3 s of budget; after the first (paid 100, owes 200)
    # every start pays its 100 estimate plus the 200 owed by the one before.
    assert starts == approx([0, 3, 6, 9])


def test_credit_is_bounded_by_one_bucket():
    async def main() -> tuple[float, list[float]]:
        lim = EndpointLimiter(rpm=None, tpm=6000, max_concurrency=1)
        lim.release(await lim.acquire(100), 0)
        lim.release(await lim.acquire(100), 0)  # credit would be 200 if unbounded
        owed = lim.owed_tokens
        starts = []
        for _ in range(3):
            p = await lim.acquire(100)
            starts.append(now())
            lim.release(p, None)
        return owed, starts

    owed, starts = run_virtual(main)
    assert owed == -100.0
    assert starts == approx([0.0, 1.0, 2.0])


def test_estimate_above_a_minute_of_budget_goes_after_one_minute():
    async def main() -> tuple[float, float]:
        lim = EndpointLimiter(rpm=None, tpm=600, max_concurrency=1)  # 10 tokens/s
        permit = await lim.acquire(5000)  # more than the whole minute; must not deadlock
        first = now()
        lim.release(permit, None)
        return first, lim.owed_tokens

    first, owed = run_virtual(main)
    assert first == approx(59.0)  # 600 tokens: 10 at once, 590 at 10/s
    assert owed == approx(4400.0)  # the rest is debt for later requests


# ------------------------------------------------------------------ concurrency


def test_concurrency_cap_is_never_exceeded_with_random_hold_times():
    rng = random.Random(11)
    holds = [rng.expovariate(1 / 2.0) for _ in range(200)]

    async def main() -> tuple[int, int]:
        lim = EndpointLimiter(rpm=1200, tpm=None, max_concurrency=7)
        active = 0
        peak = 0

        async def one(hold: float) -> None:
            nonlocal active, peak
            permit = await lim.acquire(50)
            active += 1
            peak = max(peak, active)
            assert lim.in_flight == active <= 7
            await asyncio.sleep(hold)
            active -= 1
            lim.release(permit, 40)

        await asyncio.gather(*(one(h) for h in holds))
        return peak, lim.in_flight

    peak, left = run_virtual(main)
    assert peak == 7  # the cap is reached (work was waiting) and never passed
    assert left == 0


# ------------------------------------------------------------------ pause


def test_pause_blocks_everyone_and_overlapping_pauses_extend():
    async def main() -> tuple[list[float], list[float]]:
        lim = EndpointLimiter(rpm=600, tpm=None, max_concurrency=10)
        starts: list[float] = []

        async def one(delay: float) -> None:
            await asyncio.sleep(delay)
            permit = await lim.acquire(0)
            starts.append(now())
            lim.release(permit, None)

        lim.pause(10)
        tasks = [asyncio.ensure_future(one(d)) for d in (0, 0, 0, 4, 6)]
        await asyncio.sleep(3)
        lim.pause(20)  # now 3: until 23, extends
        marks = [lim.paused_until]
        await asyncio.sleep(2)
        lim.pause(1)  # now 5: would end at 6, must not shorten
        marks.append(lim.paused_until)
        await asyncio.gather(*tasks)
        return starts, marks

    starts, marks = run_virtual(main)
    assert marks == approx([23.0, 23.0])
    # Nobody starts before 23, and after the pause they go at the 600 RPM pace, not as a herd.
    assert sorted(starts) == approx([23.0, 23.1, 23.2, 23.3, 23.4])


def test_pause_reaches_a_waiter_already_in_the_rate_stage():
    async def main() -> float:
        lim = EndpointLimiter(rpm=6, tpm=None, max_concurrency=2)  # one request per 10 s
        lim.release(await lim.acquire(0), None)
        waiter = asyncio.ensure_future(lim.acquire(0))
        await asyncio.sleep(5)
        lim.pause(30)  # it had budget coming at t=10; the pause says not before 35
        permit = await waiter
        lim.release(permit, None)
        return now()

    assert run_virtual(main) == approx(35.0)


# ------------------------------------------------------------------ cancellation


def test_cancelled_waiters_leak_no_slot_and_free_no_foreign_one():
    async def main() -> list[tuple[str, Any]]:
        lim = EndpointLimiter(rpm=60, tpm=None, max_concurrency=1)
        log: list[tuple[str, Any]] = []
        held = await lim.acquire(0)  # t=0
        # waiting for the slot
        slot_waiter = asyncio.ensure_future(lim.acquire(0))
        await asyncio.sleep(0.2)
        slot_waiter.cancel()
        await asyncio.sleep(0)
        log.append(("in_flight after slot cancel", lim.in_flight))
        lim.release(held, None)
        # waiting in the rate stage (slot held, request budget not yet there)
        rate_waiter = asyncio.ensure_future(lim.acquire(0))
        await asyncio.sleep(0.3)
        rate_waiter.cancel()
        await asyncio.sleep(0)
        log.append(("in_flight after rate cancel", lim.in_flight))
        permit = await lim.acquire(0)
        log.append(("next start", now()))
        # exactly one slot exists: a second acquire must wait for the release
        extra = asyncio.ensure_future(lim.acquire(0))
        await asyncio.sleep(5)
        log.append(("extra done while slot held", extra.done()))
        lim.release(permit, None)
        lim.release(await extra, None)
        log.append(("extra started", now()))
        return log

    log = dict(run_virtual(main))
    assert log["in_flight after slot cancel"] == 1
    assert log["in_flight after rate cancel"] == 0
    assert log["next start"] == approx(1.0)  # the RPM pace of 1/s, not delayed further
    assert log["extra done while slot held"] is False
    assert log["extra started"] == approx(6.0)


def test_cancelled_token_waiter_is_not_charged():
    async def main() -> tuple[float, float]:
        lim = EndpointLimiter(rpm=None, tpm=6000, max_concurrency=5)
        lim.release(await lim.acquire(100), None)  # bucket full at t=0
        waiter = asyncio.ensure_future(lim.acquire(100))
        await asyncio.sleep(0.5)
        waiter.cancel()
        await asyncio.sleep(0)
        owed = lim.owed_tokens
        lim.release(await lim.acquire(100), None)
        return owed, now()

    owed, start = run_virtual(main)
    assert owed == 0.0
    assert start == approx(1.0)  # not 2.0: the cancelled request cost nothing


def test_release_errors():
    async def main() -> None:
        lim = EndpointLimiter(rpm=None, tpm=None, max_concurrency=2)
        permit = await lim.acquire(1)
        lim.release(permit, 1)
        with pytest.raises(ValueError):
            lim.release(permit, 1)
        with pytest.raises(ValueError):
            lim.release(Permit(est_tokens=1), 1)
        with pytest.raises(ValueError):
            await lim.acquire(-1)
        assert lim.in_flight == 0

    run_virtual(main)
    for kwargs in ({"max_concurrency": 0}, {"rpm": 0}, {"tpm": -5}, {"burst_s": -1.0}):
        args: dict[str, Any] = {"rpm": None, "tpm": None, "max_concurrency": 1, **kwargs}
        with pytest.raises(ValueError):
            EndpointLimiter(**args)


# ------------------------------------------------------------------ changing limits


def test_set_limits_mid_run_changes_the_pace():
    async def main() -> list[float]:
        lim = EndpointLimiter(rpm=60, tpm=None, max_concurrency=1)
        starts = []
        for i in range(10):
            if i == 4:
                lim.set_limits(rpm=600, tpm=None)
            if i == 7:
                lim.set_limits(rpm=120, tpm=None)
            lim.set_limits(lim.rpm, None)  # unchanged: a no-op, must not reset the bucket
            lim.release(await lim.acquire(0), None)
            starts.append(now())
        return starts

    starts = run_virtual(main)
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(starts)]
    # 60 RPM: 1 s apart; at 600 RPM: 0.1 s, the first counted from the last start under the old
    # rate (the new bucket carries that start, so a change is no free burst); at 120 RPM: 0.5 s.
    assert gaps == [1.0, 1.0, 1.0, 0.1, 0.1, 0.1, 0.5, 0.5, 0.5]


def test_set_limits_wakes_a_waiter_stuck_on_the_old_pace():
    async def main() -> tuple[float, list[float]]:
        lim = EndpointLimiter(rpm=1, tpm=600, max_concurrency=5)  # one request per minute
        lim.release(await lim.acquire(10), None)
        waiter = asyncio.ensure_future(lim.acquire(10))
        await asyncio.sleep(2)
        lim.set_limits(rpm=600, tpm=600)
        lim.release(await waiter, None)
        first = now()
        await asyncio.sleep(1)
        lim.set_limits(rpm=None, tpm=None)  # limits lifted: everyone goes at once
        starts = []
        for _ in range(3):
            lim.release(await lim.acquire(10_000), None)
            starts.append(now())
        return first, starts

    first, starts = run_virtual(main)
    assert first == approx(2.0)
    assert starts == approx([3.0, 3.0, 3.0])


# ------------------------------------------------------------------ no limits


def test_without_rates_a_pause_and_the_cap_still_hold():
    """An endpoint with no rpm or tpm admits without queueing at the gate, but a pause (and a
    waiter already queued behind it) still comes first, and the cap still holds."""

    async def main() -> tuple[list[float], int]:
        lim = EndpointLimiter(rpm=None, tpm=None, max_concurrency=2)
        first = await lim.acquire(10)  # nothing to wait for
        starts: list[float] = [now()]
        lim.pause(5)

        async def one() -> None:
            permit = await lim.acquire(10)
            starts.append(now())
            await asyncio.sleep(1)
            lim.release(permit, None)

        tasks = [asyncio.ensure_future(one()) for _ in range(3)]
        await asyncio.sleep(0)
        lim.release(first, 8)
        await asyncio.gather(*tasks)
        return starts, lim.in_flight

    starts, left = run_virtual(main)
    # the first at 0; then nobody before the pause ends at 5; two at a time (the cap)
    assert starts == approx([0.0, 5.0, 5.0, 6.0])
    assert left == 0


# ------------------------------------------------------------------ a loaded event loop


def paced_on_a_loaded_loop(rpm: int, burst_s: float, turn_s: float, seconds: float) -> float:
    """Requests a second admitted at `rpm` when every turn of the event loop takes `turn_s`
    (a CPU hog beside the run: the loop runs a few times a second), 128 workers and 100 ms per
    request."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        lim = EndpointLimiter(rpm=rpm, tpm=None, max_concurrency=128, burst_s=burst_s)
        end = now() + seconds
        admitted = 0

        async def hog() -> None:  # each turn of the loop costs `turn_s`
            while now() < end:
                loop._virtual.now += turn_s
                await asyncio.sleep(0)

        async def worker() -> None:
            nonlocal admitted
            while now() < end:
                permit = await lim.acquire(0)
                admitted += 1
                await asyncio.sleep(0.1)
                lim.release(permit, None, outcome="ok")

        await asyncio.gather(hog(), *(worker() for _ in range(128)))
        return admitted / seconds

    return run_virtual(main)


def test_a_loaded_event_loop_does_not_slow_a_paced_model_to_a_crawl():
    """Issue 33: under a CPU hog every paced model crawled at 4-7 requests/s whatever its
    rate, the gate passing one request per turn of the loop. Now the holder admits the
    waiters behind it while the bucket has budget, and `PACING_SLACK_S` of bucket makes up
    for the late wake-ups."""
    rate = paced_on_a_loaded_loop(6000, PACING_SLACK_S, turn_s=0.3, seconds=60.0)
    # 5 a second before. Not all of 100: a holder that must wait on the bucket takes about
    # three turns of such a loop (0.9 s) to be woken, and the bucket holds 0.5 s.
    assert rate >= 0.75 * 100, rate
    assert rate <= 100 * (1 + PACING_SLACK_S / 60) + 1, rate  # and never above the rate


def test_many_waiters_pass_the_gate_in_one_turn_when_the_bucket_holds_them():
    async def main() -> list[float]:
        lim = EndpointLimiter(rpm=6000, tpm=60_000, max_concurrency=100, burst_s=0.5)
        starts: list[float] = []

        async def one() -> None:
            permit = await lim.acquire(10)
            starts.append(now())
            lim.release(permit, 10)

        await asyncio.gather(*(one() for _ in range(80)))
        return starts

    starts = run_virtual(main)
    assert len(starts) == 80
    assert max_in_window(starts, 1e-3) == 50  # the bucket: half a second of 6,000 a minute
    for w in (1.0, 2.0):  # ...and the pace after it
        assert max_in_window(starts, w) <= 6000 * w / 60 + 50, w

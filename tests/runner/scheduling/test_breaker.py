"""The circuit breaker's state machine, on a fake clock (plain numbers as `now`)."""

from __future__ import annotations

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ibias.runner.scheduling.breaker import Breaker, BreakerState, wait_turn

CAUSE = "connection: ClientConnectorError: Cannot connect to host 127.0.0.1:9"


def _tripped(now: float = 10.0, limit: float = 600.0) -> Breaker:
    b = Breaker(outage_limit_s=limit, trip_after=3, first_probe_s=1.0, max_probe_s=30.0)
    for _ in range(3):
        assert b.admit(now).go
    assert b.unreachable(now, now - 1, CAUSE) is False
    assert b.unreachable(now, now - 1, CAUSE) is False
    assert b.unreachable(now, now - 1, CAUSE) is True
    return b


def test_closed_lets_everything_go_and_a_short_streak_does_not_trip():
    b = Breaker(trip_after=3)
    assert b.unreachable(1.0, 0.0, CAUSE) is False
    assert b.unreachable(2.0, 1.0, CAUSE) is False
    b.reached(3.0)  # any HTTP answer ends the streak
    assert b.unreachable(4.0, 3.5, CAUSE) is False
    assert b.unreachable(5.0, 4.5, CAUSE) is False
    assert b.state is BreakerState.CLOSED
    assert all(b.admit(5.0).go for _ in range(100))


def test_trips_after_consecutive_unreachable_then_one_probe_at_a_time():
    b = _tripped(now=10.0)
    assert b.state is BreakerState.OPEN
    # Nobody goes before the first probe wait is over; then exactly one probe.
    early = b.admit(10.5)
    assert not early.go and early.wait_s == pytest.approx(0.5)
    probe = b.admit(11.0)
    assert probe.go and probe.probe
    others = [b.admit(11.0 + i) for i in range(20)]
    assert not any(a.go for a in others)
    assert all(a.wait_s is None for a in others)  # they wait for the probe's outcome


def test_probe_waits_double_up_to_the_cap():
    b = _tripped(now=0.0, limit=10_000.0)
    now, waits = 0.0, []
    for _ in range(10):
        first = b.admit(now)
        if not first.go:
            assert first.wait_s is not None
            now += first.wait_s
        a = b.admit(now)
        assert a.probe
        started = now
        now += 0.25  # the probe's own duration
        assert b.unreachable(now, started, CAUSE, probe=True) is True
        waits.append(b.admit(now).wait_s)
    assert waits == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0]


def test_a_probe_that_reaches_the_endpoint_closes_the_breaker():
    b = _tripped(now=0.0)
    assert b.admit(1.0).probe
    b.reached(1.2, probe=True)  # an HTTP 500 counts: the endpoint answered
    assert b.state is BreakerState.CLOSED
    assert b.down_for(5.0) == 0.0
    assert b.cause is None
    assert b.admit(1.3).go and not b.admit(1.3).probe
    # A new outage starts its probe waits from the beginning again.
    for t in (2.0, 2.1, 2.2):
        b.unreachable(t, t, CAUSE)
    assert b.admit(2.2).wait_s == pytest.approx(1.0)


def test_dead_once_down_for_the_outage_limit_and_not_before():
    b = Breaker(outage_limit_s=60.0, trip_after=1, first_probe_s=1.0, max_probe_s=10.0)
    assert b.unreachable(5.0, 0.0, CAUSE) is True  # sent at 0: down since 0
    now = 5.0
    while True:
        a = b.admit(now)
        if a.dead:
            break
        if not a.go:
            assert a.wait_s is not None
            now += a.wait_s
            continue
        started, now = now, now + 5.0  # each probe times out after 5 s
        b.unreachable(now, started, "timeout: TimeoutError", probe=True)
        if b.state is not BreakerState.DEAD:
            assert b.down_for(now) < 60.0
    assert b.state is BreakerState.DEAD
    assert 60.0 <= b.down_for(now) < 60.0 + 10.0 + 5.0  # at most one probe wait + one probe late
    assert b.cause == "timeout: TimeoutError"
    assert b.admit(now + 1000).dead


def test_the_outage_begins_no_earlier_than_the_last_answer():
    b = Breaker(outage_limit_s=100.0, trip_after=2)
    b.reached(50.0)
    # Sent long before the last answer, failed after it: down since the answer, not since 0.
    b.unreachable(60.0, 0.0, CAUSE)
    b.unreachable(61.0, 55.0, CAUSE)
    assert b.down_for(61.0) == pytest.approx(11.0)
    assert b.state is BreakerState.OPEN


def test_an_abandoned_probe_lets_the_next_worker_probe():
    b = _tripped(now=0.0)
    assert b.admit(1.0).probe
    assert not b.admit(1.0).go
    b.abandon()
    assert b.admit(1.0).probe


def test_stray_failures_while_open_do_not_move_the_probe_schedule():
    b = _tripped(now=0.0)
    # Requests sent before the trip fail later: part of the outage, the probe wait unchanged.
    assert b.unreachable(0.5, 0.0, CAUSE) is True
    assert b.admit(0.5).wait_s == pytest.approx(0.5)


@given(
    st.lists(
        st.tuples(st.sampled_from(["ok", "down", "probe_ok", "probe_down"]), st.floats(0, 50)),
        max_size=60,
    )
)
def test_never_more_than_one_probe_in_flight_and_dead_only_after_the_limit(events):
    b = Breaker(outage_limit_s=120.0, trip_after=2, first_probe_s=1.0, max_probe_s=8.0)
    now = 0.0
    probing = False
    for kind, dt in events:
        now += dt
        a = b.admit(now)
        if a.probe:
            assert not probing
            probing = True
        if kind.startswith("probe") and probing:
            probing = False
            if kind == "probe_ok":
                b.reached(now, probe=True)
            else:
                b.unreachable(now, now - dt / 2, CAUSE, probe=True)
        elif kind == "ok":
            b.reached(now)
            probing = False  # an answer closes the breaker: no probe is needed any more
        elif kind == "down" and a.go and not a.probe:
            b.unreachable(now, now - dt / 2, CAUSE)
        elif a.probe:  # admitted as the probe but the event is not a probe's: give it back
            b.abandon()
            probing = False
        if b.state is BreakerState.DEAD:
            assert b.down_for(now) >= 120.0
            return


async def test_wait_turn_wakes_waiters_when_the_probe_ends():
    b = Breaker(outage_limit_s=600.0, trip_after=1, first_probe_s=0.0)
    now = anyio.current_time()
    b.unreachable(now, now, CAUSE)
    probe = await wait_turn(b)
    assert probe.probe
    got: list[bool] = []

    async def waiter() -> None:
        got.append((await wait_turn(b)).go)

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        assert got == []  # all wait behind the probe
        b.reached(anyio.current_time(), probe=True)
    assert got == [True, True, True]


async def test_wait_turn_returns_dead_to_every_waiter():
    b = Breaker(outage_limit_s=1.0, trip_after=1, first_probe_s=0.0)
    b.unreachable(anyio.current_time(), anyio.current_time() - 0.5, CAUSE)
    assert (await wait_turn(b)).probe
    dead: list[bool] = []

    async def waiter() -> None:
        dead.append((await wait_turn(b)).dead)

    async with anyio.create_task_group() as tg:
        for _ in range(2):
            tg.start_soon(waiter)
        await anyio.wait_all_tasks_blocked()
        now = anyio.current_time()
        b.unreachable(now + 1.0, now, CAUSE, probe=True)
    assert dead == [True, True]


# ------------------------------------------------------------------ issue 20: dead at once


def _refused_until_dead(b: Breaker, *, start: float = 0.0, step: float = 0.01) -> float:
    """Drive `b` as the scheduler does against a port that refuses every connection (each
    attempt fails `step` seconds after it is sent); the clock time at which it is dead."""
    now = start
    while True:
        admission = b.admit(now)
        if admission.dead:
            return now
        if not admission.go:
            assert admission.wait_s is not None  # nothing else is in flight here
            now += admission.wait_s
            continue
        sent, now = now, now + step
        b.unreachable(now, sent, CAUSE, probe=admission.probe, connect=True)
        assert now < 10_000, "never died"


def test_an_endpoint_that_never_answered_is_dead_after_never_answered_s():
    b = Breaker(outage_limit_s=600.0, never_answered_s=30.0)
    dead_at = _refused_until_dead(b)
    # At the limit (the last probe is sent when the outage reaches it), not a probe later.
    assert 30.0 <= dead_at <= 30.0 + 0.02
    assert b.never_answered and b.state is BreakerState.DEAD and b.cause == CAUSE


def test_the_default_never_answered_limit_is_thirty_seconds():
    b = Breaker(outage_limit_s=600.0)
    assert b.never_answered_s == 30.0
    assert _refused_until_dead(b) <= 30.0 + 0.02


def test_an_endpoint_that_answered_and_then_died_keeps_the_whole_outage_limit():
    b = Breaker(outage_limit_s=600.0, never_answered_s=30.0)
    b.reached(0.0)  # it answered once
    dead_at = _refused_until_dead(b, start=1.0)
    assert 600.0 <= dead_at - 1.0 <= 600.0 + 0.02
    assert not b.never_answered


def test_timeouts_never_count_towards_the_never_answered_limit():
    """A slow first answer (a reasoning model, a local server loading) is no dead endpoint:
    only refused connections, DNS and TLS failures stop a model early."""
    b = Breaker(outage_limit_s=600.0, never_answered_s=30.0)
    now = 0.0
    for _ in range(3):
        b.unreachable(now + 60, now, "timeout: no answer", connect=False)
    now = 60.0
    # refused connections after timeouts: still the outage limit for this streak
    b.unreachable(now + 40, now + 39.9, CAUSE, connect=True)
    assert b.state is BreakerState.OPEN
    assert b.limit_s() == 600.0


def test_a_shorter_outage_limit_wins_and_is_said_as_the_outage_limit():
    b = Breaker(outage_limit_s=5.0, never_answered_s=30.0)
    dead_at = _refused_until_dead(b)
    assert 5.0 <= dead_at <= 5.02
    assert not b.never_answered  # the line names outage_limit_s, as before


def test_one_request_that_waited_past_the_limit_is_an_outage_past_it():
    """timeout_s > outage_limit_s, nothing answered meanwhile: dead at its failure, even
    though the breaker never tripped (one failure, fewer than trip_after)."""
    b = Breaker(outage_limit_s=30.0, trip_after=3)
    assert b.unreachable(121.0, 1.0, "timeout: no answer") is True
    assert b.state is BreakerState.DEAD


async def test_watch_only_when_the_outage_limit_comes_before_the_timeout():
    b = Breaker(outage_limit_s=30.0)
    assert b.watch(sent=100.0, timeout_s=30.0) is None  # the usual case: nothing to do
    assert b.watch(sent=100.0, timeout_s=20.0) is None
    scope = b.watch(sent=100.0, timeout_s=120.0)
    assert scope is not None
    assert scope.deadline == pytest.approx(anyio.current_time() + 30.0, abs=0.5)
    # Within a failing streak the outage began earlier: less is left.
    b.unreachable(110.0, 90.0, "timeout: x")
    later = b.watch(sent=110.0, timeout_s=120.0)
    assert later is not None
    assert later.deadline == pytest.approx(anyio.current_time() + 10.0, abs=0.5)
    # Any answer lifts every watched deadline: the endpoint is up.
    b.reached(111.0)
    assert scope.deadline == later.deadline == float("inf")
    b.unwatch(scope)
    b.unwatch(later)


async def test_watch_gives_the_last_probe_a_moment_to_fail_on_its_own():
    b = Breaker(outage_limit_s=30.0)
    b.unreachable(10.0, 0.0, "timeout: x")
    scope = b.watch(sent=40.0, timeout_s=120.0)  # sent when the outage is past its limit
    assert scope is not None
    assert scope.deadline >= anyio.current_time() + 0.9

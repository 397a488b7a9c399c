"""`Breaker(first_alone=True)`: until the endpoint first answers, one request at a time goes,
so what every request of a model shares and the model refuses costs one attempt, not one per
worker (issue 33). On a fake clock (plain numbers as `now`)."""

from __future__ import annotations

from ibias.runner.scheduling.breaker import FIRST_ALONE_S, Breaker, BreakerState

CAUSE = "connection: refused"


def test_the_first_request_goes_alone_until_an_answer():
    b = Breaker(first_alone=True)
    assert not b.closed
    first = b.admit(0.0)
    assert first.go and first.probe
    assert not any(b.admit(0.0).go for _ in range(15))  # the other workers wait for it
    b.reached(0.5, probe=True)  # any HTTP answer, a 400 too
    assert b.closed and b.state is BreakerState.CLOSED
    assert all(b.admit(0.6).go and not b.admit(0.6).probe for _ in range(15))


def test_a_failed_first_request_lets_the_next_go_alone():
    b = Breaker(first_alone=True, trip_after=3)
    assert b.admit(0.0).probe
    assert b.unreachable(0.1, 0.0, CAUSE, probe=True) is False  # counted against the trial
    second = b.admit(0.2)
    assert second.go and second.probe  # no wait: this is no outage yet
    assert not b.admit(0.2).go
    b.abandon()  # a stop cancelled it: the next one goes
    assert b.admit(0.3).probe


def test_without_first_alone_everything_goes_at_once():
    b = Breaker()
    assert b.closed
    assert all(b.admit(0.0).go and not b.admit(0.0).probe for _ in range(16))


def test_a_slow_first_answer_holds_the_others_for_a_few_seconds_only():
    b = Breaker(first_alone=True)
    assert b.admit(10.0).probe
    held = b.admit(10.0 + FIRST_ALONE_S / 2)
    assert not held.go and held.wait_s == FIRST_ALONE_S / 2
    late = b.admit(10.0 + FIRST_ALONE_S)
    assert late.go and not late.probe and b.closed
    b.reached(70.0, probe=True)  # the slow first answer, long after: nothing changes
    assert b.closed and all(b.admit(70.0).go for _ in range(5))

"""A timeout our own starved CPU caused is not the provider's (issue 33,
runner/scheduling/loop_lag.py).

The lag is measured on a fake clock (`LagMeter`) and on a virtual-time loop whose every turn
costs what a CPU hog makes it cost; the classification is driven through the scheduler on the
same virtual loop, with a loop-lag meter that reports what the test says (so backoffs take no
real time and nothing depends on the machine's load).
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ibias.runner.config import load_config
from ibias.runner.progress import Progress, render_table
from ibias.runner.providers.base import AttemptError, Provider, Reply
from ibias.runner.providers.retries import Backoff, Classification, Verdict
from ibias.runner.scheduling.breaker import Breaker
from ibias.runner.scheduling.limits import EndpointLimiter
from ibias.runner.scheduling.loop_lag import (
    LOCAL_STALL,
    MIN_STALL_S,
    STALL_SHARE,
    LagMark,
    LagMeter,
    LoopLag,
    is_local_stall,
    starved_note,
)
from ibias.runner.scheduling.scheduler import ModelRuntime, ModelStats, Scheduler, _Worker
from tests.helpers import model_block, write_config
from tests.runner.scheduling.test_limits import VirtualTimeLoop, run_virtual

# ------------------------------------------------------------------ measuring (fake clock)


def test_the_meter_adds_how_late_each_wake_up_was():
    m = LagMeter()
    m.sleeping(0.0, 0.5)
    assert m.woke(0.5) == 0.0  # on time
    m.sleeping(0.5, 0.5)
    assert m.woke(3.0) == 2.0  # woke at 3.0 instead of 1.0
    assert m.overdue(3.0) == 2.0 and m.worst_s == 2.0


def test_a_stall_in_progress_counts_before_the_ticker_wakes():
    """A request that fails at the end of a freeze sees the freeze, though the ticker has not
    run since: the total is continuous across the wake-up."""
    m = LagMeter()
    m.sleeping(10.0, 0.5)
    assert m.overdue(10.4) == 0.0
    assert m.overdue(30.5) == 20.0  # 20 s overdue and counting
    m.woke(30.5)
    assert m.overdue(30.5) == 20.0
    assert m.overdue(99.0) == 20.0  # not ticking: nothing more is overdue


@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0.01, max_value=5.0), st.floats(min_value=0.0, max_value=60.0)
        ),
        max_size=30,
    )
)
def test_the_total_never_shrinks_and_is_the_sum_of_the_lateness(ticks):
    m = LagMeter()
    now, seen, total = 0.0, 0.0, 0.0
    for interval, late in ticks:
        m.sleeping(now, interval)
        for t in (now + interval / 2, now + interval + late / 2):  # read while it sleeps
            assert m.overdue(t) >= seen - 1e-9
            seen = m.overdue(t)
        now += interval + late
        total += late
        assert m.woke(now) == pytest.approx(late, abs=1e-9)
        assert m.overdue(now) == pytest.approx(total, abs=1e-6)
        seen = m.overdue(now)


def _measured(turn_s: float, seconds: float) -> tuple[float, float]:
    """(overdue seconds, worst wake-up) of the ticker over `seconds` of a virtual loop where
    every turn costs `turn_s` (0: a quiet loop)."""

    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        lag = LoopLag()
        ticker = asyncio.ensure_future(lag.run())
        start = loop.time()
        mark = lag.mark()
        while loop.time() - start < seconds:
            loop._virtual.now += turn_s  # the hog: this turn took turn_s
            await asyncio.sleep(0 if turn_s else 0.05)
        took, overdue = lag.since(mark)
        assert took >= seconds
        ticker.cancel()
        return overdue, lag.worst_s

    return run_virtual(main)


def test_a_quiet_loop_is_never_overdue():
    overdue, worst = _measured(0.0, 60.0)
    assert overdue < 1e-3 and worst < 1e-3


def test_a_starved_loop_is_overdue_for_most_of_the_time():
    """Turns of 1.5 s (the heavy run's wake-ups, 1-2 s late): overdue for most of a 30 s
    request, so a timeout then is ours; turns of 0.1 s: well under the share, so it is not."""
    overdue, worst = _measured(1.5, 30.0)
    assert overdue >= STALL_SHARE * 30.0 and worst >= 1.0
    assert is_local_stall(overdue, 30.0, 30.0)
    overdue, _ = _measured(0.1, 30.0)
    assert overdue < STALL_SHARE * 30.0
    assert not is_local_stall(overdue, 30.0, 30.0)


@pytest.mark.parametrize(
    ("overdue_s", "took_s", "timeout_s", "ours"),
    [
        (12.0, 30.2, 30.0, True),  # two fifths of the timeout
        (11.9, 30.2, 30.0, False),
        (0.0, 30.0, 30.0, False),
        (6.0, 15.0, 30.0, True),  # a reset after 15 s: two fifths of the time it had
        (5.9, 15.0, 30.0, False),
        (0.9, 0.5, 0.5, False),  # sub-second timeouts: not below the floor
        (MIN_STALL_S, 1.2, 0.5, True),
        (300.0, 600.0, 600.0, True),
    ],
)
def test_the_threshold_is_two_fifths_of_the_time_the_request_had_and_at_least_a_second(
    overdue_s, took_s, timeout_s, ours
):
    assert is_local_stall(overdue_s, took_s, timeout_s) is ours


# ------------------------------------------------------------------ the breaker's clock


def test_an_excused_stall_is_not_part_of_an_outage_clock():
    b = Breaker(outage_limit_s=600.0)
    b.unreachable(10.0, 10.0, "timeout: x")  # a real failure: the outage began at 10
    assert b.down_for(100.0) == 90.0
    b.excuse(100.0, 60.0)  # ...but our loop was late for 60 of those seconds
    assert b.down_for(100.0) == 30.0
    b.excuse(100.0, 1_000.0)  # never later than now
    assert b.down_for(100.0) == 0.0
    fresh = Breaker()
    fresh.excuse(5.0, 3.0)  # no streak: nothing to move
    assert fresh.down_for(5.0) == 0.0 and fresh.closed


# ------------------------------------------------------------------ the scheduler


class _Lag(LoopLag):
    """A loop-lag meter that says the loop was `overdue_s` late during every request."""

    def __init__(self, overdue_s: float) -> None:
        super().__init__()
        self.overdue_s = overdue_s

    def since(self, mark: LagMark) -> tuple[float, float]:
        return super().since(mark)[0], self.overdue_s


class _TimesOut(Provider):
    """Times out `failures` times (after 30 s of the virtual loop: the model's timeout_s), then
    answers."""

    def __init__(self, failures: int, kind: str = "timeout") -> None:
        self.failures = failures
        self.kind = kind
        self.calls = 0
        #: The model's breaker (set by `_run`) and how long it thought the endpoint down at
        #: each call: 0 while no failure was held against the endpoint.
        self.breaker: Breaker | None = None
        self.down_at_call: list[float] = []

    async def complete(self, messages, sampling):
        self.calls += 1
        if self.breaker is not None:
            self.down_at_call.append(self.breaker.down_for(float("inf")))
        if self.calls <= self.failures:
            await asyncio.sleep(30.0)
            raise AttemptError(Classification(Verdict.RETRY, self.kind, f"{self.kind}: boom"))
        return Reply("ok", "stop", None, 10, 5, None, None, {})


class _Writer:
    def __init__(self) -> None:
        self.attempts: list[Any] = []
        self.responses: list[Any] = []

    def add_attempt(self, row: Any) -> None:
        self.attempts.append(row)

    def add_response(self, row: Any, landed: Any = None) -> None:
        self.responses.append(row)


@dataclass(frozen=True)
class _Trial:
    trial_key: str = "k1"
    experiment: str = "prompts"
    model_id: str = "m"
    item: Mapping[str, Any] = field(default_factory=lambda: {"id": "p0"})
    messages: Sequence[Mapping[str, str]] = ({"role": "user", "content": "hello"},)
    params: Mapping[str, Any] = field(
        default_factory=lambda: {"temperature": 0.0, "max_tokens": 100}
    )


@dataclass
class _Ran:
    writer: _Writer
    rt: ModelRuntime
    lag: _Lag
    scheduler: Scheduler


def _run(tmp_path: Path, provider: Provider, overdue_s: float, max_attempts: int) -> _Ran:
    """One trial through the scheduler on the virtual loop, its model's timeout 30 s."""
    cfg = load_config(write_config(tmp_path, [model_block("m", provider="simulator")], n_prompts=1))
    model = replace(cfg.models[0], timeout_s=30.0, max_tokens=100)
    rt = ModelRuntime(
        config=model,
        provider=provider,
        limiter=EndpointLimiter(rpm=None, tpm=None, max_concurrency=4, adaptive=True),
        stats=ModelStats(model_id="m"),
    )
    if isinstance(provider, _TimesOut):
        provider.breaker = rt.breaker
    writer = _Writer()
    lag = _Lag(overdue_s)
    s = Scheduler(
        run_id="r",
        runtimes=[rt],
        writer=writer,  # type: ignore[arg-type]
        backoff=Backoff(max_attempts=max_attempts),
        loop_lag=lag,
    )

    async def main() -> None:
        await s._process(rt, _Trial(), _Worker())

    run_virtual(main)
    return _Ran(writer, rt, lag, s)


def _kinds(writer: _Writer) -> list[tuple[str | None, str]]:
    return [(a.error_kind, a.outcome) for a in writer.attempts]


@pytest.mark.parametrize("kind", ["timeout", "connection"])
def test_a_timeout_while_our_loop_was_starved_is_retried_and_counted_against_nothing(
    tmp_path, kind
):
    """Two timeouts (or resets) with the loop 20 s late in each 30 s request: each is a
    `local_stall`, the trial is answered though 2 attempts is all it has (counted, the second
    timeout would have ended it), the breaker saw no streak (no outage clock began),
    concurrency was not cut, and the model has no errors."""
    ran = _run(tmp_path, _TimesOut(2, kind), overdue_s=20.0, max_attempts=2)
    assert _kinds(ran.writer) == [(LOCAL_STALL, "retry")] * 2 + [(None, "ok")]
    assert len(ran.writer.responses) == 1
    stall = ran.writer.attempts[0]
    assert stall.http_status is None
    assert f"{kind} while this machine's CPU was starved" in stall.error_message
    assert "20.0 s late" in stall.error_message and f"{kind}: boom" in stall.error_message
    assert "in the request's 30.0 s (timeout_s = 30)" in stall.error_message
    rt = ran.rt
    assert rt.breaker.closed and rt.breaker.answered
    assert rt.provider.down_at_call == [0.0, 0.0, 0.0]  # type: ignore[attr-defined]
    assert rt.limiter.concurrency == 4
    assert (rt.stats.errors, rt.stats.failing, rt.stats.failed) == (0, 0, 0)
    assert rt.stats.retries == 2 and ran.lag.stalls == 2


def test_the_same_timeouts_with_no_lag_count(tmp_path):
    """The pair of the test above on a loop that kept up: the second timeout ends the
    trial, and the breaker's outage clock is running."""
    ran = _run(tmp_path, _TimesOut(2), overdue_s=0.0, max_attempts=2)
    assert _kinds(ran.writer) == [("timeout", "retry"), ("timeout", "gave_up")]
    assert ran.writer.responses == []
    assert ran.rt.breaker.down_for(float("inf")) > 0
    assert ran.rt.provider.down_at_call[1] > 0  # type: ignore[attr-defined]


def test_a_timeout_with_no_lag_still_counts(tmp_path):
    """The same timeouts on a loop that kept up: they are the provider's, as ever: the trial
    uses up its 2 attempts and fails, and the breaker counts the streak."""
    ran = _run(tmp_path, _TimesOut(3), overdue_s=0.0, max_attempts=2)
    assert _kinds(ran.writer) == [("timeout", "retry"), ("timeout", "gave_up")]
    assert ran.writer.responses == []
    assert ran.rt.breaker.down_for(float("inf")) > 0  # a streak (an outage clock) began
    assert ran.rt.stats.errors == 2 and ran.rt.stats.failed == 1
    assert ran.lag.stalls == 0


def test_a_lag_under_the_threshold_counts(tmp_path):
    ran = _run(tmp_path, _TimesOut(3), overdue_s=STALL_SHARE * 30.0 - 0.5, max_attempts=2)
    assert [k for k, _ in _kinds(ran.writer)] == ["timeout", "timeout"]


def test_other_failures_are_never_excused(tmp_path):
    """Only a failure to hear the endpoint can be ours: an answered error is the provider's."""
    ran = _run(tmp_path, _TimesOut(3, "http_500"), overdue_s=29.0, max_attempts=2)
    assert [k for k, _ in _kinds(ran.writer)] == ["http_500", "http_500"]


def test_a_trial_is_excused_at_most_max_attempts_times(tmp_path):
    """A provider that truly hangs on a machine always starved still ends its trials."""
    ran = _run(tmp_path, _TimesOut(100), overdue_s=29.0, max_attempts=2)
    assert _kinds(ran.writer) == [
        (LOCAL_STALL, "retry"),
        (LOCAL_STALL, "retry"),
        ("timeout", "retry"),
        ("timeout", "gave_up"),
    ]


# ------------------------------------------------------------------ said to the user


def test_the_run_says_requests_were_retried_because_the_machine_was_starved():
    lag = LoopLag()
    stats = [ModelStats(model_id="m", total=10)]
    out = io.StringIO()
    progress = Progress(stats, quiet=False, stream=out, plain_interval=30.0, loop_lag=lag)
    progress._print_plain()
    assert "starved" not in out.getvalue()  # nothing excused: nothing said
    lag.stalls, lag.worst_s = 12, 1.75
    progress._print_plain()
    progress._print_plain()  # no new ones since: not said again
    said = [line for line in out.getvalue().splitlines() if "starved" in line]
    assert said == [
        "12 requests were retried because this machine's CPU was starved (the run's event "
        "loop woke up to 1.8 s late), not the providers; they used up no retries"
    ]
    lag.stalls = 13
    progress._print_plain()
    assert sum("starved" in line for line in out.getvalue().splitlines()) == 2
    note = starved_note(lag.stalls, lag.worst_s)
    table = render_table(stats, 200, note)
    assert table.caption is not None and "13 requests were retried" in str(table.caption)
    assert starved_note(0, 5.0) is None
    assert starved_note(1, 2.0) is not None and "1 request was retried" in str(starved_note(1, 2.0))

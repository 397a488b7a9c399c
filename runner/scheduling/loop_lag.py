"""How late the run's own event loop is, so that a timeout our starved CPU caused is not read as
the provider failing (issue 33).

Why: every request, the replies' parsing, the writer's hand-offs and (for `simulator` models)
the simulated provider itself run on one event loop. When the machine is starved (other
processes hogging its cores, or the run's own work), the loop turns late. Beside six CPU hogs on
two cores its wake-ups came 0.4-2 s late; four of the demo grid's seven models had their
requests time out (30 s) or reset by hundreds, their breakers opened 8-18 times each in 150 s as
if their providers were down, and every such failure used up one of its trial's attempts. None
of it said anything about the providers.

**Measure.** `LoopLag.run` is a ticker: it sleeps `TICK_S` and adds how late it woke to a
running total (`overdue`: seconds the loop's timers were overdue, on the loop's clock). The
total only grows, so a request needs one mark: `mark()` when it is sent; `since(mark)` when it
fails says how long it was in flight and how late the loop was meanwhile. The wake-up in
progress counts too (the total includes how overdue the ticker is right now), so a stall that
ends with the request's failure is seen before the ticker runs again. Cost: two wake-ups a
second for the whole run; per request, reading the loop's clock twice.

**Classify.** A timeout or dropped connection is our own (`is_local_stall`) when, while it was
in flight, the loop was overdue for at least `STALL_SHARE` (two fifths) of the time the request
had (its `timeout_s`, or the time it took when it failed sooner: a reset after 15 s of a 30 s
timeout) and for at least `MIN_STALL_S`: its not being answered in time then says nothing
about the endpoint. With a ticker of `TICK_S`, a loop whose every wake-up is `d` seconds late
is overdue for `d / (TICK_S + d)` of the time, so two fifths means wake-ups a third of a second
late or worse all through the request, or one freeze of two fifths of its time (a process
stopped and continued, a swap storm). Why two fifths, measured on the demo grid (issue 33):
beside six CPU hogs the timeouts of the models that crawled had the loop overdue for 0.42-0.76
of their 30 s (the first wave, before the lag grew, 0.42-0.44: at one half, those still opened
every crawling model's breaker); a run whose loop kept up (no hogs, the run's own work making
wake-ups 0.1-0.3 s late) had its few timeouts at 0.25. A healthy loop is overdue for almost
none of a request. The floor keeps sub-second timeouts (tests, a local server) from being
excused by ordinary scheduling jitter.

The scheduler records such a failure as `local_stall` (its own `attempts.error_kind`, with the
original failure in the message), retries it after a backoff of its own, and counts it in
nothing of the provider's: not in the breaker's streak or outage clock, not as an overload
signal, not as one of the trial's attempts (runner/scheduling/scheduler.py). A trial gets at most
`max_attempts` such excused failures; past them a timeout counts as the timeout it is, so a
provider that really hangs, on a machine that is always starved, still ends its trials and
trips its breaker, later.

**Why the timeout is not extended by the lag instead.** It would spare the provider a second
request. But the timeout is the provider adapter's own (aiohttp's `ClientTimeout`, or whatever a
plugin provider uses), which the scheduler does not own: extending it would mean the scheduler
keeping a timer per request and every adapter giving up its own. Classifying when the failure
comes costs nothing per request and has the same effect on what is counted.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import anyio

__all__ = [
    "LOCAL_STALL",
    "MIN_STALL_S",
    "NO_MARK",
    "STALL_SHARE",
    "TICK_S",
    "LagMark",
    "LagMeter",
    "LoopLag",
    "is_local_stall",
    "starved_note",
]

#: `attempts.error_kind` of a timeout or dropped connection while our own loop was starved.
LOCAL_STALL = "local_stall"
#: Seconds between the ticker's wake-ups.
TICK_S = 0.5
#: Share of a request's `timeout_s` the loop must have been overdue while it was in flight for
#: its timeout or dropped connection to be our own (see the module docstring).
STALL_SHARE = 0.4
#: ...and at least this many seconds.
MIN_STALL_S = 1.0


def is_local_stall(overdue_s: float, took_s: float, timeout_s: float) -> bool:
    """Whether a request that timed out or lost its connection after `took_s` seconds failed
    because of our own loop, overdue for `overdue_s` of them: at least `STALL_SHARE` of the
    time it had (`timeout_s`, or `took_s` when it failed sooner), and `MIN_STALL_S`."""
    return overdue_s >= max(STALL_SHARE * min(took_s, timeout_s), MIN_STALL_S)


class LagMeter:
    """The running total of the loop's lateness, clocked by its caller (any monotonic seconds),
    so it is tested with a fake clock. `sleeping(now, interval)` before each sleep, `woke(now)`
    after it."""

    def __init__(self) -> None:
        self._total = 0.0
        self._expected: float | None = None
        #: The latest single wake-up seen (seconds late), for the line that says so.
        self.worst_s = 0.0

    def sleeping(self, now: float, interval_s: float) -> None:
        self._expected = now + interval_s

    def woke(self, now: float) -> float:
        """The sleep ended at `now`: add how late it was; returns that lateness."""
        if self._expected is None:
            return 0.0
        late = max(0.0, now - self._expected)
        self._expected = None
        self._total += late
        self.worst_s = max(self.worst_s, late)
        return late

    def overdue(self, now: float) -> float:
        """Seconds the loop has been overdue in total, the wake-up in progress included."""
        if self._expected is None:
            return self._total
        return self._total + max(0.0, now - self._expected)


class LagMark(NamedTuple):
    """When a request was sent (loop time) and the loop's overdue total then."""

    at: float
    overdue: float


#: The mark of a request not yet sent.
NO_MARK = LagMark(0.0, 0.0)


class LoopLag(LagMeter):
    """The run's loop-lag ticker (`run`, a task for the length of the run) and what requests
    ask of it (`mark`, `since`), plus how many failures it excused (`excused`, `stalls`)."""

    def __init__(self, interval_s: float = TICK_S) -> None:
        super().__init__()
        if not (interval_s > 0 and math.isfinite(interval_s)):
            raise ValueError("interval_s must be a finite number > 0")
        self.interval_s = interval_s
        #: Failures recorded as `local_stall` (retried, counted against nothing).
        self.stalls = 0

    def mark(self) -> LagMark:
        """Now and the total so far (taken in the loop when a request is sent)."""
        now = anyio.current_time()
        return LagMark(now, self.overdue(now))

    def since(self, mark: LagMark) -> tuple[float, float]:
        """(seconds since `mark`, seconds of them the loop was overdue)."""
        now = anyio.current_time()
        return max(0.0, now - mark.at), max(0.0, self.overdue(now) - mark.overdue)

    def excused(self) -> None:
        self.stalls += 1

    async def run(self) -> None:
        """Tick until cancelled (the run's end)."""
        try:
            while True:
                self.sleeping(anyio.current_time(), self.interval_s)
                await anyio.sleep(self.interval_s)
                self.woke(anyio.current_time())
        finally:
            self._expected = None  # not running: nothing is overdue any more


def starved_note(stalls: int, worst_s: float) -> str | None:
    """The line that says requests were retried because this machine was starved (progress,
    the run's summary); None when none were. Plain text."""
    if not stalls:
        return None
    what = "request was" if stalls == 1 else "requests were"
    return (
        f"{stalls:,} {what} retried because this machine's CPU was starved (the run's event "
        f"loop woke up to {worst_s:,.1f} s late), not the providers; they used up no retries"
    )

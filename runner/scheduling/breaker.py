"""A per-model circuit breaker: an endpoint that stops answering is probed, not hammered, and a
model whose endpoint stays down for `outage_limit_s` is stopped so the other models go on.

Why: without it a dead endpoint (nothing listening, or a server that never answers) makes every
trial retry `max_attempts` times, each attempt costing up to `timeout_s`, in every worker slot:
hours of a night's sweep for nothing, and every trial of the outage marked failed. With it:

* **closed** (normal): requests go as the limiter allows. `trip_after` consecutive
  *unreachable* outcomes (a connection failure or a timeout; any HTTP answer, even a 500,
  means the endpoint is there) open the breaker.
* **open**: one request at a time probes the endpoint, the first after `first_probe_s`, each
  next one after twice the previous wait (at most `max_probe_s`). The other workers wait.
  Failures while open are part of the outage, not of the trial: they do not use up the trial's
  attempts, so a short outage costs no trial. A probe (or any request) that reaches the
  endpoint closes the breaker.
* **dead**: a failure while open, `outage_limit_s` or more after the outage began, ends the
  model for this run (the scheduler stops it with one line naming the cause; the trials stay
  unanswered, so the next run resumes them).

The outage begins when the first request of the failing streak was sent (not before the last
success): an endpoint that has not answered anything since then has been down that long.

A failure while the run's own event loop was starved (`local_stall`, runner/scheduling/loop_lag.py)
is not the endpoint's: it is no part of a streak, and an outage's clock does not count the time the
loop was late (`excuse`). Beside six CPU hogs, four models' breakers opened on such failures.

Two limits make sure a dead endpoint is said at once, not after a night:

* **the outage limit holds whatever `timeout_s` is**: a request in flight is cancelled when the
  outage limit is reached (`watch`: a cancel scope whose deadline is the outage's start plus
  `outage_limit_s`, lifted as soon as the endpoint answers anything). Without it a request
  with `timeout_s = 120` against an outage limit of 30 s was waited out, then its probe too:
  the model stopped at 243 s.
* **an endpoint that never answered stops in `NEVER_ANSWERED_S`**: when nothing has answered
  since the run started and every failure of the streak was a failed connection (refused, DNS,
  TLS: no HTTP response at all), the limit is `min(outage_limit_s, NEVER_ANSWERED_S)`: a wrong
  `base_url` or a server that is not running is said in 30 s, not 10 minutes. An endpoint that
  had answered keeps the whole `outage_limit_s` (a short outage must not end a model's night),
  and a slow first answer is never cut by this limit (timeouts do not count towards it, and no
  request in flight is cancelled for it).

The state machine is pure and clocked by its caller (`now` in seconds, any monotonic clock), so
it is tested with a fake clock; the scheduler drives it with `time.monotonic` (the clock of
asyncio's loop) and waits for a turn with `wait_turn`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import anyio

from ibias.runner.config import DEFAULT_OUTAGE_LIMIT_S

__all__ = [
    "FIRST_ALONE_S",
    "NEVER_ANSWERED_S",
    "UNREACHABLE_KINDS",
    "Admission",
    "Breaker",
    "BreakerState",
    "wait_turn",
]

#: `Classification.kind`s that mean the endpoint did not answer at all
#: (runner/providers/retries.py).
UNREACHABLE_KINDS = frozenset({"connection", "timeout"})
#: Seconds an endpoint that has not answered once since the run started may keep refusing
#: connections before its model stops (read when a breaker is made, so a test may lower it).
NEVER_ANSWERED_S = 30.0
#: Seconds the other requests of a model wait for its first one (`Breaker(first_alone=True)`):
#: a refusal comes within a second; a slow first answer does not hold the model back longer.
FIRST_ALONE_S = 3.0
#: Seconds a request sent when the outage is at its limit may take before it is cancelled.
LAST_PROBE_S = 1.0
#: Clock slack when comparing an outage with its limit: a deadline timer may fire a hair
#: before the monotonic clock reads the deadline (uvloop's timers count milliseconds).
_SLACK_S = 0.005


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    DEAD = "dead"


@dataclass(frozen=True)
class Admission:
    """What a worker may do now: `go` (as the `probe` if the breaker is open), stop because
    the endpoint is `dead`, or wait `wait_s` seconds (None: until the probe in flight ends)."""

    go: bool
    probe: bool = False
    dead: bool = False
    wait_s: float | None = None


_GO = Admission(go=True)
_PROBE = Admission(go=True, probe=True)
_DEAD = Admission(go=False, dead=True)
_WAIT_FOR_PROBE = Admission(go=False)


class Breaker:
    """One endpoint's breaker. Not thread-safe: driven from the event loop only."""

    def __init__(
        self,
        *,
        outage_limit_s: float = DEFAULT_OUTAGE_LIMIT_S,
        trip_after: int = 3,
        first_probe_s: float = 1.0,
        max_probe_s: float = 30.0,
        never_answered_s: float | None = None,
        first_alone: bool = False,
    ) -> None:
        if not outage_limit_s > 0:
            raise ValueError("outage_limit_s must be > 0")
        if trip_after < 1:
            raise ValueError("trip_after must be >= 1")
        if not 0 <= first_probe_s <= max_probe_s:
            raise ValueError("need 0 <= first_probe_s <= max_probe_s")
        self.outage_limit_s = outage_limit_s
        self.never_answered_s = NEVER_ANSWERED_S if never_answered_s is None else never_answered_s
        if not self.never_answered_s > 0:
            raise ValueError("never_answered_s must be > 0")
        #: True when the breaker died by `never_answered_s` (shorter than the outage limit):
        #: the endpoint never answered in this run (the stop line says so).
        self.never_answered = False
        self.trip_after = trip_after
        self.first_probe_s = first_probe_s
        self.max_probe_s = max_probe_s
        self.state = BreakerState.CLOSED
        #: The last unreachable outcome's message (the cause named when the model stops).
        self.cause: str | None = None
        self._streak = 0
        self._streak_began: float | None = None
        self._last_ok: float = -math.inf
        #: Every failure of the current streak was a failed connection (no HTTP response).
        self._connect_only = True
        #: Cancel scopes of requests in flight that end at the outage limit (see `watch`).
        self._watched: set[anyio.CancelScope] = set()
        self._probe_in_flight = False
        self._next_probe_at = 0.0
        self._interval = first_probe_s
        #: Bumped on every change that may let a waiting worker go (see `wait_turn`).
        self._changed: anyio.Event | None = None
        #: `first_alone`: until the endpoint first answers, one request at a time goes (as a
        #: probe, with no wait between), for at most `FIRST_ALONE_S` each: what every request
        #: of a model shares and the model refuses (a parameter, the key: a 400 comes at once)
        #: then costs one attempt, not one per worker, and a slow first answer (a reasoning
        #: model, a hanging server) holds the others for seconds only. Any answer, even an
        #: error status, ends it; so does its wait; after a failure the next one goes alone.
        self._unproven = first_alone
        self._alone_until = 0.0

    # ------------------------------------------------------------------ queries

    @property
    def closed(self) -> bool:
        """Requests go as the limiter allows (not while a first request goes alone)."""
        return self.state is BreakerState.CLOSED and not self._unproven

    def down_for(self, now: float) -> float:
        """Seconds the endpoint has been unreachable (0 when it is not known to be down)."""
        if self._streak_began is None:
            return 0.0
        return max(0.0, now - self._streak_began)

    @property
    def answered(self) -> bool:
        """The endpoint has answered (any HTTP response) since this breaker was made."""
        return self._last_ok > -math.inf

    def limit_s(self) -> float:
        """How long the current outage may last: `outage_limit_s`, or `never_answered_s` when
        shorter and the endpoint has only ever refused connections in this run."""
        if not self.answered and self._connect_only:
            return min(self.outage_limit_s, self.never_answered_s)
        return self.outage_limit_s

    # ------------------------------------------------------------------ requests in flight

    def watch(self, sent: float, timeout_s: float) -> anyio.CancelScope | None:
        """A cancel scope for a request sent at `sent` (this breaker's clock) that ends it when
        the outage limit is reached, or None when the request's own timeout comes first (the
        usual case: nothing to do on the hot path).

        The outage, if this request turns out to be part of one, began with the current
        failing streak, or else when this request was sent. Its deadline is given on anyio's
        clock, the scope's, measured from `sent` (the two clocks need not share an origin).
        Any answer from the endpoint lifts every watched deadline (`reached`): a slow request
        while others are answered is no outage, and keeps its own timeout. The caller enters
        the scope around the request and calls `unwatch` after."""
        began = self._streak_began if self._streak_began is not None else sent
        # A request sent at (or after) the limit, the last probe, still gets a moment to fail
        # on its own (a refused connection is then the cause named, not the cancel).
        left = max(began + self.outage_limit_s - sent, LAST_PROBE_S)
        if left >= timeout_s:
            return None
        scope = anyio.CancelScope(deadline=anyio.current_time() + left)
        self._watched.add(scope)
        return scope

    def unwatch(self, scope: anyio.CancelScope) -> None:
        self._watched.discard(scope)

    # ------------------------------------------------------------------ transitions

    def admit(self, now: float) -> Admission:
        """May a request start now? Open: the first caller once the probe wait is over becomes
        the probe, and must report its outcome (or `abandon` it)."""
        if self.state is BreakerState.CLOSED:
            return self._first_alone(now) if self._unproven else _GO
        if self.state is BreakerState.DEAD:
            return _DEAD
        if self._probe_in_flight:
            return _WAIT_FOR_PROBE
        if now >= self._next_probe_at:
            self._probe_in_flight = True
            return _PROBE
        return Admission(go=False, wait_s=self._next_probe_at - now)

    def _first_alone(self, now: float) -> Admission:
        """Closed, and nothing answered yet (`first_alone`): one request goes, the others wait
        for its outcome or `FIRST_ALONE_S`, whichever comes first."""
        if not self._probe_in_flight:
            self._probe_in_flight = True
            self._alone_until = now + FIRST_ALONE_S
            return _PROBE
        if now < self._alone_until:
            return Admission(go=False, wait_s=self._alone_until - now)
        self._unproven = False  # a slow first answer: the others go too
        self._probe_in_flight = False
        return _GO

    def reached(self, now: float, *, probe: bool = False) -> None:
        """A request got an HTTP answer (a success or any error status): the endpoint is up.

        Called for every reply, so the common case (closed, no streak) is two comparisons."""
        if now > self._last_ok:
            self._last_ok = now
        if self._unproven:
            self._unproven = False
            self._probe_in_flight = False
            self._notify()
        if (
            not self._streak
            and not probe
            and self.state is BreakerState.CLOSED
            and not self._watched
        ):
            return
        for scope in self._watched:  # it is up: requests in flight keep their own timeout
            scope.deadline = math.inf
        self._watched.clear()
        self._streak = 0
        self._streak_began = None
        self._connect_only = True
        if probe:
            self._probe_in_flight = False
        if self.state is BreakerState.OPEN:
            self.state = BreakerState.CLOSED
            self._probe_in_flight = False
            self._interval = self.first_probe_s
            self.cause = None
            self._notify()

    def unreachable(
        self,
        now: float,
        started: float,
        cause: str,
        *,
        probe: bool = False,
        connect: bool = False,
    ) -> bool:
        """A request sent at `started` failed without an answer (connection, timeout) at `now`;
        `connect`: no connection was made at all (refused, DNS, TLS), see `limit_s`.

        Returns True when the failure belongs to an outage (the breaker is open or dead after
        it): the caller does not count it against the trial's attempts and waits for a turn
        instead of backing off. The outage's limit is checked whatever the state: a single
        request that waited out a `timeout_s` longer than the limit, with nothing answered
        meanwhile, is already an outage past its limit."""
        if self.state is BreakerState.DEAD:
            return True
        self.cause = cause
        if not self._streak:
            self._connect_only = True
        self._connect_only = self._connect_only and connect
        began = max(started, self._last_ok)
        if self._streak_began is None or began < self._streak_began:
            self._streak_began = min(began, now)
        self._streak += 1
        if probe:
            self._probe_in_flight = False
        limit = self.limit_s()
        if self.down_for(now) + _SLACK_S >= limit:
            self.state = BreakerState.DEAD
            self.never_answered = limit < self.outage_limit_s
            self._notify()
            return True
        if self.state is BreakerState.CLOSED:
            if self._streak < self.trip_after:
                if probe and self._unproven:
                    self._notify()  # the next request goes alone in its place
                return False
            self.state = BreakerState.OPEN
            self._interval = self.first_probe_s
            self._next_probe_at = now + self._interval
        elif probe:
            self._interval = min(self.max_probe_s, max(self._interval * 2, self.first_probe_s))
            self._next_probe_at = now + self._interval
        # No probe waits past the moment the outage reaches its limit: the one sent then
        # decides, so the model stops at its limit rather than up to `max_probe_s` later.
        assert self._streak_began is not None
        self._next_probe_at = min(self._next_probe_at, self._streak_began + limit)
        self._notify()
        return True

    def excuse(self, now: float, overdue_s: float) -> None:
        """A request failed while the run's own event loop was starved
        (runner/scheduling/loop_lag.py): it says nothing of the endpoint, so it is no part of the
        streak (the caller tells nothing else, and `abandon`s a probe), and the outage clock of a
        streak already under way does not count the `overdue_s` seconds the loop was late: an
        endpoint is not declared dead for time in which we could not have heard it."""
        if self._streak_began is not None and overdue_s > 0:
            self._streak_began = min(now, self._streak_began + overdue_s)

    def abandon(self) -> None:
        """The probe ended without an outcome (cancelled by a stop): let another worker probe."""
        if self._probe_in_flight:
            self._probe_in_flight = False
            self._notify()

    # ------------------------------------------------------------------ waiting

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def changed(self, timeout_s: float | None) -> None:
        """Return after the next change of state, or after `timeout_s` seconds."""
        if self._changed is None:
            self._changed = anyio.Event()
        event = self._changed
        with anyio.move_on_after(math.inf if timeout_s is None else timeout_s):
            await event.wait()


async def wait_turn(breaker: Breaker, clock: Callable[[], float] = time.monotonic) -> Admission:
    """Wait until `breaker` lets a request go (`go`, maybe as the probe) or is `dead`.

    Cancellable at any point (a stop cancels the worker waiting here); nothing is held while
    waiting, and a probe admission is taken only at the moment this returns."""
    while True:
        admission = breaker.admit(clock())
        if admission.go or admission.dead:
            return admission
        await breaker.changed(admission.wait_s)

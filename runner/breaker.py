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

__all__ = ["UNREACHABLE_KINDS", "Admission", "Breaker", "BreakerState", "wait_turn"]

#: `Classification.kind`s that mean the endpoint did not answer at all (runner/retries.py).
UNREACHABLE_KINDS = frozenset({"connection", "timeout"})


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
    ) -> None:
        if not outage_limit_s > 0:
            raise ValueError("outage_limit_s must be > 0")
        if trip_after < 1:
            raise ValueError("trip_after must be >= 1")
        if not 0 <= first_probe_s <= max_probe_s:
            raise ValueError("need 0 <= first_probe_s <= max_probe_s")
        self.outage_limit_s = outage_limit_s
        self.trip_after = trip_after
        self.first_probe_s = first_probe_s
        self.max_probe_s = max_probe_s
        self.state = BreakerState.CLOSED
        #: The last unreachable outcome's message (the cause named when the model stops).
        self.cause: str | None = None
        self._streak = 0
        self._streak_began: float | None = None
        self._last_ok: float = -math.inf
        self._probe_in_flight = False
        self._next_probe_at = 0.0
        self._interval = first_probe_s
        #: Bumped on every change that may let a waiting worker go (see `wait_turn`).
        self._changed: anyio.Event | None = None

    # ------------------------------------------------------------------ queries

    @property
    def closed(self) -> bool:
        return self.state is BreakerState.CLOSED

    def down_for(self, now: float) -> float:
        """Seconds the endpoint has been unreachable (0 when it is not known to be down)."""
        if self._streak_began is None:
            return 0.0
        return max(0.0, now - self._streak_began)

    # ------------------------------------------------------------------ transitions

    def admit(self, now: float) -> Admission:
        """May a request start now? Open: the first caller once the probe wait is over becomes
        the probe, and must report its outcome (or `abandon` it)."""
        if self.state is BreakerState.CLOSED:
            return _GO
        if self.state is BreakerState.DEAD:
            return _DEAD
        if self._probe_in_flight:
            return _WAIT_FOR_PROBE
        if now >= self._next_probe_at:
            self._probe_in_flight = True
            return _PROBE
        return Admission(go=False, wait_s=self._next_probe_at - now)

    def reached(self, now: float, *, probe: bool = False) -> None:
        """A request got an HTTP answer (a success or any error status): the endpoint is up.

        Called for every reply, so the common case (closed, no streak) is two comparisons."""
        if now > self._last_ok:
            self._last_ok = now
        if not self._streak and not probe and self.state is BreakerState.CLOSED:
            return
        self._streak = 0
        self._streak_began = None
        if probe:
            self._probe_in_flight = False
        if self.state is BreakerState.OPEN:
            self.state = BreakerState.CLOSED
            self._probe_in_flight = False
            self._interval = self.first_probe_s
            self.cause = None
            self._notify()

    def unreachable(self, now: float, started: float, cause: str, *, probe: bool = False) -> bool:
        """A request sent at `started` failed without an answer (connection, timeout) at `now`.

        Returns True when the failure belongs to an outage (the breaker is open or dead after
        it): the caller does not count it against the trial's attempts and waits for a turn
        instead of backing off."""
        if self.state is BreakerState.DEAD:
            return True
        self.cause = cause
        began = max(started, self._last_ok)
        if self._streak_began is None or began < self._streak_began:
            self._streak_began = min(began, now)
        self._streak += 1
        if probe:
            self._probe_in_flight = False
        if self.state is BreakerState.CLOSED:
            if self._streak < self.trip_after:
                return False
            self.state = BreakerState.OPEN
            self._interval = self.first_probe_s
            self._next_probe_at = now + self._interval
        elif probe:
            self._interval = min(self.max_probe_s, max(self._interval * 2, self.first_probe_s))
            self._next_probe_at = now + self._interval
        if self.down_for(now) >= self.outage_limit_s:
            self.state = BreakerState.DEAD
        self._notify()
        return True

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

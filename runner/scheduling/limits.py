"""Per-endpoint pacing: a concurrency cap, evenly paced RPM and TPM, and one shared pause.

Why evenly paced: a provider that sells 3,000 requests per minute enforces it over short
windows too, so 3,000 requests in the first second earn a wall of 429s. The request bucket
therefore holds about one request (``burst_s`` widens it) and drips at ``rpm/60`` per second;
in any window of ``w`` seconds at most ``rpm*w/60 + bucket`` requests start.

The rate buckets are :class:`aiolimiter.AsyncLimiter` instances, used only through their public
API. What aiolimiter cannot express is wrapped around it:

* **token corrections** - a request's tokens are an estimate until the response reports usage.
  A ledger (``owed``) carries the difference to later acquires: an overshoot is charged to the
  next requests, an unused estimate is credited (bounded by one bucket, since a bucket that is
  already empty cannot get emptier);
* **requests bigger than the token bucket** - they pay in bucket-sized instalments instead of
  raising ``ValueError`` or deadlocking; one request never pays more than a minute of budget
  (``tpm``), the rest is carried as debt, so a single huge estimate cannot stall the endpoint for
  longer than a minute;
* **changing rates mid-run** (learnt from ``x-ratelimit-limit-*`` headers) - the limiters are
  replaced; the task waiting on an old one is woken and moves to the new one, and the new bucket
  starts with what the last admission would still occupy, so a change is not a free burst;
* **one shared pause** - a 429 pauses the whole endpoint; pauses only ever extend;
* **adaptive concurrency** - with no rate known (none configured, none announced yet), the
  number of requests in flight follows an AIMD controller (runner/scheduling/adaptive.py) fed by
  each request's outcome (`release(..., outcome=...)`); the first announced rate ends it and the cap
  goes back to ``max_concurrency``. A lowered cap is reached as requests finish: a slot freed
  while the cap is exceeded is retired instead of handed on;
* **a learnt rate** - beside it, `AdaptiveRate` learns the hidden request rate from the 429s
  (runner/scheduling/adaptive.py); once learnt, requests are paced by it (the request bucket, as if
  it had been announced) and the cap goes back to ``max_concurrency``: below about one request
  in flight per latency, only a rate can keep a hidden limit. An announced rate ends both;
* **a configured rate is a ceiling** - with ``rpm`` configured (and ``adaptive`` asked), 429s
  that pacing at it does not prevent say the account's real limit is lower (a lower tier of a
  provider that announces nothing: OpenRouter, xAI, Gemini's OpenAI-compatible endpoint). The
  same learner then paces the model below the configured rate, and recovers towards it, never
  above (`learnt_rpm`, `ceiling_rpm`; the status line says so). With ``rpm = 300`` against a
  hidden 120, pacing at the configured rate alone earned a third of all requests 429s.

All requests pass the rate stage one at a time in FIFO order (the gate): this keeps
aiolimiter's smallest-amount-first wake-up order from starving large requests, and means at
most one task waits on the buckets when a pause begins, so a pause's end is not a herd. The
task holding the gate, once admitted, admits the waiters behind it itself while the buckets
hold budget for them (`_pass_gate`), and hands the gate to the first that must wait. Why:
handing it on one task at a time costs one turn of the event loop per request, and a loaded
loop turns a few times a second: under a CPU hog (6 busy processes on 2 cores, a loop turn of
0.2-0.5 s) every paced model of the demo grid crawled at 4-7 requests/s, whatever its rate (76
to 525 a second), while the unpaced ones did 60-115 (issue 33). A loaded loop also wakes the
task waiting on a bucket late; `PACING_SLACK_S` of bucket lets the next requests make up
for it instead of that time being lost.

Time is the running loop's clock (as in aiolimiter), so tests can use a virtual-time loop.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from typing import Literal, NamedTuple

from aiolimiter import AsyncLimiter

from ibias.runner.scheduling.adaptive import AdaptiveConcurrency, AdaptiveRate
from ibias.runner.scheduling.gate import Gate
from ibias.runner.scheduling.slots import Slots

__all__ = ["PACING_SLACK_S", "EndpointLimiter", "Outcome", "Permit"]

#: Seconds of request budget the run's limiters may catch up after a late wake-up (the
#: run's `burst_s`, runner/execution/run_schedule.py): a loaded event loop wakes a paced task late
#: by up to a turn of the loop (0.2-0.5 s under a CPU hog), and a one-request bucket loses that time
#: for good.
#: Well within the one second of budget a provider's bucket holds (runner/simulator/faults.py).
PACING_SLACK_S = 0.5

_Which = Literal["rpm", "tpm"]
#: How a request went, as far as adapting concurrency cares: answered, refused with a 429, or
#: anything else (an error that says nothing about the provider's limits). Timeouts and dropped
#: connections are "other": only a 429 is read as overload, so a run whose own event loop is
#: starved (runner/scheduling/loop_lag.py) never cuts a model's concurrency or learnt rate for it.
Outcome = Literal["ok", "rate_limited", "other"]


def _check_sizes(max_concurrency: int, burst_s: float, token_burst_s: float) -> None:
    if max_concurrency < 1:
        raise ValueError("max_concurrency must be at least 1")
    if not (burst_s >= 0 and math.isfinite(burst_s)):
        raise ValueError("burst_s must be a finite number >= 0")
    if not (token_burst_s > 0 and math.isfinite(token_burst_s)):
        raise ValueError("token_burst_s must be a finite number > 0")


def _rate_learner(
    learn_rate: bool | AdaptiveRate, *, adapting: bool, asked: bool, rpm: int | None
) -> AdaptiveRate | None:
    """The controller that learns a hidden rate, when one is to be learnt: while concurrency
    adapts (no rate known), or below a configured `rpm` when adapting was `asked` (the learnt
    rate then stays under it: a configured rate is a ceiling)."""
    if learn_rate is False or not (adapting or (asked and rpm is not None)):
        return None
    learner = AdaptiveRate() if learn_rate is True else learn_rate
    if rpm is not None:
        learner.ceiling_per_s = rpm / 60.0
    return learner


class Permit(NamedTuple):
    """Proof that a request may start; hand it back to :meth:`EndpointLimiter.release`.

    ``serial`` makes every permit distinct, so a double release is detected; ``epoch`` is the
    adaptive controller's epoch at admission (see runner/scheduling/adaptive.py).
    """

    est_tokens: int
    serial: int = -1
    epoch: int = 0
    admitted_at: float = 0.0
    """Loop time of admission (what a learnt rate counts by, runner/scheduling/adaptive.py)."""


class EndpointLimiter:
    """Admission control for one model endpoint (see module docstring for the design).

    ``rpm``/``tpm`` of ``None`` mean "no limit known"; :meth:`set_limits` can set them later.
    ``burst_s`` is how many seconds of request budget may go back to back (default 0: a bucket
    of exactly one request, i.e. perfectly even spacing). ``token_burst_s`` is the depth of the
    token bucket in seconds of TPM; it must hold a typical request, hence the default of 1 s.
    ``adaptive`` (True, or a configured :class:`AdaptiveConcurrency`) adapts the concurrency
    cap to the 429s while no rate is known; it has no effect when ``rpm`` or ``tpm`` is given.
    """

    def __init__(
        self,
        *,
        rpm: int | None,
        tpm: int | None,
        max_concurrency: int,
        burst_s: float = 0.0,
        token_burst_s: float = 1.0,
        adaptive: bool | AdaptiveConcurrency = False,
        learn_rate: bool | AdaptiveRate = True,
    ) -> None:
        _check_sizes(max_concurrency, burst_s, token_burst_s)
        self._max_concurrency = max_concurrency
        self._adaptive: AdaptiveConcurrency | None = None
        if adaptive is not False and rpm is None and tpm is None:
            self._adaptive = AdaptiveConcurrency(max_concurrency) if adaptive is True else adaptive
        #: The configured or announced request rate: the learnt one never paces above it.
        self._ceiling_rpm = rpm
        #: Learns a hidden rate (``learn_rate``): while adapting, or below a configured rpm
        #: (see the module docstring).
        self._rate_learner = _rate_learner(
            learn_rate, adapting=self._adaptive is not None, asked=adaptive is not False, rpm=rpm
        )
        self._burst_s = burst_s
        self._token_burst_s = token_burst_s
        #: The concurrency cap (runner/scheduling/slots.py): below `max_concurrency` while adapting.
        self._slots = Slots(max_concurrency if self._adaptive is None else self._adaptive.limit)
        #: The gate (see the module docstring and runner/scheduling/gate.py).
        self._gate = Gate()
        self._in_flight = 0
        self._outstanding: set[int] = set()
        self._serials = itertools.count()
        self._paused_until = 0.0
        # Tokens consumed (estimated, then corrected) minus tokens paid into the bucket.
        # Positive: debt charged to the next acquires. Negative: credit, at most one bucket.
        self._owed = 0.0
        self._changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rpm: int | None = None
        self._tpm: int | None = None
        self._rpm_limiter: AsyncLimiter | None = None
        self._tpm_limiter: AsyncLimiter | None = None
        # What the last admission put into the buckets, to seed replacement limiters.
        self._last_admit_at: float | None = None
        self._last_tokens_paid = 0.0
        self._seed_rpm = False
        self._seed_tpm = False
        self._install(rpm, tpm)

    # ------------------------------------------------------------------ configuration

    @staticmethod
    def _check_rate(name: str, value: int | None) -> None:
        if value is not None and value <= 0:
            raise ValueError(f"{name} must be positive or None")

    def _request_capacity(self, rpm: int) -> float:
        return max(1.0, rpm * self._burst_s / 60.0)

    def _token_capacity(self, tpm: int) -> float:
        return max(1.0, tpm * self._token_burst_s / 60.0)

    def _install(self, rpm: int | None, tpm: int | None) -> None:
        self._check_rate("rpm", rpm)
        self._check_rate("tpm", tpm)
        if rpm != self._rpm:
            self._rpm = rpm
            if rpm is None:
                self._rpm_limiter = None
            else:
                cap = self._request_capacity(rpm)
                self._rpm_limiter = AsyncLimiter(cap, cap * 60.0 / rpm)
            self._seed_rpm = rpm is not None
        if tpm != self._tpm:
            self._tpm = tpm
            if tpm is None:
                self._tpm_limiter = None
                self._owed = 0.0
            else:
                cap = self._token_capacity(tpm)
                self._tpm_limiter = AsyncLimiter(cap, cap * 60.0 / tpm)
                self._owed = max(self._owed, -cap)
            self._seed_tpm = tpm is not None

    def set_limits(self, rpm: int | None, tpm: int | None) -> None:
        """Change the rates mid-run by replacing the wrapped limiters.

        Cheap no-op when nothing changes, so it can be called on every response. A task waiting
        on an old limiter is woken and re-queues on the new one at its new pace.
        """
        if rpm == self._rpm and tpm == self._tpm:
            return
        if rpm is not None or tpm is not None:
            self._stop_adapting()
            self._rate_learner = None  # announced limits win: their windows explain a 429
        self._ceiling_rpm = rpm
        self._install(rpm, tpm)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    @property
    def rpm(self) -> int | None:
        return self._rpm

    @property
    def tpm(self) -> int | None:
        return self._tpm

    @property
    def max_concurrency(self) -> int:
        return self._max_concurrency

    @property
    def concurrency(self) -> int:
        """The cap on requests in flight now (below `max_concurrency` while adapting)."""
        return self._slots.cap

    @property
    def ceiling_rpm(self) -> int | None:
        """The configured (or announced) request rate, which a learnt rate stays under."""
        return self._ceiling_rpm

    @property
    def learnt_rpm(self) -> int | None:
        """The request rate paced by, when it was learnt from 429s (else None)."""
        learner = self._rate_learner
        if learner is None or learner.rate_per_s is None:
            return None
        return self._rpm

    @property
    def rate_learner(self) -> AdaptiveRate | None:
        """The controller learning a hidden rate, or None (a rate is known, or none asked)."""
        return self._rate_learner

    @property
    def adaptive(self) -> AdaptiveConcurrency | None:
        """The controller adapting the cap, or None (a rate is known, or none was asked)."""
        return self._adaptive

    # ------------------------------------------------------------------ concurrency

    def _stop_adapting(self) -> None:
        if self._adaptive is not None:
            self._adaptive = None
            self._slots.set_cap(self._max_concurrency)

    def _adapt(self, permit: Permit, outcome: Outcome) -> None:
        learner = self._rate_learner
        adaptive = self._adaptive
        if adaptive is None and learner is None:
            return
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        now = loop.time()
        if outcome == "other":
            # Says nothing of the limit, but must not hold a learning window open forever.
            if learner is not None and learner.learning:
                rate = learner.dropped(permit.admitted_at, now)
                if rate is not None:
                    self._pace_learnt(rate)
            return
        if learner is not None:
            rate = learner.finished(permit.admitted_at, outcome == "rate_limited", now)
            if rate is not None:
                self._pace_learnt(rate)
        adaptive = self._adaptive
        if adaptive is None:
            return
        if outcome == "ok":
            changed = adaptive.on_success(permit.epoch, now)
        else:
            changed = adaptive.on_rate_limited(permit.epoch, now)
        if changed is not None:
            self._slots.set_cap(changed)

    def _pace_learnt(self, rate_per_s: float) -> None:
        """Pace by a learnt rate (requests per second): the request bucket as if the rate had
        been announced, concurrency no longer adapted (the rate is what keeps the limit)."""
        self._stop_adapting()
        rpm = max(1, round(rate_per_s * 60.0))
        if self._ceiling_rpm is not None:
            rpm = min(rpm, self._ceiling_rpm)
        if rpm != self._rpm:
            self._install(rpm, self._tpm)
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()

    @property
    def in_flight(self) -> int:
        """Permits handed out and not yet released."""
        return self._in_flight

    @property
    def paused_until(self) -> float:
        """Loop time until which no request starts (in the past when not paused)."""
        return self._paused_until

    @property
    def owed_tokens(self) -> float:
        """Token debt (positive) or credit (negative) carried to the next acquires."""
        return self._owed

    # ------------------------------------------------------------------ pause

    def pause(self, seconds: float) -> None:
        """Hold every acquire, waiting or new, until ``now + seconds`` (loop time).

        Overlapping pauses extend and never shorten: the provider's latest "slow down" wins only
        if it asks for longer. Non-positive or NaN durations are ignored.
        """
        if not seconds > 0:
            return
        until = asyncio.get_running_loop().time() + seconds
        self._paused_until = max(self._paused_until, until)

    async def _wait_pause(self) -> None:
        loop = asyncio.get_running_loop()
        while (remaining := self._paused_until - loop.time()) > 0:
            await asyncio.sleep(remaining)

    # ------------------------------------------------------------------ rate stage

    def _limiter(self, which: _Which) -> AsyncLimiter | None:
        return self._rpm_limiter if which == "rpm" else self._tpm_limiter

    async def _take(self, which: _Which, amount: float) -> bool:
        """Acquire ``amount`` on the current limiter; False if the limits changed meanwhile.

        Returns True (nothing to do) when the limit is gone. Cancel-safe: aiolimiter's acquire
        removes a cancelled waiter itself.
        """
        limiter = self._limiter(which)
        if limiter is None:
            return True
        if limiter.has_capacity(amount):
            await limiter.acquire(amount)  # does not suspend when capacity is there
            return True
        acquiring = asyncio.ensure_future(limiter.acquire(amount))
        changed = asyncio.ensure_future(self._changed.wait())
        try:
            await asyncio.wait({acquiring, changed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            changed.cancel()
            if not acquiring.done():
                acquiring.cancel()
        if acquiring.done() and not acquiring.cancelled():
            acquiring.result()
            return True
        return False

    async def _seed(self, which: _Which, rate_per_s: float, last_amount: float) -> None:
        """Start a replacement bucket with what the last admission would still occupy."""
        limiter = self._limiter(which)
        if limiter is None or self._last_admit_at is None:
            return
        elapsed = asyncio.get_running_loop().time() - self._last_admit_at
        level = min(limiter.max_rate, max(0.0, last_amount - elapsed * rate_per_s))
        if level > 0 and limiter.has_capacity(level):
            await limiter.acquire(level)  # empty new bucket: does not suspend

    async def _take_request(self) -> None:
        while True:
            if self._seed_rpm and self._rpm is not None:
                self._seed_rpm = False
                await self._seed("rpm", self._rpm / 60.0, 1.0)
            if await self._take("rpm", 1.0):
                return

    async def _take_tokens(self, est_tokens: int) -> float:
        """Pay this request's estimate plus any debt (minus credit); returns tokens paid."""
        if self._tpm is None:
            return 0.0
        need = est_tokens + self._owed
        charge = min(max(need, 0.0), float(self._tpm))
        self._owed = need
        paid = 0.0
        try:
            while paid < charge and self._tpm is not None:
                if self._seed_tpm:
                    self._seed_tpm = False
                    await self._seed("tpm", self._tpm / 60.0, self._last_tokens_paid)
                chunk = min(charge - paid, self._token_capacity(self._tpm))
                if await self._take("tpm", chunk):
                    paid += chunk
                    self._owed -= chunk
        except BaseException:
            # The request never starts: its estimate was not consumed; what was paid stays
            # paid and becomes credit for the next request.
            self._owed -= est_tokens
            self._clamp_credit()
            raise
        return paid

    def _clamp_credit(self) -> None:
        if self._tpm is None:
            self._owed = 0.0
        else:
            self._owed = max(self._owed, -self._token_capacity(self._tpm))

    # ------------------------------------------------------------------ public API

    async def acquire(self, est_tokens: int) -> Permit:
        """Wait until a request estimated at ``est_tokens`` tokens may start.

        Order: a concurrency slot, then (one task at a time) the shared pause, the request
        bucket, the token bucket, and the pause again (it may have begun meanwhile). Cancelling
        a waiter at any point gives back the slot it held; request budget already drawn from a
        bucket is not returned (aiolimiter cannot), which errs on the slow side.
        """
        if est_tokens < 0:
            raise ValueError("est_tokens must be >= 0")
        if not self._slots.try_take():
            await self._slots.take()
        if self._rpm_limiter is None and self._tpm_limiter is None and not self._gate.held:
            # No rate to keep and nobody queued at the gate: unless paused, nothing to wait
            # for, so skip the gate's await chain (the common case of an endpoint without
            # limits). The loop is looked up once per limiter: each lookup is a getpid().
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            now = loop.time()
            if self._paused_until <= now:
                self._last_admit_at = now
                self._last_tokens_paid = 0.0
                return self._permit(est_tokens, now)
        try:
            if self._gate.held:
                admitted = await self._gate.wait(est_tokens, self._unsent)
                if admitted is not None:  # admitted by the task ahead
                    return self._permit(est_tokens, admitted[1])
            else:
                self._gate.held = True
            try:
                await self._wait_pause()
                await self._take_request()
                paid = await self._take_tokens(est_tokens)
                await self._wait_pause()
            except BaseException:
                self._gate.hand_on()
                raise
            now = asyncio.get_running_loop().time()
            self._last_admit_at = now
            self._last_tokens_paid = paid
            await self._pass_gate()
        except BaseException:
            self._slots.give_back()
            raise
        return self._permit(est_tokens, now)

    def _unsent(self, est_tokens: int) -> None:
        """A request admitted but never sent: its estimate was not consumed (credited)."""
        self._owed -= est_tokens
        self._clamp_credit()

    async def _pass_gate(self) -> None:
        """The holder was admitted: admit the waiters behind it in order while nothing would
        make them wait (no pause, budget in both buckets, no bucket to seed), then hand the
        gate to the first that must wait. Nothing here suspends (each take finds capacity), so
        the admissions are one step of the loop, not one turn each."""
        loop = asyncio.get_running_loop()
        try:
            while self._gate.waiters:
                waiter, est = self._gate.waiters[0]
                if waiter.done():  # cancelled while waiting
                    self._gate.waiters.popleft()
                    continue
                now = loop.time()
                if not self._can_admit_now(est, now):
                    break
                self._gate.waiters.popleft()
                await self._take_request()
                paid = await self._take_tokens(est)
                self._last_admit_at = now
                self._last_tokens_paid = paid
                waiter.set_result((paid, now))
        finally:
            self._gate.hand_on()

    def _can_admit_now(self, est_tokens: int, now: float) -> bool:
        """Whether a request of `est_tokens` would pass the rate stage without waiting."""
        if self._paused_until > now or self._seed_rpm or self._seed_tpm:
            return False
        if self._rpm_limiter is not None and not self._rpm_limiter.has_capacity(1.0):
            return False
        if self._tpm is None or self._tpm_limiter is None:
            return True
        charge = min(max(est_tokens + self._owed, 0.0), float(self._tpm))
        if charge > self._token_capacity(self._tpm):
            return False  # paid in instalments: the holder's slow path
        return charge <= 0 or self._tpm_limiter.has_capacity(charge)

    def _permit(self, est_tokens: int, now: float) -> Permit:
        serial = next(self._serials)
        self._outstanding.add(serial)
        self._in_flight += 1
        epoch = 0 if self._adaptive is None else self._adaptive.epoch
        if self._rate_learner is not None:
            self._rate_learner.admitted(now)
        return Permit(est_tokens=est_tokens, serial=serial, epoch=epoch, admitted_at=now)

    def release(
        self, permit: Permit, actual_tokens: int | None, *, outcome: Outcome = "other"
    ) -> None:
        """Free the permit's slot and correct the token ledger with the reported usage.

        ``actual_tokens=None`` (no usage reported, e.g. a failed attempt) keeps the estimate as
        charged. ``outcome`` feeds adaptive concurrency ("ok": answered; "rate_limited": a 429).
        Releasing a permit twice, or one from another limiter, raises ``ValueError``.
        """
        if permit.serial not in self._outstanding:
            raise ValueError("permit was not issued by this limiter or was already released")
        self._outstanding.remove(permit.serial)
        self._in_flight -= 1
        self._adapt(permit, outcome)  # first: a halved cap retires this very slot
        self._slots.give_back()
        if actual_tokens is not None and self._tpm is not None:
            self._owed += actual_tokens - permit.est_tokens
            self._clamp_credit()

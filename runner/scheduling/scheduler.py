"""Sends trials to models through each endpoint's limits, retrying what can be retried.

Each model has its own bounded queue, feeder and worker pool, so a slow or rate-limited
provider never holds back the others, and each model walks the same interleaved plan order, so
whatever point a run is interrupted at, every model's finished trials form a balanced prefix of
the design. The feeder refills its queue a batch at a time from the model's source (the store's
remaining trials, read in a worker thread); memory is bounded by the queues, not by the size of
the grid.

Structured with anyio: all feeders and workers live in one task group, whose cancel scope is
the stop's grace period. A stop (a `Stop` from outside, a budget) ends scheduling at once:
feeders stop, every worker that is waiting rather than requesting (rate limiter, backoff, an
empty queue) is cancelled through its own cancel scope, and the work scope gets a deadline
`grace_s` ahead, so requests already in flight may finish and be recorded but never hold the
run longer than that. The scopes are per worker, not per wait, so the hot path costs nothing.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import anyio
import anyio.to_thread

from ibias.runner.providers.base import AttemptError, Reply, Sampling
from ibias.runner.providers.retries import Backoff, Classification, Verdict
from ibias.runner.scheduling.breaker import UNREACHABLE_KINDS, wait_turn
from ibias.runner.scheduling.budget import Budget
from ibias.runner.scheduling.limit_adoption import limits_due, read_limits
from ibias.runner.scheduling.limits import Outcome, Permit
from ibias.runner.scheduling.loop_lag import NO_MARK, LagMark, LoopLag, is_local_stall
from ibias.runner.scheduling.recording import Recorder, count_done, storable
from ibias.runner.scheduling.recording import response_row as response_row
from ibias.runner.scheduling.runtime import ModelRuntime as ModelRuntime
from ibias.runner.scheduling.runtime import Trial as Trial
from ibias.runner.scheduling.stop import Stop, stopping_line
from ibias.runner.scheduling.trial_queue import TrialQueue
from ibias.runner.scheduling.verdicts import endpoint_dead, local_stall, outage_timeout, stops_model
from ibias.runner.status import ModelStats as ModelStats
from ibias.store.plans import prompt_chars
from ibias.store.writer import Writer


@dataclass(eq=False)
class _Worker:
    """A worker's cancel scope, and whether it is in a request (which a stop lets finish).

    `waited_for`: whether a stop lets its request finish. Not for the built-in simulator
    (provider `simulator`, served in-process): its replies cost nothing and come again the
    same on resume, and waiting for a full load of them (448 for the demo grid, answered by
    the same loop) was half a second of every stop of the demo."""

    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    in_request: bool = False
    waited_for: bool = True


@dataclass(slots=True, eq=False)
class _Tries:
    """One trial's requests so far, and what every one of them shares.

    `attempt` numbers every request made (the attempts table); `counted` those that lengthen
    its backoff: failures during an outage of the endpoint (its breaker is open) do not, so a
    short outage costs no trial. Of those, 429s do not use up the trial's retries (`limited`):
    a rate limit only slows the run (the endpoint's pause and pacing), it never makes a trial
    fail for good; a `Retry-After` beyond the outage limit stops the model instead. Timeouts
    and dropped connections while the run's own event loop was starved (`stalled`, recorded
    as `local_stall`: runner/scheduling/loop_lag.py) count in none of these, up to `max_attempts` of
    them."""

    trial: Trial
    sampling: Sampling
    #: The request's token estimate (prompt and the whole completion budget), for the limiter.
    est: int
    #: The request's upper-bound cost, reserved against the budget while it is in flight.
    est_cost: float
    attempt: int = 0
    counted: int = 0
    limited: int = 0
    stalled: int = 0


@dataclass(slots=True, eq=False)
class _Request:
    """One request of a trial: its limiter permit, whether it probes a down endpoint, when it
    went out (epoch seconds for the attempts table, loop time for the breaker) and how late the
    run's event loop had been by then (`LoopLag.mark`)."""

    permit: Permit
    probe: bool
    started: float = 0.0
    sent: float = 0.0
    latency_ms: float = 0.0
    lag_mark: LagMark = NO_MARK


def estimate_tokens(trial: Trial, max_tokens: int) -> int:
    """Rough pre-request token count (4 characters a token) plus the completion budget.

    Providers reserve max_tokens against TPM, so the estimate includes it; the limiter is
    corrected from the reported usage afterwards. A trial read from the store carries its
    character count (`prompt_chars`, counted by the feeder once per spec); others are
    counted here, the same way.
    """
    chars = getattr(trial, "prompt_chars", None)
    if chars is None:
        chars = prompt_chars(trial.messages)
    return math.ceil(chars / 4) + max_tokens


#: The provider served in-process by ibias's simulator (runner/simulator/provider.py).
SIMULATOR = "simulator"


class Scheduler:
    """Runs per-model feeders and workers until the plan is done, a stop is asked, or a
    budget is hit."""

    def __init__(
        self,
        *,
        run_id: str,
        runtimes: list[ModelRuntime],
        writer: Writer,
        backoff: Backoff,
        max_cost: float | None = None,
        spent_before: float = 0.0,
        grace_s: float = 10.0,
        on_fatal: Callable[[str], None] = lambda line: None,
        rng: random.Random | None = None,
        loop_lag: LoopLag | None = None,
    ) -> None:
        self.run_id = run_id
        self.runtimes = runtimes
        self.writer = writer
        self.backoff = backoff
        #: The money cap (`--max-cost`) over what the store had already spent on this plan's
        #: trials (`spent_before`: earlier runs, other providers) and this run's spending.
        self.budget = Budget(max_cost, spent_before, [rt.stats for rt in runtimes])
        self.recorder = Recorder(run_id, writer)
        self.grace_s = grace_s
        self.on_fatal = on_fatal
        self.rng = rng or random.Random()
        #: How late the event loop is (ticking while `run` runs): a timeout or dropped
        #: connection while it was starved is not the provider's (runner/scheduling/loop_lag.py).
        self.loop_lag = LoopLag() if loop_lag is None else loop_lag
        self.stop_reason: str | None = None
        #: True when the first stop came from outside (a `Stop`): the run was interrupted.
        self.interrupted = False
        self._stopping = False
        #: Called once, inside the request of a stop from outside (`Stop.on_request`), with the
        #: line saying the run is stopping: the run halts its progress display and prints it.
        self.on_interrupt: Callable[[str], None] = lambda line: None
        self._work_scope: anyio.CancelScope | None = None
        self._workers: set[_Worker] = set()
        #: The feeders' cancel scopes: a stop cancels them, as it does the waiting workers.
        self._feeders: set[anyio.CancelScope] = set()
        #: One feeder reads the store at a time (see `_feed`); made inside the loop, in `run`.
        self._reading: anyio.CapacityLimiter | None = None

    # ------------------------------------------------------------------ control

    def request_stop(self, reason: str) -> None:
        """Stop scheduling; in-flight requests get `grace_s` to finish, except those to the
        built-in simulator (`_Worker.waited_for`). Idempotent; the first reason is the one
        reported."""
        if self.stop_reason is None:
            self.stop_reason = reason
        if self._stopping:
            return
        self._stopping = True
        for worker in self._workers:
            if not worker.in_request or not worker.waited_for:
                worker.scope.cancel()
        for feeder in self._feeders:
            feeder.cancel()
        self._start_grace()

    def in_flight(self) -> tuple[int, int]:
        """Requests in flight now: those a stop waits for, and those it does not (the
        built-in simulator's)."""
        waited = dropped = 0
        for worker in self._workers:
            if worker.in_request:
                if worker.waited_for:
                    waited += 1
                else:
                    dropped += 1
        return waited, dropped

    @property
    def stopping(self) -> bool:
        return self._stopping

    def _start_grace(self) -> None:
        if self._work_scope is not None:
            deadline = anyio.current_time() + self.grace_s
            self._work_scope.deadline = min(self._work_scope.deadline, deadline)

    @property
    def spent(self) -> float:
        """Everything spent on this plan (see `Budget.spent`)."""
        return self.budget.spent

    # ------------------------------------------------------------------ running

    async def run(
        self,
        source: Callable[[ModelRuntime], Iterator[Sequence[Trial]]],
        stop: Stop | None = None,
    ) -> None:
        """Schedule every model's trials until done or stopped (by `stop`, by `request_stop`,
        or by the budget). `source(rt)` gives the model's trials in batches; it is advanced in
        a worker thread, and closed (if it has `close`) when the model's feeding ends."""
        # A stop from outside is handled inside its request, not by a task woken later: the
        # workers stop and the run says so before any other task (a progress refresh) runs.
        unlisten = None if stop is None else stop.on_request(lambda: self._interrupt(stop))
        try:
            async with anyio.create_task_group() as outer:
                outer.start_soon(self.loop_lag.run)
                self._reading = anyio.CapacityLimiter(1)
                async with anyio.create_task_group() as work:
                    self._work_scope = work.cancel_scope
                    if self._stopping:
                        self._start_grace()
                    for rt in self.runtimes:
                        n_workers = rt.config.max_concurrency
                        queue = TrialQueue(low=max(2 * n_workers, 512))
                        work.start_soon(self._feed, rt, source(rt), queue)
                        for _ in range(n_workers):
                            work.start_soon(self._work, rt, queue)
                outer.cancel_scope.cancel()  # the work is over: stop listening for a stop
        finally:
            if unlisten is not None:
                unlisten()
            self._work_scope = None
            ended = time.monotonic()
            for rt in self.runtimes:
                rt.stats.finished = True
                if rt.stats.ended_at is None:
                    rt.stats.ended_at = ended

    def _interrupt(self, stop: Stop) -> None:
        """A stop from outside: stop scheduling, then say so with the requests in flight."""
        first = self.stop_reason is None
        if first:
            self.interrupted = True
        reason = stop.reason or "interrupted"
        waited, dropped = self.in_flight()  # counted before the cancellations land
        self.request_stop(reason)
        if first:
            ends = stop.grace_s + stop.margin_s if stop.armed else None
            self.on_interrupt(stopping_line(reason, waited, dropped, self.grace_s, ends))

    def _halted(self, rt: ModelRuntime) -> bool:
        return self._stopping or rt.stats.fatal is not None

    async def _feed(
        self, rt: ModelRuntime, batches: Iterator[Sequence[Trial]], queue: TrialQueue
    ) -> None:
        """Keep the model's queue above its low-water mark, a batch at a time. Batches are
        fetched in a worker thread (reading the store, decoding JSON), so the loop only
        appends them.

        One feeder reads at a time (`_reading`), and its turn is waited for on the loop, not
        in a thread: a stop cancels a feeder waiting for its turn or for space, and waits only
        for the one read under way. (The store's reads took turns anyway, inside the threads,
        where a stop had to wait for every model's queued read: up to a second of a stop of
        the demo grid on a loaded machine.)"""
        scope = anyio.CancelScope()
        self._feeders.add(scope)

        def fetch() -> Sequence[Trial] | None:
            # A stop that came while this turn was being given: read nothing more.
            return None if self._halted(rt) else next(batches, None)

        try:
            with scope:
                if self._stopping:
                    scope.cancel()
                while not self._halted(rt):
                    if len(queue.items) >= queue.low:
                        await queue.wait_for_space()
                        continue
                    batch = await anyio.to_thread.run_sync(fetch, limiter=self._reading)
                    if batch is None:
                        return
                    queue.items.extend(batch)
                    queue.wake_workers()
        finally:
            self._feeders.discard(scope)
            queue.close()
            close = getattr(batches, "close", None)
            if close is not None:
                close()

    async def _work(self, rt: ModelRuntime, queue: TrialQueue) -> None:
        worker = _Worker(waited_for=rt.config.provider != SIMULATOR)
        self._workers.add(worker)
        items = queue.items
        try:
            with worker.scope:
                if self._stopping:
                    worker.scope.cancel()
                while not self._halted(rt):
                    if items:
                        trial = items.popleft()
                        if len(items) < queue.low:
                            queue.wake_feeder()
                        await self._process(rt, trial, worker)
                    elif queue.closed:
                        return
                    else:
                        await queue.wait_for_items()
        finally:
            self._workers.discard(worker)
            queue.wake_feeder()  # a halted model's feeder must not wait for space forever

    async def _admit(self, rt: ModelRuntime, est: int, est_cost: float) -> Permit | None:
        """A limiter permit for one request that fits the budget; None when the run or the
        model stopped, or the budget is spent."""
        budget = self.budget
        while True:
            if not budget.fits(est_cost) and not await budget.wait_for_room(
                est_cost, lambda: self._stopping, self.request_stop
            ):
                return None
            permit = await rt.limiter.acquire(est)
            if self._stopping or rt.stats.fatal:
                rt.limiter.release(permit, 0)
                return None
            if budget.fits(est_cost):  # others may have started while this one waited
                return permit
            rt.limiter.release(permit, 0)

    async def _process(self, rt: ModelRuntime, trial: Trial, worker: _Worker) -> None:
        """Request `trial` until it has a reply, fails for good, or the model or run stops.

        Each turn of the loop is one request: cleared by the breaker, the budget and the
        limiter (`_clear_to_send`), sent (`_send`), then recorded as a reply (`_on_reply`) or
        an error that may be retried (`_on_error`, which counts the retries: see `_Tries`)."""
        cfg = rt.config
        est = estimate_tokens(trial, cfg.max_tokens)
        tries = _Tries(
            trial, rt.sampling(trial.params), est, cfg.cost(est - cfg.max_tokens, cfg.max_tokens)
        )
        while True:
            if self._stopping or rt.stats.fatal:
                return
            request = await self._clear_to_send(rt, tries)
            if request is None:  # stopped, the endpoint is dead, or the budget is spent
                return
            tries.attempt += 1
            outcome = await self._send(rt, tries, request, worker)
            if not isinstance(outcome, AttemptError):
                self._on_reply(rt, tries, request, outcome)
                return
            if not await self._on_error(rt, tries, request, outcome):
                return

    async def _clear_to_send(self, rt: ModelRuntime, tries: _Tries) -> _Request | None:
        """A request of the trial that the breaker, the budget and the limiter let through;
        None when the endpoint is dead (the model stops), or the run or the model stopped, or
        the budget is spent. While the endpoint is down this waits for a turn to probe it (a
        stop cancels the wait); a probe that is not sent gives its turn back."""
        breaker = rt.breaker
        probe = False
        if not breaker.closed:
            admission = await wait_turn(breaker)
            if admission.dead:
                self._endpoint_dead(rt)
                return None
            probe = admission.probe
        try:
            permit = await self._admit(rt, tries.est, tries.est_cost)  # a stop cancels its waits
        except BaseException:
            if probe:
                breaker.abandon()
            raise
        if permit is None:
            if probe:
                breaker.abandon()
            return None
        return _Request(permit, probe)

    async def _send(
        self, rt: ModelRuntime, tries: _Tries, request: _Request, worker: _Worker
    ) -> Reply | AttemptError:
        """Send one request: its reply, or the error it ended in (a provider's own exception
        classified, so a provider bug never kills the run). While it is in flight its estimate
        is reserved against the budget and a stop lets it finish (within the grace period);
        it is cancelled when the endpoint's outage limit comes before its timeout
        (runner/scheduling/breaker.py). A cancellation releases the permit and is raised."""
        cfg = rt.config
        breaker = rt.breaker
        request.started = time.time()  # epoch seconds; the writer's thread makes it a timestamp
        request.sent = time.monotonic()
        request.lag_mark = self.loop_lag.mark()
        t0 = time.perf_counter()
        self.budget.reserve(tries.est_cost)
        rt.stats.requests += 1
        outcome: Reply | AttemptError
        worker.in_request = True
        watch = breaker.watch(request.sent, cfg.timeout_s)  # None in the usual case
        try:
            if watch is None:
                outcome = await rt.provider.complete(tries.trial.messages, tries.sampling)
            else:
                reply: Reply | None = None
                with watch:
                    reply = await rt.provider.complete(tries.trial.messages, tries.sampling)
                # No reply: the watch cancelled the request (a reply that came first wins).
                outcome = (
                    reply if reply is not None else AttemptError(outage_timeout(cfg.outage_limit_s))
                )
        except AttemptError as exc:
            outcome = exc
        except anyio.get_cancelled_exc_class():
            rt.limiter.release(request.permit, None)
            if request.probe:
                breaker.abandon()
            raise
        except Exception as exc:  # a provider bug must not kill the run: retry, recorded
            outcome = AttemptError(rt.provider.classify_exception(exc))
        finally:
            if watch is not None:
                breaker.unwatch(watch)
            worker.in_request = False
            self.budget.settle(tries.est_cost)
        request.latency_ms = (time.perf_counter() - t0) * 1000
        return outcome

    def _on_reply(self, rt: ModelRuntime, tries: _Tries, request: _Request, reply: Reply) -> None:
        """A reply: the endpoint is up, the limiter learns the tokens used and, now and then,
        the limits the reply's headers announce; then it is recorded."""
        rt.breaker.reached(time.monotonic(), probe=request.probe)
        rt.stats.failing = 0
        reply = storable(reply)
        used = None
        if reply.prompt_tokens is not None and reply.completion_tokens is not None:
            used = reply.prompt_tokens + reply.completion_tokens
        self._release(rt, request.permit, used, "ok")
        if limits_due(rt):
            self._read_limits(rt, reply.headers, tries.est)
        self._store_reply(rt, tries, request, reply)

    def _store_reply(
        self, rt: ModelRuntime, tries: _Tries, request: _Request, reply: Reply
    ) -> None:
        """Record `reply` as the answer of this request of the trial."""
        cost = self.budget.reply_cost(rt.config, rt.stats, reply, tries.est_cost)
        self.recorder.answered(
            tries.trial, tries.attempt, request.started, request.latency_ms, reply, cost
        )
        count_done(rt.stats, reply, cost)

    def _release(
        self, rt: ModelRuntime, permit: Permit, used: int | None, outcome: Outcome
    ) -> None:
        """Hand a request's permit back with how it went, and show the rate the limiter now
        paces at (a learnt rate moves with each outcome: `ibias status`)."""
        rt.limiter.release(permit, used, outcome=outcome)
        rt.stats.learnt_rpm = rt.limiter.learnt_rpm

    async def _on_error(
        self, rt: ModelRuntime, tries: _Tries, request: _Request, error: AttemptError
    ) -> bool:
        """A failed request, recorded as ending the model (fatal, or a wait beyond the outage
        limit), the trial (given up) or neither (retried: at once while the endpoint is down,
        since the breaker spaces the probes, else after the backoff). True when the trial is
        to be requested again."""
        cls = error.classification
        stall = self._local_stall(rt, tries, request, cls)
        if stall is not None:
            return await self._on_stall(rt, tries, request, *stall)
        self._release(rt, request.permit, None, "rate_limited" if cls.is_rate_limit else "other")
        self._read_limits(rt, error.headers, tries.est)
        self._failing(rt, cls.kind)
        outage = self._tell_breaker(rt, cls, request)
        stops = stops_model(cls, rt.config.outage_limit_s)
        if stops is not None:
            cls, line = stops
            self._attempt_of(rt, tries, request, error.status, cls, "fatal")
            self._fatal(rt, line)
            return False
        rt.stats.errors += 1
        if cls.verdict is Verdict.GIVE_UP:  # this trial fails for good; the model goes on
            self._give_up(rt, tries, request, error.status, cls)
            return False
        if not outage and self._backoff_exhausted(rt, tries, cls):
            if error.fallback is not None:  # an answer retried as a likely fault: stored as is
                rt.stats.errors -= 1
                self._store_reply(rt, tries, request, storable(error.fallback))
                return False
            self._give_up(rt, tries, request, error.status, cls)
            return False
        self._attempt_of(rt, tries, request, error.status, cls, "retry")
        rt.stats.retries += 1
        if outage:
            return True  # no backoff of its own: the breaker spaces the probes
        if self._stopping:  # came while this request was in flight: no backoff to sit out
            return False
        await anyio.sleep(self.backoff.delay(tries.counted, cls.delay_hint_s, self.rng))
        return True

    def _local_stall(
        self, rt: ModelRuntime, tries: _Tries, request: _Request, cls: Classification
    ) -> tuple[Classification, float] | None:
        """The `local_stall` to record instead of `cls`, and the seconds the loop was overdue,
        when it is a timeout or a dropped connection that came while the run's own event loop
        was starved (runner/scheduling/loop_lag.py), else None. Past `max_attempts` such failures in
        one trial, a failure is what it is (a provider that truly hangs on a machine always starved
        still ends its trials)."""
        if cls.kind not in UNREACHABLE_KINDS or tries.stalled >= self.backoff.max_attempts:
            return None
        took, overdue = self.loop_lag.since(request.lag_mark)
        timeout_s = rt.config.timeout_s
        if not is_local_stall(overdue, took, timeout_s):
            return None
        return local_stall(cls, overdue, took, timeout_s), overdue

    async def _on_stall(
        self,
        rt: ModelRuntime,
        tries: _Tries,
        request: _Request,
        cls: Classification,
        overdue: float,
    ) -> bool:
        """A failure of our own starved loop (`overdue` s late while it was in flight):
        recorded as `local_stall` and retried after a backoff of its own (a herd of requests
        that timed out together is spread, and the loop gets air), counted in nothing else: no
        streak or outage time for the breaker (a probe gives its turn back), an outcome that
        says nothing of the limits ("other"), no attempt of the trial's (`_Tries.stalled`),
        nothing in the model's failures in a row. True when the trial is to be requested
        again."""
        self._release(rt, request.permit, None, "other")
        rt.breaker.excuse(time.monotonic(), overdue)
        if request.probe:
            rt.breaker.abandon()
        tries.stalled += 1
        self.loop_lag.excused()
        self._attempt_of(rt, tries, request, None, cls, "retry")
        rt.stats.retries += 1
        if self._stopping:
            return False
        await anyio.sleep(self.backoff.delay(tries.stalled, None, self.rng))
        return True

    def _tell_breaker(self, rt: ModelRuntime, cls: Classification, request: _Request) -> bool:
        """Tell the endpoint's breaker how a failed request went: unreachable (a connection
        failure or a timeout), or answered, so up. True when the endpoint is in an outage."""
        if cls.kind in UNREACHABLE_KINDS:
            cause = f"{cls.kind}: {cls.message}"
            return rt.breaker.unreachable(
                time.monotonic(),
                request.sent,
                cause,
                probe=request.probe,
                connect=cls.kind == "connection",
            )
        rt.breaker.reached(time.monotonic(), probe=request.probe)  # it answered: it is up
        return False

    def _backoff_exhausted(self, rt: ModelRuntime, tries: _Tries, cls: Classification) -> bool:
        """Count a retryable failure outside an outage in the trial's backoff; True when the
        trial has used up its retries. A 429 pauses the endpoint and is counted in the
        backoff's length but not against the retries: a rate limit only slows the run."""
        tries.counted += 1
        if cls.is_rate_limit:
            tries.limited += 1
            rt.stats.rate_limited += 1
            rt.limiter.pause(cls.delay_hint_s or self.backoff.window(tries.counted))
        return self.backoff.exhausted(tries.counted - tries.limited)

    def _give_up(
        self,
        rt: ModelRuntime,
        tries: _Tries,
        request: _Request,
        status: int | None,
        cls: Classification,
    ) -> None:
        """The trial fails for good (the model goes on); its cause is kept for the summary."""
        self._attempt_of(rt, tries, request, status, cls, "gave_up")
        rt.stats.failed += 1
        rt.last_failure = f"{cls.kind}: {cls.message}"

    def _attempt_of(
        self,
        rt: ModelRuntime,
        tries: _Tries,
        request: _Request,
        status: int | None,
        cls: Classification,
        outcome: str,
    ) -> None:
        """The attempt row of the trial's latest request, which ended in an error."""
        self.recorder.failed(
            tries.trial,
            tries.attempt,
            request.started,
            request.latency_ms,
            status,
            cls,
            outcome,
        )

    def _endpoint_dead(self, rt: ModelRuntime) -> None:
        """The model's endpoint has been down for its `outage_limit_s` (or, never having
        answered in this run, for `NEVER_ANSWERED_S`): stop the model, naming the URL."""
        self._fatal(rt, endpoint_dead(rt.breaker, rt.provider.endpoint, time.monotonic()))

    def _failing(self, rt: ModelRuntime, kind: str) -> None:
        """Count a failed attempt in the model's run of failures, for the progress display
        (which names the last error kind and the URL after a few in a row)."""
        s = rt.stats
        s.failing += 1
        s.last_error_kind = kind
        if s.endpoint is None:
            s.endpoint = rt.provider.endpoint

    def _read_limits(self, rt: ModelRuntime, headers: Mapping[str, str], est: int) -> None:
        """Adopt the limits a reply announces (runner/scheduling/limit_adoption.py); a used-up
        window that resets beyond the model's outage limit stops the model."""
        line = read_limits(rt, headers, est)
        if line is not None:
            self._fatal(rt, line)

    def _fatal(self, rt: ModelRuntime, message: str) -> None:
        if rt.stats.fatal is None:
            rt.stats.fatal = message
            self.on_fatal(f"model {rt.config.id} stopped: {message}")

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
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

import anyio
import anyio.to_thread

from ibias.runner.breaker import UNREACHABLE_KINDS, Breaker, wait_turn
from ibias.runner.config import ModelConfig
from ibias.runner.limits import EndpointLimiter, Outcome, Permit
from ibias.runner.loop_lag import LOCAL_STALL, NO_MARK, LagMark, LoopLag, is_local_stall
from ibias.runner.money import usd
from ibias.runner.providers.base import AttemptError, Limits, Provider, Reply, Sampling
from ibias.runner.providers.usage import MAX_TOKEN_COUNT, token_count
from ibias.runner.retries import Backoff, Classification, Verdict
from ibias.runner.status import ModelStats as ModelStats
from ibias.runner.stop import Stop, stopping_line
from ibias.store.derived import parsed_kinds, reply_text
from ibias.store.plans import prompt_chars
from ibias.store.writer import AttemptRow, Landed, ResponseRow, Writer


def response_row(
    key: str,
    run_id: str,
    model_id: str,
    reply: Reply,
    cost: float | None,
    received_at: float,
    raw: str | Mapping[str, Any] | None,
) -> ResponseRow:
    """The stored row of one answered request, online (the body as `raw`) or from a batch's
    result file (the line as `raw`): one mapping, so both ways store the same columns."""
    return ResponseRow(
        key,
        run_id,
        model_id,
        reply.provider_model,
        reply.content,
        reply.refusal,
        reply.finish_reason,
        reply.prompt_tokens,
        reply.completion_tokens,
        cost,
        reply.system_fingerprint,
        received_at,
        raw,
        reply.reasoning,
        reply.reasoning_tokens,
        reply.logprobs,
        reply.cache_read_tokens,
        reply.cache_write_tokens,
    )


@dataclass
class ModelRuntime:
    """One model's provider, limiter and counters for the length of a run."""

    config: ModelConfig
    provider: Provider
    limiter: EndpointLimiter
    stats: ModelStats
    learnt_limits: bool = False
    #: The provider reports where its limits stand (remaining, reset) on its replies: read
    #: every reply then, so a used-up window holds requests before it earns a 429.
    reads_limits: bool = False
    #: When a successful reply's headers are next read for limits (loop time, see _process).
    next_limits_check: float = 0.0
    #: The last trial params seen and their Sampling (a model's trials share one params).
    _sampling: tuple[Mapping[str, Any], Sampling] | None = None
    #: The endpoint's circuit breaker (runner/breaker.py), from the model's `outage_limit_s`.
    breaker: Breaker = field(init=False)
    #: Why the last trial that failed for good failed (named in the run's final summary).
    last_failure: str | None = None

    def __post_init__(self) -> None:
        # The model's first request goes alone (runner/breaker.py `first_alone`): a request
        # every trial shares that the model refuses (a 400 naming a parameter, a bad key)
        # stops it after one attempt, not one per worker.
        self.breaker = Breaker(outage_limit_s=self.config.outage_limit_s, first_alone=True)
        self.stats.configured_rpm = self.config.rpm

    def sampling(self, params: Mapping[str, Any]) -> Sampling:
        cached = self._sampling
        if cached is not None and (cached[0] is params or cached[0] == params):
            return cached[1]
        sampling = Sampling.from_params(params, self.config.options)
        self._sampling = (params, sampling)
        return sampling


class _Queue:
    """One model's trials between its feeder and its workers: a deque the feeder refills a
    batch at a time whenever it falls below `low`. Waiting (workers for items, the feeder for
    space) is on an event made per wait, not per trial, so handing a trial over is one
    `popleft`."""

    def __init__(self, low: int) -> None:
        self.items: deque[Trial] = deque()
        self.low = low
        self.closed = False
        self._items: anyio.Event | None = None
        self._space: anyio.Event | None = None

    async def wait_for_items(self) -> None:
        if self._items is None:
            self._items = anyio.Event()
        await self._items.wait()

    async def wait_for_space(self) -> None:
        if self._space is None:
            self._space = anyio.Event()
        await self._space.wait()

    def wake_workers(self) -> None:
        if self._items is not None:
            self._items.set()
            self._items = None

    def wake_feeder(self) -> None:
        if self._space is not None:
            self._space.set()
            self._space = None

    def close(self) -> None:
        self.closed = True
        self.wake_workers()


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
    as `local_stall`: runner/loop_lag.py) count in none of these, up to `max_attempts` of
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


LIMITS_CHECK_INTERVAL_S = 1.0
#: USD: sums of float costs drift by far less than this; a request that fits exactly fits.
BUDGET_EPSILON = 1e-9


class Trial(Protocol):
    """What the scheduler needs of a trial (a stored `Trial`, or a `store.plans.Pending`)."""

    @property
    def trial_key(self) -> str: ...
    @property
    def experiment(self) -> str: ...
    @property
    def model_id(self) -> str: ...
    @property
    def item(self) -> Mapping[str, Any]: ...
    @property
    def messages(self) -> Sequence[Mapping[str, str]]: ...
    @property
    def params(self) -> Mapping[str, Any]: ...


def _checked(reply: Reply) -> Reply:
    """`reply` with token counts the store can hold: every built-in protocol checks them
    (runner/providers/usage.py), but a provider handed in by a caller may not, and one count
    past 2^31 - 1 would fail the writer's flush for every model. Two comparisons when the
    counts are fine (the usual case), a copy with the bad ones unknown when not."""
    p, c, r = reply.prompt_tokens, reply.completion_tokens, reply.reasoning_tokens
    if (
        (p is None or 0 <= p <= MAX_TOKEN_COUNT)
        and (c is None or 0 <= c <= MAX_TOKEN_COUNT)
        and (r is None or 0 <= r <= MAX_TOKEN_COUNT)
    ):
        return reply
    return replace(
        reply,
        prompt_tokens=token_count(p),
        completion_tokens=token_count(c),
        reasoning_tokens=token_count(r),
    )


def _outage_timeout(outage_limit_s: float) -> Classification:
    """A request cancelled in flight because the endpoint's outage reached its limit."""
    return Classification(
        Verdict.RETRY,
        "timeout",
        f"no answer within outage_limit_s = {outage_limit_s:g} s (request cancelled)",
    )


def _wait_beyond_limit(wait_s: float, outage_limit_s: float, now: float) -> str:
    """The line that stops a model whose provider asked for a wait beyond its outage limit:
    how long, until when (UTC, rounded up to the minute, so running again then is never too
    early) and what to do."""
    until = datetime.fromtimestamp(math.ceil((now + wait_s) / 60) * 60, UTC)
    return (
        f"provider asked to wait {wait_s:,.0f} s (until {until:%Y-%m-%d %H:%M} UTC), beyond "
        f"outage_limit_s = {outage_limit_s:,g} s; run again after then"
    )


def _stops_model(cls: Classification, outage_limit_s: float) -> tuple[Classification, str] | None:
    """The classification to record and the line that stops the model, when a failure ends
    the model rather than the trial: a fatal error, or a retryable one whose provider asks for
    a wait beyond the outage limit (sleeping silently for hours is no retry: say until when).
    None when the model goes on."""
    hint = cls.delay_hint_s
    if cls.verdict is Verdict.RETRY and hint is not None and hint > outage_limit_s:
        line = _wait_beyond_limit(hint, outage_limit_s, time.time())
        return Classification(Verdict.FATAL, cls.kind, f"{cls.message}; {line}"), line
    if cls.verdict is Verdict.FATAL:
        return cls, cls.message
    return None


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


#: The provider served in-process by ibias's simulator (runner/providers/simulator.py).
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
        self.max_cost = max_cost
        #: What the store had already spent on this plan's trials before this run (earlier
        #: runs, other providers): `--max-cost` caps the sum.
        self.spent_before = spent_before
        self.grace_s = grace_s
        self.on_fatal = on_fatal
        self.rng = rng or random.Random()
        #: How late the event loop is (ticking while `run` runs): a timeout or dropped
        #: connection while it was starved is not the provider's (runner/loop_lag.py).
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
        self._in_flight = 0
        self._reserved_cost = 0.0
        #: What replies of unknown cost (a usage count missing or invalid) may have cost: each
        #: counts at its request's upper bound (prompt estimate plus the whole `max_tokens`),
        #: never as 0, so `--max-cost` still holds when a provider reports no usage.
        self._unknown_cost = 0.0
        #: Experiments whose replies are parsed as they land; the others' replies hand the
        #: writer nothing to parse (an ad-hoc run makes no `Landed` per reply).
        self._parsed = frozenset(parsed_kinds())
        #: Set when a request in flight settles (for workers waiting for budget room).
        self._settled: anyio.Event | None = None

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
        """Everything spent on this plan: before this run and in it, a reply of unknown cost
        counted at its request's upper bound."""
        return (
            self.spent_before + sum(rt.stats.cost_usd for rt in self.runtimes) + self._unknown_cost
        )

    def _fits(self, est_cost: float) -> bool:
        """Whether a request estimated at `est_cost` fits under the cap beside what is spent
        and what the requests in flight are estimated to cost. Estimates count the whole
        completion budget, so a request that fits cannot cross the cap unless its prompt is
        longer than estimated."""
        return self.max_cost is None or (
            self.spent + self._reserved_cost + est_cost <= self.max_cost + BUDGET_EPSILON
        )

    async def _wait_for_budget(self, est_cost: float) -> bool:
        """Wait until the request fits; False (and the run stops) when it cannot.

        While requests are in flight their estimates are reserved; they usually cost less,
        so wait for them to settle rather than stop early. With nothing in flight and still
        no room, the budget is spent: stop. A run so stopped leaves less room than a request
        needs, so a resume at the same cap stops before its first request.
        """
        while not self._fits(est_cost):
            if self._stopping:
                return False
            if self._in_flight == 0:
                assert self.max_cost is not None
                self.request_stop(
                    f"budget of {usd(self.max_cost)} reached ({usd(self.spent)} spent on this "
                    f"config's trials, this and earlier runs; the next request could cost up to "
                    f"{usd(est_cost)}); raise --max-cost to go on"
                )
                return False
            if self._settled is None:
                self._settled = anyio.Event()
            await self._settled.wait()
        return True

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
                        queue = _Queue(low=max(2 * n_workers, 512))
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
        self, rt: ModelRuntime, batches: Iterator[Sequence[Trial]], queue: _Queue
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

    async def _work(self, rt: ModelRuntime, queue: _Queue) -> None:
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
        while True:
            if not self._fits(est_cost) and not await self._wait_for_budget(est_cost):
                return None
            permit = await rt.limiter.acquire(est)
            if self._stopping or rt.stats.fatal:
                rt.limiter.release(permit, 0)
                return None
            if self._fits(est_cost):  # others may have started while this one waited
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
        (runner/breaker.py). A cancellation releases the permit and is raised."""
        cfg = rt.config
        breaker = rt.breaker
        request.started = time.time()  # epoch seconds; the writer's thread makes it a timestamp
        request.sent = time.monotonic()
        request.lag_mark = self.loop_lag.mark()
        t0 = time.perf_counter()
        self._in_flight += 1
        self._reserved_cost += tries.est_cost
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
                    reply
                    if reply is not None
                    else AttemptError(_outage_timeout(cfg.outage_limit_s))
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
            self._settle(worker, tries.est_cost)
        request.latency_ms = (time.perf_counter() - t0) * 1000
        return outcome

    def _settle(self, worker: _Worker, est_cost: float) -> None:
        """A request is no longer in flight: give back its reserved estimate and wake the
        workers waiting for budget room (they run after this attempt is recorded)."""
        worker.in_request = False
        self._in_flight -= 1
        self._reserved_cost -= est_cost
        if self._settled is not None:
            self._settled.set()
            self._settled = None

    def _on_reply(self, rt: ModelRuntime, tries: _Tries, request: _Request, reply: Reply) -> None:
        """A reply: the endpoint is up, the limiter learns the tokens used and, now and then,
        the limits the reply's headers announce; then it is recorded."""
        rt.breaker.reached(time.monotonic(), probe=request.probe)
        rt.stats.failing = 0
        reply = _checked(reply)
        used = None
        if reply.prompt_tokens is not None and reply.completion_tokens is not None:
            used = reply.prompt_tokens + reply.completion_tokens
        self._release(rt, request.permit, used, "ok")
        if rt.reads_limits:
            self._read_limits(rt, reply.headers, tries.est)
        else:
            # Until a reply says where its limits stand, successful replies are read at most
            # once a second: reading every reply's headers is per-request work the loop can
            # skip. Errors (a 429 first of all) are always read.
            now = time.monotonic()
            if now >= rt.next_limits_check:
                rt.next_limits_check = now + LIMITS_CHECK_INTERVAL_S
                self._read_limits(rt, reply.headers, tries.est)
        self._store_reply(rt, tries, request, reply)

    def _store_reply(
        self, rt: ModelRuntime, tries: _Tries, request: _Request, reply: Reply
    ) -> None:
        """Record `reply` as the answer of this request of the trial."""
        self._record_reply(
            rt,
            tries.trial,
            tries.attempt,
            request.started,
            request.latency_ms,
            reply,
            tries.est_cost,
        )

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
        stops = _stops_model(cls, rt.config.outage_limit_s)
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
                self._store_reply(rt, tries, request, _checked(error.fallback))
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
        was starved (runner/loop_lag.py), else None. Past `max_attempts` such failures in one
        trial, a failure is what it is (a provider that truly hangs on a machine always starved
        still ends its trials)."""
        if cls.kind not in UNREACHABLE_KINDS or tries.stalled >= self.backoff.max_attempts:
            return None
        took, overdue = self.loop_lag.since(request.lag_mark)
        timeout_s = rt.config.timeout_s
        if not is_local_stall(overdue, took, timeout_s):
            return None
        stall = Classification(
            Verdict.RETRY,
            LOCAL_STALL,
            f"{cls.kind} while this machine's CPU was starved: the run's event loop was "
            f"{overdue:,.1f} s late in the request's {took:,.1f} s (timeout_s = {timeout_s:g}); "
            f"not counted against the provider ({cls.message})",
        )
        return stall, overdue

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
        self._attempt(
            rt,
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
        b = rt.breaker
        url = rt.provider.endpoint
        down = b.down_for(time.monotonic())
        if b.never_answered:
            self._fatal(
                rt,
                f"endpoint {url or '(no URL)'} has not answered since the run started "
                f"({down:,.0f} s): {b.cause}; check base_url and that the server is running",
            )
            return
        self._fatal(
            rt,
            f"endpoint unreachable for {down:,.0f} s "
            f"(outage_limit_s = {b.outage_limit_s:g}): {b.cause}" + (f" ({url})" if url else ""),
        )

    def _failing(self, rt: ModelRuntime, kind: str) -> None:
        """Count a failed attempt in the model's run of failures, for the progress display
        (which names the last error kind and the URL after a few in a row)."""
        s = rt.stats
        s.failing += 1
        s.last_error_kind = kind
        if s.endpoint is None:
            s.endpoint = rt.provider.endpoint

    # ------------------------------------------------------------------ recording

    def _read_limits(self, rt: ModelRuntime, headers: Mapping[str, str], est: int) -> None:
        """Adopt the rates a reply announces (see `_adopt_limits`) and, when one of its
        windows is used up, hold the endpoint until it can take the next request (estimated
        at `est` tokens) rather than send it into a 429. A model whose config sets both rpm
        and tpm is paced by those alone and never asks."""
        if rt.config.rpm is not None and rt.config.tpm is not None:
            return
        limits = rt.provider.limits_from_headers(headers)
        if limits is None:
            return
        self._adopt_limits(rt, limits)
        if limits.windows:
            rt.reads_limits = True
            hold = limits.hold_s(est)
            if hold > rt.config.outage_limit_s:  # a used-up window that resets in hours
                self._fatal(rt, _wait_beyond_limit(hold, rt.config.outage_limit_s, time.time()))
                return
            rt.limiter.pause(hold)

    def _learn_limits(self, rt: ModelRuntime, headers: Mapping[str, str]) -> None:
        """With no rpm/tpm configured, adopt the limits the provider announces (asked of the
        provider, which knows its own headers), once."""
        if rt.learnt_limits or (rt.config.rpm is not None and rt.config.tpm is not None):
            return
        limits = rt.provider.limits_from_headers(headers)
        if limits is not None:
            self._adopt_limits(rt, limits)

    def _adopt_limits(self, rt: ModelRuntime, limits: Limits) -> None:
        """Pace by the per-minute rates the provider announces, once, under the configured
        ones (a configured limit is a ceiling; which also ends adaptive concurrency and the
        learnt rate: the limiter then knows the rate, and the announced windows explain a 429).
        A model whose config sets both rpm and tpm is paced by those alone."""
        if rt.learnt_limits or (rt.config.rpm is not None and rt.config.tpm is not None):
            return
        if limits.empty:
            return
        rt.learnt_limits = True
        rt.limiter.set_limits(
            rpm=_lower(rt.config.rpm, limits.rpm), tpm=_lower(rt.config.tpm, limits.tpm)
        )

    def _fatal(self, rt: ModelRuntime, message: str) -> None:
        if rt.stats.fatal is None:
            rt.stats.fatal = message
            self.on_fatal(f"model {rt.config.id} stopped: {message}")

    def _attempt(
        self,
        rt: ModelRuntime,
        trial: Trial,
        attempt: int,
        started: float,
        latency_ms: float,
        status: int | None,
        cls: Classification | None,
        outcome: str,
    ) -> None:
        self.writer.add_attempt(
            AttemptRow(
                self.run_id,
                trial.trial_key,
                trial.model_id,
                attempt,
                started,
                latency_ms,
                status,
                cls.kind if cls else None,
                cls.message if cls else None,
                outcome,
            )
        )

    def _record_reply(
        self,
        rt: ModelRuntime,
        trial: Trial,
        attempt: int,
        started: float,
        latency_ms: float,
        reply: Reply,
        est_cost: float,
    ) -> None:
        """One attempt row, one response row and what its parser needs, appended to the
        writer's buffers as tuples; converting and serialising them (the raw body included)
        happens on the writer's thread."""
        cost = self._reply_cost(rt, reply, est_cost)
        key = trial.trial_key
        self.writer.add_attempt(
            AttemptRow(
                self.run_id,
                key,
                trial.model_id,
                attempt,
                started,
                latency_ms,
                reply.status,
                None,
                None,
                "ok",
            )
        )
        self.writer.add_response(
            response_row(key, self.run_id, trial.model_id, reply, cost, time.time(), reply.raw),
            Landed(
                key,
                trial.experiment,
                trial.item,
                reply_text(reply.content, reply.finish_reason, reply.refusal),
                reply.logprobs,
            )
            if trial.experiment in self._parsed
            else None,
        )
        _count_done(rt.stats, reply, cost)

    def _reply_cost(self, rt: ModelRuntime, reply: Reply, est_cost: float) -> float | None:
        """What the reply cost, from its token counts and the model's prices.

        Unknown (NULL) when either token count is (missing or invalid, see
        runner/providers/usage.py): a guessed 0 would read as free and let the budget spend
        past its cap. The budget counts such a reply at `est_cost`, its request's upper
        bound."""
        if reply.prompt_tokens is not None and reply.completion_tokens is not None:
            return rt.config.cost(
                reply.prompt_tokens,
                reply.completion_tokens,
                reply.cache_read_tokens,
                reply.cache_write_tokens,
            )
        self._unknown_cost += est_cost
        rt.stats.cost_unknown += 1
        return None


def _lower(configured: int | None, announced: int | None) -> int | None:
    """The lower of a configured and an announced rate (either may be unknown)."""
    if configured is None or announced is None:
        return configured if announced is None else announced
    return min(configured, announced)


def _count_done(stats: ModelStats, reply: Reply, cost: float | None) -> None:
    """Count a recorded reply in its model's progress: tokens, cost, the model the provider
    says answered (drift, said live by `ibias status`) and when."""
    stats.done += 1
    stats.prompt_tokens += reply.prompt_tokens or 0
    stats.completion_tokens += reply.completion_tokens or 0
    if cost is not None:
        stats.cost_usd += cost
    if reply.provider_model is not None:
        stats.reported.add(reply.provider_model)
    stats.last_done_at = time.monotonic()
    if stats.first_done_at is None:
        stats.first_done_at = stats.last_done_at

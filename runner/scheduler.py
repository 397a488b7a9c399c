"""Sends trials to models through each endpoint's limits, retrying what can be retried.

Each model has its own bounded queue, feeder and worker pool, so a slow or rate-limited
provider never holds back the others, and each model walks the same interleaved plan order, so
whatever point a run is interrupted at, every model's finished trials form a balanced prefix of
the design. Memory is bounded by the queues, not by the size of the grid.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ibias.runner.config import ModelConfig
from ibias.runner.limits import EndpointLimiter
from ibias.runner.plan import Trial
from ibias.runner.providers.base import Provider, ProviderError, Reply, Sampling
from ibias.runner.retries import Backoff, Classification, Verdict
from ibias.store.derived import reply_text
from ibias.store.writer import AttemptRow, Landed, ResponseRow, Writer, raw_json


@dataclass
class ModelStats:
    """Live counters for one model (mutable state read by progress and the status file)."""

    model_id: str
    total: int = 0
    done: int = 0
    done_before: int = 0
    requests: int = 0
    retries: int = 0
    errors: int = 0
    failed: int = 0
    rate_limited: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    fatal: str | None = None
    finished: bool = False
    first_done_at: float | None = None


@dataclass
class ModelRuntime:
    config: ModelConfig
    provider: Provider
    limiter: EndpointLimiter
    stats: ModelStats
    queue: asyncio.Queue[Trial | None] = field(default_factory=lambda: asyncio.Queue(1))
    learnt_limits: bool = False


def estimate_tokens(trial: Trial, max_tokens: int) -> int:
    """Rough pre-request token count (4 characters a token) plus the completion budget.

    Providers reserve max_tokens against TPM, so the estimate includes it; the limiter is
    corrected from the reported usage afterwards.
    """
    chars = sum(len(m.get("content", "")) + 8 for m in trial.messages)
    return math.ceil(chars / 4) + max_tokens


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
        grace_s: float = 10.0,
        on_fatal: Callable[[str], None] = lambda line: None,
        rng: random.Random | None = None,
    ) -> None:
        self.run_id = run_id
        self.runtimes = runtimes
        self.writer = writer
        self.backoff = backoff
        self.max_cost = max_cost
        self.grace_s = grace_s
        self.on_fatal = on_fatal
        self.rng = rng or random.Random()
        self.stop_event = asyncio.Event()
        self.stop_reason: str | None = None
        self._in_flight = 0
        self._reserved_cost = 0.0

    # ------------------------------------------------------------------ control

    def request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self.stop_event.set()

    @property
    def spent(self) -> float:
        return sum(rt.stats.cost_usd for rt in self.runtimes)

    # ------------------------------------------------------------------ running

    async def run(self, source: Callable[[ModelRuntime], Iterator[Trial]]) -> None:
        tasks: list[asyncio.Task[None]] = []
        for rt in self.runtimes:
            n_workers = rt.config.max_concurrency
            rt.queue = asyncio.Queue(maxsize=max(2 * n_workers, 16))
            tasks.append(asyncio.create_task(self._feed(rt, source(rt), n_workers)))
            tasks.extend(asyncio.create_task(self._work(rt)) for _ in range(n_workers))
        waiter: asyncio.Future[Any] = asyncio.create_task(self.stop_event.wait())
        everything: asyncio.Future[Any] = asyncio.gather(*tasks)
        await asyncio.wait([waiter, everything], return_when=asyncio.FIRST_COMPLETED)
        if not everything.done():
            await self._drain(tasks)
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await everything
        for rt in self.runtimes:
            rt.stats.finished = True

    async def _drain(self, tasks: list[asyncio.Task[None]]) -> None:
        """After a stop: let in-flight requests finish for a while, then cancel the rest."""
        deadline = time.monotonic() + self.grace_s
        while self._in_flight > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _feed(self, rt: ModelRuntime, trials: Iterator[Trial], n_workers: int) -> None:
        # No try/finally: when cancelled (after a stop's grace period) the workers are
        # cancelled too, and waiting to hand them end markers would block forever.
        for i, trial in enumerate(trials):
            if self.stop_event.is_set() or rt.stats.fatal:
                break
            await rt.queue.put(trial)
            if i % 256 == 255:
                await asyncio.sleep(0)  # planning is CPU work: let requests through
        for _ in range(n_workers):
            await rt.queue.put(None)

    async def _work(self, rt: ModelRuntime) -> None:
        while True:
            trial = await rt.queue.get()
            if trial is None:
                return
            if rt.stats.fatal or self.stop_event.is_set():
                continue
            await self._process(rt, trial)

    async def _process(self, rt: ModelRuntime, trial: Trial) -> None:
        cfg = rt.config
        sampling = Sampling.from_params(trial.params)
        est = estimate_tokens(trial, cfg.max_tokens)
        est_cost = cfg.cost(est - cfg.max_tokens, cfg.max_tokens)
        attempt = 0
        while True:
            attempt += 1
            if self.stop_event.is_set() or rt.stats.fatal:
                return
            if self.max_cost is not None and self.spent + self._reserved_cost >= self.max_cost:
                self.request_stop(f"budget of ${self.max_cost:.2f} reached")
                return
            permit = await rt.limiter.acquire(est)
            if self.stop_event.is_set() or rt.stats.fatal:
                rt.limiter.release(permit, 0)
                return
            started = datetime.now(UTC)
            t0 = time.perf_counter()
            self._in_flight += 1
            self._reserved_cost += est_cost
            rt.stats.requests += 1
            reply: Reply | None = None
            error: ProviderError | None = None
            try:
                reply = await rt.provider.complete(trial.messages, sampling)
            except ProviderError as exc:
                error = exc
            except asyncio.CancelledError:
                rt.limiter.release(permit, None)
                raise
            except Exception as exc:  # a provider bug must not kill the run: retry, recorded
                error = ProviderError(rt.provider.classify_exception(exc))
            finally:
                self._in_flight -= 1
                self._reserved_cost -= est_cost
            latency_ms = (time.perf_counter() - t0) * 1000
            if reply is not None:
                used = None
                if reply.prompt_tokens is not None and reply.completion_tokens is not None:
                    used = reply.prompt_tokens + reply.completion_tokens
                rt.limiter.release(permit, used)
                self._learn_limits(rt, reply.headers)
                self._record_reply(rt, trial, attempt, started, latency_ms, reply)
                return
            assert error is not None
            rt.limiter.release(permit, None)
            self._learn_limits(rt, error.headers)
            cls = error.classification
            if cls.verdict is Verdict.FATAL:
                self._attempt(rt, trial, attempt, started, latency_ms, error.status, cls, "fatal")
                self._fatal(rt, cls)
                return
            rt.stats.errors += 1
            if cls.is_rate_limit:
                rt.stats.rate_limited += 1
                rt.limiter.pause(cls.delay_hint_s or self.backoff.window(attempt))
            if self.backoff.exhausted(attempt):
                self._attempt(rt, trial, attempt, started, latency_ms, error.status, cls, "gave_up")
                rt.stats.failed += 1
                return
            self._attempt(rt, trial, attempt, started, latency_ms, error.status, cls, "retry")
            rt.stats.retries += 1
            delay = self.backoff.delay(attempt, cls.delay_hint_s, self.rng)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop_event.wait(), timeout=delay)

    # ------------------------------------------------------------------ recording

    def _learn_limits(self, rt: ModelRuntime, headers: Mapping[str, str]) -> None:
        """With no rpm/tpm configured, adopt the limits the provider announces (asked of the
        provider, which knows its own headers), once."""
        if rt.learnt_limits or (rt.config.rpm is not None and rt.config.tpm is not None):
            return
        limits = rt.provider.limits_from_headers(headers)
        if limits is None or limits.empty:
            return
        rt.learnt_limits = True
        rt.limiter.set_limits(
            rpm=rt.config.rpm if rt.config.rpm is not None else limits.rpm,
            tpm=rt.config.tpm if rt.config.tpm is not None else limits.tpm,
        )

    def _fatal(self, rt: ModelRuntime, cls: Classification) -> None:
        if rt.stats.fatal is None:
            rt.stats.fatal = cls.message
            self.on_fatal(f"model {rt.config.id} stopped: {cls.message}")

    def _attempt(
        self,
        rt: ModelRuntime,
        trial: Trial,
        attempt: int,
        started: datetime,
        latency_ms: float,
        status: int | None,
        cls: Classification | None,
        outcome: str,
    ) -> None:
        self.writer.add_attempt(
            AttemptRow(
                run_id=self.run_id,
                trial_key=trial.trial_key,
                model_id=trial.model_id,
                attempt_no=attempt,
                started_at=started,
                latency_ms=latency_ms,
                http_status=status,
                error_kind=cls.kind if cls else None,
                error_message=cls.message if cls else None,
                outcome=outcome,
            )
        )

    def _record_reply(
        self,
        rt: ModelRuntime,
        trial: Trial,
        attempt: int,
        started: datetime,
        latency_ms: float,
        reply: Reply,
    ) -> None:
        cfg = rt.config
        cost = cfg.cost(reply.prompt_tokens or 0, reply.completion_tokens or 0)
        self._attempt(rt, trial, attempt, started, latency_ms, reply.status, None, "ok")
        self.writer.add_response(
            ResponseRow(
                trial_key=trial.trial_key,
                run_id=self.run_id,
                model_id=trial.model_id,
                provider_model=reply.provider_model,
                content=reply.content,
                refusal=reply.refusal,
                finish_reason=reply.finish_reason,
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                cost_usd=cost,
                system_fingerprint=reply.system_fingerprint,
                received_at=datetime.now(UTC),
                raw=raw_json(reply.raw),
            ),
            Landed(
                trial_key=trial.trial_key,
                experiment=trial.experiment,
                item=dict(trial.item),
                content=reply_text(reply.content, reply.finish_reason, reply.refusal),
            ),
        )
        s = rt.stats
        s.done += 1
        s.prompt_tokens += reply.prompt_tokens or 0
        s.completion_tokens += reply.completion_tokens or 0
        s.cost_usd += cost
        if s.first_done_at is None:
            s.first_done_at = time.monotonic()

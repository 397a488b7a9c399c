"""A run's requests: the online models through the scheduler (with the writer, the progress
display and the status ticker living exactly as long as it), the batch models through their
provider's batch API around it, and a rehearsal's simulator started first for both.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from ibias.runner.batch.run import BatchOptions, BatchOutcome, batch_models, online_config
from ibias.runner.batch.run import run as batch_run
from ibias.runner.config import Config, ModelConfig
from ibias.runner.execution import phase_hook
from ibias.runner.execution.run_context import RunContext
from ibias.runner.execution.run_result import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    RunResult,
    summary,
)
from ibias.runner.progress import Progress
from ibias.runner.providers.base import ProviderContext
from ibias.runner.providers.registry import ProviderFactory
from ibias.runner.scheduling.limits import PACING_SLACK_S, EndpointLimiter
from ibias.runner.scheduling.loop_lag import LoopLag
from ibias.runner.scheduling.scheduler import ModelRuntime, ModelStats, Scheduler
from ibias.runner.status import snapshot, try_write_status
from ibias.store.derived import parse_landed
from ibias.store.plans import Pending, StoredPlan, remaining
from ibias.store.writer import Writer

if TYPE_CHECKING:
    from ibias.runner.execution.rehearsal import Rehearsal
    from ibias.runner.simulator.provider import LoopbackSimulator


async def schedule_all(
    ctx: RunContext,
    config: Config,
    plan: StoredPlan,
    stats: dict[str, ModelStats],
    spent: float,
) -> RunResult:
    """The online models through the scheduler; the batch models (runner/batch/), when the
    run or a model's `mode` asks for batches, through their provider's batch API around it.
    A rehearsal starts its simulator first: its batch and online models all talk to it."""
    rehearsal = ctx.options.rehearsal
    if rehearsal is None:
        return await _schedule_models(ctx, config, plan, stats, spent, None)
    from ibias.runner.simulator.provider import LoopbackSimulator

    sim = LoopbackSimulator(rehearsal.profile(config))
    try:
        await sim.url()
        ctx.say(
            f"rehearsal: {_models(len(config.models))} answered by ibias's simulator on "
            + ("its own protocol" if len(config.models) == 1 else "their own protocols")
            + ", no key, no network"
            + (
                f"; --speed {rehearsal.speed:g}: limits x{rehearsal.speed:g}, latencies "
                f"/{rehearsal.speed:g}, so the ETAs shown are {rehearsal.speed:g} times shorter "
                "than the real run's"
                if rehearsal.speed != 1
                else ""
            )
        )
        return await _schedule_models(ctx, config, plan, stats, spent, sim)
    finally:
        with anyio.CancelScope(shield=True):
            await sim.stop()


async def _schedule_models(
    ctx: RunContext,
    config: Config,
    plan: StoredPlan,
    stats: dict[str, ModelStats],
    spent: float,
    rehearsal_sim: LoopbackSimulator | None,
) -> RunResult:
    """`_schedule_all` once the rehearsal's simulator (if any) listens."""
    batch_options = ctx.options.batch or BatchOptions()
    batched, online_lines = batch_models(config, batch_options.forced)
    for line in online_lines:
        ctx.say(line)
    if not batched:
        return await _schedule(ctx, config, plan, stats, spent, rehearsal_sim)
    online = online_config(config, batched)
    results: list[RunResult] = []
    batch_base = None
    rehearsal = ctx.options.rehearsal
    if rehearsal is not None and rehearsal_sim is not None:
        batch_base = rehearsal.batch_base(await rehearsal_sim.url())
        # The simulator's batches move on as they are polled: the waits between polls are
        # sped up with the rest of the rehearsal.
        batch_options = replace(
            batch_options, sleep=functools.partial(_sped_up_sleep, batch_options.sleep, rehearsal)
        )

    async def run_online(committed: float) -> None:
        if online.models:
            results.append(
                await _schedule(ctx, online, plan, stats, spent + committed, rehearsal_sim)
            )

    outcome = await batch_run(
        ctx.con,
        plan,
        ctx.run_id,
        batched,
        ctx.keys,
        stats,
        batch_options,
        ctx.stop,
        ctx.say,
        online=run_online,
        max_cost=ctx.options.max_cost,
        spent=spent,
        base_url=batch_base,
    )
    base = results[0] if results else summary(None, list(stats.values()))
    return _batched_result(ctx, stats, base, outcome)


def _batched_result(
    ctx: RunContext, stats: dict[str, ModelStats], base: RunResult, outcome: BatchOutcome
) -> RunResult:
    """A run with batch models: the online part's result (`base`) and the batches' outcome
    as one result and one final status."""
    lines = (*base.lines, *outcome.lines)
    if base.exit_code == EXIT_INTERRUPTED or outcome.interrupted:
        ctx.status("interrupted", stats)
        reason = ctx.stop.reason or "interrupted"
        return RunResult(EXIT_INTERRUPTED, (*lines, f"{reason}: results so far are stored"))
    ctx.status("finished", stats)
    if base.exit_code != EXIT_OK or outcome.failed:
        return RunResult(EXIT_FAILED, lines)
    return RunResult(EXIT_OK, lines)


async def _sped_up_sleep(
    sleep: Callable[[float], Awaitable[None]], rehearsal: Rehearsal, seconds: float
) -> None:
    await sleep(rehearsal.sleep(seconds))


async def _schedule(
    ctx: RunContext,
    config: Config,
    plan: StoredPlan,
    stats: dict[str, ModelStats],
    spent_before: float = 0.0,
    rehearsal_sim: LoopbackSimulator | None = None,
) -> RunResult:
    """`config`'s models through the scheduler, each streaming what is left of `plan`; the
    writer, the progress display and the status ticker live exactly as long as it. Whatever
    ends it, what was answered is written and every provider closed. In a rehearsal every
    provider is built as in a real run, then sent to `rehearsal_sim` (its owner stops it)."""
    sim = rehearsal_sim or _loopback_simulator(config)
    factory = await _factory(ctx, rehearsal_sim)
    runtimes: list[ModelRuntime] = []
    writer = Writer(
        ctx.con, on_landed=parse_landed, guard=ctx.guard, before_commit=phase_hook.flush_hook()
    )
    loop_lag = LoopLag()  # the scheduler ticks it; progress says what it excused
    progress = Progress(
        [stats[m.id] for m in config.models],
        quiet=ctx.options.quiet,
        loop_lag=loop_lag,
        stop=ctx.stop,
        speed=1.0 if ctx.options.rehearsal is None else ctx.options.rehearsal.speed,
    )
    try:
        context = ProviderContext(simulator=sim)
        await _start_providers(ctx, config, context, stats, runtimes, factory)
        scheduler = Scheduler(
            run_id=ctx.run_id,
            runtimes=runtimes,
            writer=writer,
            backoff=ctx.options.backoff,
            max_cost=ctx.options.max_cost,
            spent_before=spent_before,
            grace_s=ctx.stop.grace_s,
            on_fatal=ctx.say,
            loop_lag=loop_lag,
        )
        # A failed write stops scheduling before any other task runs: no request starts after
        # it; the writer's error then ends the task group (in-flight requests are cancelled).
        writer.on_failure = lambda failure: scheduler.request_stop(str(failure))
        # A stop from outside: the table stays as it was and the run says it is stopping.
        scheduler.on_interrupt = progress.interrupted
        progress.start()
        async with anyio.create_task_group() as run:
            run.start_soon(writer.run)
            run.start_soon(_tick, ctx, progress, stats)
            await scheduler.run(functools.partial(_remaining_trials, ctx, plan), ctx.stop)
            await writer.close()
            run.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _close_schedule(
                ctx, writer, runtimes, None if rehearsal_sim else sim, progress, stats
            )
    ctx.status("interrupted" if scheduler.interrupted else "finished", stats)
    causes = {rt.config.id: rt.last_failure for rt in runtimes if rt.last_failure}
    return summary(scheduler, list(stats.values()), causes)


async def _factory(ctx: RunContext, rehearsal_sim: LoopbackSimulator | None) -> ProviderFactory:
    """The run's provider factory; a rehearsal's sends each provider to its simulator."""
    if ctx.options.rehearsal is None or rehearsal_sim is None:
        return ctx.factory
    return ctx.options.rehearsal.factory(ctx.factory, await rehearsal_sim.url())


def _loopback_simulator(config: Config) -> LoopbackSimulator | None:
    """The loopback simulator, made only if a `simulator` model may ask for its URL (never
    with injected providers); its module is loaded only when a model names it."""
    if not any(m.provider == "simulator" for m in config.models):
        return None
    from ibias.runner.simulator.provider import LoopbackSimulator

    return LoopbackSimulator.for_models(config.run.seed, config.models)


async def _start_providers(
    ctx: RunContext,
    config: Config,
    context: ProviderContext,
    stats: dict[str, ModelStats],
    runtimes: list[ModelRuntime],
    factory: ProviderFactory,
) -> None:
    """Make and start each model's provider and limiter into `runtimes` (the caller's list,
    so a provider whose start fails is still closed with the others)."""
    concurrency = ctx.options.concurrency
    for m in config.models:
        cfg = m if concurrency is None else _with_concurrency(m, concurrency)
        provider = factory(cfg, ctx.keys[m.id], context)
        runtimes.append(
            ModelRuntime(
                config=cfg,
                provider=provider,
                limiter=EndpointLimiter(
                    rpm=m.rpm,
                    tpm=m.tpm,
                    max_concurrency=cfg.max_concurrency,
                    adaptive=True,  # while no rate is configured or announced
                    burst_s=PACING_SLACK_S,  # a loaded loop's late wake-ups made up
                ),
                stats=stats[m.id],
            )
        )
        await provider.start()


async def _tick(ctx: RunContext, progress: Progress, stats: dict[str, ModelStats]) -> None:
    """Once a second: redraw the progress display and rewrite the status file."""
    while True:
        await anyio.sleep(1.0)
        progress.tick()
        try_write_status(ctx.status_file, ctx.snapshot("running", stats))


def _remaining_trials(
    ctx: RunContext, plan: StoredPlan, rt: ModelRuntime
) -> Iterator[list[Pending]]:
    """The model's trials still without a response, in plan order, in batches. Each model
    streams on a cursor of its own, while the writer inserts on the run's connection."""
    cursor = ctx.con.cursor()
    try:
        yield from remaining(cursor, plan, rt.config.id, guard=ctx.guard)
    finally:
        cursor.close()


async def _close_schedule(
    ctx: RunContext,
    writer: Writer,
    runtimes: list[ModelRuntime],
    sim: LoopbackSimulator | None,
    progress: Progress,
    stats: dict[str, ModelStats],
) -> None:
    """The last write (after an error too: what was answered is kept), then, even when that
    write fails, every provider and the simulator closed; a run its writer ended gets the
    `failed` status."""
    try:
        await writer.close()
    finally:
        for rt in runtimes:
            await rt.provider.close()
        if sim is not None:
            await sim.stop()
        progress.stop()
        if writer.failure is not None:
            _failed_status(ctx.status_file, ctx.run_id, ctx.started_at, stats, writer)


def _failed_status(
    path: Path, run_id: str, started_at: datetime, stats: dict[str, ModelStats], writer: Writer
) -> None:
    """The final status of a run its writer ended: `failed`, the error, and as `done` what
    was stored (replies still buffered when the write failed were not)."""
    for model_id, s in stats.items():
        s.done = writer.stored_by_model.get(model_id, 0)
    error = None if writer.failure is None else str(writer.failure)
    try_write_status(path, snapshot(run_id, "failed", started_at, stats.values(), error=error))


def _with_concurrency(m: ModelConfig, concurrency: int) -> ModelConfig:
    return replace(m, max_concurrency=concurrency)


def _models(n: int) -> str:
    return "1 model" if n == 1 else f"{n:,} models"

"""`ibias run`: config -> plan -> store.trials -> scheduler -> store, resumable.

Order matters for crash safety: the run row and every planned trial are committed before the
first request, so the store always knows the whole plan; responses then land through the single
writer. Resume is the default: trials with a stored response are skipped.

A plan is made once. Its hash covers every input of the plan (runner/plan.py); a run whose hash
matches a completed plan in the store skips planning, and every run, planned or not, reads what
is left of the plan from the store with one anti-join per model, in plan order, so no trial is
generated or keyed twice.

The run's lifetime is one anyio task group (writer, status ticker, scheduler). It installs no
signal handlers: a caller stops it through a `Stop` (the CLI requests it on SIGINT, SIGTERM and
SIGHUP; the Python API and tests call `Stop.request()`), and providers come from a
`ProviderFactory` (by default the registry), so tests can inject in-process providers.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import duckdb

from ibias.prompts import registry
from ibias.prompts.base import Experiment, stable_hash
from ibias.runner import phase_hook
from ibias.runner.batch.run import BatchOptions, BatchOutcome, batch_models, online_config
from ibias.runner.batch.run import run as batch_run
from ibias.runner.config import Config, ConfigFileError, ModelConfig
from ibias.runner.console import literal
from ibias.runner.limits import PACING_SLACK_S, EndpointLimiter
from ibias.runner.loop_lag import LoopLag, starved_note
from ibias.runner.money import usd
from ibias.runner.plan import (
    build_experiments,
    plan_batches,
    plan_hash,
    plan_inputs,
    store_files,
)
from ibias.runner.progress import Progress
from ibias.runner.providers.base import ProviderContext
from ibias.runner.providers.registry import ProviderFactory, create_provider
from ibias.runner.redact import secrets_scope
from ibias.runner.rehearsal import check_store, sim_table_note
from ibias.runner.retries import Backoff
from ibias.runner.scheduler import ModelRuntime, ModelStats, Scheduler
from ibias.runner.status import snapshot, span, status_path, try_write_status, write_status
from ibias.runner.stop import Stop
from ibias.store.arrow_scan import registered
from ibias.store.db import close_store, defer_final_checkpoint, open_store
from ibias.store.derived import parse_landed
from ibias.store.live import LiveServer
from ibias.store.lock import StoreLock, shown_path
from ibias.store.memory import MemoryGuard
from ibias.store.plans import (
    PROMPT_CHARS_SQL,
    Pending,
    StoredPlan,
    find_plan,
    has_trials,
    insert_planned,
    plan_progress,
    record_plan,
    remaining,
)
from ibias.store.writer import StoreWriteError, Writer, is_write_failure, write_failure

if TYPE_CHECKING:
    from ibias.runner.providers.simulator import LoopbackSimulator
    from ibias.runner.rehearsal import Rehearsal

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
TRIAL_BATCH = 5000
DUCKDB_MEMORY_LIMIT = "192MB"


@dataclass(frozen=True)
class RunOptions:
    store: Path
    max_cost: float | None = None
    concurrency: int | None = None
    quiet: bool = False
    #: Seconds in-flight requests get after a stop; None: the config's `[run].grace_s`.
    grace_s: float | None = None
    backoff: Backoff = field(default_factory=Backoff)
    #: Provider batches (`--batch`, `--no-wait`; runner/batch/): None reads each model's
    #: `mode` only (a model with `mode = "batch"` still runs in batch mode).
    batch: BatchOptions | None = None
    #: `--rehearse` (and `--speed`): every model answered by the in-process simulator on its
    #: own protocol, into a store marked a rehearsal's (runner/rehearsal.py); None: a real run.
    rehearsal: Rehearsal | None = None


@dataclass(frozen=True)
class RunResult:
    """How the run ended: its exit code, the lines to show, and where its time went
    (`timings`, seconds: `open` the store, hash the plan's `inputs`, find or make the `plan`,
    count its `totals`, `schedule` the requests, and the run's `total`; `planned` is 1.0 when
    this run planned and 0.0 when it found the plan in the store)."""

    exit_code: int
    lines: tuple[str, ...]
    timings: Mapping[str, float] = field(default_factory=dict)


def ibias_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ibias")
    except PackageNotFoundError:
        return "0+unknown"


def git_rev() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def check_keys(config: Config, environ: Mapping[str, str]) -> dict[str, str | None]:
    """API keys by model id, from the environment. Missing variables are one config error
    naming all of them (only the config's models: a `--model` selection asks for its own)."""
    keys: dict[str, str | None] = {}
    missing: list[tuple[str, str]] = []
    for m in config.models:
        if m.api_key_env is None:
            keys[m.id] = None
            continue
        value = environ.get(m.api_key_env)
        if not value:
            missing.append((m.api_key_env, m.id))
            continue
        keys[m.id] = value
    if len(missing) == 1:
        raise ConfigFileError(
            f"{config.path}: environment variable {missing[0][0]} is not set "
            f"(needed by model {missing[0][1]!r})"
        )
    if missing:
        raise ConfigFileError(
            f"{config.path}: {len(missing)} environment variables are not set: "
            + ", ".join(f"{env} (model {model_id!r})" for env, model_id in missing)
            + " (export them, or run only some models with --model ID)"
        )
    return keys


def _record_run(
    con: duckdb.DuckDBPyConnection, run_id: str, config: Config, planned_from: str, rev: str | None
) -> None:
    con.execute(
        "INSERT INTO runs (run_id, started_at, config, config_hash, version, git_rev, command, "
        "plan_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            run_id,
            datetime.now(UTC),
            config.text,
            stable_hash(config.text),
            ibias_version(),
            rev,
            shown_path(" ".join([Path(sys.argv[0]).name, *sys.argv[1:]])),  # bytes kept as \xNN
            planned_from,
        ],
    ).fetchall()


def _record_end(con: duckdb.DuckDBPyConnection, run_id: str, exit_status: int) -> None:
    """When the run ended and its exit code (migration 011): the report's "from ... to ..."
    and a reader's "did it finish?". Best effort: a store that refuses this write (a full
    disk) already failed the run with its own message, which this must not replace."""
    with contextlib.suppress(duckdb.Error):
        con.execute(
            "UPDATE runs SET ended_at = ?, exit_status = ? WHERE run_id = ?",
            [datetime.now(UTC), exit_status, run_id],
        ).fetchall()


def _insert_patients(con: duckdb.DuckDBPyConnection, config: Config) -> None:
    """The roster rows of every configured experiment that has one."""
    rows: list[dict[str, object]] = []
    for name, table in config.experiments.items():
        roster = registry.unit(name).capability(registry.Roster)
        if roster is not None:
            rows += roster.rows(table, config.run.seed, config.base_dir)
    if not rows:
        return
    import pyarrow as pa

    batch = pa.Table.from_pylist(rows)
    with registered(con, "_patients", batch):
        con.execute(
            "INSERT INTO patients SELECT roster_id, person_id, language, name, age, "
            "sex_assigned_at_birth, gender_identity FROM _patients p WHERE NOT EXISTS "
            "(SELECT 1 FROM patients q WHERE q.roster_id = p.roster_id "
            "AND q.person_id = p.person_id AND q.language = p.language)"
        ).fetchall()


class PlanningInterrupted(Exception):
    """A stop was requested while planning; the batches committed so far stay in the store."""

    def __init__(self, planned: int, stats: dict[str, ModelStats]) -> None:
        super().__init__(f"interrupted while planning after {planned:,} trials")
        self.planned = planned
        self.stats = stats


async def plan_into_store(
    con: duckdb.DuckDBPyConnection,
    plan: StoredPlan,
    run_id: str,
    experiments: list[Experiment],
    models: tuple[ModelConfig, ...],
    *,
    fresh: bool,
    stop: Stop | None = None,
    on_batch: Callable[[dict[str, ModelStats]], None] | None = None,
) -> int:
    """Store every trial of the plan (streaming, in batches); returns how many it has.

    Each batch is generated and inserted in a worker thread, so the loop stays free to receive
    a stop, and the stop is checked between batches: planning a large grid can take a while,
    and an interrupt must not wait for it nor cut a batch in half. Each batch commits on its
    own: one transaction over a million trials would hold them all in memory, and a
    half-planned store is harmless (the next run plans again and skips keys already there).
    """
    stats = {m.id: ModelStats(model_id=m.id) for m in models}
    batches = plan_batches(experiments, models, TRIAL_BATCH)
    planned = 0

    def next_batch() -> int | None:
        batch = next(batches, None)
        if batch is None:
            return None
        insert_planned(con, plan, run_id, batch.columns(), fresh=fresh)
        phase_hook.reached("planning")
        return len(batch)

    while (n := await anyio.to_thread.run_sync(next_batch)) is not None:
        planned += n
        for s in stats.values():  # a batch holds whole specs: every model has n / models
            s.total += n // len(models)
        if on_batch is not None:
            on_batch(stats)
        if stop is not None and stop.requested:
            raise PlanningInterrupted(planned, stats)
    return planned


async def prepare_plan(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    run_id: str,
    experiments: list[Experiment],
    inputs: dict[str, str],
    *,
    stop: Stop | None = None,
    on_batch: Callable[[dict[str, ModelStats]], None] | None = None,
) -> tuple[StoredPlan, bool]:
    """The completed plan for `inputs`: found in the store, or planned now (True)."""
    digest = plan_hash(inputs)
    found = find_plan(con, digest)
    if found is not None and found.complete:
        return found, False
    _insert_patients(con, config)
    record_plan(con, digest, run_id, "started", inputs)
    plan = StoredPlan(
        plan_hash=digest,
        runs=(*(found.runs if found else ()), run_id),
        complete=False,
        reused=found.reused if found else False,
    )
    fresh = not has_trials(con)
    n = await plan_into_store(
        con, plan, run_id, experiments, config.models, fresh=fresh, stop=stop, on_batch=on_batch
    )
    record_plan(con, digest, run_id, "complete", inputs, trials=n)
    done = find_plan(con, digest)
    assert done is not None and done.complete
    return done, True


async def execute(
    config: Config,
    options: RunOptions,
    environ: Mapping[str, str] | None = None,
    say: Callable[[str], None] = lambda line: print(literal(line), file=sys.stderr, flush=True),
    *,
    provider_factory: ProviderFactory | None = None,
    stop: Stop | None = None,
) -> RunResult:
    """Plan `config` into the store and request every trial without a response.

    `provider_factory` builds each model's provider (default: the registry, by the config's
    `provider`); `stop` lets the caller interrupt the run (planning or scheduling) and get exit
    code 130 with everything done so far stored. No signal handler is installed here.
    """
    if options.rehearsal is not None:
        # No key is read: each model that names one gets a dummy (only in its session's
        # headers); the limits are sped up, nothing that plans or keys a trial changes.
        keys = options.rehearsal.keys(config)
        config = options.rehearsal.config(replace(config, rehearsal=True))
    else:
        keys = check_keys(config, os.environ if environ is None else environ)
        note = sim_table_note(config)
        if note is not None:
            say(note)
    stop = stop or Stop()
    stop.grace_s = config.run.grace_s if options.grace_s is None else options.grace_s
    options = replace(options, grace_s=stop.grace_s)
    store = options.store
    lock = StoreLock(store)
    lock.acquire()
    try:
        # Every error message made during the run is redacted of these keys (runner/redact.py).
        with _fewer_collections(), secrets_scope(keys.values()):
            return await _execute_locked(
                config,
                options,
                keys,
                say,
                provider_factory or create_provider,
                stop,
            )
    except BaseExceptionGroup as group:
        first = _first_error(group)
        # One error reads as itself (the CLI names it in one line); several keep the whole
        # group as the cause, for IBIAS_DEBUG tracebacks.
        raise first from (None if _count_errors(group) == 1 else group)
    finally:
        lock.release()


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first error inside (nested) task-group wrappers."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def _count_errors(error: BaseException) -> int:
    if isinstance(error, BaseExceptionGroup):
        return sum(_count_errors(e) for e in error.exceptions)
    return 1


@dataclass(frozen=True)
class _RunContext:
    """What every step of one run shares, made once the store is open: the caller's options
    and hooks, the store and its memory guard, and the run's identity. Passed whole rather
    than as a dozen arguments, so each step's signature names only what varies between its
    calls (the models, the plan, the budget already spent)."""

    options: RunOptions
    keys: dict[str, str | None]
    say: Callable[[str], None]
    factory: ProviderFactory
    stop: Stop
    con: duckdb.DuckDBPyConnection
    guard: MemoryGuard
    run_id: str
    started_at: datetime
    status_file: Path

    def status(self, state: str, stats: Mapping[str, ModelStats]) -> None:
        """Write the run's status file (what `ibias status` reads) in `state`."""
        write_status(self.status_file, self.snapshot(state, stats))

    def snapshot(self, state: str, stats: Mapping[str, ModelStats]) -> dict[str, Any]:
        """The status file's content in `state`; a rehearsal's says so, with its speed (so
        `ibias status` gives the ETA in real time too)."""
        data = snapshot(self.run_id, state, self.started_at, stats.values())
        if self.options.rehearsal is not None:
            data["rehearsal"] = {"speed": self.options.rehearsal.speed}
        return data


async def _execute_locked(
    config: Config,
    options: RunOptions,
    keys: dict[str, str | None],
    say: Callable[[str], None],
    factory: ProviderFactory,
    stop: Stop,
) -> RunResult:
    """The run, with the store's lock held: open the store, record the run, find or make its
    plan, then request what is left of it. The run's row always gets its exit status (an
    error that escapes is exit 2, the CLI's); a write the store refuses before scheduling ends
    the run in one line (`_refused_write`)."""
    clock = _Clock()
    con, live, guard = _open_for_run(options.store)
    clock.lap("open")
    ctx = _RunContext(options, keys, say, factory, stop, con, guard, *_new_run(options.store))
    exit_status = EXIT_BAD_INPUT
    run_recorded = False
    try:
        check_store(con, options.store, rehearse=options.rehearsal is not None)  # before writing
        experiments = build_experiments(config)
        inputs, revision = await _inputs_and_revision(config, experiments, options.store)
        clock.lap("inputs")
        _record_run(con, ctx.run_id, config, plan_hash(inputs), revision)
        run_recorded = True
        ctx.status("planning", {})
        try:
            plan, planned = await prepare_plan(
                con,
                config,
                ctx.run_id,
                experiments,
                inputs,
                stop=stop,
                on_batch=lambda partial: ctx.status("planning", partial),
            )
        except PlanningInterrupted as exc:
            result = _planning_interrupted(ctx, exc, clock)
            exit_status = result.exit_code
            return result
        clock.lap("plan")
        stats, spent = await _progress_so_far(ctx, config, plan)
        clock.lap("totals")
        result = await _request_what_is_left(ctx, config, plan, stats, spent)
        clock.lap("schedule")
        exit_status = result.exit_code
        if options.rehearsal is not None:
            result = _rehearsal_result(result, options.rehearsal, clock.laps["schedule"])
        return replace(result, timings=clock.timings(planned=planned))
    except Exception as exc:
        failure = _refused_write(ctx, exc)
        if failure is None:
            raise
        raise failure from exc
    finally:
        if live is not None:
            live.close()
        if run_recorded:
            _record_end(con, ctx.run_id, exit_status)
        close_store(con, stopped=exit_status == EXIT_INTERRUPTED)


def _new_run(store: Path) -> tuple[str, datetime, Path]:
    """A new run's id, start time and status file."""
    return uuid.uuid4().hex, datetime.now(UTC), status_path(store)


def _open_for_run(
    store: Path,
) -> tuple[duckdb.DuckDBPyConnection, LiveServer | None, MemoryGuard]:
    """The store opened (created if new) for a run, the server of its live readers, and the
    guard of DuckDB's memory between them."""
    con = open_store(store, create=True)
    # The writer only appends; DuckDB's default cache (80% of RAM) would just hold written
    # blocks, so cap it and keep a long run's footprint flat.
    con.execute(f"SET memory_limit = '{DUCKDB_MEMORY_LIMIT}'").fetchall()
    defer_final_checkpoint(con)  # a stopped run leaves it to the next open (`close_store`)
    # Serves `ibias sql/status/plan/analyze` sandboxed snapshots while the run holds the store.
    live = LiveServer.start(con, store)
    # The run's own queries come first for DuckDB's memory: they take turns, and one that
    # finds the pool full interrupts the served readers and tries again (store/memory.py).
    guard = MemoryGuard(live.relieve if live is not None else None)
    return con, live, guard


async def _inputs_and_revision(
    config: Config, experiments: Sequence[Experiment], store: Path
) -> tuple[dict[str, str], str | None]:
    """The plan's input digests (hashed in a worker thread) and the code's git revision (a
    subprocess, awaited beside the hashing)."""
    revision: list[str | None] = []

    async def read_revision() -> None:
        revision.append(await anyio.to_thread.run_sync(git_rev))

    async with anyio.create_task_group() as beside:
        beside.start_soon(read_revision)
        inputs = await anyio.to_thread.run_sync(
            lambda: plan_inputs(config, experiments, exclude=store_files(store))
        )
    return inputs, revision[0]


def _planning_interrupted(ctx: _RunContext, exc: PlanningInterrupted, clock: _Clock) -> RunResult:
    """Exit 130 for a stop that came while planning: the planned trials are stored."""
    ctx.status("interrupted", exc.stats)
    clock.lap("plan")
    return RunResult(
        EXIT_INTERRUPTED,
        (
            f"{ctx.stop.reason} while planning: {exc.planned:,} planned trials are stored; "
            "run again to resume",
        ),
        clock.timings(planned=True),
    )


async def _progress_so_far(
    ctx: _RunContext, config: Config, plan: StoredPlan
) -> tuple[dict[str, ModelStats], float]:
    """Each model's counters, starting from what earlier runs of the plan stored (a resumed
    run carries their usage too), and what the store has already spent on the plan when a
    budget caps it (0 when none does)."""
    stats = {m.id: ModelStats(model_id=m.id) for m in config.models}
    totals, usage = await anyio.to_thread.run_sync(
        ctx.guard.exclusive, lambda: plan_progress(ctx.con, plan, [m.id for m in config.models])
    )
    for model_id, (total, done) in totals.items():
        if model_id in stats:
            stats[model_id].total, stats[model_id].done_before = total, done
    if any(done for _, done in totals.values()):  # a resumed run: carry the usage too
        for model_id, used in usage.items():
            if model_id in stats:
                before = stats[model_id]
                before.prompt_tokens_before = used.prompt_tokens
                before.completion_tokens_before = used.completion_tokens
                before.cost_usd_before = used.cost_usd
    spent = 0.0
    if ctx.options.max_cost is not None:
        spent = await anyio.to_thread.run_sync(
            ctx.guard.exclusive, lambda: spent_on_plan(ctx.con, plan, config.models)
        )
    return stats, spent


async def _request_what_is_left(
    ctx: _RunContext,
    config: Config,
    plan: StoredPlan,
    stats: dict[str, ModelStats],
    spent: float,
) -> RunResult:
    """Schedule the plan's trials without a response, unless none is left (then no provider,
    writer or simulator starts) or earlier runs already used up the budget (no request)."""
    max_cost = ctx.options.max_cost
    if all(s.done_before >= s.total for s in stats.values()):
        ctx.status("finished", stats)
        return _result(None, list(stats.values()))
    if max_cost is not None and spent >= max_cost:
        ctx.status("finished", stats)
        return _budget_used_up(max_cost, spent, list(stats.values()))
    ctx.status("running", stats)
    return await _schedule_all(ctx, config, plan, stats, spent)


def _refused_write(ctx: _RunContext, exc: Exception) -> StoreWriteError | None:
    """The one-line error for a write the store refused before scheduling (recording the
    run, planning), with a final status file naming the system's reason; None for any other
    error. (Scheduling's writer failures are StoreWriteErrors already, their status written
    by _schedule.)"""
    if isinstance(exc, StoreWriteError) or not is_write_failure(exc):
        return None
    failure = write_failure(exc)
    try_write_status(
        ctx.status_file, snapshot(ctx.run_id, "failed", ctx.started_at, (), error=str(failure))
    )
    return failure


async def _schedule_all(
    ctx: _RunContext,
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
    from ibias.runner.providers.simulator import LoopbackSimulator

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
    ctx: _RunContext,
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
    base = results[0] if results else _result(None, list(stats.values()))
    return _batched_result(ctx, stats, base, outcome)


def _batched_result(
    ctx: _RunContext, stats: dict[str, ModelStats], base: RunResult, outcome: BatchOutcome
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


#: Allocations between young-generation collections during a run (CPython's default: 700).
GC_THRESHOLD0 = 20_000


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Raise the cyclic collector's first threshold for the length of the run, then restore
    it. Each request allocates a few dozen short-lived containers; at the default threshold a
    collection ran every ~50 requests and cost about a tenth of the run's CPU (measured with
    gc.callbacks in bench/). Reference counting frees almost all of it anyway; the rare cycles
    wait a little longer."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], GC_THRESHOLD0), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


class _Clock:
    """Seconds spent in each phase of a run (RunResult.timings)."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = now - self.last
        self.last = now

    def timings(self, *, planned: bool) -> dict[str, float]:
        return {**self.laps, "total": self.last - self.start, "planned": float(planned)}


async def _sped_up_sleep(
    sleep: Callable[[float], Awaitable[None]], rehearsal: Rehearsal, seconds: float
) -> None:
    await sleep(rehearsal.sleep(seconds))


async def _schedule(
    ctx: _RunContext,
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
    return _result(scheduler, list(stats.values()), causes)


async def _factory(ctx: _RunContext, rehearsal_sim: LoopbackSimulator | None) -> ProviderFactory:
    """The run's provider factory; a rehearsal's sends each provider to its simulator."""
    if ctx.options.rehearsal is None or rehearsal_sim is None:
        return ctx.factory
    return ctx.options.rehearsal.factory(ctx.factory, await rehearsal_sim.url())


def _loopback_simulator(config: Config) -> LoopbackSimulator | None:
    """The loopback simulator, made only if a `simulator` model may ask for its URL (never
    with injected providers); its module is loaded only when a model names it."""
    if not any(m.provider == "simulator" for m in config.models):
        return None
    from ibias.runner.providers.simulator import LoopbackSimulator

    return LoopbackSimulator.for_models(config.run.seed, config.models)


async def _start_providers(
    ctx: _RunContext,
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


async def _tick(ctx: _RunContext, progress: Progress, stats: dict[str, ModelStats]) -> None:
    """Once a second: redraw the progress display and rewrite the status file."""
    while True:
        await anyio.sleep(1.0)
        progress.tick()
        try_write_status(ctx.status_file, ctx.snapshot("running", stats))


def _remaining_trials(
    ctx: _RunContext, plan: StoredPlan, rt: ModelRuntime
) -> Iterator[list[Pending]]:
    """The model's trials still without a response, in plan order, in batches. Each model
    streams on a cursor of its own, while the writer inserts on the run's connection."""
    cursor = ctx.con.cursor()
    try:
        yield from remaining(cursor, plan, rt.config.id, guard=ctx.guard)
    finally:
        cursor.close()


async def _close_schedule(
    ctx: _RunContext,
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


def spent_on_plan(
    con: duckdb.DuckDBPyConnection, plan: StoredPlan, models: Sequence[ModelConfig] = ()
) -> float:
    """USD the store has spent on this plan's trials: every stored response to one of them,
    whichever run, provider or model config produced it (what `--max-cost` caps). A response
    whose cost is unknown (its provider reported no usable token counts) counts at its
    request's upper bound under the model's config (prompt estimate plus `max_tokens`), as the
    scheduler counted it when it landed, never as free."""
    where, params = plan.membership()
    known = con.execute(
        "SELECT coalesce(sum(r.cost_usd), 0) FROM responses r WHERE r.trial_key IN "
        f"(SELECT t.trial_key FROM trial_rows t WHERE {where})",
        params,
    ).fetchone()
    spent = float(known[0]) if known else 0.0
    by_id = {m.id: m for m in models}
    if not by_id:
        return spent
    unknown = con.execute(
        "SELECT t.model_id, count(*), coalesce(sum(ceil(s.chars / 4)), 0)::BIGINT "
        "FROM responses r JOIN trial_rows t ON t.trial_key = r.trial_key "
        f"JOIN (SELECT s.spec_key, {PROMPT_CHARS_SQL} AS chars FROM trial_specs s) s "
        f"ON s.spec_key = t.spec_key WHERE r.cost_usd IS NULL AND {where} GROUP BY 1",
        params,
    ).fetchall()
    for model_id, n, prompt in unknown:
        m = by_id.get(model_id)
        if m is not None:
            spent += m.cost(int(prompt), int(n) * m.max_tokens)
    return spent


def _rehearsal_result(result: RunResult, rehearsal: Rehearsal, seconds: float) -> RunResult:
    """The run's lines, with how long its requests took and what that is in real time."""
    if rehearsal.speed == 1:
        line = f"rehearsal: requests took {_duration(seconds)}"
    else:
        line = (
            f"rehearsal at --speed {rehearsal.speed:g}: requests took {_duration(seconds)}, "
            f"about {_duration(seconds * rehearsal.speed)} in real time"
        )
    return replace(result, lines=(*result.lines, line))


def _models(n: int) -> str:
    return "1 model" if n == 1 else f"{n:,} models"


def _duration(seconds: float) -> str:
    """`12.3 s`, `4m05s`, `3h07m`: a span as people read it."""
    return f"{seconds:.1f} s" if seconds < 60 else span(round(seconds))


def _budget_used_up(max_cost: float, spent: float, stats: list[ModelStats]) -> RunResult:
    """Exit 1 without a request: earlier runs of this config already spent the cap."""
    lines = list(_result(None, stats).lines)
    lines.append(
        f"stopped: budget of {usd(max_cost)} reached ({usd(spent)} already spent on this "
        "config's trials by earlier runs); raise --max-cost to go on"
    )
    return RunResult(EXIT_FAILED, tuple(lines))


def _with_concurrency(m: ModelConfig, concurrency: int) -> ModelConfig:
    return replace(m, max_concurrency=concurrency)


def _result(
    scheduler: Scheduler | None,
    stats: list[ModelStats],
    causes: Mapping[str, str] | None = None,
) -> RunResult:
    """The run's outcome; `scheduler` is None when nothing was left to request. Every failure
    is named with its model and cause: a stopped model with why it stopped, and trials that
    failed for good (after all retries, or at once for a reply too large to read) per model
    with the last failure's cause (`causes`)."""
    causes = causes or {}
    lines: list[str] = []
    total = sum(s.total for s in stats)
    have = sum(s.done_before + s.done for s in stats)
    new = sum(s.done for s in stats)
    lines.append(f"{new:,} responses stored this run; {have:,} of {total:,} trials done")
    for s in stats:
        if s.fatal:
            left = s.total - s.done_before - s.done
            lines.append(
                f"model {s.model_id} stopped ({s.fatal}); {left:,} trials not done; "
                "run again to resume"
            )
    for s in stats:
        if s.failed:
            cause = causes.get(s.model_id)
            lines.append(
                f"model {s.model_id}: {s.failed:,} trials failed for good"
                + (f" (last: {cause})" if cause else "")
                + "; see the attempts table"
            )
    if scheduler is None:
        return RunResult(EXIT_OK, tuple(lines))
    starved = starved_note(scheduler.loop_lag.stalls, scheduler.loop_lag.worst_s)
    if starved is not None:
        lines.append(starved)
    if scheduler.interrupted:
        lines.append(f"{scheduler.stop_reason}: results so far are stored; run again to resume")
        return RunResult(EXIT_INTERRUPTED, tuple(lines))
    if scheduler.stop_reason:
        lines.append(f"stopped: {scheduler.stop_reason}")
        return RunResult(EXIT_FAILED, tuple(lines))
    if any(s.failed or s.fatal for s in stats):
        return RunResult(EXIT_FAILED, tuple(lines))
    return RunResult(EXIT_OK, tuple(lines))

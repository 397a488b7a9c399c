"""`ibias run`: config -> plan -> store.trials -> scheduler -> store, resumable.

Order matters for crash safety: the run row and every planned trial are committed before the
first request, so the store always knows the whole plan; responses then land through the single
writer. Resume is the default: trials with a stored response are skipped.

A plan is made once. Its hash covers every input of the plan (runner/execution/plan.py); a run whose
hash matches a completed plan in the store skips planning, and every run, planned or not, reads what
is left of the plan from the store with one anti-join per model, in plan order, so no trial is
generated or keyed twice.

The run's lifetime is one anyio task group (writer, status ticker, scheduler). It installs no
signal handlers: a caller stops it through a `Stop` (the CLI requests it on SIGINT, SIGTERM and
SIGHUP; the Python API and tests call `Stop.request()`), and providers come from a
`ProviderFactory` (by default the registry), so tests can inject in-process providers.
"""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import anyio
import anyio.to_thread
import duckdb

from ibias.prompts.base import Experiment, stable_hash
from ibias.runner.config import Config, ConfigFileError
from ibias.runner.console import literal
from ibias.runner.execution.plan import build_experiments, plan_hash, plan_inputs, store_files
from ibias.runner.execution.planning import TRIAL_BATCH as TRIAL_BATCH
from ibias.runner.execution.planning import PlanningInterrupted as PlanningInterrupted
from ibias.runner.execution.planning import plan_into_store as plan_into_store
from ibias.runner.execution.planning import prepare_plan as prepare_plan
from ibias.runner.execution.rehearsal import check_store, sim_table_note
from ibias.runner.execution.run_context import Clock, RunContext
from ibias.runner.execution.run_context import RunOptions as RunOptions
from ibias.runner.execution.run_result import EXIT_BAD_INPUT as EXIT_BAD_INPUT
from ibias.runner.execution.run_result import EXIT_FAILED as EXIT_FAILED
from ibias.runner.execution.run_result import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from ibias.runner.execution.run_result import EXIT_OK as EXIT_OK
from ibias.runner.execution.run_result import RunResult as RunResult
from ibias.runner.execution.run_result import budget_used_up, rehearsal_result, summary
from ibias.runner.execution.run_schedule import schedule_all
from ibias.runner.providers.registry import ProviderFactory, create_provider
from ibias.runner.redact import secrets_scope
from ibias.runner.scheduling.budget import spent_on_plan as spent_on_plan
from ibias.runner.scheduling.scheduler import ModelStats
from ibias.runner.scheduling.stop import Stop
from ibias.runner.status import snapshot, status_path, try_write_status
from ibias.store.db import close_store, defer_final_checkpoint, open_store
from ibias.store.live import LiveServer
from ibias.store.lock import StoreLock, shown_path
from ibias.store.memory import MemoryGuard
from ibias.store.plans import StoredPlan, plan_progress
from ibias.store.writer import StoreWriteError, is_write_failure, write_failure

DUCKDB_MEMORY_LIMIT = "192MB"


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
    clock = Clock()
    con, live, guard = _open_for_run(options.store)
    clock.lap("open")
    ctx = RunContext(options, keys, say, factory, stop, con, guard, *_new_run(options.store))
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
            result = rehearsal_result(result, options.rehearsal, clock.laps["schedule"])
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


def _planning_interrupted(ctx: RunContext, exc: PlanningInterrupted, clock: Clock) -> RunResult:
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
    ctx: RunContext, config: Config, plan: StoredPlan
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
    ctx: RunContext,
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
        return summary(None, list(stats.values()))
    if max_cost is not None and spent >= max_cost:
        ctx.status("finished", stats)
        return budget_used_up(max_cost, spent, list(stats.values()))
    ctx.status("running", stats)
    return await schedule_all(ctx, config, plan, stats, spent)


def _refused_write(ctx: RunContext, exc: Exception) -> StoreWriteError | None:
    """The one-line error for a write the store refused before scheduling (recording the
    run, planning), with a final status file naming the system's reason; None for any other
    error. (Scheduling's writer failures are StoreWriteErrors already, their status written
    by runner/execution/run_schedule.py.)"""
    if isinstance(exc, StoreWriteError) or not is_write_failure(exc):
        return None
    failure = write_failure(exc)
    try_write_status(
        ctx.status_file, snapshot(ctx.run_id, "failed", ctx.started_at, (), error=str(failure))
    )
    return failure


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

"""What `ibias status` and `ibias batches cancel` say and do about provider batches.

`ibias status` lists each batch of the store (its newest row in `batch_state`: provider, model,
batch id, state, counts, age), read like the rest of the status: through the run that holds
the store, or from the file. `ibias status CONFIG --refresh` first asks each provider for the
state of the config's running batches and records it, as a run's poll would (the lock held):
the store's view is otherwise as old as the last `ibias run --batch`.
`ibias batches cancel CONFIG` asks each provider to cancel this config's live batches (the
store's lock held, like a run), recording each request; the trials of a cancelled batch that
did not run are retried by the next `ibias run --batch`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import duckdb

    from ibias.runner.batch.engine import ModelBatches

__all__ = ["batch_lines", "batches_of", "batches_report", "cancel_batches", "refresh_batches"]


def batches_report(store: Path, now: datetime | None = None) -> list[dict[str, Any]]:
    """Every batch of the store, oldest first (empty for a store without batches or from
    before them)."""
    from ibias.store.reader import open_reader

    with open_reader(store, internal=True) as reader:
        return batches_of(cast("duckdb.DuckDBPyConnection", reader), now)


def batches_of(con: duckdb.DuckDBPyConnection, now: datetime | None = None) -> list[dict[str, Any]]:
    """`batches_report` read through an open session (a store reader or a connection), so
    `ibias status` reads them in the snapshot it reads the progress in."""
    import duckdb

    now = now or datetime.now(UTC)
    try:
        rows = con.execute(
            "SELECT provider, model_id, batch_id, state, requests, completed, failed, "
            "intended_at, updated_at, detail FROM batch_state ORDER BY intended_at"
        ).fetchall()
    except duckdb.Error:  # a store from before batches (migration 012)
        return []
    out: list[dict[str, Any]] = []
    for provider, model, batch_id, state, requests, completed, failed, at, updated, detail in rows:
        out.append(
            {
                "provider": provider,
                "model_id": model,
                "batch_id": batch_id,
                "state": state,
                "requests": requests,
                "completed": completed,
                "failed": failed,
                "age_s": round((now - at).total_seconds()),
                "updated_at": updated.isoformat(),
                "detail": detail,
            }
        )
    return out


def _age(seconds: int) -> str:
    from ibias.runner.execution.planning_report import duration

    return duration(seconds)


def batch_lines(batches: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line a batch, for the status table's reader: the batch id, model and state as the
    store holds them, control characters escaped so each stays one line (runner/console.py)."""
    from ibias.runner.console import literal

    lines = []
    for b in batches:
        counts = ""
        if b["completed"] is not None:
            counts = f", {b['completed']:,} done, {b['failed'] or 0:,} failed"
        line = (
            f"batch {b['batch_id'] or '(not submitted)'} ({b['provider']}, model "
            f"{b['model_id']}): {b['state']}, {b['requests']:,} requests{counts}, "
            f"{_age(b['age_s'])} old"
        )
        lines.append(literal(line, layout=False))
    return lines


@asynccontextmanager
async def _live_engines(
    config: Any, store: Path, environ: Mapping[str, str], say: Callable[[str], None]
) -> AsyncIterator[list[ModelBatches]]:
    """One engine per model of the config with live batches in the store, each with its
    provider's batch API started, the store's lock held (like a run: these write to it).
    Only those models' API keys are needed; a missing one is a ConfigFileError (one line)."""
    from dataclasses import replace

    from ibias.runner.batch.engine import ModelBatches
    from ibias.runner.batch.run import batch_api
    from ibias.runner.execution.run import check_keys
    from ibias.runner.scheduling.scheduler import ModelStats
    from ibias.store import batches as stored
    from ibias.store.db import open_store
    from ibias.store.lock import StoreLock
    from ibias.store.plans import StoredPlan

    lock = StoreLock(store)
    lock.acquire()
    try:
        con = open_store(store)
        try:
            models = [
                m
                for m in config.models
                if stored.batches_of(con, model_id=m.id, states=stored.LIVE)
            ]
            keys = check_keys(replace(config, models=tuple(models)), environ)
            engines: list[ModelBatches] = []
            try:
                for m in models:
                    api = batch_api(m, keys.get(m.id))
                    await api.start()
                    engines.append(
                        ModelBatches(
                            con,
                            StoredPlan(plan_hash="", runs=(), complete=True, reused=False),
                            "",
                            m,
                            api,
                            ModelStats(model_id=m.id),
                            say=say,
                        )
                    )
                yield engines
            finally:
                for e in engines:
                    await e.api.close()
        finally:
            con.close()
    finally:
        lock.release()


async def cancel_batches(
    config: Any, store: Path, environ: Mapping[str, str], say: Callable[[str], None]
) -> list[str]:
    """Cancel this config's live batches at their providers; returns the batch ids."""
    cancelled: list[str] = []
    async with _live_engines(config, store, environ, say) as engines:
        for engine in engines:
            for batch_id in await engine.cancel():
                say(f"model {engine.model.id}: batch {batch_id} cancel requested")
                cancelled.append(batch_id)
    return cancelled


async def refresh_batches(
    config: Any, store: Path, environ: Mapping[str, str], say: Callable[[str], None]
) -> int:
    """`ibias status --refresh`: ask each provider for the state of this config's running
    batches (through the same `BatchAPI` adapters a run polls with) and record each change in
    the store as a poll does; nothing is downloaded or ingested (the next
    `ibias run --batch` does that). Returns how many batches were read."""
    read = 0
    async with _live_engines(config, store, environ, say) as engines:
        for engine in engines:
            read += await engine.refresh()
    return read

"""What `ibias status` and `ibias batches cancel` say and do about provider batches.

`ibias status` lists each batch of the store (its newest row in `batch_state`: provider, model,
batch id, state, counts, age), read like the rest of the status: through the run that holds
the store, or from the file. `ibias batches cancel CONFIG` asks each provider to cancel this
config's live batches (the store's lock held, like a run), recording each request; the
trials of a cancelled batch that did not run are retried by the next `ibias run --batch`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

__all__ = ["batch_lines", "batches_report", "cancel_batches"]


def batches_report(store: Path, now: datetime | None = None) -> list[dict[str, Any]]:
    """Every batch of the store, oldest first (empty for a store without batches or from
    before them)."""
    import duckdb

    from ibias.store.reader import open_reader

    now = now or datetime.now(UTC)
    with open_reader(store) as reader:
        con = cast("duckdb.DuckDBPyConnection", reader)
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
    from ibias.runner.planning_report import duration

    return duration(seconds)


def batch_lines(batches: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line a batch, for the status table's reader."""
    lines = []
    for b in batches:
        counts = ""
        if b["completed"] is not None:
            counts = f", {b['completed']:,} done, {b['failed'] or 0:,} failed"
        lines.append(
            f"batch {b['batch_id'] or '(not submitted)'} ({b['provider']}, model "
            f"{b['model_id']}): {b['state']}, {b['requests']:,} requests{counts}, "
            f"{_age(b['age_s'])} old"
        )
    return lines


async def cancel_batches(
    config: Any, store: Path, environ: Mapping[str, str], say: Callable[[str], None]
) -> list[str]:
    """Cancel this config's live batches at their providers; returns the batch ids."""
    from ibias.runner.batch.engine import ModelBatches
    from ibias.runner.batch.run import batch_api
    from ibias.runner.run import check_keys
    from ibias.runner.scheduler import ModelStats
    from ibias.store import batches as stored
    from ibias.store.db import open_store
    from ibias.store.lock import StoreLock
    from ibias.store.plans import StoredPlan

    keys = check_keys(config, environ)
    lock = StoreLock(store)
    lock.acquire()
    cancelled: list[str] = []
    try:
        con = open_store(store)
        try:
            for m in config.models:
                if not stored.batches_of(con, model_id=m.id, states=stored.LIVE):
                    continue
                api = batch_api(m, keys.get(m.id))
                await api.start()
                try:
                    engine = ModelBatches(
                        con,
                        StoredPlan(plan_hash="", runs=(), complete=True, reused=False),
                        "",
                        m,
                        api,
                        ModelStats(model_id=m.id),
                        say=say,
                    )
                    for batch_id in await engine.cancel():
                        say(f"model {m.id}: batch {batch_id} cancel requested")
                        cancelled.append(batch_id)
                finally:
                    await api.close()
        finally:
            con.close()
    finally:
        lock.release()
    return cancelled

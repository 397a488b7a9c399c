"""Planning a run into the store: find the completed plan for the run's inputs, or store
every trial of it now, in batches a stop can come between.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import anyio.to_thread
import duckdb

from ibias.prompts import registry
from ibias.prompts.base import Experiment
from ibias.runner.config import Config, ModelConfig
from ibias.runner.execution import phase_hook
from ibias.runner.execution.plan import plan_batches, plan_hash
from ibias.runner.scheduling.stop import Stop
from ibias.runner.status import ModelStats
from ibias.store.arrow_scan import registered
from ibias.store.plans import StoredPlan, find_plan, has_trials, insert_planned, record_plan

TRIAL_BATCH = 5000


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

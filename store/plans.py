"""Plans in the store: which trials a plan has, what is left of it, in plan order.

A plan is identified by its hash (runner/plan.py). Its trials are the rows of `trials` that its
planning runs inserted, plus the keys listed in `plan_trials` (trials an earlier run had
already stored, so they keep that run's id). Rows are only inserted (migration 004): a
'started' row in `plans` when a run starts planning, a 'complete' row when every trial of the
plan is stored. What is left is an anti-join of the plan's trials with `responses`, streamed in
insertion order (the order the planner produced them in), a window of rowids at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

import duckdb
import orjson
import pyarrow as pa

from ibias.prompts.base import Message
from ibias.store.writer import TRIAL_COLUMNS

#: Columns of `trials` a planner batch carries (run_id is added on insert).
PLANNED_COLUMNS = tuple(c for c in TRIAL_COLUMNS if c != "run_id")


@dataclass(frozen=True)
class StoredPlan:
    """A plan as the store knows it: its planning runs and whether it is complete."""

    plan_hash: str
    runs: tuple[str, ...]
    complete: bool
    reused: bool  # some trials are listed in plan_trials (stored before by another run)

    def membership(self, alias: str = "t") -> tuple[str, list[Any]]:
        """A SQL predicate on `trials AS alias` selecting this plan's trials, and its
        parameters."""
        if self.reused:
            return (
                f"(list_contains(?, {alias}.run_id) OR {alias}.trial_key IN "
                "(SELECT trial_key FROM plan_trials WHERE plan_hash = ?))",
                [list(self.runs), self.plan_hash],
            )
        return f"list_contains(?, {alias}.run_id)", [list(self.runs)]


def find_plan(con: duckdb.DuckDBPyConnection, plan_hash: str) -> StoredPlan | None:
    """What the store holds of the plan with this hash (None if no run ever started it)."""
    rows = con.execute(
        "SELECT run_id, state FROM plans WHERE plan_hash = ? ORDER BY recorded_at", [plan_hash]
    ).fetchall()
    if not rows:
        return None
    runs = tuple(dict.fromkeys(r[0] for r in rows))
    reused = con.execute(
        "SELECT count(*) FROM (SELECT 1 FROM plan_trials WHERE plan_hash = ? LIMIT 1)",
        [plan_hash],
    ).fetchall()[0][0]
    return StoredPlan(
        plan_hash=plan_hash,
        runs=runs,
        complete=any(state == "complete" for _, state in rows),
        reused=bool(reused),
    )


def record_plan(
    con: duckdb.DuckDBPyConnection,
    plan_hash: str,
    run_id: str,
    state: str,
    inputs: Mapping[str, str],
    trials: int | None = None,
) -> None:
    con.execute(
        "INSERT INTO plans (plan_hash, run_id, state, trials, inputs, recorded_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [plan_hash, run_id, state, trials, orjson.dumps(dict(inputs)).decode(), datetime.now(UTC)],
    ).fetchall()


def has_trials(con: duckdb.DuckDBPyConnection) -> bool:
    return bool(con.execute("SELECT count(*) FROM (SELECT 1 FROM trials LIMIT 1)").fetchall()[0][0])


#: The JSON columns of `trials`. The planner's texts are canonical JSON made by orjson, so
#: they go in typed as Arrow JSON, which DuckDB stores without parsing each one again.
JSON_COLUMNS = frozenset({"coords", "item", "messages", "params"})


def _planned_table(run_id: str, columns: Mapping[str, Sequence[Any]]) -> pa.Table:
    n = len(columns["trial_key"])
    arrays = {
        c: pa.array(columns[c], type=pa.json_() if c in JSON_COLUMNS else pa.string())
        for c in PLANNED_COLUMNS[:-1]
    }
    return pa.table(
        {
            "trial_key": arrays["trial_key"],
            "run_id": pa.array([run_id] * n, type=pa.string()),
            **{c: arrays[c] for c in PLANNED_COLUMNS[1:-1]},
            "replicate": pa.array(columns["replicate"], type=pa.int32()),
        }
    )


def insert_planned(
    con: duckdb.DuckDBPyConnection,
    plan: StoredPlan,
    run_id: str,
    columns: Mapping[str, Sequence[Any]],
    *,
    fresh: bool,
) -> int:
    """Store one planner batch (columns as `runner.plan.PlanBatch.columns()`) for `plan`,
    planned by `run_id`; returns how many trial rows were new.

    `fresh` (the store had no trials when planning started, so no key can be there already:
    a plan's keys are distinct) appends without looking. Otherwise keys already stored are
    not inserted again; those stored by a run outside the plan's planning runs are listed in
    `plan_trials`, so the plan still knows them.
    """
    batch = _planned_table(run_id, columns)
    names = ", ".join(batch.column_names)
    con.register("_planned", batch)
    try:
        if fresh:
            con.execute(f"INSERT INTO trials ({names}) SELECT {names} FROM _planned").fetchall()
            return int(batch.num_rows)
        # One scan of the stored keys per batch; DuckDB hashes the batch, not the table.
        hits = dict(
            con.execute(
                "SELECT s.trial_key, s.run_id FROM trials s SEMI JOIN _planned b "
                "ON s.trial_key = b.trial_key"
            ).fetchall()
        )
        if not hits:
            con.execute(f"INSERT INTO trials ({names}) SELECT {names} FROM _planned").fetchall()
            return int(batch.num_rows)
        own = set(plan.runs) | {run_id}
        reused = [k for k, r in hits.items() if r not in own]
        if reused:
            con.execute(
                "INSERT INTO plan_trials SELECT DISTINCT ?, k FROM unnest(?::VARCHAR[]) u(k) "
                "WHERE k NOT IN (SELECT trial_key FROM plan_trials WHERE plan_hash = ?)",
                [plan.plan_hash, reused, plan.plan_hash],
            ).fetchall()
        keys = columns["trial_key"]
        mask = pa.array([k not in hits for k in keys], type=pa.bool_())
        new = batch.filter(mask)
        if new.num_rows:
            con.register("_planned_new", new)
            try:
                con.execute(
                    f"INSERT INTO trials ({names}) SELECT {names} FROM _planned_new"
                ).fetchall()
            finally:
                con.unregister("_planned_new")
        return int(new.num_rows)
    finally:
        con.unregister("_planned")


def remaining_prompt_chars(
    con: duckdb.DuckDBPyConnection, plan: StoredPlan
) -> dict[str, tuple[int, int]]:
    """Per model: trials without a response, and the sum over them of the pre-request token
    estimate's prompt part (ceil(characters / 4), characters counted as `estimate_tokens`
    counts them: each message's content plus 8)."""
    where, params = plan.membership()
    rows = con.execute(
        f"SELECT t.model_id, count(*), coalesce(sum(ceil({PROMPT_CHARS_SQL} / 4)), 0)::BIGINT "
        f"FROM trials t WHERE {where} AND t.trial_key NOT IN "
        "(SELECT trial_key FROM responses) GROUP BY 1",
        params,
    ).fetchall()
    return {m: (int(n), int(chars)) for m, n, chars in rows}


class Pending(NamedTuple):
    """A stored trial still to request: what the scheduler sends and records (a `Trial`
    without the design coordinates, which requesting does not need)."""

    trial_key: str
    experiment: str
    model_id: str
    language: str
    item: Mapping[str, Any]
    messages: tuple[Message, ...]
    params: Mapping[str, Any]
    #: Characters of its messages as the pre-request token estimate counts them (each
    #: message's content plus 8), counted by DuckDB while it reads the trial.
    prompt_chars: int


#: `prompt_chars` of `trials AS t`, in SQL.
PROMPT_CHARS_SQL = (
    "list_sum(list_transform(CAST(json_extract_string(t.messages, '$[*].content') AS VARCHAR[]),"
    " lambda c: coalesce(length(c), 0) + 8))"
)


#: Rows of `trials` (by rowid) one query of `remaining` covers: the query sorts only the
#: window's remaining rowids, so a million-trial plan never sorts in one piece.
WINDOW = 131_072


def remaining(
    con: duckdb.DuckDBPyConnection,
    plan: StoredPlan,
    model_id: str,
    *,
    batch: int = 1024,
    window: int = WINDOW,
) -> Iterator[list[Pending]]:
    """The plan's trials for one model that have no response, in plan order (insertion
    order: rowid), as lists of up to `batch`. `con` should be a cursor of its own, as the
    results stream while other connections write.

    Why two queries: every model of a run streams its own result at once, and a sorted result
    is held whole until it is read. The anti-join with `responses` (one query per window of
    `window` rowids, restricted to the window's keys on both sides) therefore returns only the
    rowids, 8 bytes a trial; the wide columns (item, messages, a few kB a trial) are read one
    batch at a time. Memory stays bounded by a batch per model, not by the window times the
    number of models (the demo's seven models over 131,072-row windows of wide rows exceeded
    the run's 192 MB DuckDB cap)."""
    where, params = plan.membership()
    lo, hi = con.execute(
        f"SELECT min(t.rowid), max(t.rowid) FROM trials t WHERE t.model_id = ? AND {where}",
        [model_id, *params],
    ).fetchall()[0]
    if lo is None:
        return
    loads = orjson.loads
    decoded: dict[str, Any] = {}  # a model's trials share a few params texts: decode each once
    for start in range(int(lo), int(hi) + 1, window):
        end = start + window
        rowids = [
            r[0]
            for r in con.execute(
                "SELECT t.rowid FROM trials t "
                f"WHERE t.rowid >= ? AND t.rowid < ? AND t.model_id = ? AND {where} "
                "AND t.trial_key NOT IN (SELECT r.trial_key FROM responses r SEMI JOIN "
                "(SELECT trial_key FROM trials WHERE rowid >= ? AND rowid < ?) w "
                "ON r.trial_key = w.trial_key) ORDER BY t.rowid",
                [start, end, model_id, *params, start, end],
            ).fetchall()
        ]
        for i in range(0, len(rowids), batch):
            chunk = rowids[i : i + batch]
            rows = con.execute(
                "SELECT t.trial_key, t.experiment, t.language, t.item, t.messages, t.params, "
                f"coalesce({PROMPT_CHARS_SQL}, 0) FROM trials t "
                "WHERE t.rowid >= ? AND t.rowid <= ? AND list_contains(?, t.rowid) "
                "ORDER BY t.rowid",
                [chunk[0], chunk[-1], chunk],
            ).fetchall()
            out = []
            for key, experiment, language, item, messages, p, chars in rows:
                sampling = decoded.get(p)
                if sampling is None:
                    sampling = decoded[p] = loads(p)
                out.append(
                    Pending(
                        key,
                        experiment,
                        model_id,
                        language,
                        loads(item),
                        tuple(loads(messages)),
                        sampling,
                        chars,
                    )
                )
            yield out


class Usage(NamedTuple):
    """Tokens and cost of the responses stored for one model's trials of a plan."""

    prompt_tokens: int
    completion_tokens: int
    cost_usd: float


def plan_progress(
    con: duckdb.DuckDBPyConnection, plan: StoredPlan, model_ids: Sequence[str]
) -> tuple[dict[str, tuple[int, int]], dict[str, Usage]]:
    """Per model: the plan's trials and how many have a response; and what those responses
    used (tokens, cost, per the model that answered), so a resumed run's counts, tokens and
    cost start where the last run left them.

    One query, one pass over the plan's trials joined with their responses (a trial has at
    most one: the writer inserts with an anti-join): a resume of a finished store is mostly
    this count (bench/BENCHMARKS.md, issue 12), and two queries scanned both tables twice."""
    where, params = plan.membership()
    rows = con.execute(
        "SELECT t.model_id, r.model_id, count(*), count(r.trial_key), "
        "coalesce(sum(r.prompt_tokens), 0)::BIGINT, "
        "coalesce(sum(r.completion_tokens), 0)::BIGINT, coalesce(sum(r.cost_usd), 0) "
        "FROM trials t LEFT JOIN responses r ON r.trial_key = t.trial_key "
        f"WHERE {where} GROUP BY ALL",
        params,
    ).fetchall()
    totals = {m: (0, 0) for m in model_ids}
    usage: dict[str, Usage] = {}
    for model_id, answered_by, trials, done, prompt, completion, cost in rows:
        total, had = totals.get(model_id, (0, 0))
        totals[model_id] = (total + int(trials), had + int(done))
        if answered_by is not None:
            u = usage.get(answered_by, Usage(0, 0, 0.0))
            usage[answered_by] = Usage(
                u.prompt_tokens + int(prompt),
                u.completion_tokens + int(completion),
                u.cost_usd + float(cost),
            )
    return totals, usage

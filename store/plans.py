"""Plans in the store: which trials a plan has, what is left of it, in plan order.

A plan is identified by its hash (runner/execution/plan.py). Its trials are the trial rows that its
planning runs inserted, plus the keys listed in `plan_trials` (trials an earlier run had
already stored, so they keep that run's id). Rows are only inserted (migration 004): a
'started' row in `plans` when a run starts planning, a 'complete' row when every trial of the
plan is stored. What is left is an anti-join of the plan's trials with `responses`, streamed in
insertion order (the order the planner produced them in), a window of rowids at a time.

Trials are stored in two tables (migration 008): `trial_rows`, one narrow row per trial in
plan order, and `trial_specs`, each spec's texts (coords, item, messages) once, which every
model's trial of that spec names by `spec_key`. `trials` is a view joining them, for users and
the derived views; the queries here read the two tables directly, so they pay for the texts
only where they need them (once per spec, never for counting).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

import duckdb
import orjson
import pyarrow as pa

from ibias.prompts.base import Message
from ibias.store.arrow_scan import registered
from ibias.store.db import begin, rollback
from ibias.store.memory import MemoryGuard
from ibias.store.progress_counts import current, rebuild, runs_counts, trials_added
from ibias.store.writer import SPEC_COLUMNS, TRIAL_ROW_COLUMNS

#: Per-spec columns of a planner batch (`runner.execution.plan.PlanBatch.columns()`, one entry per
#: spec): the spec's texts as canonical JSON, its key, and the columns its trials share
#: (stored in each trial row).
SPEC_BATCH_COLUMNS = (*SPEC_COLUMNS, "experiment", "language", "replicate")
#: Per-trial columns of a planner batch (one entry per trial); `spec` is the index of the
#: trial's spec in the batch's per-spec columns.
TRIAL_BATCH_COLUMNS = ("trial_key", "model_id", "params", "spec")


@dataclass(frozen=True)
class StoredPlan:
    """A plan as the store knows it: its planning runs and whether it is complete."""

    plan_hash: str
    runs: tuple[str, ...]
    complete: bool
    reused: bool  # some trials are listed in plan_trials (stored before by another run)

    def membership(self, alias: str = "t") -> tuple[str, list[Any]]:
        """A SQL predicate on `trial_rows AS alias` (or the `trials` view: it reads only
        `trial_key` and `run_id`) selecting this plan's trials, and its parameters."""
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
    return bool(
        con.execute("SELECT count(*) FROM (SELECT 1 FROM trial_rows LIMIT 1)").fetchall()[0][0]
    )


def _planned_tables(run_id: str, columns: Mapping[str, Sequence[Any]]) -> tuple[pa.Table, pa.Table]:
    """The batch as `trial_specs` and `trial_rows` rows (Arrow). The texts are canonical JSON
    made by orjson, so they go in typed as Arrow JSON, which DuckDB stores without parsing
    each one again; the per-spec columns of each trial row are taken from the spec columns
    by index in Arrow, not repeated per model in Python."""
    spec_table = pa.table(
        {
            "spec_key": pa.array(columns["spec_key"], type=pa.string()),
            **{c: pa.array(columns[c], type=pa.json_()) for c in SPEC_COLUMNS[1:]},
        }
    )
    index = pa.array(columns["spec"], type=pa.int32())
    rows: dict[str, Any] = {
        "trial_key": pa.array(columns["trial_key"], type=pa.string()),
        "run_id": pa.array([run_id] * len(index), type=pa.string()),
        "experiment": pa.array(columns["experiment"], type=pa.string()).take(index),
        "model_id": pa.array(columns["model_id"], type=pa.string()),
        "language": pa.array(columns["language"], type=pa.string()).take(index),
        "spec_key": spec_table.column("spec_key").take(index),
        "params": pa.array(columns["params"], type=pa.json_()),
        "replicate": pa.array(columns["replicate"], type=pa.int32()).take(index),
    }
    return spec_table, pa.table({c: rows[c] for c in TRIAL_ROW_COLUMNS})


def insert_planned(
    con: duckdb.DuckDBPyConnection,
    plan: StoredPlan,
    run_id: str,
    columns: Mapping[str, Sequence[Any]],
    *,
    fresh: bool,
) -> int:
    """Store one planner batch (columns as `runner.execution.plan.PlanBatch.columns()`: per spec and
    per trial) for `plan`, planned by `run_id`; returns how many trial rows were new.

    `fresh` (the store had no trials when planning started, so no key can be there already:
    a plan's trial keys are distinct, so are its specs) appends without looking. Otherwise
    keys already stored are not inserted again (those stored by a run outside the plan's
    planning runs are listed in `plan_trials`, so the plan still knows them), and a spec is
    stored only if a new row names it and it is not stored yet (an anti-join on spec_key: a
    batch holds all the trials of its specs, so no later batch needs one it skipped).

    The specs are committed before the rows that name them, so a stop or a crash between the
    two leaves at most specs no row names yet (the view shows nothing of them, and the next
    planning finds them by key), never a row without its texts."""
    spec_table, row_table = _planned_tables(run_id, columns)
    spec_names = ", ".join(SPEC_COLUMNS)
    if fresh:
        _append(con, "trial_specs", spec_names, spec_table)
        return _append_rows(con, row_table)
    row_table = _without_stored_keys(con, plan, run_id, row_table, columns["trial_key"])
    if not row_table.num_rows:
        return 0
    new_specs = _unstored_specs(con, spec_table, row_table, columns["spec_key"])
    if new_specs.num_rows:
        _append(con, "trial_specs", spec_names, new_specs)
    return _append_rows(con, row_table)


def _append_rows(con: duckdb.DuckDBPyConnection, row_table: pa.Table) -> int:
    """Append the batch's trial rows and count them (store/progress_counts.py) in one
    transaction, so a crash keeps both or neither; returns how many."""
    names = ", ".join(TRIAL_ROW_COLUMNS)
    begin(con)
    try:
        with registered(con, "_append", row_table):
            con.execute(f"INSERT INTO trial_rows ({names}) SELECT {names} FROM _append").fetchall()
            trials_added(con, "_append", int(row_table.num_rows))
        con.execute("COMMIT").fetchall()
    except BaseException:
        rollback(con)
        raise
    return int(row_table.num_rows)


def _without_stored_keys(
    con: duckdb.DuckDBPyConnection,
    plan: StoredPlan,
    run_id: str,
    row_table: pa.Table,
    keys: Sequence[Any],
) -> pa.Table:
    """The batch's trial rows whose keys are not stored yet. Stored keys that a run outside
    the plan's planning runs stored are listed in `plan_trials`, so the plan still knows them.
    One scan of the stored keys per batch: DuckDB hashes the batch, not the table."""
    with registered(con, "_planned", row_table):
        hits = dict(
            con.execute(
                "SELECT s.trial_key, s.run_id FROM trial_rows s SEMI JOIN _planned b "
                "ON s.trial_key = b.trial_key"
            ).fetchall()
        )
    if not hits:
        return row_table
    own = set(plan.runs) | {run_id}
    reused = [k for k, r in hits.items() if r not in own]
    if reused:
        con.execute(
            "INSERT INTO plan_trials SELECT DISTINCT ?, k FROM unnest(?::VARCHAR[]) u(k) "
            "WHERE k NOT IN (SELECT trial_key FROM plan_trials WHERE plan_hash = ?)",
            [plan.plan_hash, reused, plan.plan_hash],
        ).fetchall()
    return row_table.filter(pa.array([k not in hits for k in keys], type=pa.bool_()))


def _unstored_specs(
    con: duckdb.DuckDBPyConnection,
    spec_table: pa.Table,
    row_table: pa.Table,
    spec_keys: Sequence[Any],
) -> pa.Table:
    """The batch's specs that a new trial row names and the store does not hold yet (an
    anti-join on spec_key: a batch holds all the trials of its specs, so no later batch needs
    one it skipped)."""
    needed = set(row_table.column("spec_key").to_pylist())
    with registered(con, "_planned_specs", spec_table):
        stored = {
            r[0]
            for r in con.execute(
                "SELECT s.spec_key FROM trial_specs s SEMI JOIN _planned_specs b "
                "ON s.spec_key = b.spec_key"
            ).fetchall()
        }
    return spec_table.filter(
        pa.array([k in needed and k not in stored for k in spec_keys], type=pa.bool_())
    )


def _append(con: duckdb.DuckDBPyConnection, table: str, names: str, rows: pa.Table) -> None:
    with registered(con, "_append", rows):
        con.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM _append").fetchall()


def remaining_prompt_chars(
    con: duckdb.DuckDBPyConnection, plan: StoredPlan
) -> dict[str, tuple[int, int]]:
    """Per model: trials without a response, and the sum over them of the pre-request token
    estimate's prompt part (ceil(characters / 4), characters counted as `estimate_tokens`
    counts them: each message's content plus 8). The characters are counted once per spec
    and joined to the trial rows."""
    where, params = plan.membership()
    rows = con.execute(
        "SELECT t.model_id, count(*), coalesce(sum(ceil(s.chars / 4)), 0)::BIGINT "
        f"FROM trial_rows t JOIN (SELECT s.spec_key, {PROMPT_CHARS_SQL} AS chars "
        "FROM trial_specs s) s ON s.spec_key = t.spec_key "
        f"WHERE {where} AND t.trial_key NOT IN (SELECT trial_key FROM responses) GROUP BY 1",
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
    #: Characters of its messages as the pre-request token estimate counts them
    #: (`prompt_chars`), counted once per spec while the feeder reads it.
    prompt_chars: int


def prompt_chars(messages: Sequence[Message]) -> int:
    """The characters the pre-request token estimate counts: each message's content plus 8
    (its role and framing). `PROMPT_CHARS_SQL` is the same count in SQL (a test holds them
    equal), for the totals `ibias plan` reports without reading every message into Python."""
    return sum(len(m.get("content", "")) + 8 for m in messages)


#: `prompt_chars` of a spec (`trial_specs AS s`), in SQL.
PROMPT_CHARS_SQL = (
    "list_sum(list_transform(CAST(json_extract_string(s.messages, '$[*].content') AS VARCHAR[]),"
    " lambda c: coalesce(length(c), 0) + 8))"
)


#: Trial rows (by rowid) one query of `remaining` covers: the query sorts only the window's
#: remaining rowids, so a million-trial plan never sorts in one piece.
WINDOW = 131_072


def remaining(
    con: duckdb.DuckDBPyConnection,
    plan: StoredPlan,
    model_id: str,
    *,
    batch: int = 1024,
    window: int = WINDOW,
    guard: MemoryGuard | None = None,
) -> Iterator[list[Pending]]:
    """The plan's trials for one model that have no response, in plan order (insertion
    order: the rowid of `trial_rows`), as lists of up to `batch`. `con` should be a cursor of
    its own, as the results stream while other connections write.

    Why several queries: every model of a run streams its own result at once, and a sorted
    result is held whole until it is read. The anti-join with `responses` (one query per
    window of `window` rowids, restricted to the window's keys on both sides) therefore
    returns only two numbers a trial: its rowid and its spec's rowid in `trial_specs` (the one
    place the window meets the specs, so they are looked up by key once per window, not once
    per batch). The wide columns are then read one batch at a time by rowid: the trial rows'
    narrow ones, and each spec's texts and character count once (a range of rowids, as a
    plan's specs are stored in the order of its trials). Memory stays bounded by a batch per
    model, not by the window times the number of models (windows of wide rows, one per model,
    would together exceed the run's DuckDB memory cap).

    With a `guard` (store/memory.py), each query takes its turn with the other models' and is
    tried again when DuckDB's memory is full: the window query holds a few hash tables, and
    many models' at once can fill the cap when a run resumes."""
    where, params = plan.membership()
    query = _reader(con, guard)
    lo = query(
        f"SELECT min(t.rowid) FROM trial_rows t WHERE t.model_id = ? AND {where}",
        [model_id, *params],
    )[0][0]
    if lo is None:
        return
    decoded: dict[str, Any] = {}  # a model's trials share a few params texts: decode each once
    for start in _busy_windows(query, model_id, where, params, int(lo), window):
        end = start + window
        found = query(
            "SELECT t.rowid AS row, s.rowid AS spec FROM trial_rows t "
            "JOIN trial_specs s ON s.spec_key = t.spec_key "
            f"WHERE t.rowid >= ? AND t.rowid < ? AND t.model_id = ? AND {where} "
            "AND t.trial_key NOT IN (SELECT r.trial_key FROM responses r SEMI JOIN "
            "(SELECT trial_key FROM trial_rows WHERE rowid >= ? AND rowid < ?) w "
            "ON r.trial_key = w.trial_key) ORDER BY t.rowid",
            [start, end, model_id, *params, start, end],
            numpy=True,
        )
        rowids, spec_rowids = found["row"], found["spec"]
        for i in range(0, len(rowids), batch):
            chunk = rowids[i : i + batch].tolist()
            spec_chunk = spec_rowids[i : i + batch].tolist()
            rows = _trial_rows_by_rowid(query, chunk)
            texts = _spec_texts_by_rowid(query, spec_chunk)
            yield _pending_batch(model_id, rows, spec_chunk, texts, decoded)


_Query = Callable[..., Any]


def _busy_windows(
    query: _Query, model_id: str, where: str, params: list[Any], lo: int, window: int
) -> list[int]:
    """The first rowid of each window (of `window` rowids from `lo`) that holds a trial of the
    model without a response, ascending. One anti-join over the model's trials (a few hundred
    milliseconds at ten times the paper's grid) spares reading the other windows: resuming an
    almost finished store reads the windows of its last trials, not every window (two seconds
    a model there, most of a resume's start)."""
    busy = query(
        f"SELECT DISTINCT (t.rowid - ?) // ? AS w FROM trial_rows t WHERE t.model_id = ? "
        f"AND {where} AND NOT EXISTS (SELECT 1 FROM responses r WHERE r.trial_key = t.trial_key) "
        "ORDER BY w",
        [lo, window, model_id, *params],
    )
    return [lo + int(w) * window for (w,) in busy]


def _reader(con: duckdb.DuckDBPyConnection, guard: MemoryGuard | None) -> _Query:
    """`query(sql, args, numpy=False)` on `con`: rows (or numpy columns), taking its turn
    through `guard` when there is one. A failed read is rolled back, so no aborted
    transaction outlives it."""

    def query(sql: str, args: list[Any], *, numpy: bool = False) -> Any:
        def fetch() -> Any:
            try:
                result = con.execute(sql, args)
                return result.fetchnumpy() if numpy else result.fetchall()
            except duckdb.Error:
                rollback(con)
                raise

        return fetch() if guard is None else guard.exclusive(fetch)

    return query


def _trial_rows_by_rowid(query: _Query, chunk: list[int]) -> list[tuple[Any, ...]]:
    """The narrow columns of the trial rows at `chunk`'s rowids (ascending), in that order.
    Consecutive rowids (a model's trials in a one-model plan, or none answered in between)
    are selected by the range alone, without a list test on every row."""
    gaps = chunk[-1] - chunk[0] >= len(chunk)
    rows: list[tuple[Any, ...]] = query(
        "SELECT t.trial_key, t.experiment, t.language, t.params FROM trial_rows t "
        "WHERE t.rowid >= ? AND t.rowid <= ?"
        + (" AND list_contains(?, t.rowid)" if gaps else "")
        + " ORDER BY t.rowid",
        [chunk[0], chunk[-1], *([chunk] if gaps else [])],
    )
    return rows


def _spec_texts_by_rowid(
    query: _Query, spec_chunk: list[int]
) -> dict[int, tuple[Any, tuple[Message, ...], int]]:
    """Each spec the batch names, by rowid: its item and messages decoded, and the
    messages' character count, each once however many trials share the spec. A fresh plan's
    specs are consecutive rowids: then the range alone selects them."""
    wanted = sorted(set(spec_chunk))
    listed = wanted[-1] - wanted[0] >= len(wanted)
    loads = orjson.loads
    texts = {}
    for spec, item, messages_text in query(
        "SELECT s.rowid, s.item, s.messages FROM trial_specs s "
        "WHERE s.rowid >= ? AND s.rowid <= ?"
        + (" AND list_contains(?, s.rowid)" if listed else ""),
        [wanted[0], wanted[-1], *([wanted] if listed else [])],
    ):
        messages = tuple(loads(messages_text))
        texts[spec] = (loads(item), messages, prompt_chars(messages))
    return texts


def _pending_batch(
    model_id: str,
    rows: list[tuple[Any, ...]],
    spec_chunk: list[int],
    texts: Mapping[int, tuple[Any, tuple[Message, ...], int]],
    decoded: dict[str, Any],
) -> list[Pending]:
    """The batch's trials as `Pending`s, each joined to its spec's texts; params texts are
    decoded once a model (`decoded`, kept across batches)."""
    loads = orjson.loads
    out = []
    for (key, experiment, language, p), spec in zip(rows, spec_chunk, strict=True):
        sampling = decoded.get(p)
        if sampling is None:
            sampling = decoded[p] = loads(p)
        item, messages, chars = texts[spec]
        out.append(Pending(key, experiment, model_id, language, item, messages, sampling, chars))
    return out


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

    Read from the kept counts (store/progress_counts.py) of the trials the plan's runs
    stored, in constant time: a resume of a nearly finished large store once spent over a
    minute joining every trial with its response here. Trials the plan reuses from other runs
    (listed in `plan_trials`) are counted under their own run, so those alone are still
    joined with their responses (`_reused_progress`). Counts that are not `current` (rows
    edited outside ibias) are rebuilt first: `con` is the run's writable connection, and the
    flushes that follow add to them."""
    if not current(con):
        rebuild(con)
    totals = {m: (0, 0) for m in model_ids}
    usage: dict[str, Usage] = {}

    def add(model_id: str, answered_by: str | None, trials: int, done: int, used: Usage) -> None:
        total, had = totals.get(model_id, (0, 0))
        totals[model_id] = (total + trials, had + done)
        if answered_by is not None and done:
            u = usage.get(answered_by, Usage(0, 0, 0.0))
            usage[answered_by] = Usage(
                u.prompt_tokens + used.prompt_tokens,
                u.completion_tokens + used.completion_tokens,
                u.cost_usd + used.cost_usd,
            )

    for c in runs_counts(con, plan.runs):
        used = Usage(c.prompt_tokens, c.completion_tokens, c.cost_usd)
        add(c.model_id, c.model_id, c.planned, c.answered, used)
    if plan.reused:
        for model_id, answered_by, trials, done, prompt, completion, cost in _reused_progress(
            con, plan
        ):
            used = Usage(int(prompt), int(completion), float(cost))
            add(model_id, answered_by, int(trials), int(done), used)
    return totals, usage


def _reused_progress(con: duckdb.DuckDBPyConnection, plan: StoredPlan) -> list[tuple[Any, ...]]:
    """The plan's trials stored by runs outside it (listed in `plan_trials`), joined with
    their responses: per trial model and answering model, trials, answered, tokens and cost.
    The counts keep them under the run that stored them, which another plan may share."""
    return con.execute(
        "SELECT t.model_id, r.model_id, count(*), count(r.trial_key), "
        "coalesce(sum(r.prompt_tokens), 0)::BIGINT, "
        "coalesce(sum(r.completion_tokens), 0)::BIGINT, coalesce(sum(r.cost_usd), 0) "
        "FROM trial_rows t LEFT JOIN responses r ON r.trial_key = t.trial_key "
        "WHERE NOT list_contains(?, t.run_id) AND t.trial_key IN "
        "(SELECT trial_key FROM plan_trials WHERE plan_hash = ?) GROUP BY ALL",
        [list(plan.runs), plan.plan_hash],
    ).fetchall()

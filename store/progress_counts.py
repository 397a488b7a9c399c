"""Progress counts kept in the store (migration 016), so progress is read, not recounted.

Counting progress from the rows means joining every trial with every response and attempt:
about a second for `status` on a 1.4-million-trial store, and far more for a resumed run's
start on a busy machine. So the code that inserts trial rows, attempts and responses
(store/writer.py's `insert_*`, store/plans.py's `insert_planned`) calls the functions here with
the rows it has just inserted (or, for attempts, is about to insert), inside the caller's
transaction: each adds that batch's change to

- `progress_counts`, per origin run of the trials (`trial_rows.run_id`), model, experiment and
  language: planned trials, answered ones (with a response), failed ones (no response, and a
  fatal or given-up attempt: the `progress` view's definition) and the answered responses'
  tokens and cost;
- `attempt_counts`, attempts per run, model and outcome;
- `progress_rows`, how many rows of `trial_rows`, `responses` and `attempts` the counts have
  seen;
- `trial_index`, each trial row's group under the MD5 of its key, where a flush finds the
  groups of its responses' trials by scanning 16-byte numbers instead of the keys.

Each change is computed from the batch's keys alone, joined to the stored rows with the batch
as the hashed side (as the writer's own duplicate check does), and a crash loses the counts
together with the rows they count. DuckDB knows a table's row count without a scan, so
`current` tells in constant time whether rows were inserted or deleted behind ibias's back
(by hand, with another tool); the readers then count from the rows as before and a run
rebuilds the counts (`rebuild`). `verify` recounts everything and lists the differences.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Protocol

import duckdb

from ibias.store import drift
from ibias.store.arrow_scan import registered
from ibias.store.db import begin, rollback

#: Outcomes of an attempt after which the trial is given up for that run.
FAILED_OUTCOMES = ("fatal", "gave_up")
_FAILED_SQL = "('fatal', 'gave_up')"

#: The group of a trial: its origin run, model, experiment and language.
GROUP = ("run_id", "model_id", "experiment", "language")
#: What is counted per group.
MEASURES = ("planned", "answered", "failed", "prompt_tokens", "completion_tokens", "cost_usd")

#: A trial's group: one per key, as the `progress` view always counted them (the writer never
#: stores a key twice, but stores from before its anti-joins may hold a duplicate row; one
#: stored by two runs is counted under the run whose id sorts first). `{rows}`: the rows read.
_TRIALS_SQL = """(SELECT s.trial_key, min(s.run_id) AS run_id, s.model_id, s.experiment,
    s.language FROM {rows} GROUP BY s.trial_key, s.model_id, s.experiment, s.language)"""
#: A trial's response: one per key (the smallest usage, should an old store hold two).
_RESPONSES_SQL = """(SELECT s.trial_key, min(s.prompt_tokens) AS prompt_tokens,
    min(s.completion_tokens) AS completion_tokens, min(s.cost_usd) AS cost_usd
    FROM {rows} GROUP BY s.trial_key)"""
#: The keys of fatal or given-up attempts.
_GIVEN_UP_SQL = "(SELECT DISTINCT s.trial_key FROM {rows} WHERE s.outcome IN " + _FAILED_SQL + ")"

#: The measures of trials `t` joined with their response `r` and given-up key `f`.
_MEASURES_SQL = """
    count(*) AS planned,
    count(r.trial_key) AS answered,
    count(*) FILTER (WHERE r.trial_key IS NULL AND f.trial_key IS NOT NULL) AS failed,
    coalesce(sum(r.prompt_tokens), 0)::BIGINT AS prompt_tokens,
    coalesce(sum(r.completion_tokens), 0)::BIGINT AS completion_tokens,
    coalesce(sum(r.cost_usd::DECIMAL(38, 18)), 0)::DECIMAL(38, 18) AS cost_usd"""

#: Every count recomputed from the rows: one pass over the trials joined with their responses
#: and the keys of their fatal or given-up attempts (migration 016's backfill).
RECOUNT_SQL = f"""
SELECT t.run_id, t.model_id, t.experiment, t.language, {_MEASURES_SQL}
FROM {_TRIALS_SQL.format(rows="trial_rows s")} t
LEFT JOIN {_RESPONSES_SQL.format(rows="responses s")} r ON r.trial_key = t.trial_key
LEFT JOIN {_GIVEN_UP_SQL.format(rows="attempts s")} f ON f.trial_key = t.trial_key
GROUP BY ALL
"""
#: `trial_index` rows of the trial rows `{rows}`: each trial's group under the MD5 of its key.
_INDEX_COLUMNS = ("trial_key", "run_id", "model_id", "experiment", "language")
_INDEX_SQL = "SELECT md5_number(trial_key), run_id, model_id, experiment, language FROM {rows}"
RECOUNT_ATTEMPTS_SQL = (
    "SELECT run_id, model_id, outcome, count(*) AS attempts FROM attempts GROUP BY ALL"
)
_ROW_COUNTS_SQL = (
    "SELECT (SELECT count(*) FROM trial_rows), (SELECT count(*) FROM responses), "
    "(SELECT count(*) FROM attempts)"
)

# ------------------------------------------------------------------ keeping the counts


def _keyed(table: str, relation: str) -> str:
    """`table AS s` restricted to the keys of the batch `relation`: an inner join on its
    distinct keys, so DuckDB hashes the small batch, not the table (store/writer.py
    `_existing`)."""
    return (
        f"{table} s JOIN (SELECT DISTINCT trial_key FROM {relation}) k ON s.trial_key = k.trial_key"
    )


def _merge(con: duckdb.DuckDBPyConnection, delta_sql: str, params: Sequence[Any] = ()) -> None:
    """Add the per-group rows of `delta_sql` (GROUP, then MEASURES) to `progress_counts`."""
    on = " AND ".join(f"c.{g} = d.{g}" for g in GROUP)
    updates = ", ".join(f"{m} = c.{m} + d.{m}" for m in MEASURES)
    names = ", ".join(f"d.{c}" for c in (*GROUP, *MEASURES))
    con.execute(
        f"MERGE INTO progress_counts c USING ({delta_sql}) d ON {on} "
        f"WHEN MATCHED THEN UPDATE SET {updates} "
        f"WHEN NOT MATCHED THEN INSERT VALUES ({names})",
        list(params),
    ).fetchall()


def _seen(con: duckdb.DuckDBPyConnection, table: str, n: int) -> None:
    """`n` more rows of `table` counted."""
    if n:
        con.execute(f"UPDATE progress_rows SET {table} = {table} + ?", [n]).fetchall()


def trials_added(con: duckdb.DuckDBPyConnection, relation: str, n: int) -> None:
    """Count the trial rows just inserted, visible to `con` as `relation` (with their key,
    run, model, experiment and language; `n` rows). A trial is normally stored before any
    response or attempt names it, but an import or a re-plan may store one whose response is
    already there: it is counted answered (or failed) at once."""
    if not n:
        return
    _merge(
        con,
        f"""
        SELECT t.run_id, t.model_id, t.experiment, t.language, {_MEASURES_SQL}
        FROM {_TRIALS_SQL.format(rows=f"{relation} s")} t
        LEFT JOIN {_RESPONSES_SQL.format(rows=_keyed("responses", relation))} r
            ON r.trial_key = t.trial_key
        LEFT JOIN {_GIVEN_UP_SQL.format(rows=_keyed("attempts", relation))} f
            ON f.trial_key = t.trial_key
        GROUP BY ALL
        """,
    )
    con.execute(f"INSERT INTO trial_index {_INDEX_SQL.format(rows=relation)}").fetchall()
    _seen(con, "trial_rows", n)


def responses_added(con: duckdb.DuckDBPyConnection, relation: str, n: int) -> None:
    """Count the responses just inserted, visible to `con` as `relation` (key, tokens, cost,
    and what store/drift.py keeps: model, reported name, fingerprint, time received; `n` rows,
    each new: the writer inserts a trial's first response only). Each answers its trial, which
    leaves the failed count if an attempt had given it up.

    Each response's trial is found in `trial_index` by the MD5 of its key: a scan of 16-byte
    numbers, several times cheaper than matching the 64-character keys of `trial_rows`, which
    would cost each flush more than the writer's own duplicate check. A digest shared by two
    index rows (a trial stored twice by an old ibias) is resolved on `trial_rows` instead."""
    if not n:
        return
    found = con.execute(
        "SELECT b.trial_key, g.run_id, g.model_id, g.experiment, g.language FROM trial_index g "
        f"JOIN (SELECT trial_key, md5_number(trial_key) AS h FROM {relation}) b ON g.h = b.h"
    ).fetchall()
    if len({row[0] for row in found}) == len(found):
        import pyarrow as pa

        columns = list(zip(*found, strict=True)) if found else [()] * 5
        trials = pa.table(
            {c: pa.array(v, type=pa.string()) for c, v in zip(_INDEX_COLUMNS, columns, strict=True)}
        )
        with registered(con, "_answered_trials", trials):
            _merge(con, _answered_delta(relation, "_answered_trials t"))
    else:
        _merge(
            con,
            _answered_delta(
                relation, _TRIALS_SQL.format(rows=_keyed("trial_rows", relation)) + " t"
            ),
        )
    drift.responses_added(con, relation)
    _seen(con, "responses", n)


def _answered_delta(relation: str, trials: str) -> str:
    """The change that the new responses `relation` make, their trials' groups read from
    `trials` (aliased `t`)."""
    return f"""
        SELECT t.run_id, t.model_id, t.experiment, t.language,
            0::BIGINT AS planned,
            count(*) AS answered,
            -count(f.trial_key) AS failed,
            coalesce(sum(n.prompt_tokens), 0)::BIGINT AS prompt_tokens,
            coalesce(sum(n.completion_tokens), 0)::BIGINT AS completion_tokens,
            coalesce(sum(n.cost_usd::DECIMAL(38, 18)), 0)::DECIMAL(38, 18) AS cost_usd
        FROM {relation} n
        JOIN {trials} ON t.trial_key = n.trial_key
        LEFT JOIN {_GIVEN_UP_SQL.format(rows=_keyed("attempts", relation))} f
            ON f.trial_key = n.trial_key
        GROUP BY ALL
        """


class AttemptKey(Protocol):
    """What counting an attempt needs of it (store/writer.py's `AttemptRow` has it)."""

    @property
    def run_id(self) -> str: ...
    @property
    def trial_key(self) -> str: ...
    @property
    def model_id(self) -> str: ...
    @property
    def outcome(self) -> str: ...


def attempts_adding(con: duckdb.DuckDBPyConnection, attempts: Iterable[AttemptKey]) -> None:
    """Count attempts about to be inserted (call it before the insert, in its transaction):
    by run, model and outcome, and, for a fatal or given-up one, its trial as failed unless
    the trial has a response or was given up before. Only those rare attempts cost a look at
    the stored rows."""
    by_outcome: Counter[tuple[str, str, str]] = Counter()
    given_up: set[str] = set()
    n = 0
    for a in attempts:
        by_outcome[(a.run_id, a.model_id, a.outcome)] += 1
        if a.outcome in FAILED_OUTCOMES:
            given_up.add(a.trial_key)
        n += 1
    if not n:
        return
    import pyarrow as pa  # here: `status` reads the counts without loading pyarrow

    if given_up:
        keys = pa.table({"trial_key": pa.array(sorted(given_up), type=pa.string())})
        before = _GIVEN_UP_SQL.format(rows=_keyed("attempts", "_given_up"))
        with registered(con, "_given_up", keys):
            _merge(
                con,
                f"""
                SELECT t.run_id, t.model_id, t.experiment, t.language,
                    0::BIGINT AS planned, 0::BIGINT AS answered, count(*) AS failed,
                    0::BIGINT AS prompt_tokens, 0::BIGINT AS completion_tokens,
                    0::DECIMAL(38, 18) AS cost_usd
                FROM {_TRIALS_SQL.format(rows=_keyed("trial_rows", "_given_up"))} t
                WHERE t.trial_key NOT IN (
                    SELECT s.trial_key FROM {_keyed("responses", "_given_up")}
                ) AND t.trial_key NOT IN {before}
                GROUP BY ALL
                """,
            )
    counted = pa.table(
        {
            "run_id": pa.array([k[0] for k in by_outcome], type=pa.string()),
            "model_id": pa.array([k[1] for k in by_outcome], type=pa.string()),
            "outcome": pa.array([k[2] for k in by_outcome], type=pa.string()),
            "attempts": pa.array(list(by_outcome.values()), type=pa.int64()),
        }
    )
    with registered(con, "_attempt_counts", counted):
        con.execute(
            "MERGE INTO attempt_counts c USING _attempt_counts d "
            "ON c.run_id = d.run_id AND c.model_id = d.model_id AND c.outcome = d.outcome "
            "WHEN MATCHED THEN UPDATE SET attempts = c.attempts + d.attempts "
            "WHEN NOT MATCHED THEN INSERT VALUES (d.run_id, d.model_id, d.outcome, d.attempts)"
        ).fetchall()
    _seen(con, "attempts", n)


# ------------------------------------------------------------------ rebuilding and checking


def rebuild(con: duckdb.DuckDBPyConnection) -> None:
    """Recompute every count from the rows, in one transaction (after rows were edited by
    hand, or to repair counts `verify` found wrong), what was reported per model
    (store/drift.py) included."""
    begin(con)
    try:
        for table in ("progress_counts", "attempt_counts", "progress_rows", "trial_index"):
            con.execute(f"DELETE FROM {table}").fetchall()
        for statement in drift.rebuild_sql():
            con.execute(statement).fetchall()
        con.execute(f"INSERT INTO trial_index {_INDEX_SQL.format(rows='trial_rows')}").fetchall()
        con.execute(f"INSERT INTO progress_counts {RECOUNT_SQL}").fetchall()
        con.execute(f"INSERT INTO attempt_counts {RECOUNT_ATTEMPTS_SQL}").fetchall()
        con.execute(f"INSERT INTO progress_rows {_ROW_COUNTS_SQL}").fetchall()
        con.execute("COMMIT").fetchall()
    except BaseException:
        rollback(con)
        raise


def verify(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The differences between the kept counts (what was reported per model included,
    store/drift.py) and a recount from the rows, one line each (empty when they agree). `con`
    may be a store reader (store/reader.py): only `execute(...).fetchall()` is called."""
    out: list[str] = []
    kept = _by_key(con.execute(f"SELECT {', '.join((*GROUP, *MEASURES))} FROM progress_counts"))
    recounted = _by_key(con.execute(RECOUNT_SQL))
    for key in sorted(set(kept) | set(recounted)):
        a = kept.get(key, (0,) * len(MEASURES))
        b = recounted.get(key, (0,) * len(MEASURES))
        for name, x, y in zip(MEASURES, a, b, strict=True):
            if x != y:
                run_id, model_id, experiment, language = key
                out.append(
                    f"run {run_id}, model {model_id}, experiment {experiment}, language "
                    f"{language or '(none)'}: {name} kept {x}, counted {y}"
                )
    kept_attempts = _by_key(con.execute("SELECT * FROM attempt_counts"), width=3)
    recounted_attempts = _by_key(con.execute(RECOUNT_ATTEMPTS_SQL), width=3)
    for key in sorted(set(kept_attempts) | set(recounted_attempts)):
        x = kept_attempts.get(key, (0,))[0]
        y = recounted_attempts.get(key, (0,))[0]
        if x != y:
            out.append(f"run {key[0]}, model {key[1]}: {key[2]} attempts kept {x}, counted {y}")
    stray = con.execute(
        "SELECT count(*) FROM ((SELECT * FROM trial_index EXCEPT ALL "
        f"{_INDEX_SQL.format(rows='trial_rows')}) UNION ALL ("
        f"{_INDEX_SQL.format(rows='trial_rows')} EXCEPT ALL SELECT * FROM trial_index))"
    ).fetchall()[0][0]
    if stray:
        out.append(f"trial_index: {stray} rows differ from trial_rows")
    out.extend(f"reported_counts: {line}" for line in drift.verify(con))
    seen = con.execute("SELECT * FROM progress_rows").fetchall()
    actual = con.execute(_ROW_COUNTS_SQL).fetchall()[0]
    if len(seen) != 1:
        out.append(f"progress_rows has {len(seen)} rows, not 1")
    else:
        for name, x, y in zip(
            ("trial_rows", "responses", "attempts"), seen[0], actual, strict=True
        ):
            if int(x) != int(y):
                out.append(f"{name}: {x} rows counted, {y} in the table")
    return out


def _by_key(result: Any, width: int = 4) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Rows keyed by their first `width` columns (summed, should a key repeat)."""
    out: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for row in result.fetchall():
        key, values = tuple(row[:width]), tuple(row[width:])
        if key in out:
            values = tuple(a + b for a, b in zip(out[key], values, strict=True))
        out[key] = values
    return out


def trials_counted(con: duckdb.DuckDBPyConnection) -> int:
    """How many trials the counts hold."""
    row = con.execute("SELECT coalesce(sum(planned), 0) FROM progress_counts").fetchall()
    return int(row[0][0]) if row else 0


# ------------------------------------------------------------------ reading them


def current(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the counts have seen exactly the rows the tables hold (constant time: DuckDB
    keeps each table's row count). False after rows were inserted or deleted outside ibias."""
    rows = con.execute(
        "SELECT p.trial_rows, p.responses, p.attempts, c.* "
        f"FROM progress_rows p, ({_ROW_COUNTS_SQL}) c"
    ).fetchall()
    return len(rows) == 1 and tuple(map(int, rows[0][:3])) == tuple(map(int, rows[0][3:]))


#: Per experiment, model and language: planned, done and failed trials (the `progress` view).
CELLS_SQL = "SELECT experiment, model_id, language, planned, done, failed FROM progress"
_CELLS_RECOUNTED_SQL = (
    "SELECT experiment, model_id, language, sum(planned)::BIGINT, sum(answered)::BIGINT, "
    f"sum(failed)::BIGINT FROM ({RECOUNT_SQL}) GROUP BY ALL ORDER BY ALL"
)


def cells(con: duckdb.DuckDBPyConnection, *, kept: bool = True) -> list[tuple[Any, ...]]:
    """The `progress` view's rows; recounted from the rows when `kept` is False (counts that
    are not `current`)."""
    return con.execute(CELLS_SQL if kept else _CELLS_RECOUNTED_SQL).fetchall()


def model_attempts(
    con: duckdb.DuckDBPyConnection, *, kept: bool = True
) -> dict[str, tuple[int, int]]:
    """Per model: its retries, and its errors (retries and give-ups), over all runs."""
    source = "attempt_counts" if kept else f"({RECOUNT_ATTEMPTS_SQL})"
    return {
        m: (int(r), int(e))
        for m, r, e in con.execute(
            "SELECT model_id, coalesce(sum(attempts) FILTER (WHERE outcome = 'retry'), 0), "
            "coalesce(sum(attempts) FILTER (WHERE outcome IN ('retry', 'gave_up')), 0) "
            f"FROM {source} GROUP BY 1"
        ).fetchall()
    }


def model_costs(con: duckdb.DuckDBPyConnection, *, kept: bool = True) -> dict[str, float]:
    """Per model: the cost of the responses to its stored trials."""
    source = "progress_counts" if kept else f"({RECOUNT_SQL})"
    return {
        m: float(c)
        for m, c in con.execute(
            f"SELECT model_id, coalesce(sum(cost_usd), 0) FROM {source} GROUP BY 1"
        ).fetchall()
    }


class RunCounts(NamedTuple):
    """One model's counts over the trials of some runs."""

    model_id: str
    planned: int
    answered: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float


def runs_counts(con: duckdb.DuckDBPyConnection, runs: Sequence[str]) -> list[RunCounts]:
    """Per model: the counts of the trials that `runs` stored (their origin run)."""
    return [
        RunCounts(m, int(p), int(a), int(pt), int(ct), float(c))
        for m, p, a, pt, ct, c in con.execute(
            "SELECT model_id, sum(planned), sum(answered), sum(prompt_tokens), "
            "sum(completion_tokens), sum(cost_usd) FROM progress_counts "
            "WHERE list_contains(?, run_id) GROUP BY 1",
            [list(runs)],
        ).fetchall()
    ]

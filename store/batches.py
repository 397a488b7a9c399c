"""The `batches` table (migration 012): every provider batch, recorded before the run moves on.

Why an event log rather than one row per batch that is updated: the store is append-only, and
each step of a batch's life (the intent to submit, the uploaded file, the provider's batch id,
each polled state, the ingestion) is one committed row, so a crash between any two steps leaves
a history that says exactly what is known. The intent row is written *before* anything is
uploaded: a crash after the upload or the create and before their row finds that intent on the
next run, which asks the provider (runner/batch/) rather than submitting the trials again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import duckdb

__all__ = [
    "ENDED",
    "FINAL",
    "LIVE",
    "BatchRow",
    "attempts_of",
    "batch_ids",
    "batches_of",
    "held_estimate",
    "keys_in_batches",
    "keys_of",
    "new_intent",
    "record",
]

#: States in which the batch may still run (the provider has, or may have, its requests).
LIVE = frozenset(
    {"intent", "uploaded", "submitted", "validating", "in_progress", "finalizing", "cancelling"}
)
#: States in which the provider has finished with the batch and its results are to be stored.
ENDED = frozenset({"completed", "expired", "cancelled", "failed"})
#: States after which a batch holds no trial: its results are stored, or it never existed.
FINAL = frozenset({"ingested", "abandoned"})


@dataclass(frozen=True)
class BatchRow:
    """A batch as its newest rows describe it (view `batch_state`)."""

    intent_id: str
    provider: str
    model_id: str
    intended_at: datetime
    requests: int
    state: str
    batch_id: str | None
    input_file_id: str | None
    completed: int | None
    failed: int | None
    detail: str | None
    updated_at: datetime


def new_intent(
    con: duckdb.DuckDBPyConnection, provider: str, model_id: str, trial_keys: Sequence[str]
) -> str:
    """Record the intent to submit `trial_keys` as one batch (committed before the upload);
    returns its id, which the provider's batch carries (metadata, display name) where it can."""
    intent_id = f"ibias-{uuid.uuid4().hex}"
    con.execute(
        "INSERT INTO batches (intent_id, provider, model_id, state, trial_keys, requests, seq) "
        "VALUES (?, ?, ?, 'intent', ?, ?, 0)",
        [intent_id, provider, model_id, list(trial_keys), len(trial_keys)],
    ).fetchall()
    return intent_id


def record(
    con: duckdb.DuckDBPyConnection,
    row: BatchRow,
    state: str,
    *,
    batch_id: str | None = None,
    input_file_id: str | None = None,
    completed: int | None = None,
    failed: int | None = None,
    detail: str | None = None,
) -> BatchRow:
    """Append one event of `row`'s batch; returns the batch as it now stands."""
    con.execute(
        "INSERT INTO batches (intent_id, provider, model_id, state, batch_id, input_file_id, "
        "completed, failed, detail, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, "
        "(SELECT coalesce(max(seq), 0) + 1 FROM batches WHERE intent_id = ?))",
        [
            row.intent_id,
            row.provider,
            row.model_id,
            state,
            batch_id,
            input_file_id,
            completed,
            failed,
            detail,
            row.intent_id,
        ],
    ).fetchall()
    found = batches_of(con, intent_id=row.intent_id)
    return found[0]


def batches_of(
    con: duckdb.DuckDBPyConnection,
    *,
    model_id: str | None = None,
    states: Iterable[str] | None = None,
    intent_id: str | None = None,
) -> list[BatchRow]:
    """Batches (oldest intent first), of one model and in some states when given."""
    where: list[str] = []
    params: list[object] = []
    if model_id is not None:
        where.append("model_id = ?")
        params.append(model_id)
    if intent_id is not None:
        where.append("intent_id = ?")
        params.append(intent_id)
    if states is not None:
        wanted = sorted(states)
        where.append("list_contains(?, state)")
        params.append(wanted)
    sql = (
        "SELECT intent_id, provider, model_id, intended_at, requests, state, batch_id, "
        "input_file_id, completed, failed, detail, updated_at FROM batch_state"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY intended_at, intent_id"
    )
    return [BatchRow(*r) for r in con.execute(sql, params).fetchall()]


def batch_ids(con: duckdb.DuckDBPyConnection, model_id: str) -> set[str]:
    """Every provider batch id recorded for this model (none is adopted twice)."""
    rows = con.execute(
        "SELECT DISTINCT batch_id FROM batches WHERE model_id = ? AND batch_id IS NOT NULL",
        [model_id],
    ).fetchall()
    return {r[0] for r in rows}


def keys_of(con: duckdb.DuckDBPyConnection, intent_id: str) -> list[str]:
    """The trial keys of a batch, in the order they were sent."""
    row = con.execute(
        "SELECT trial_keys FROM batches WHERE intent_id = ? AND state = 'intent'", [intent_id]
    ).fetchone()
    return list(row[0]) if row and row[0] is not None else []


def keys_in_batches(
    con: duckdb.DuckDBPyConnection, model_id: str, states: Iterable[str]
) -> set[str]:
    """Trial keys of this model's batches in `states` (e.g. every live one)."""
    rows = con.execute(
        "SELECT unnest(b.trial_keys) FROM batches b JOIN batch_state s "
        "ON s.intent_id = b.intent_id WHERE b.state = 'intent' AND s.model_id = ? "
        "AND list_contains(?, s.state)",
        [model_id, sorted(states)],
    ).fetchall()
    return {r[0] for r in rows}


def held_estimate(
    con: duckdb.DuckDBPyConnection, model_id: str, states: Iterable[str] = LIVE | ENDED
) -> tuple[int, int]:
    """Requests in this model's batches in `states` (default: those that may still cost
    money, live or ended and not ingested yet), whichever run submitted them, and the sum of
    their prompt estimates (ceil(characters / 4), as the submitting run estimated them): what
    `--max-cost` counts at the upper bound before it admits another batch, and (live only)
    what OpenAI's enqueued-token limit counts."""
    from ibias.store.plans import PROMPT_CHARS_SQL

    row = con.execute(
        "SELECT count(*), coalesce(sum(ceil(s.chars / 4)), 0)::BIGINT FROM ("
        "SELECT unnest(b.trial_keys) AS trial_key FROM batches b JOIN batch_state st "
        "ON st.intent_id = b.intent_id WHERE b.state = 'intent' AND st.model_id = ? "
        "AND list_contains(?, st.state)) k "
        "JOIN trial_rows t ON t.trial_key = k.trial_key AND t.model_id = ? "
        f"JOIN (SELECT s.spec_key, {PROMPT_CHARS_SQL} AS chars FROM trial_specs s) s "
        "ON s.spec_key = t.spec_key",
        [model_id, sorted(states), model_id],
    ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def attempts_of(con: duckdb.DuckDBPyConnection, model_id: str) -> dict[str, int]:
    """Attempts stored per trial of this model that has no response (what the retry limit
    counts: a line that errored or expired in a batch is one attempt, as online)."""
    rows = con.execute(
        "SELECT a.trial_key, count(*) FROM attempts a WHERE a.model_id = ? AND a.trial_key "
        "NOT IN (SELECT r.trial_key FROM responses r WHERE r.model_id = ?) GROUP BY 1",
        [model_id, model_id],
    ).fetchall()
    return {k: int(n) for k, n in rows}

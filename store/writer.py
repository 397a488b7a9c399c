"""The single writer: the only code that inserts into the store during a run.

Rows are buffered in memory and flushed as Arrow batches at least every `interval` seconds, in
a worker thread (anyio's thread helper, one flush at a time), so the event loop never blocks on
disk and a `kill -9` loses at most the last second of results. A flush that has started always
finishes, even when the run is cancelled: anyio waits for the thread instead of abandoning it,
so a transaction is never left half-done. Responses are inserted with an anti-join
on trial_key, so a trial can never end with two response rows.

Attempts and their responses are committed together, in one transaction per flush, and a
flush starts at most `interval` seconds after the previous one started (at once when a flush
took longer): after a `kill -9` the store lacks only the attempts in flight and those finished
since the last committed flush began, and every trial without a response is asked again.

A flush that fails (a full disk, a file-size limit, an I/O error) is final for the run: the
writer raises `StoreWriteError` naming the system's reason, which ends the run's task group at
once (no request starts after it is seen), and writes nothing more, so what was committed
before stays readable and a rerun after the cause is fixed resumes from it.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import anyio
import anyio.to_thread
import duckdb
import orjson
import pyarrow as pa

from ibias import errors
from ibias.prompts.base import canonical_json
from ibias.store.arrow_scan import registered
from ibias.store.db import begin, rollback
from ibias.store.memory import MemoryGuard, is_out_of_memory
from ibias.store.outcome import reply_outcome
from ibias.store.progress_counts import attempts_adding, responses_added, trials_added
from ibias.store.specs import spec_key
from ibias.store.trial import Trial


class AttemptRow(NamedTuple):
    """`started_at` is a datetime, or epoch seconds (converted on the writer's thread).

    Built with keywords: ten fields in a row, several of the same type, read as noise by
    position, and a swapped pair would still type-check."""

    run_id: str
    trial_key: str
    model_id: str
    attempt_no: int
    started_at: datetime | float
    latency_ms: float | None
    http_status: int | None
    error_kind: str | None
    error_message: str | None
    outcome: str


class ResponseRow(NamedTuple):
    """`raw` is the reply's JSON text, or the decoded body, and `received_at` a datetime or
    epoch seconds: either is converted on the writer's thread, off the event loop. Built with
    keywords, as `AttemptRow`."""

    trial_key: str
    run_id: str
    model_id: str
    provider_model: str | None
    content: str | None
    refusal: str | None
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cost_usd: float | None
    system_fingerprint: str | None
    received_at: datetime | float
    raw: str | Mapping[str, Any] | None
    reasoning_content: str | None = None
    reasoning_tokens: int | None = None
    logprobs: Sequence[Mapping[str, Any]] | None = None
    """The reply's token logprobs (migration 007), serialised on the writer's thread."""
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    """Prompt tokens read from / written to the provider's cache (migration 009)."""


class Landed(NamedTuple):
    """A response as it lands, with what its parser needs (so parsing needs no extra query)."""

    trial_key: str
    experiment: str
    item: Mapping[str, Any]
    content: str | None
    logprobs: Sequence[Mapping[str, Any]] | None = None


_TS = pa.timestamp("us", tz="UTC")
_ARROW_TYPES: dict[str, pa.DataType] = {
    "run_id": pa.string(),
    "trial_key": pa.string(),
    "model_id": pa.string(),
    "attempt_no": pa.int32(),
    "started_at": _TS,
    "latency_ms": pa.float64(),
    "http_status": pa.int32(),
    "error_kind": pa.string(),
    "error_message": pa.string(),
    "outcome": pa.string(),
    "provider_model": pa.string(),
    "content": pa.string(),
    "refusal": pa.string(),
    "finish_reason": pa.string(),
    "prompt_tokens": pa.int32(),
    "completion_tokens": pa.int32(),
    "cost_usd": pa.float64(),
    "system_fingerprint": pa.string(),
    "received_at": _TS,
    "raw": pa.string(),
    "reasoning_content": pa.string(),
    "reasoning_tokens": pa.int32(),
    "logprobs": pa.string(),
    "cache_read_tokens": pa.int32(),
    "cache_write_tokens": pa.int32(),
}


#: Columns that are None for most rows (reasoning, migration 006; logprobs, 007): left out of
#: a batch in which every value is None.
_SPARSE = frozenset(
    {"reasoning_content", "reasoning_tokens", "logprobs", "cache_read_tokens", "cache_write_tokens"}
)


def to_arrow(rows: Sequence[tuple[Any, ...]], row_type: type[AttemptRow | ResponseRow]) -> pa.Table:
    """Rows (named tuples of `row_type`) as an Arrow table: one transpose, one array per
    column; a decoded `raw` body is serialised here."""
    names = row_type._fields
    columns = list(zip(*rows, strict=True))
    out: dict[str, pa.Array] = {}
    for name, values in zip(names, columns, strict=True):
        if name in _SPARSE and all(v is None for v in values):
            continue  # the column's default (NULL) fills it; no Arrow work for most batches
        if name in ("raw", "logprobs"):
            values = tuple(_json_text(v) for v in values)
        elif _ARROW_TYPES[name] == _TS and any(not isinstance(v, datetime) for v in values):
            out[name] = _epoch_timestamps(values)
            continue
        out[name] = pa.array(values, type=_ARROW_TYPES[name])
    return pa.table(out)


def _epoch_timestamps(values: Sequence[datetime | float]) -> pa.Array:
    """Epoch seconds (floats, or datetimes mixed in) as UTC microsecond timestamps.

    Built from the integers directly: `Array.cast` would load `pyarrow.compute`, 20 ms of
    imports on the writer's thread holding the interpreter lock in the middle of a run."""
    micros = [
        round(v.timestamp() * 1e6) if isinstance(v, datetime) else round(v * 1e6) for v in values
    ]
    return pa.array(micros, type=_TS)


def _json_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def insert_attempts(con: duckdb.DuckDBPyConnection, rows: Sequence[AttemptRow]) -> None:
    """Insert attempts, counted (store/progress_counts.py) in the caller's transaction."""
    if not rows:
        return
    attempts_adding(con, rows)
    batch = to_arrow(rows, AttemptRow)
    names = ", ".join(batch.column_names)
    with registered(con, "_attempt_batch", batch):
        con.execute(f"INSERT INTO attempts ({names}) SELECT {names} FROM _attempt_batch").fetchall()


def insert_responses(con: duckdb.DuckDBPyConnection, rows: Sequence[ResponseRow]) -> int:
    """Insert responses whose trial has none yet; returns how many were new. The new ones
    are counted (store/progress_counts.py) in the caller's transaction, from the rows the
    insert returns.

    A trial's first row in `rows` is the one kept. Duplicates inside the batch are dropped
    here, in a pass over the keys, rather than by a window function in SQL: DuckDB's
    partitioning of every batch was a third of a flush's cost, for rows a run never sends
    twice (an import may)."""
    if not rows:
        return 0
    keys = {r.trial_key for r in rows}
    if len(keys) < len(rows):
        kept: dict[str, ResponseRow] = {}
        for r in rows:
            kept.setdefault(r.trial_key, r)
        rows = list(kept.values())
    batch = _with_outcomes(to_arrow(rows, ResponseRow), rows)
    names = ", ".join(batch.column_names)
    with registered(con, "_response_batch", batch):
        new = con.execute(
            f"INSERT INTO responses ({names}) SELECT {names} FROM _response_batch b "
            f"WHERE b.trial_key NOT IN ({_existing('responses', '_response_batch')}) "
            f"RETURNING {', '.join(_COUNTED_RESPONSE_COLUMNS)}"
        ).fetchall()
    table = _returned(new, _COUNTED_RESPONSE_COLUMNS)
    with registered(con, "_new_responses", table):
        responses_added(con, "_new_responses", len(new))
    return len(new)


#: What counting a new response needs of it (store/progress_counts.py, store/drift.py).
_COUNTED_RESPONSE_COLUMNS = (
    "trial_key",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "model_id",
    "provider_model",
    "system_fingerprint",
    "received_at",
)


def _returned(rows: list[tuple[Any, ...]], names: Sequence[str]) -> pa.Table:
    """The rows an INSERT ... RETURNING gave, as an Arrow table for counting them (fetched as
    rows: DuckDB copies a DB-API result once more to give it as Arrow)."""
    types = {
        "prompt_tokens": pa.int64(),
        "completion_tokens": pa.int64(),
        "cost_usd": pa.float64(),
        "received_at": pa.timestamp("us", tz="UTC"),
    }
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in names]
    return pa.table(
        {
            n: pa.array(c, type=types.get(n, pa.string()))
            for n, c in zip(names, columns, strict=True)
        }
    )


def _with_outcomes(batch: pa.Table, rows: Sequence[ResponseRow]) -> pa.Table:
    """`batch` with each reply's outcome and reason (store/outcome.py, migration 009), decided
    here from the stored fields so every path into the store (a run, an import) agrees."""
    decided = [
        reply_outcome(r.content, r.finish_reason, r.refusal, r.reasoning_content) for r in rows
    ]
    return batch.append_column(
        "outcome", pa.array([o for o, _ in decided], type=pa.string())
    ).append_column("outcome_reason", pa.array([why for _, why in decided], type=pa.string()))


def _existing(table: str, batch: str) -> str:
    """Keys of `batch` already in `table`, as an inner join so DuckDB hashes the small batch,
    not the whole table (a NOT EXISTS anti-join would hash every stored key per flush)."""
    return (
        f"SELECT s.trial_key FROM {table} s JOIN (SELECT DISTINCT trial_key FROM {batch}) k "
        f"ON s.trial_key = k.trial_key"
    )


#: Columns of the `trials` view, in its order (migration 008: a view over `trial_rows` and
#: `trial_specs` with the columns of the table it replaced).
TRIAL_COLUMNS = (
    "trial_key",
    "run_id",
    "experiment",
    "model_id",
    "language",
    "coords",
    "item",
    "messages",
    "params",
    "replicate",
)
#: Columns of `trial_rows`: one row per trial, naming its spec.
TRIAL_ROW_COLUMNS = (
    "trial_key",
    "run_id",
    "experiment",
    "model_id",
    "language",
    "spec_key",
    "params",
    "replicate",
)
#: Columns of `trial_specs`: each spec's texts, once.
SPEC_COLUMNS = ("spec_key", "coords", "item", "messages")


def insert_trials(con: duckdb.DuckDBPyConnection, run_id: str, trials: Iterable[Trial]) -> int:
    """Insert trials not yet in the store (anti-join on trial_key); returns new rows, counted
    (store/progress_counts.py) in the caller's transaction.

    Each spec's texts go to `trial_specs` once: only specs of the new rows, and only those not
    stored already (anti-join on spec_key), so importing a file again adds no spec. The specs
    are written first, while the batch's keys are still absent from `trial_rows`."""
    row_batch, spec_batch = _trial_tables(run_id, trials)
    if not row_batch.num_rows:
        return 0
    names = ", ".join(TRIAL_ROW_COLUMNS)
    spec_names = ", ".join(SPEC_COLUMNS)
    with registered(con, "_trial_batch", row_batch), registered(con, "_spec_batch", spec_batch):
        con.execute(
            f"INSERT INTO trial_specs ({spec_names}) SELECT {spec_names} FROM _spec_batch b "
            "WHERE b.spec_key IN (SELECT n.spec_key FROM _trial_batch n WHERE n.trial_key "
            f"NOT IN ({_existing('trial_rows', '_trial_batch')})) AND b.spec_key NOT IN "
            "(SELECT s.spec_key FROM trial_specs s JOIN _spec_batch k "
            "ON s.spec_key = k.spec_key)"
        ).fetchall()
        new = con.execute(
            f"INSERT INTO trial_rows ({names}) SELECT {names} FROM _trial_batch b "
            f"WHERE b.trial_key NOT IN ({_existing('trial_rows', '_trial_batch')}) "
            "RETURNING trial_key, run_id, model_id, experiment, language"
        ).fetchall()
    table = _returned(new, ("trial_key", "run_id", "model_id", "experiment", "language"))
    with registered(con, "_new_trials", table):
        trials_added(con, "_new_trials", len(new))
    return len(new)


def _trial_tables(run_id: str, trials: Iterable[Trial]) -> tuple[pa.Table, pa.Table]:
    """The trials as `trial_rows` rows and their specs as `trial_specs` rows (Arrow), each
    spec once, keyed by the canonical JSON of its parts."""
    rows: dict[str, list[Any]] = {c: [] for c in TRIAL_ROW_COLUMNS}
    specs: dict[str, tuple[str, str, str]] = {}
    for t in trials:
        coords = canonical_json(t.coords)
        item = canonical_json(t.item)
        messages = canonical_json(t.messages)
        key = spec_key(
            coords,
            canonical_json(t.experiment),
            item,
            canonical_json(t.language),
            messages,
            canonical_json(t.replicate),
        )
        if key not in specs:
            specs[key] = (coords.decode(), item.decode(), messages.decode())
        rows["trial_key"].append(t.trial_key)
        rows["run_id"].append(run_id)
        rows["experiment"].append(t.experiment)
        rows["model_id"].append(t.model_id)
        rows["language"].append(t.language)
        rows["spec_key"].append(key)
        rows["params"].append(canonical_json(t.params).decode())
        rows["replicate"].append(t.replicate)
    row_batch = pa.table(
        {
            c: pa.array(v, type=pa.int32() if c == "replicate" else pa.string())
            for c, v in rows.items()
        }
    )
    spec_batch = pa.table(
        {
            "spec_key": pa.array(list(specs), type=pa.string()),
            **{
                c: pa.array([texts[i] for texts in specs.values()], type=pa.string())
                for i, c in enumerate(SPEC_COLUMNS[1:])
            },
        }
    )
    return row_batch, spec_batch


class StoreWriteError(errors.StoreError):
    """The store could not be written: one line naming the file and the system's reason (a
    full disk, a file-size limit, an I/O error), what was kept, and what to do. A user error
    (exit 2): nothing is wrong with the run, the place it writes to must be fixed first."""


#: DuckDB names the file and the system's reason inside its own wrappers, e.g.
#: `TransactionContext Error: Failed to commit: Could not write file "x.wal": File too large`.
_OS_CAUSE = re.compile(
    r"Could not (?:write|fsync|truncate|extend|open|create|seek in|read from)[a-z ]*? file "
    r'"(?P<path>[^"]+)"[:,]? *(?P<reason>[^\n]*)'
)
_DUCKDB_PREFIXES = re.compile(
    r"^(?:(?:TransactionContext|IO|FATAL|Invalid Input|INTERNAL) Error: |Failed to commit: )+"
)


def os_cause(exc: BaseException) -> str:
    """The system's reason inside a DuckDB error (`PATH: No space left on device`), or the
    error's own text without DuckDB's wrapper prefixes when it names none."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    text = " ".join(str(exc).split())
    found = _OS_CAUSE.search(str(exc))
    if found is not None:
        reason = found.group("reason").strip().rstrip('."') or "write failed"
        return f"{found.group('path')}: {reason}"
    return _DUCKDB_PREFIXES.sub("", text) or type(exc).__name__


def is_write_failure(exc: BaseException) -> bool:
    """Whether `exc` is the store failing to reach the disk (rather than a bug): an OSError,
    a DuckDB I/O error, or a DuckDB error that names a file it could not write."""
    return isinstance(exc, OSError | duckdb.IOException) or (
        isinstance(exc, duckdb.Error) and _OS_CAUSE.search(str(exc)) is not None
    )


def write_failure(exc: BaseException, stored: int | None = None) -> StoreWriteError:
    """The one-line StoreWriteError for a failed write; `stored` is how many responses this
    run committed before it."""
    kept = (
        f"{stored:,} responses of this run are stored"
        if stored is not None
        else "everything committed before it is kept"
    )
    return StoreWriteError(
        f"the store could not be written ({os_cause(exc)}); the run stopped: {kept}; "
        "free space (or fix the cause) and run again to resume"
    )


#: `attempts.error_kind` of a reply the store refused even alone (the trial stays unanswered).
UNSTORABLE = "unstorable"
#: Tries of a batch of several replies that finds DuckDB's memory full before it is halved.
BATCH_OOM_TRIES = 2
#: Characters of such an attempt's `error_message`.
ERROR_MESSAGE_CHARS = 500

OnLanded = Callable[[duckdb.DuckDBPyConnection, Sequence[Landed]], None]


class Writer:
    """Buffers attempts and responses and flushes them in a worker thread.

    Run `run()` as a task of the run's task group and `close()` at the end (also after an
    error: it writes what is still buffered). `on_landed` (e.g. the derived-table parsers) runs
    on the writer thread right after each flush, inside the same transaction, so parsed rows
    never refer to missing responses. After a failed write (`failure`) it writes nothing more;
    `on_failure` is called with the error on the event loop before it is raised, so the run can
    stop scheduling before any other task runs.
    """

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        *,
        interval: float = 1.0,
        max_rows: int = 5000,
        on_landed: OnLanded | None = None,
        on_failure: Callable[[StoreWriteError], None] | None = None,
        guard: MemoryGuard | None = None,
        before_commit: Callable[[bool], None] | None = None,
    ) -> None:
        self.con = con
        #: Retries a flush that found DuckDB's memory full (store/memory.py).
        self.guard = guard
        #: Called inside each flush's transaction just before COMMIT, with whether the writer
        #: is closing (the final flush): the test-only phase hook of the torture tests.
        self.before_commit = before_commit
        self.on_failure = on_failure
        self.interval = interval
        self.max_rows = max_rows
        self.on_landed = on_landed
        self._attempts: list[AttemptRow] = []
        self._responses: list[ResponseRow] = []
        self._landed: list[Landed] = []
        # anyio primitives are made in run(), inside the loop (a Writer may be built outside).
        self._wake: anyio.Event | None = None
        self._stopped: anyio.Event | None = None
        self._one_at_a_time: anyio.CapacityLimiter | None = None
        self._closing = False
        #: Responses committed so far by this writer (new rows only), in all and by model.
        self.stored = 0
        self.stored_by_model: Counter[str] = Counter()
        #: Replies the store refused even alone, recorded as their attempts' errors.
        self.unstorable = 0
        #: The error that ended writing, once a flush has failed.
        self.failure: StoreWriteError | None = None

    def add_attempt(self, row: AttemptRow) -> None:
        self._attempts.append(row)
        self._maybe_wake()

    def add_response(self, row: ResponseRow, landed: Landed | None = None) -> None:
        self._responses.append(row)
        if landed is not None:
            self._landed.append(landed)
        self._maybe_wake()

    def _maybe_wake(self) -> None:
        if self._wake is not None and len(self._attempts) + len(self._responses) >= self.max_rows:
            self._wake.set()

    async def run(self) -> None:
        """Flush `interval` seconds after the previous flush began (sooner when `max_rows`
        are buffered, at once when a flush took longer) until `close()`; raises
        `StoreWriteError` when a flush fails."""
        self._stopped = anyio.Event()
        try:
            started = time.monotonic()
            while not self._closing:
                self._wake = anyio.Event()
                with anyio.move_on_after(max(0.0, started + self.interval - time.monotonic())):
                    await self._wake.wait()
                started = time.monotonic()
                await self.flush()
        finally:
            self._stopped.set()

    async def flush(self) -> None:
        """Commit what is buffered, in one transaction. After a failed flush (this one raises
        `StoreWriteError`) the buffers are dropped and nothing more is written: those trials
        have no response, so a rerun asks them again."""
        attempts, self._attempts = self._attempts, []
        responses, self._responses = self._responses, []
        landed, self._landed = self._landed, []
        # The final flush always reaches the test-only hook (runner/execution/phase_hook.py), even
        # with nothing to write, so the torture tests can stop every run in that phase.
        hooked = self._closing and self.before_commit is not None
        if self.failure is not None or (not attempts and not responses and not hooked):
            return
        if self._one_at_a_time is None:
            self._one_at_a_time = anyio.CapacityLimiter(1)
        try:
            await anyio.to_thread.run_sync(
                self._write, attempts, responses, landed, limiter=self._one_at_a_time
            )
        except Exception as exc:
            if not is_write_failure(exc):
                raise
            self.failure = write_failure(exc, self.stored)
            if self.on_failure is not None:
                self.on_failure(self.failure)
            raise self.failure from exc

    def _write(
        self, attempts: list[AttemptRow], responses: list[ResponseRow], landed: list[Landed]
    ) -> None:
        """Commit the batch; when it cannot be committed whole for any reason but the disk's,
        store it in parts (`_write_apart`), so one reply DuckDB refuses, or a batch too large
        for the memory cap, costs at most that reply, never the others."""
        self._store(attempts, responses, landed)
        # Written: free the rows (and the reply bodies they hold) here, on the writer's
        # thread, rather than on the event loop's when the flush returns.
        attempts.clear()
        responses.clear()
        landed.clear()

    def _store(
        self, attempts: list[AttemptRow], responses: list[ResponseRow], landed: list[Landed]
    ) -> None:
        """Commit these rows, or, failing for any reason but the disk's, store them apart."""
        try:
            self._guarded(attempts, responses, landed)
        except Exception as exc:
            if is_write_failure(exc):
                raise
            self._write_apart(attempts, responses, landed, exc)

    def _guarded(
        self, attempts: list[AttemptRow], responses: list[ResponseRow], landed: list[Landed]
    ) -> None:
        """One transaction, tried again after relief while DuckDB is out of memory: all the
        guard's tries for one reply; once for several, which are halved rather than retried
        (a batch can be too large for the memory by itself: then only halving helps)."""
        if self.guard is None:
            self._commit(attempts, responses, landed)
        else:
            tries = None if len(responses) <= 1 else BATCH_OOM_TRIES
            self.guard.call(lambda: self._commit(attempts, responses, landed), tries=tries)

    def _write_apart(
        self,
        attempts: list[AttemptRow],
        responses: list[ResponseRow],
        landed: list[Landed],
        error: Exception,
    ) -> None:
        """Store a batch that failed whole: halves by response (each with its trials' attempts
        and parses), down to one reply, which is stored without its parse if only parsing
        failed (analysis parses it later), and otherwise recorded as its attempt's error
        (`error_kind = 'unstorable'`): the trial has no response and is asked again."""
        if len(responses) > 1:
            half = len(responses) // 2
            for first, part in ((True, responses[:half]), (False, responses[half:])):
                keys = {r.trial_key for r in part}
                own = [a for a in attempts if a.trial_key in keys]
                if first:  # attempts of trials without a response in this batch go first
                    every = {r.trial_key for r in responses}
                    own += [a for a in attempts if a.trial_key not in every]
                self._store(own, part, [item for item in landed if item.trial_key in keys])
            return
        if responses and landed:
            try:
                self._guarded(attempts, responses, [])  # the parse failed, not the reply
                return
            except Exception as exc:
                if is_write_failure(exc):
                    raise
                error = exc
        if is_out_of_memory(error):
            # Not this reply's fault (one reply is at most `max_body_bytes`): the memory is
            # full even after the readers gave theirs back. Give up rather than bisect on.
            raise error
        why = f"the store refused the reply: {os_cause(error)}"[:ERROR_MESSAGE_CHARS]
        keys = {r.trial_key for r in responses}
        kept = [
            a._replace(outcome="error", error_kind=UNSTORABLE, error_message=why)
            if a.trial_key in keys and a.outcome == "ok"
            else a
            for a in attempts
        ]
        if responses and not any(a.trial_key in keys and a.outcome == "error" for a in kept):
            r = responses[0]  # no attempt row came with it: record one
            kept.append(
                AttemptRow(
                    run_id=r.run_id,
                    trial_key=r.trial_key,
                    model_id=r.model_id,
                    attempt_no=0,
                    started_at=r.received_at,
                    latency_ms=None,
                    http_status=None,
                    error_kind=UNSTORABLE,
                    error_message=why,
                    outcome="error",
                )
            )
        self.unstorable += len(responses)
        self._guarded(kept, [], [])

    def _commit(
        self, attempts: list[AttemptRow], responses: list[ResponseRow], landed: list[Landed]
    ) -> None:
        con = self.con
        begin(con)
        try:
            insert_attempts(con, attempts)
            new = insert_responses(con, responses)
            if self.on_landed is not None and landed:
                self.on_landed(con, landed)
            if self.before_commit is not None:
                self.before_commit(self._closing)
            con.execute("COMMIT").fetchall()
        except BaseException:
            rollback(con)
            raise
        self.stored += new
        if new == len(responses):  # every row was new (the scheduler sends a trial once)
            self.stored_by_model.update(r.model_id for r in responses)
        elif responses:  # some trial had a response already: count this run's from the store
            run_id = responses[0].run_id
            self.stored_by_model = Counter(
                dict(
                    con.execute(
                        "SELECT model_id, count(*) FROM responses WHERE run_id = ? GROUP BY 1",
                        [run_id],
                    ).fetchall()
                )
            )

    async def close(self) -> None:
        """Stop the flush loop and write everything still buffered. Idempotent; shielded from
        cancellation, because it is what keeps a stopped run's results."""
        with anyio.CancelScope(shield=True):
            self._closing = True
            if self._wake is not None:
                self._wake.set()
            if self._stopped is not None:
                await self._stopped.wait()
            await self.flush()

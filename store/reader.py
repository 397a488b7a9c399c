"""The one way ibias's read-only commands read a store, whether or not a run holds it.

`open_reader(store)` gives a session of sandboxed reads (store/sandbox.py's rules: one read
statement, external access off, configuration locked) that returns Arrow, Polars or Python rows
(the rows without loading pyarrow, on the file or, for a small result, from a run):

- when no process holds the store, on a read-only, sandboxed DuckDB connection to the file;
- while `ibias run` holds it, from that process over its live socket (store/live.py): the run
  only executes the read, in a read-only transaction, so every query of one session sees the
  same committed snapshot; what the caller does with the rows happens here, in memory.

A run that has just taken or just released the store is retried for a moment, so a reader
racing with a run's start or end gets an answer rather than "busy".

Whose query it is decides what a failure is. The user's (`ibias sql`, a `--where`) failing is
the user's to fix: a one-line `StoreAccessError`, exit 2. ibias's own (`open_reader(store,
internal=True)`: the analysis's reads) failing because its text does not parse or bind is a
bug: `InternalQueryFailure`, which the command reports as an internal error (exit 1, the
traceback under `IBIAS_DEBUG=1`). A store that cannot be read (broken, busy, out of memory, a
query past its time limit) stays a `StoreAccessError` for either.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import duckdb

from ibias.store.db import StoreAccessError
from ibias.store.live import LiveClient, execute_rows, read_error, read_table
from ibias.store.lock import holder
from ibias.store.sandbox import open_query_connection

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa


class InternalQueryFailure(RuntimeError):
    """ibias's own query failed for a reason in its text (it does not parse, names a column
    that is not there, is not one read): a bug, never the user's store error. Not an
    `ibias.Error`, so the command reports it as an internal error with its traceback on
    request; the message names the store, DuckDB's line and the query."""


#: The one-line errors (store/live.py `read_error`, store/sandbox.py `read_statement`: the same
#: served live or not) that fault a query's text rather than the store: DuckDB could not parse
#: or bind it, does not implement it, or the sandbox refused it as not one read.
_TEXT_FAULTS = re.compile(
    r"query (?:failed|refused): (?:Parser|Binder|Not implemented|Permission) Error:"
    r"|query is empty|query has \d+ statements|.* statements are refused"
)
#: How much of a failing internal query its error line quotes.
_QUOTED_CHARS = 300


def _query_text(sql: str) -> str:
    flat = " ".join(sql.split())
    return flat if len(flat) <= _QUOTED_CHARS else flat[: _QUOTED_CHARS - 3] + "..."


#: Tries (and the pause between them) while a run is starting or ending: about 2 s in all.
ATTEMPTS = 10
PAUSE_S = 0.2


class Rows(Protocol):
    """A result with the two DB-API calls the store's query helpers use (store/plans.py)."""

    def fetchall(self) -> list[tuple[Any, ...]]: ...

    def fetchone(self) -> tuple[Any, ...] | None: ...


class ListRows:
    """`Rows` already fetched (a live result): its names in `description`, as DuckDB's."""

    def __init__(self, names: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        self.description = [(name,) for name in names]
        self._rows = rows

    def fetchall(self) -> list[tuple[Any, ...]]:
        return list(self._rows)

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None


class StoreReader:
    """A session of sandboxed reads of one store; `live` says a running process serves it."""

    def __init__(
        self,
        store: Path,
        live: bool,
        table: Callable[[str, Sequence[Any]], pa.Table],
        close: Callable[[], None],
        rows: Callable[[str, Sequence[Any]], Rows],
        *,
        internal: bool = False,
    ) -> None:
        self.store = store
        self.live = live
        #: The queries are ibias's own: a fault in their text is an `InternalQueryFailure`.
        self.internal = internal
        self._table = table
        self._close = close
        self._rows = rows

    def _fault(self, exc: StoreAccessError, sql: str) -> Exception:
        """What a failed query raises: the user's store error, or, for ibias's own query whose
        text is at fault, an internal error naming the store and the query."""
        if self.internal and _TEXT_FAULTS.match(str(exc)):
            return InternalQueryFailure(
                f"ibias's own query of store {self.store} failed: {exc} (query: {_query_text(sql)})"
            )
        return exc

    def table(self, sql: str, params: Sequence[Any] = ()) -> pa.Table:
        """The result as an Arrow table; a refusal or failure is a one-line `StoreAccessError` (an
        `InternalQueryFailure` for a fault in the text of ibias's own query)."""
        try:
            return self._table(sql, params)
        except StoreAccessError as exc:
            raise self._fault(exc, sql) from exc

    def frame(
        self, sql: str, params: Sequence[Any] = (), *, categorical: Collection[str] = ()
    ) -> pl.DataFrame:
        """The result as a Polars frame, from its Arrow table made one chunk first; the
        `categorical` columns it has (texts) as Polars categoricals.

        DuckDB hands a result over in batches of some 60,000 rows, and Polars' frame of a
        result converted batch by batch keeps far more memory than its data: the allocation
        view of a store ten times the paper's grid (22 batches) held 485 MB, measured as what
        dropping it gave back, against 205 MB when the batches are combined first. The
        string columns are most of the difference (four short ones: 172 against 82 MB).

        A categorical column (text; another type stays as it is) is dictionary-encoded while
        still in Arrow, so its texts never become Polars strings (16 bytes a row and the text,
        against 4): encoding the allocation view's nine label columns after the conversion
        instead kept 115 MB more of the 10x store's read, and took 0.6 s longer. (Having
        DuckDB send them as enums of their distinct values instead read with 200 MB less at
        its peak, but the enum cast over the view then ran out of the reads' 384 MB now and
        then: 2 loads of 8 at 10x.)"""
        import polars as pl
        import pyarrow as pa

        table = self.table(sql, params)
        encoded = [
            field.name
            for field in table.schema
            if field.name in categorical
            and (pa.types.is_string(field.type) or pa.types.is_large_string(field.type))
        ]
        if encoded:
            import pyarrow.compute as pc

            for name in encoded:
                index = table.column_names.index(name)
                table = table.set_column(index, name, pc.dictionary_encode(table[name]))
            table = table.unify_dictionaries()
        frame = pl.from_arrow(table.combine_chunks())
        del table
        assert isinstance(frame, pl.DataFrame)  # a table always converts to a DataFrame
        return frame

    def records(
        self, sql: str, params: Sequence[Any] = ()
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """The result's column names and rows as Python values, straight from DuckDB on the
        file, so neither pyarrow nor Polars is loaded (0.2 s of a short `ibias sql`); from a run,
        in the row form of its live server (store/live_rows.py), which decodes to the same
        values, and as Arrow only for a result too large for it."""
        result = self.execute(sql, params)
        names = [d[0] for d in getattr(result, "description", None) or ()]
        try:
            return names, result.fetchall()
        except duckdb.Error as exc:
            raise self._fault(read_error(exc), sql) from exc

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        """Like `DuckDBPyConnection.execute(...)` for helpers that take a connection and only
        call `fetchall()` / `fetchone()` on its result."""
        try:
            return self._rows(sql, params)
        except StoreAccessError as exc:
            raise self._fault(exc, sql) from exc

    def close(self) -> None:
        self._close()


@contextmanager
def open_reader(
    store: Path, *, internal: bool = False, memory_limit: str | None = None
) -> Iterator[StoreReader]:
    """A sandboxed read session of `store`: the file itself, or the run holding it.
    `internal`: its queries are ibias's own, not the user's (see the module doc).
    `memory_limit`: DuckDB's cap for a session on the file (`open_query_connection`); a run
    holding the store serves reads under its own cap."""
    reader = _open(store, memory_limit)
    reader.internal = internal
    try:
        yield reader
    finally:
        reader.close()


def _open(store: Path, memory_limit: str | None = None) -> StoreReader:
    who: str | None = None
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(PAUSE_S)
        who = holder(store)
        if who is None:
            try:
                con = open_query_connection(store, memory_limit=memory_limit)
            except StoreAccessError:
                if holder(store) is None or attempt == ATTEMPTS - 1:
                    raise
                continue  # a run took the store meanwhile: ask it
            return StoreReader(
                store,
                False,
                functools.partial(read_table, con),
                con.close,
                functools.partial(execute_rows, con),
            )
        client = LiveClient.connect(store)
        if client is not None:
            return StoreReader(store, True, client.table, client.close, _live_rows(client))
    raise StoreAccessError(
        f"store {store} is busy: held by {who or 'another process'}, which serves no live "
        "reads; try again when it ends"
    )


def _live_rows(client: LiveClient) -> Callable[[str, Sequence[Any]], Rows]:
    """The live session's row reads, as `Rows`."""

    def rows(sql: str, params: Sequence[Any]) -> Rows:
        return ListRows(*client.rows(sql, params))

    return rows

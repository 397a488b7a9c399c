"""The one way ibias's read-only commands read a store, whether or not a run holds it.

`open_reader(store)` gives a session of sandboxed reads (store/sandbox.py's rules: one read
statement, external access off, configuration locked) that returns Arrow or Polars:

- when no process holds the store, on a read-only, sandboxed DuckDB connection to the file;
- while `ibias run` holds it, from that process over its live socket (store/live.py): the run
  only executes the read, in a read-only transaction, so every query of one session sees the
  same committed snapshot; what the caller does with the rows happens here, in memory.

A run that has just taken or just released the store is retried for a moment, so a reader
racing with a run's start or end gets an answer rather than "busy".
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import duckdb

from ibias.store.db import StoreError
from ibias.store.live import LiveClient, execute_rows, read_error, read_table
from ibias.store.lock import holder
from ibias.store.sandbox import open_query_connection

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

#: Tries (and the pause between them) while a run is starting or ending: about 2 s in all.
ATTEMPTS = 10
PAUSE_S = 0.2


class Rows(Protocol):
    """A result with the two DB-API calls the store's query helpers use (store/plans.py)."""

    def fetchall(self) -> list[tuple[Any, ...]]: ...

    def fetchone(self) -> tuple[Any, ...] | None: ...


class TableRows:
    """`Rows` of an Arrow table (a live result)."""

    def __init__(self, table: pa.Table) -> None:
        columns = [c.to_pylist() for c in table.columns]
        self._rows: list[tuple[Any, ...]] = list(zip(*columns, strict=True)) if columns else []

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
        rows: Callable[[str, Sequence[Any]], Rows] | None = None,
    ) -> None:
        self.store = store
        self.live = live
        self._table = table
        self._close = close
        self._rows = rows

    def table(self, sql: str, params: Sequence[Any] = ()) -> pa.Table:
        """The result as an Arrow table; a refusal or failure is a one-line `StoreError`."""
        return self._table(sql, params)

    def frame(self, sql: str, params: Sequence[Any] = ()) -> pl.DataFrame:
        import polars as pl

        frame = pl.from_arrow(self.table(sql, params))
        assert isinstance(frame, pl.DataFrame)  # a table always converts to a DataFrame
        return frame

    def records(
        self, sql: str, params: Sequence[Any] = ()
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """The result's column names and rows as Python values. On the file they come straight
        from DuckDB, so neither pyarrow nor Polars is loaded (0.2 s of a short `ibias sql`);
        from a run, out of the Arrow table it serves. The values are the same either way (and
        the same as a Polars frame's rows)."""
        if self._rows is not None:
            result = self._rows(sql, params)
            names = [d[0] for d in getattr(result, "description", None) or ()]
            try:
                return names, result.fetchall()
            except duckdb.Error as exc:
                raise read_error(exc) from None
        table = self.table(sql, params)
        return list(table.column_names), TableRows(table).fetchall()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        """Like `DuckDBPyConnection.execute(...)` for helpers that take a connection and only
        call `fetchall()` / `fetchone()` on its result."""
        if self._rows is not None:
            return self._rows(sql, params)
        return TableRows(self.table(sql, params))

    def close(self) -> None:
        self._close()


@contextmanager
def open_reader(store: Path) -> Iterator[StoreReader]:
    """A sandboxed read session of `store`: the file itself, or the run holding it."""
    reader = _open(store)
    try:
        yield reader
    finally:
        reader.close()


def _open(store: Path) -> StoreReader:
    who: str | None = None
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(PAUSE_S)
        who = holder(store)
        if who is None:
            try:
                con = open_query_connection(store)
            except StoreError:
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
            return StoreReader(store, True, client.table, client.close)
    raise StoreError(
        f"store {store} is busy: held by {who or 'another process'}, which serves no live "
        "reads; try again when it ends"
    )

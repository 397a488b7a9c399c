"""Marks a store carries about itself (migration 015): today only `rehearsal`.

A rehearsal (`ibias run CONFIG --rehearse`) writes simulated replies into a store of its own.
The file name (`<store>.rehearsal.duckdb`) is only a default: the user may pass any `--store`,
so the store itself records what it is, and `run` checks that mark, not the name, before it
writes (rehearsing into a real store, or really running into a rehearsal store, is refused).
Readers (analysis, `status`, `sql`) ask `is_rehearsal(con)` to say the replies are simulated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import duckdb

#: The mark of a store written by `ibias run --rehearse`.
REHEARSAL = "rehearsal"


class Queryable(Protocol):
    """A DuckDB connection, or a `StoreReader` (store/reader.py, a run's served snapshot):
    the readers here only `execute(sql)` and `fetchall()` its result."""

    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...


def _has_table(con: Queryable) -> bool:
    rows = con.execute(
        "SELECT count(*) FROM information_schema.tables "
        "WHERE table_name = 'store_marks' AND table_catalog = current_database()"
    ).fetchall()
    return bool(rows and rows[0][0])


def marks(con: Queryable) -> frozenset[str]:
    """Every mark the store carries (empty for a store older than migration 015)."""
    if not _has_table(con):
        return frozenset()
    return frozenset(str(row[0]) for row in con.execute("SELECT mark FROM store_marks").fetchall())


def is_rehearsal(con: Queryable) -> bool:
    """Whether the store was written by a rehearsal (its replies are all simulated)."""
    return REHEARSAL in marks(con)


def is_empty(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether no run has used the store yet, so it may still take either kind: a store with
    no `runs` row and no reply is neither real nor a rehearsal until a run marks it."""
    for table in ("runs", "responses"):
        rows = con.execute(
            "SELECT count(*) FROM information_schema.tables "
            "WHERE table_name = ? AND table_catalog = current_database()",
            [table],
        ).fetchall()
        if rows and rows[0][0] and con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]:
            return False
    return True


def mark_rehearsal(con: duckdb.DuckDBPyConnection, detail: str | None = None) -> None:
    """Record that the store is a rehearsal's (once; a second call keeps the first row)."""
    con.execute(
        "INSERT INTO store_marks (mark, detail) VALUES (?, ?) ON CONFLICT DO NOTHING",
        [REHEARSAL, detail],
    ).fetchall()

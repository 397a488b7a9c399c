"""Arrow tables handed to DuckDB by name for the length of one statement or transaction.

Why a helper: `unregister` is itself a statement of the connection. Inside a transaction that
a failed statement has aborted (an out-of-memory error, a value DuckDB refuses), it fails too,
with "Current transaction is aborted", and an `unregister` in a plain `finally` then replaces
the error that mattered. A full run once died of exactly that: a served query took the shared
memory, the writer's insert failed for want of it, and the user saw only the aborted
transaction. Here the name is dropped when the body succeeds, and only tried (its failure
ignored) when the body failed, so the first error is the one that propagates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import duckdb


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, name: str, table: Any) -> Iterator[None]:
    """`table` (Arrow, or anything `register` accepts) visible to `con` as `name` inside."""
    con.register(name, table)
    try:
        yield
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.unregister(name)
        raise
    con.unregister(name)

"""`ibias sql`: one read-only query over the store, as a table, CSV or one JSON array.

The query runs on `open_query_connection` (store/sandbox.py): DuckDB itself refuses every file
but the store.
"""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import orjson
import polars as pl
from rich.console import Console
from rich.table import Table

from ibias.store.db import StoreError, _first_line
from ibias.store.lock import holder
from ibias.store.sandbox import open_query_connection, read_statement


def run_query(store: Path, query: str, fmt: str) -> int:
    statement = read_statement(query)
    who = holder(store)
    if who is not None:
        raise StoreError(f"store {store} is busy: held by {who}; try again when the run ends")
    frame = query_frame(store, statement)
    if fmt == "json":
        sys.stdout.write(_json(frame))
    elif fmt == "csv":
        sys.stdout.write(_csv(frame))
    else:
        table = Table(show_lines=False)
        for name in frame.columns:
            table.add_column(name)
        for row in frame.iter_rows():
            table.add_row(*("NULL" if v is None else str(v) for v in row))
        Console().print(table)
    return 0


def query_frame(store: Path, statement: duckdb.Statement) -> pl.DataFrame:
    """The statement's result on a user-query connection; DuckDB's refusals as one line."""
    con = open_query_connection(store)
    try:
        try:
            frame = pl.from_arrow(con.sql(statement).to_arrow_table())
        except duckdb.PermissionException as exc:
            raise StoreError(
                f"query refused: {_first_line(str(exc))} (ibias sql reads only the store)"
            ) from None
        except duckdb.Error as exc:
            raise StoreError(f"query failed: {_first_line(str(exc))}") from None
    finally:
        con.close()
    assert isinstance(frame, pl.DataFrame)
    return frame


def _json(frame: pl.DataFrame) -> str:
    return orjson.dumps(frame.to_dicts(), default=str).decode() + "\n"


def _csv(frame: pl.DataFrame) -> str:
    nested = [n for n, t in frame.schema.items() if t.is_nested() or t == pl.Object]
    if nested:
        frame = frame.with_columns(
            pl.col(n).map_elements(
                lambda v: orjson.dumps(v, default=str).decode(), return_dtype=pl.String
            )
            for n in nested
        )
    return frame.write_csv()

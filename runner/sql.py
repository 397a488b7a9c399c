"""`ibias sql`: read-only SQL over the store, as a table, CSV or one JSON array."""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import orjson
import polars as pl
from rich.console import Console
from rich.table import Table

from ibias.store.db import StoreError, open_store
from ibias.store.lock import holder


def run_query(store: Path, query: str, fmt: str) -> int:
    who = holder(store)
    if who is not None:
        raise StoreError(f"store {store} is busy: held by {who}; try again when the run ends")
    con = open_store(store, read_only=True)
    try:
        try:
            relation = con.sql(query)
            if relation is None:
                return 0
            frame = pl.from_arrow(relation.to_arrow_table())
        except duckdb.Error as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreError(f"query failed: {first}") from None
    finally:
        con.close()
    assert isinstance(frame, pl.DataFrame)
    if fmt == "json":
        sys.stdout.write(orjson.dumps(frame.to_dicts(), default=str).decode() + "\n")
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

"""`ibias sql`: one read-only query over the store, as a table, CSV, one JSON array, or a file.

The query runs through `open_reader` (store/reader.py) under the sandbox of store/sandbox.py,
on the file or, while a run holds the store, served by that run: DuckDB itself refuses every
file but the store, so a result reaches a file only through `--output`, written here by Polars.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import orjson
from rich.console import Console
from rich.table import Table

from ibias.runner.status import status_path
from ibias.store.db import StoreError
from ibias.store.reader import open_reader
from ibias.store.sandbox import read_statement

if TYPE_CHECKING:
    import polars as pl

#: `--output` formats, by the file's extension.
OUTPUT_FORMATS = {".parquet": "parquet", ".csv": "csv", ".json": "json"}


def run_query(
    store: Path, query: str, fmt: str, output: Path | None = None, force: bool = False
) -> int:
    out_fmt = _check_output(store, output, force) if output is not None else None
    statement = read_statement(query)
    if output is None and fmt != "csv":
        # Python rows, not a Polars frame: the same values, without loading Polars or pyarrow.
        with open_reader(store) as reader:
            names, records = reader.records(statement.query)
        if fmt == "json":
            sys.stdout.write(_json_array([dict(zip(names, r, strict=True)) for r in records]))
        else:
            _print_table(names, records)
        return 0
    frame = query_frame(store, statement)
    if output is not None and out_fmt is not None:
        _write(frame, output, out_fmt)
        rows = "row" if frame.height == 1 else "rows"
        print(f"wrote {frame.height} {rows} to {output}")
    else:
        sys.stdout.write(_csv(frame))
    return 0


def _print_table(names: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    table = Table(show_lines=False)
    for name in names:
        table.add_column(name)
    for row in rows:
        table.add_row(*("NULL" if v is None else str(v) for v in row))
    Console().print(table)


def query_frame(store: Path, statement: duckdb.Statement) -> pl.DataFrame:
    """The statement's result through the store's one read entry point (store/reader.py):
    sandboxed on the file, or served by the run holding the store; refusals as one line."""
    with open_reader(store) as reader:
        return reader.frame(statement.query)


def _check_output(store: Path, output: Path, force: bool) -> str:
    """The format for `output`, or a one-line refusal: unknown extension, the store, a file."""
    fmt = OUTPUT_FORMATS.get(output.suffix.lower())
    if fmt is None:
        known = ", ".join(OUTPUT_FORMATS)
        raise StoreError(f"--output {output}: unknown extension; use one of {known}")
    target = output.resolve()
    # The store's WAL and lock file have extensions no export has; its status file is JSON.
    for own in (store, status_path(store)):
        if target == own.resolve():
            raise StoreError(f"--output {output} is the store's own file; choose another path")
    if output.is_dir():
        raise StoreError(f"--output {output} is a directory")
    if not output.parent.is_dir():
        raise StoreError(f"--output {output}: directory {output.parent} does not exist")
    if output.exists() and not force:
        raise StoreError(f"--output {output} exists; pass --force to overwrite it")
    return fmt


def _write(frame: pl.DataFrame, output: Path, fmt: str) -> None:
    """Write to a temporary file beside `output`, then rename it: never a half-written file."""
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        if fmt == "parquet":
            frame.write_parquet(tmp)
        elif fmt == "csv":
            tmp.write_text(_csv(frame), encoding="utf-8")
        else:
            tmp.write_text(_json(frame), encoding="utf-8")
        os.replace(tmp, output)
    except OSError as exc:
        raise StoreError(f"--output {output} cannot be written: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _json(frame: pl.DataFrame) -> str:
    return _json_array(frame.to_dicts())


def _json_array(objects: list[dict[str, Any]]) -> str:
    """One JSON array of the rows as objects (values orjson cannot write, as text)."""
    return orjson.dumps(objects, default=str).decode() + "\n"


def _csv(frame: pl.DataFrame) -> str:
    import polars as pl

    nested = [n for n, t in frame.schema.items() if t.is_nested() or t == pl.Object]
    if nested:
        frame = frame.with_columns(
            pl.col(n).map_elements(
                lambda v: orjson.dumps(v, default=str).decode(), return_dtype=pl.String
            )
            for n in nested
        )
    return frame.write_csv()

"""`ibias sql`: one read-only query over the store, as a table, CSV, one JSON array, or a file.

The query runs through `open_reader` (store/reader.py) under the sandbox of store/sandbox.py,
on the file or, while a run holds the store, served by that run: DuckDB itself refuses every
file but the store, so a result reaches a file only through `--output`, written here by Polars.

Every DuckDB type reaches every format. Python, orjson, Arrow and Polars each lack some of
DuckDB's types or values (infinite dates and timestamps, INTERVAL, BIT, UNION, TIMETZ's offset,
integers beyond 64 bits, NaN inside a list), so before the query runs its columns are described
(`DESCRIBE query`, which binds without executing) and those a format cannot carry are converted
by DuckDB itself, in the same query: to DuckDB's own text for a value (`CAST(x AS VARCHAR)`,
what the DuckDB shell prints: `infinity`, `1 month 2 days 03:00:00`, `10:00:00+02`), and to
JSON (`to_json`) for a list, struct or map, which CSV and the table print as JSON text and the
JSON format embeds. Whatever still fails to convert is refused in one line naming the column.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import duckdb
import orjson
from rich.table import Table

from ibias.runner.console import natural_width, terminal, text
from ibias.runner.status import status_path
from ibias.store.db import StoreAccessError, first_line
from ibias.store.reader import StoreReader, open_reader
from ibias.store.sandbox import read_statement

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa
    from rich.console import Console
    from rich.text import Text

#: `--output` formats, by the file's extension.
OUTPUT_FORMATS = {".parquet": "parquet", ".csv": "csv", ".json": "json"}

#: DuckDB types every text format (table, CSV, JSON) carries as they are.
_TEXT_NATIVE = re.compile(
    r"(BOOLEAN|TINYINT|SMALLINT|INTEGER|BIGINT|UTINYINT|USMALLINT|UINTEGER|UBIGINT|FLOAT"
    r"|DOUBLE|VARCHAR|UUID|JSON|DECIMAL\(\d+,\s*\d+\)|ENUM\(.*\))",
    re.DOTALL,
)
#: Whole numbers beyond 64 bits: text for CSV and the table, a number in JSON.
_BIG_NUMBERS = frozenset({"HUGEINT", "UHUGEINT", "BIGNUM", "VARINT"})
#: Types Parquet (through Arrow and Polars) cannot carry, or carries without part of the value.
_PARQUET_LOSSY = re.compile(
    r"INTERVAL|UNION\(|\bBIT\b|TIME WITH TIME ZONE|TIMETZ|BIGNUM|VARINT|GEOMETRY|TIME_NS|TUPLE\("
    r"|VARIANT|STRUCT(?!\()"  # the last: an empty STRUCT, which Parquet has no form for
)


#: How a column reaches the output (`Column`).
Kind = Literal["native", "text", "number", "json"]


@dataclass(frozen=True)
class Column:
    """One result column and how it reaches the output: `native` as DuckDB gives it, `text`
    as DuckDB's own text, `number` as text that JSON writes as a number, `json` as JSON text
    (a list, struct or map)."""

    name: str
    type: str
    kind: Kind


def run_query(
    store: Path, query: str, fmt: str, output: Path | None = None, force: bool = False
) -> int:
    out_fmt = _check_output(store, output, force) if output is not None else None
    statement = read_statement(query)
    target = out_fmt or fmt
    with open_reader(store) as reader:
        sql, columns = converted(reader, statement.query, target)
        if output is None and fmt != "csv":
            # Python rows, not a Polars frame: the same values, without loading Polars or
            # pyarrow on a closed store.
            names, records = reader.records(sql)
            rows = _cells(records, columns, as_json=fmt == "json")
            if fmt == "json":
                sys.stdout.write(_json_array(names, rows, columns))
            else:
                _print_table(names, rows)
            return 0
        frame = _frame(reader.table(sql), columns, target)
    if output is not None and out_fmt is not None:
        _write(frame, output, out_fmt, columns)
        rows_word = "row" if frame.height == 1 else "rows"
        print(f"wrote {frame.height} {rows_word} to {output}")
    else:
        sys.stdout.write(_csv(frame, columns))
    return 0


def converted(reader: StoreReader, query: str, fmt: str) -> tuple[str, tuple[Column, ...]]:
    """The query, with the columns `fmt` cannot carry converted by DuckDB, and its columns.

    A statement DuckDB cannot describe (EXPLAIN) runs as written: its columns are text."""
    try:
        _, described = reader.records(f"DESCRIBE {query}")
    except StoreAccessError:
        return query, ()
    columns = tuple(
        Column(str(r[0]), str(r[1]), _kind(str(r[1]), fmt)) for r in described if len(r) > 1
    )
    if all(c.kind == "native" for c in columns):
        return query, columns
    exprs = []
    for i, column in enumerate(columns, start=1):
        ref = f"#{i}"
        if column.kind == "json":
            value = f"CAST(to_json({ref}) AS VARCHAR)"
        elif column.kind in {"text", "number"}:
            value = f"CAST({ref} AS VARCHAR)"
        else:
            value = ref
        exprs.append(f"{value} AS {_quoted(column.name)}")
    return f"SELECT {', '.join(exprs)} FROM (\n{_body(query)}\n) AS ibias_query", columns


def _kind(duck_type: str, fmt: str) -> Kind:
    nested = duck_type.endswith("]") or duck_type.startswith(("STRUCT", "MAP(", "TUPLE("))
    if fmt == "parquet":
        if not _PARQUET_LOSSY.search(duck_type):
            return "native"
        return "json" if nested else "text"
    if nested:
        return "json"
    if _TEXT_NATIVE.fullmatch(duck_type):
        return "native"
    return "number" if duck_type in _BIG_NUMBERS else "text"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _body(query: str) -> str:
    """The statement without its closing `;` (and what follows it), to sit in a subquery."""
    tokens = [(pos, kind.name) for pos, kind in duckdb.tokenize(query)]
    while tokens and tokens[-1][1] == "comment":
        tokens.pop()
    if tokens and query[tokens[-1][0] :].strip().startswith(";"):
        return query[: tokens[-1][0]]
    return query


def _cells(
    records: Iterable[Sequence[Any]], columns: Sequence[Column], *, as_json: bool
) -> list[tuple[Any, ...]]:
    """Rows with `json` and `number` columns made ready for the table or a JSON document."""
    convert: list[Callable[[Any], Any] | None] = [None] * len(columns)
    for i, column in enumerate(columns):
        if column.kind == "json":
            convert[i] = _json_value if as_json else _json_text
        elif column.kind == "number" and as_json:
            convert[i] = _number
    if not any(convert):
        return [tuple(r) for r in records]
    return [
        tuple(v if f is None or v is None else f(v) for f, v in zip(convert, r, strict=False))
        for r in records
    ]


def _json_value(text: str) -> Any:
    """DuckDB's `to_json` text as a value orjson writes: NaN and infinities (which `to_json`
    writes as bare tokens, not JSON) become null, as orjson writes such a float; integers
    beyond 64 bits are written as they are."""
    return _plain(json.loads(text))


def _json_text(text: str) -> str:
    return orjson.dumps(_json_value(text)).decode()


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return orjson.Fragment(str(value))
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _number(text: str) -> Any:
    return orjson.Fragment(text) if re.fullmatch(r"-?\d+", text) else text


def _print_table(
    names: Sequence[str], rows: Iterable[Sequence[Any]], console: Console | None = None
) -> None:
    """The rows as a rich table, every name and value shown as stored (runner/console.py: a
    value like `[/x]` or `[red]a[/red]` is text, never markup, and control characters are
    escaped); NULL for a missing value. Nothing is ever cut: two values never print as the
    same text (issue 34: two ids both came out as `sim-gemini-2.0-fla...`), see
    `_column_widths`."""
    console = console or terminal()
    header = [text(name) for name in names]
    body = [[text("NULL" if v is None else v) for v in row] for row in rows]
    widths = _column_widths(header, body, console.width)
    table = _table()
    for i, name in enumerate(header):
        table.add_column(name, overflow="fold", width=None if widths is None else widths[i])
    for cells in body:
        table.add_row(*cells)
    console.print(table)


def _table() -> Table:
    return Table(show_lines=False)


def _column_widths(
    header: Sequence[Text], body: Sequence[Sequence[Text]], width: int
) -> list[int] | None:
    """The width of each column when the result is wider than `width`, else None (each as
    wide as its widest value).

    Every column is first given its longest word (a run of characters without a space: an
    id, a key, a number), then what is left goes to the columns that want more, the smallest
    wants first (`_fair`), so short values such as ids and counts stay on one line and long
    text (replies, prompts) wraps between words. When even the longest words do not fit side
    by side, the shortest words are still kept whole first and the longest fold onto as many
    lines as they need (rich's `fold`): broken inside a word, but whole, where rich's default
    cut them to `...` and let two values look alike."""
    columns = list(zip(header, *body, strict=True)) if header else []
    natural = [max(_widest_line(t) for t in column) for column in columns]
    words = [max(_longest_word(t) for t in column) for column in columns]
    # The borders and padding: a table of the headers alone, less the headers' own width (a
    # table of the rows too would measure every value a second time).
    table = _table()
    for name in header:
        table.add_column(name)
    titles = sum(_widest_line(name) for name in header)
    overhead = natural_width(table) - titles
    room = width - overhead
    if sum(natural) <= room:
        return None
    if sum(words) > room:
        return [max(1, w) for w in _fair(words, room)]
    extra = _fair([n - w for n, w in zip(natural, words, strict=True)], room - sum(words))
    return [w + e for w, e in zip(words, extra, strict=True)]


def _fair(wants: Sequence[int], room: int) -> list[int]:
    """`room` shared among columns wanting `wants`: the smallest wants are met in full first,
    then each of the rest gets an equal share (max-min fair), so a short id or count stays
    whole while one long value takes what is left."""
    given = [0] * len(wants)
    left = max(room, 0)
    order = sorted(range(len(wants)), key=lambda i: wants[i])
    for n, i in enumerate(order):
        given[i] = min(wants[i], left // (len(order) - n))
        left -= given[i]
    return given


def _widest_line(value: Text) -> int:
    from rich.cells import cell_len

    return max(cell_len(line) for line in value.plain.split("\n"))


def _longest_word(value: Text) -> int:
    from rich.cells import cell_len

    return max((cell_len(word) for word in value.plain.split()), default=0)


def query_frame(store: Path, statement: duckdb.Statement, fmt: str = "csv") -> pl.DataFrame:
    """The statement's result through the store's one read entry point (store/reader.py):
    sandboxed on the file, or served by the run holding the store, converted for `fmt`;
    refusals as one line."""
    with open_reader(store) as reader:
        sql, columns = converted(reader, statement.query, fmt)
        return _frame(reader.table(sql), columns, fmt)


def _frame(table: pa.Table, columns: Sequence[Column], fmt: str) -> pl.DataFrame:
    """The Arrow result as a Polars frame; a column Polars cannot take is named in one line."""
    import polars as pl

    try:
        frame = pl.from_arrow(table)
    except BaseException as exc:  # Polars raises its own errors and, for some types, panics
        names = table.column_names
        if _polars_error(exc) and len(set(names)) < len(names):
            raise StoreAccessError(
                f"query has several columns named alike ({', '.join(names)}); give each its "
                "own name (AS ...) to write it as a file or CSV"
            ) from None
        raise _named(exc, names, columns, fmt, lambda i: pl.from_arrow(table.select([i]))) from None
    assert isinstance(frame, pl.DataFrame)  # a table always converts to a DataFrame
    return frame


def _polars_error(exc: BaseException) -> bool:
    """An error of Polars or Arrow, including a Rust panic inside Polars (pyo3's
    PanicException derives from BaseException, so `except Exception` misses it)."""
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


def _named(
    exc: BaseException,
    names: Sequence[str],
    columns: Sequence[Column],
    fmt: str,
    attempt: Callable[[int], object],
) -> BaseException:
    """What to raise for `exc`: the one-line refusal naming the first column that fails alone
    (`attempt(i)` converts or writes column i by itself), or `exc` itself if it is not a
    conversion error (an interrupt)."""
    if not _polars_error(exc):
        return exc
    for i, name in enumerate(names):
        try:
            attempt(i)
        except BaseException as inner:
            if not _polars_error(inner):
                raise
            return _refused(name, columns, i, fmt, inner)
    return StoreAccessError(f"query result cannot be written as {fmt}: {first_line(str(exc))}")


def _refused(
    name: str, columns: Sequence[Column], i: int, fmt: str, exc: BaseException
) -> StoreAccessError:
    duck_type = columns[i].type if i < len(columns) else "?"
    return StoreAccessError(
        f"column {name!r} (DuckDB type {duck_type}) cannot be written as {fmt}: "
        f"{first_line(str(exc))}; cast it in the query, e.g. CAST({_quoted(name)} AS VARCHAR)"
    )


def _check_output(store: Path, output: Path, force: bool) -> str:
    """The format for `output`, or a one-line refusal: unknown extension, the store, a file."""
    fmt = OUTPUT_FORMATS.get(output.suffix.lower())
    if fmt is None:
        known = ", ".join(OUTPUT_FORMATS)
        raise StoreAccessError(f"--output {output}: unknown extension; use one of {known}")
    target = output.resolve()
    # The store's WAL and lock file have extensions no export has; its status file is JSON.
    for own in (store, status_path(store)):
        if target == own.resolve():
            raise StoreAccessError(
                f"--output {output} is the store's own file; choose another path"
            )
    if output.is_dir():
        raise StoreAccessError(f"--output {output} is a directory")
    if not output.parent.is_dir():
        raise StoreAccessError(f"--output {output}: directory {output.parent} does not exist")
    if output.exists() and not force:
        raise StoreAccessError(f"--output {output} exists; pass --force to overwrite it")
    return fmt


def _write(frame: pl.DataFrame, output: Path, fmt: str, columns: Sequence[Column] = ()) -> None:
    """Write to a new temporary file beside `output`, then rename it over `output`: never a
    half-written file, and never a file someone else prepared. The temporary file is created
    exclusively (`mkstemp`: O_CREAT | O_EXCL, a random name, mode 0600), so a symbolic link
    planted at any name it could take is never followed; the rename replaces `output` itself
    (a link there is replaced, not followed). It gets the mode a new file would have."""
    try:
        fd, name = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
    except OSError as exc:
        raise StoreAccessError(
            f"--output {output} cannot be written: {exc.strerror or exc}"
        ) from None
    tmp = Path(name)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh:
            if fmt == "parquet":
                _parquet(frame, fh, columns)
            elif fmt == "csv":
                fh.write(_csv(frame, columns).encode("utf-8"))
            else:
                fh.write(_json(frame, columns).encode("utf-8"))
        os.replace(tmp, output)
    except OSError as exc:
        raise StoreAccessError(
            f"--output {output} cannot be written: {exc.strerror or exc}"
        ) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _parquet(frame: pl.DataFrame, fh: IO[bytes], columns: Sequence[Column]) -> None:
    import polars as pl

    try:
        frame.write_parquet(fh)
    except BaseException as exc:  # Polars' own errors: name the column it cannot write
        raise _named(
            exc,
            frame.columns,
            columns,
            "parquet",
            lambda i: frame.select(pl.nth(i)).write_parquet(io.BytesIO()),
        ) from None


def _json(frame: pl.DataFrame, columns: Sequence[Column] = ()) -> str:
    rows = _cells(frame.iter_rows(), columns, as_json=True)
    return _json_array(frame.columns, rows, columns)


def _json_array(
    names: Sequence[str], rows: Iterable[Sequence[Any]], columns: Sequence[Column] = ()
) -> str:
    """One JSON array of the rows as objects (values orjson cannot write, as text); a value
    that cannot be written at all is refused in one line naming its column."""
    objects = [dict(zip(names, r, strict=True)) for r in rows]
    try:
        return orjson.dumps(objects, default=str).decode() + "\n"
    except TypeError as exc:
        for obj in objects:
            for i, (name, value) in enumerate(obj.items()):
                try:
                    orjson.dumps(value, default=str)
                except TypeError as inner:
                    raise _refused(name, columns, i, "json", inner) from None
        raise StoreAccessError(f"query result cannot be written as json: {exc}") from None


def _csv(frame: pl.DataFrame, columns: Sequence[Column] = ()) -> str:
    import polars as pl

    as_json = {c.name for c in columns if c.kind == "json"}
    nested = [n for n, t in frame.schema.items() if t.is_nested() or t == pl.Object or n in as_json]
    if nested:
        frame = frame.with_columns(
            pl.Series(
                n,
                [None if v is None else _csv_json(v, n in as_json) for v in frame[n].to_list()],
                dtype=pl.String,
            )
            for n in nested
        )
    try:
        return frame.write_csv()
    except BaseException as exc:  # Polars' own errors: name the column it cannot write
        raise _named(
            exc, frame.columns, columns, "csv", lambda i: frame.select(pl.nth(i)).write_csv()
        ) from None


def _csv_json(value: Any, from_duckdb: bool) -> str:
    """A list, struct or map cell as JSON text: DuckDB's `to_json` text made strict JSON, or a
    Polars value (a Series for a list) written by orjson."""
    if from_duckdb and isinstance(value, str):
        return _json_text(value)
    return orjson.dumps(_python(value), default=str).decode()


def _python(value: Any) -> Any:
    to_list = getattr(value, "to_list", None)
    if callable(to_list):
        return [_python(v) for v in to_list()]
    if isinstance(value, dict):
        return {k: _python(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_python(v) for v in value]
    return value

"""Compare the statistical tables of two `ibias analyze` output folders, for the golden test.

The golden test (tests/analysis/test_golden.py) and `bench/golden_compare.py` hold a rewritten
analysis to the tables an earlier revision wrote for the same store and seed. "The same" means:
every reference table is in the new folder with the same columns in the same order, the same
types, the same number of rows in the same order; strings, booleans, integers (and anything else
that is not a float) are equal; floats are equal within a relative tolerance (no absolute one:
0 matches only 0; NaN matches NaN and null matches null). A table the new folder has and the
reference lacks is a difference too, so a new table cannot slip in unpinned.

A table is a `.parquet` file (exact: the comparison reads the types and bits as written) or a
figure's data file (`*.data.csv`, which has no Parquet twin; polars writes floats in their
shortest round-trip form, so reading it back is exact too). Every other file `analyze` writes is
left out for the reason `EXCLUDED` gives, except the CSV twin of each Parquet table, whose
presence is checked (a user reads the CSV) but whose text is the Parquet table's.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

DEFAULT_REL = 1e-12
"""The tolerance of the issue that introduced the golden test: rewrites may reorder sums."""

EXCLUDED: dict[str, str] = {
    "report.html": (
        "carries the time it was generated and the store's path; every number it shows comes "
        "from the tables compared"
    ),
    "*.png": "a figure's pixels: they follow matplotlib and the fonts, and plot the tables",
    "*.svg": "a figure's drawing: it follows matplotlib and the fonts, and plots the tables",
}
"""Files of an analysis folder that are not statistical tables, by glob on the file name, with
why each is left out. (No table at the golden revision carries a time: `progress` and `models`
are counts, and the runs, with their times, appear only in report.html.)"""

DATA_SUFFIX = ".data.csv"
MAX_ROWS_SHOWN = 5
"""Differing rows listed per column; the rest are counted."""


def excluded(name: str) -> bool:
    """Whether a file name matches one of `EXCLUDED`'s globs."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in EXCLUDED)


def table_files(folder: Path) -> dict[str, Path]:
    """The statistical tables under `folder` by path relative to it (POSIX): every `.parquet`
    and every figure data file (`*.data.csv`)."""
    out: dict[str, Path] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and (path.suffix == ".parquet" or path.name.endswith(DATA_SUFFIX)):
            out[path.relative_to(folder).as_posix()] = path
    return out


def _unexpected(folder: Path, tables: dict[str, Path]) -> Iterator[str]:
    """Files under `folder` that are neither a table, nor a table's CSV twin, nor excluded."""
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if not path.is_file() or name in tables or excluded(path.name):
            continue
        if path.suffix == ".csv" and path.with_suffix(".parquet").is_file():
            continue  # the CSV twin of a Parquet table
        yield name


def read_table(path: Path) -> pl.DataFrame:
    """One table as written: Parquet as stored, a figure data file with every column's type
    inferred from all its rows."""
    if path.suffix == ".parquet":
        return pl.read_parquet(path)
    return pl.read_csv(path, infer_schema_length=None)


def floats_equal(old: float | None, new: float | None, rel: float) -> bool:
    """Null only equals null, NaN only NaN; otherwise equal, or within `rel` of the larger
    magnitude (so 0 equals only 0, and infinities only themselves)."""
    if old is None or new is None:
        return old is None and new is None
    if math.isnan(old) or math.isnan(new):
        return math.isnan(old) and math.isnan(new)
    if old == new:
        return True
    if math.isinf(old) or math.isinf(new):
        return False
    return abs(old - new) <= rel * max(abs(old), abs(new))


def _value_differences(
    name: str, column: str, old: pl.Series, new: pl.Series, rel: float
) -> list[str]:
    numeric = old.dtype.is_float() or new.dtype.is_float()
    if numeric and not (old.dtype.is_numeric() and new.dtype.is_numeric()):
        numeric = False
    rows: list[tuple[int, Any, Any]] = []
    for i, (a, b) in enumerate(zip(old.to_list(), new.to_list(), strict=True)):
        same = floats_equal(a, b, rel) if numeric else a == b
        if not same:
            rows.append((i, a, b))
    shown = [f"{name}: column {column!r}, row {i}: {a!r} -> {b!r}" for i, a, b in rows]
    if len(shown) > MAX_ROWS_SHOWN:
        more = len(shown) - MAX_ROWS_SHOWN
        shown = [*shown[:MAX_ROWS_SHOWN], f"{name}: column {column!r}: and {more} more rows"]
    return shown


def compare_frames(name: str, old: pl.DataFrame, new: pl.DataFrame, rel: float) -> list[str]:
    """The differences of one table (`name` heads each line), empty when equal."""
    out: list[str] = []
    if old.columns != new.columns:
        missing = [c for c in old.columns if c not in new.columns]
        extra = [c for c in new.columns if c not in old.columns]
        if missing:
            out.append(f"{name}: columns missing: {', '.join(missing)}")
        if extra:
            out.append(f"{name}: columns not in the reference: {', '.join(extra)}")
        if not missing and not extra:
            out.append(f"{name}: columns reordered: {old.columns} -> {new.columns}")
    for column in (c for c in old.columns if c in new.columns):
        if old[column].dtype != new[column].dtype:
            out.append(f"{name}: column {column!r} type {old[column].dtype} -> {new[column].dtype}")
    if old.height != new.height:
        out.append(f"{name}: {old.height} rows -> {new.height} rows")
        return out
    for column in (c for c in old.columns if c in new.columns):
        out += _value_differences(name, column, old[column], new[column], rel)
    return out


def compare_tables(reference_dir: Path, new_dir: Path, rel: float = DEFAULT_REL) -> list[str]:
    """Every difference between the tables of `reference_dir` and those `new_dir` holds, one
    human-readable line each (file, column, row, old -> new); empty when they agree within
    `rel`. Raises NotADirectoryError when either folder is not one."""
    for folder in (reference_dir, new_dir):
        if not folder.is_dir():
            raise NotADirectoryError(f"not a folder: {folder}")
    reference, new = table_files(reference_dir), table_files(new_dir)
    out: list[str] = []
    for name, path in reference.items():
        if name not in new:
            out.append(f"{name}: missing")
            continue
        if path.suffix == ".parquet" and not new[name].with_suffix(".csv").is_file():
            out.append(f"{name}: its CSV twin {Path(name).with_suffix('.csv').name} is missing")
        try:
            old_frame, new_frame = read_table(path), read_table(new[name])
        except (OSError, pl.exceptions.PolarsError) as e:
            out.append(f"{name}: unreadable: {e}")
            continue
        out += compare_frames(name, old_frame, new_frame, rel)
    out += [f"{name}: not in the reference" for name in new if name not in reference]
    out += [f"{name}: not in the reference" for name in _unexpected(new_dir, new)]
    return out

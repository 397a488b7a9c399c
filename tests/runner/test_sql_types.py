"""Every DuckDB type reaches every `ibias sql` format, on a closed store and served live.

The type list is DuckDB's own: `test_all_types()` gives one column per type, each with its
minimum, maximum and NULL (dates 5,877,642 BC, 128-bit integers, nested arrays, unions, ...),
and `EXTRA` adds the values the issue found broken (infinite dates and timestamps, TIMETZ
with its offset, BIT, INTERVAL, lists longer than ten). Each format must either write every
column or refuse in one line naming the column; the served result (Arrow IPC from the run) must
print exactly as the file's.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ibias.runner.cli import main
from ibias.store.db import open_store
from ibias.store.live import LiveServer
from ibias.store.lock import StoreLock
from tests.store.test_importer import lines

ALL_TYPES = "SELECT * FROM test_all_types()"

EXTRA: dict[str, str] = {
    "ts_inf": "'infinity'::TIMESTAMP",
    "ts_ninf": "'-infinity'::TIMESTAMP",
    "tstz_inf": "'infinity'::TIMESTAMPTZ",
    "date_ninf": "'-infinity'::DATE",
    "date_inf": "'infinity'::DATE",
    "interval": "INTERVAL '1 month 2 days 3 hours'",
    "bit": "'0101'::BIT",
    "blob": "'\\xAA\\x00ab'::BLOB",
    "union_": "union_value(k := 'x')::UNION(k VARCHAR, n INT)",
    "huge": "170141183460469231731687303715884105727::HUGEINT",
    "uhuge": "340282366920938463463374607431768211455::UHUGEINT",
    "timetz": "'10:00:00+02'::TIMETZ",
    "enum_": "'a'::ENUM('a', 'b')",
    "dec38": "12345678901234567890123456789.123456789::DECIMAL(38, 9)",
    "uuid": "'5b6ac7f4-1234-4a5b-8c9d-0123456789ab'::UUID",
    "intervals": "[INTERVAL 1 DAY, NULL]",
    "timestamps": "['infinity'::TIMESTAMP, '2020-01-02'::TIMESTAMP]",
    "hugeints": "[170141183460469231731687303715884105727::HUGEINT]",
    "nan_list": "['nan'::DOUBLE, 1.5]",
    "long_list": "range(12)",
    "struct_": "{'a': 1, 'b': [1, 2], 'c': INTERVAL 1 DAY}",
    "map_": "MAP {'k': [1, 2]}",
    "array_": "[1, 2, 3]::INTEGER[3]",
}
EXTRA_QUERY = "SELECT " + ", ".join(f"{v} AS {k}" for k, v in EXTRA.items())

FORMATS = ["table", "csv", "json", "out.parquet", "out.csv", "out.json"]


@pytest.fixture(scope="module")
def closed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("types")
    src = folder / "replies.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in lines()) + "\n")
    path = folder / "store.duckdb"
    assert main(["import", str(src), "--store", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def live(closed: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of the store held and served as `ibias run` holds and serves it."""
    store = tmp_path_factory.mktemp("types-live") / "store.duckdb"
    shutil.copy(closed, store)
    with StoreLock(store):
        con = open_store(store)
        server = LiveServer.start(con, store)
        assert server is not None
        try:
            yield store
        finally:
            server.close()
            con.close()


def sql(
    store: Path, query: str, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    """`ibias sql` in one format: (exit code, what it printed or wrote, stderr)."""
    capsys.readouterr()
    if fmt.startswith("out."):
        target = tmp_path / f"{store.parent.name}.{fmt}"
        code = main(["sql", "--store", str(store), query, "--output", str(target), "--force"])
        out, err = capsys.readouterr()
        if code != 0:
            return code, out, err
        if target.suffix == ".parquet":
            table = pq.read_table(target)  # readable, every row, no Python conversion
            return code, f"{table.num_rows} rows {table.column_names}", err
        return code, target.read_text(encoding="utf-8"), err
    code = main(["sql", "--store", str(store), "--format", fmt, query])
    out, err = capsys.readouterr()
    return code, out, err


def columns_of(query: str) -> list[str]:
    return list(duckdb.sql(query).columns)


@pytest.mark.parametrize("query", [ALL_TYPES, EXTRA_QUERY], ids=["test_all_types", "extra"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_type_converts_closed_and_live_alike(
    closed: Path,
    live: Path,
    query: str,
    fmt: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = {}
    for store in (closed, live):
        code, out, err = sql(store, query, fmt, tmp_path, capsys)
        assert "Traceback" not in err and "internal error" not in err, err
        assert code == 0, err
        results[store] = out
    assert results[closed] == results[live]
    out = results[closed]
    names = columns_of(query)
    rows = 3 if query == ALL_TYPES else 1
    if fmt.endswith("json"):
        got = json.loads(out)
        assert len(got) == rows and list(got[0]) == names
    elif fmt.endswith("csv"):
        got_csv = list(csv.reader(io.StringIO(out)))
        assert got_csv[0] == names and len(got_csv) == rows + 1
    elif fmt.endswith("parquet"):
        assert out == f"{rows} rows {names}"


def test_the_values_are_duckdbs_own(
    closed: Path, live: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What each hard value becomes: DuckDB's text for a value, JSON for a list, struct or map
    (JSON text in CSV), whole numbers beyond 64 bits exact."""
    for store in (closed, live):
        code, out, err = sql(store, EXTRA_QUERY, "json", tmp_path, capsys)
        assert code == 0, err
        (row,) = json.loads(out)
        assert row["ts_inf"] == "infinity" and row["ts_ninf"] == "-infinity"
        assert row["date_ninf"] == "-infinity" and row["date_inf"] == "infinity"
        assert row["tstz_inf"] == "infinity"
        assert row["interval"] == "1 month 2 days 03:00:00"
        assert row["bit"] == "0101" and row["blob"] == "\\xAA\\x00ab"
        assert row["union_"] == "x" and row["enum_"] == "a"
        assert row["huge"] == 2**127 - 1 and row["uhuge"] == 2**128 - 1
        assert row["hugeints"] == [2**127 - 1]
        assert row["timetz"] == "10:00:00+02"
        assert row["dec38"] == "12345678901234567890123456789.123456789"
        assert row["intervals"] == ["1 day", None]
        assert row["timestamps"] == ["infinity", "2020-01-02 00:00:00"]
        assert row["nan_list"] == [None, 1.5]
        assert row["long_list"] == list(range(12))
        assert row["struct_"] == {"a": 1, "b": [1, 2], "c": "1 day"}
        assert row["map_"] == {"k": [1, 2]}
        assert row["array_"] == [1, 2, 3]
        code, out, err = sql(store, EXTRA_QUERY, "csv", tmp_path, capsys)
        assert code == 0, err
        header, values = csv.reader(io.StringIO(out))
        cell = dict(zip(header, values, strict=True))
        assert json.loads(cell["long_list"]) == list(range(12))
        assert json.loads(cell["struct_"]) == {"a": 1, "b": [1, 2], "c": "1 day"}
        assert json.loads(cell["map_"]) == {"k": [1, 2]}
        assert json.loads(cell["nan_list"]) == [None, 1.5]
        assert cell["ts_inf"] == "infinity" and cell["timetz"] == "10:00:00+02"
        assert cell["huge"] == str(2**127 - 1)


def test_csv_lists_structs_and_maps_of_a_table_are_json(
    closed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    query = (
        "SELECT range(25) AS l, {'x': 'a,b', 'y': [1.5]} AS s, MAP {'k': 'v'} AS m, "
        "[[1], [2, 3]] AS ll, 'plain' AS t"
    )
    for fmt in ("csv", "out.csv"):
        code, out, err = sql(closed, query, fmt, tmp_path, capsys)
        assert code == 0, err
        (row,) = csv.DictReader(io.StringIO(out))
        assert json.loads(row["l"]) == list(range(25))
        assert json.loads(row["s"]) == {"x": "a,b", "y": [1.5]}
        assert json.loads(row["m"]) == {"k": "v"}
        assert json.loads(row["ll"]) == [[1], [2, 3]]
        assert row["t"] == "plain"


def test_explain_and_describe_still_print(
    closed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for query in ("EXPLAIN SELECT 1", "DESCRIBE responses", "SUMMARIZE responses"):
        for fmt in FORMATS:
            code, _, err = sql(closed, query, fmt, tmp_path, capsys)
            assert code == 0, (query, fmt, err)


@pytest.mark.parametrize("fmt", ["csv", "out.parquet", "out.csv", "out.json"])
def test_a_column_that_cannot_convert_is_refused_by_name(
    closed: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    fmt: str,
) -> None:
    """The last resort, reached here by turning the conversion off: Polars' error (or panic)
    becomes one line naming the column and its DuckDB type."""
    from ibias.runner import sql as sql_module

    monkeypatch.setattr(sql_module, "_kind", lambda duck_type, fmt: "native")
    query = "SELECT 1 AS fine, [INTERVAL 1 DAY] AS bad"
    code, _, err = sql(closed, query, fmt, tmp_path, capsys)
    assert code == 2 and "Traceback" not in err, err
    (line,) = err.strip().splitlines()
    assert line.startswith("error: column 'bad' (DuckDB type INTERVAL[])"), line


def test_columns_named_alike_are_one_line(
    closed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = sql(closed, "SELECT 1 AS a, 'x' AS a", "table", tmp_path, capsys)
    assert code == 0 and "x" in out, err
    code, _, err = sql(closed, "SELECT 1 AS a, 'x' AS a", "csv", tmp_path, capsys)
    assert code == 2 and "several columns named alike" in err and len(err.splitlines()) == 1


#: Values the formats had trouble with, to be nested every way below.
LEAVES = [
    "'infinity'::TIMESTAMP",
    "'-infinity'::DATE",
    "'-infinity'::TIMESTAMPTZ",
    "INTERVAL '1 month 1 microsecond'",
    "'0101'::BIT",
    "'\\xAA\\x00'::BLOB",
    "(2::HUGEINT ** 100)::HUGEINT",
    "340282366920938463463374607431768211455::UHUGEINT",
    "'10:00:00+02'::TIMETZ",
    "'nan'::DOUBLE",
    "'-inf'::FLOAT",
    "12345678901234567890.12::DECIMAL(38, 2)",
    "'5b6ac7f4-1234-4a5b-8c9d-0123456789ab'::UUID",
    "'b'::ENUM('a', 'b')",
    "union_value(n := 2)::UNION(k VARCHAR, n INT)",
    "'x,\"y\"\n'",
    "NULL::INTEGER",
    "true",
]


def nested() -> st.SearchStrategy[str]:
    """DuckDB expressions: a hard value, or lists, structs and maps of them, a few deep."""
    return st.recursive(
        st.sampled_from(LEAVES),
        lambda inner: st.one_of(
            inner.map(lambda x: f"[{x}, NULL]"),
            inner.map(lambda x: f"[{x}]"),
            st.tuples(inner, inner).map(lambda xy: f"{{'a': {xy[0]}, 'b': {xy[1]}}}"),
            inner.map(lambda x: f"MAP {{'k': {x}}}"),
        ),
        max_leaves=4,
    )


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(expr=nested())
def test_nested_hard_values_convert_in_every_format_closed_and_live(
    closed: Path, live: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], expr: str
) -> None:
    query = f"SELECT {expr} AS v, 1 AS n"
    for fmt in FORMATS:
        results = {}
        for store in (closed, live):
            code, out, err = sql(store, query, fmt, tmp_path, capsys)
            assert code == 0 and "Traceback" not in err, (fmt, err)
            results[store] = out
        assert results[closed] == results[live], fmt
        if fmt.endswith("json"):
            assert json.loads(results[closed])[0]["n"] == 1

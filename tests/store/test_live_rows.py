"""Small live results travel as rows, so `ibias status` during a run loads no pyarrow.

The rows a run serves must be exactly what DuckDB's `fetchall()` gives on the file, for every
type DuckDB has; a result too large for the row form, and a run of an older ibias that ignores
the request for rows, still answer (as Arrow), and an older reader that never asks for rows
still gets Arrow.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from ibias.runner.status_report import _stored_progress
from ibias.store import live
from ibias.store.db import StoreAccessError
from ibias.store.live import LiveClient, LiveServer
from ibias.store.live_rows import Unencodable, encode_rows
from ibias.store.reader import open_reader
from tests.store.conftest import Served

#: Every DuckDB type at its extremes (DuckDB's own list) and the values that need care.
QUERIES = (
    "SELECT * FROM test_all_types()",
    "SELECT TIMESTAMPTZ '2024-03-31 02:30:00+00' AS tz, 'nan'::DOUBLE AS nan, "
    "'-inf'::FLOAT AS ninf, -0.0::DOUBLE AS nzero, 0.1::DOUBLE AS tenth, "
    "1.50::DECIMAL(10, 2) AS dec, 'infinity'::DATE AS dinf, 'infinity'::TIMESTAMP AS tinf, "
    "TIMETZ '10:00:00.5+02:30' AS ttz, INTERVAL 14 MONTH AS months, MAP {1: [2.5]} AS m, "
    "{'a': {'b': NULL}} AS nested, {'i': '5'} AS struct_i, (1, 'x') AS pair, "
    "NULL AS nothing, '' AS empty, "
    '\'{"i": "not a tag"}\' AS jsonish, -9223372036854775808 AS lowest',
    "SELECT range AS i, range::VARCHAR AS s FROM range(3) WHERE range > 5",
)


def _no_arrow(data: bytes) -> pa.Table:
    raise AssertionError("a small result came as Arrow")


@pytest.mark.parametrize("query", QUERIES)
def test_served_rows_are_what_fetchall_gives_on_the_file(
    served: Served, query: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    con = duckdb.connect()
    on_file = con.execute(query)
    names = [d[0] for d in on_file.description or ()]
    expected = on_file.fetchall()
    monkeypatch.setattr(live, "_arrow", _no_arrow)
    with open_reader(served.store) as reader:
        assert reader.live
        got_names, got = reader.records(query)
    assert got_names == names
    # repr: NaN is not equal to itself, and the time zones and types must match too
    assert repr(got) == repr(expected)
    assert [tuple(map(type, r)) for r in got] == [tuple(map(type, r)) for r in expected]


def test_a_result_past_the_row_limit_comes_as_arrow(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live, "ROW_LIMIT", 5)
    with open_reader(served.store) as reader:
        names, rows = reader.records("SELECT range AS i FROM range(7)")
        assert (names, rows) == (["i"], [(i,) for i in range(7)])
        assert reader.execute("SELECT range FROM range(5)").fetchall() == [(i,) for i in range(5)]


def test_a_value_without_a_row_form_is_refused_by_the_encoder() -> None:
    with pytest.raises(Unencodable):
        encode_rows([(object(),)])


def test_a_result_the_row_form_cannot_carry_comes_as_arrow(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(rows: Any) -> Any:
        raise Unencodable("no row form")

    monkeypatch.setattr(live, "encode_rows", refuse)
    with open_reader(served.store) as reader:
        assert reader.records("SELECT 'a' AS letter") == (["letter"], [("a",)])


def test_a_failing_row_query_is_one_line_and_the_session_goes_on(served: Served) -> None:
    with open_reader(served.store) as reader:
        with pytest.raises(StoreAccessError, match="query failed: Catalog Error"):
            reader.execute("SELECT * FROM no_such_table")
        with pytest.raises(StoreAccessError, match="Invalid Input Error"):
            reader.records("SELECT error('no')")
        assert reader.execute("SELECT count(*) FROM responses").fetchone() == (4,)


def test_a_run_of_an_older_ibias_answers_rows_with_arrow(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older server ignores the field it does not know and sends Arrow."""
    serve = LiveServer._serve

    def older(self: LiveServer, conn: Any, cursor: Any, request: dict[str, Any]) -> None:
        request.pop("rows", None)
        serve(self, conn, cursor, request)

    monkeypatch.setattr(LiveServer, "_serve", older)
    with open_reader(served.store) as reader:
        names, rows = reader.records("SELECT 1 AS one, 'a' AS letter, NULL AS nothing")
        assert (names, rows) == (["one", "letter", "nothing"], [(1, "a", None)])
        assert reader.execute("SELECT count(*) FROM responses").fetchone() == (4,)


def test_an_older_reader_still_gets_arrow(served: Served) -> None:
    """An older reader never asks for rows: its request is the one `table` sends."""
    client = LiveClient.connect(served.store)
    assert client is not None
    try:
        kind, _ = client._ask("SELECT 1 AS one", (), rows=False)
        assert kind == b"A"
        assert client.table("SELECT 2 AS two").to_pylist() == [{"two": 2}]
    finally:
        client.close()


STATUS = """
import json, sys
from ibias.runner.cli import main
code = main(["status", "--store", sys.argv[1], *sys.argv[2:]])
heavy = sorted(m for m in ("pyarrow", "numpy", "polars", "_duckdb") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}))
"""


def _status(store: Path, *args: str) -> tuple[str, dict[str, Any]]:
    """`ibias status` in a fresh process: what it printed, its exit code and heavy imports."""
    done = subprocess.run(
        [sys.executable, "-c", STATUS, str(store), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    printed, _, probe = done.stdout.rstrip("\n").rpartition("\n")
    return printed, json.loads(probe)


def test_status_during_a_run_loads_no_arrow(served: Served) -> None:
    printed, probe = _status(served.store)
    assert probe == {"code": 0, "heavy": []}
    assert "in progress" in printed
    printed, probe = _status(served.store, "--json")
    assert probe == {"code": 0, "heavy": []}
    report = json.loads(printed)
    assert report["running"] is True and report["done"] == 4


def test_status_reads_the_same_progress_live_and_closed(served: Served, tmp_path: Path) -> None:
    """What `status` renders from the store, served by a run or read from the file."""
    closed = tmp_path / "closed" / "store.duckdb"
    closed.parent.mkdir()
    served.con.execute("CHECKPOINT").fetchall()
    shutil.copy(served.store, closed)
    batches: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
    during = _stored_progress(served.store, batches[0])
    after = _stored_progress(closed, batches[1])
    assert during is not None and during["done"] == 4
    assert during == after
    assert batches[0] == batches[1]

"""`ibias sql` as a user meets it: one read over the store, every escape refused in one line with
no effect, and results exported only through `--output`.

Through the CLI's `main(argv)` in-process (stderr captured), and once as a subprocess.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import duckdb
import polars as pl
import pytest

from ibias.runner.cli import main
from tests.helpers import IBIAS
from tests.store.test_importer import lines
from tests.store.test_sandbox import hidden_writes, wrapped_writes

SECRET_TEXT = "not-for-your-eyes-7f3a"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """Four imported replies: word association, two allocation orders, one explicit answer."""
    folder = tmp_path_factory.mktemp("sql")
    src = folder / "replies.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in lines()) + "\n")
    path = folder / "store.duckdb"
    assert main(["import", str(src), "--store", str(path)]) == 0
    return path


@pytest.fixture
def other(store, tmp_path) -> Path:
    """Another ibias store, the victim of ATTACH and COPY."""
    path = tmp_path / "other.duckdb"
    shutil.copy(store, path)
    return path


@pytest.fixture
def sql(store, capsys):
    """`ibias sql --store STORE *args` in-process: (exit code, stdout, stderr)."""

    def call(*args: str, on: Path = store) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["sql", "--store", str(on), *args])
        out, err = capsys.readouterr()
        return code, out, err

    return call


@pytest.fixture
def refusal(sql):
    """`ibias sql ...` that must fail: its one stderr line (exit 2, no traceback)."""

    def call(*args: str, on: Path | None = None) -> str:
        code, _, err = sql(*args) if on is None else sql(*args, on=on)
        return one_line_error(code, err)

    return call


def one_line_error(code: int, err: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def rows(store: Path, table: str) -> int:
    con = duckdb.connect(str(store), read_only=True)
    try:
        got = con.execute(f"SELECT count(*) FROM {table}").fetchone()
    finally:
        con.close()
    assert got is not None
    return int(got[0])


# -- escapes: refused in one line, and nothing happened ------------------------------------------


def test_attach_and_delete_leave_the_other_store_whole(refusal, store, other):
    before = digest(other)
    n = rows(other, "responses")
    line = refusal(f"ATTACH '{other}' AS o (READ_WRITE); DELETE FROM o.responses")
    assert "2 statements; exactly one is allowed" in line
    assert "ATTACH statements are refused" in refusal(f"ATTACH '{other}' AS o (READ_WRITE)")
    assert "DELETE statements are refused" in refusal("DELETE FROM responses")
    assert rows(other, "responses") == n == rows(store, "responses") == 4
    assert digest(other) == before


def test_copy_creates_and_overwrites_nothing(refusal, other, tmp_path):
    target = tmp_path / "out.csv"
    before = digest(other)
    for query in (
        f"COPY (SELECT * FROM responses) TO '{target}'",
        f"COPY responses TO '{other}' (FORMAT parquet)",
    ):
        line = refusal(query)
        assert "COPY statements are refused" in line and "--output" in line
    # The same COPY hidden behind EXPLAIN ANALYZE is checked as the COPY it wraps.
    line = refusal(f"EXPLAIN ANALYZE COPY responses TO '{target}'")
    assert "COPY statements are refused (also inside EXPLAIN)" in line
    assert not target.exists()
    assert digest(other) == before


def test_export_database_writes_nothing(refusal, tmp_path):
    target = tmp_path / "exported"
    assert "EXPORT statements are refused" in refusal(f"EXPORT DATABASE '{target}'")
    assert not target.exists()


@pytest.mark.parametrize(
    "template",
    [
        "SELECT * FROM read_text('{p}')",
        "SELECT * FROM read_blob('{p}')",
        "SELECT * FROM glob('{d}/*')",
        "SELECT * FROM read_csv('{p}')",
        "SELECT * FROM read_parquet('{q}')",
        "SELECT * FROM '{q}'",
        "SELECT content FROM responses UNION ALL SELECT content FROM read_text('{p}')",
        "WITH f AS (SELECT * FROM read_text('/etc/passwd')) SELECT * FROM f",
    ],
)
def test_reading_a_file_is_refused(sql, tmp_path, template):
    secret = tmp_path / "secret.txt"
    secret.write_text(f"a,b\n{SECRET_TEXT},1\n")
    parquet = tmp_path / "data.parquet"
    pl.DataFrame({"a": [SECRET_TEXT]}).write_parquet(parquet)
    code, out, err = sql(template.format(p=secret, d=tmp_path, q=parquet))
    line = one_line_error(code, err)
    assert line.startswith("error: query refused: ") and "disabled by configuration" in line
    assert SECRET_TEXT not in out + err


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM read_csv('http://127.0.0.1:9/x.csv')",
        "SELECT * FROM 'https://example.com/data.parquet'",
    ],
)
def test_an_http_url_is_refused_not_fetched(sql, refusal, query):
    # Refused by the settings before any connection is tried: no network error in the message.
    line = refusal(query)
    assert "query refused" in line and "disabled by configuration" in line


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("INSTALL httpfs", "INSTALL/LOAD statements are refused"),
        ("LOAD httpfs", "INSTALL/LOAD statements are refused"),
        ("LOAD '/tmp/evil.duckdb_extension'", "INSTALL/LOAD statements are refused"),
        ("SET enable_external_access = true", "SET/RESET/USE statements are refused"),
        ("RESET lock_configuration", "SET/RESET/USE statements are refused"),
        ("PRAGMA threads = 1", "SET/RESET/USE statements are refused"),
        ("PRAGMA enable_profiling", "PRAGMA statements are refused"),
        ("SET VARIABLE x = 1", "SET/RESET/USE statements are refused"),
        ("CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')", "CREATE statements are refused"),
        ("CREATE PERSISTENT SECRET s (TYPE s3)", "CREATE statements are refused"),
        ("CREATE VIEW mine AS SELECT 1", "CREATE statements are refused"),
        ("CALL pragma_version()", "CALL statements are refused"),
    ],
)
def test_other_statements_are_refused(sql, refusal, query, named):
    line = refusal(query)
    assert named in line


def test_one_statement_exactly(sql, refusal):
    line = refusal("SELECT 1; SELECT 2")
    assert "2 statements; exactly one is allowed" in line
    line = refusal("SELECT 1; SET enable_external_access = true")
    assert "2 statements" in line
    assert "query is empty" in refusal(" ; ")
    assert "query failed: Parser Error" in refusal("SELEC nonsense")
    assert "query failed: Catalog Error" in refusal("SELECT * FROM nope")


def test_a_pivot_over_the_datas_values_is_refused_with_the_fix(sql, refusal):
    line = refusal("PIVOT responses ON model_id USING count(*)")
    assert "dynamic PIVOT" in line and "IN (v1, v2, ...)" in line
    code, out, err = sql(
        "PIVOT (SELECT model_id FROM responses) ON model_id IN ('ext') USING count(*)",
        "--format",
        "json",
    )
    assert code == 0, err
    assert json.loads(out) == [{"ext": 4}]


# -- legitimate queries ---------------------------------------------------------------------------


def test_a_view(sql):
    code, out, err = sql("SELECT category, bias FROM word_association_trials", "--format", "json")
    assert code == 0, err
    [row] = json.loads(out)
    assert row["category"] == "risk" and abs(row["bias"] - 2 / 3) < 1e-12
    code, out, err = sql(
        "SELECT first, chosen FROM allocation_decisions ORDER BY first", "--format", "csv"
    )
    assert code == 0 and out.splitlines() == ["first,chosen", "cis,trans", "trans,none"]


def test_a_cte_and_a_window_function(sql):
    query = """
        WITH per AS (SELECT experiment, count(*) AS n FROM trials GROUP BY experiment)
        SELECT experiment, n, sum(n) OVER (ORDER BY experiment)::BIGINT AS running,
               row_number() OVER (ORDER BY experiment) AS rn
        FROM per ORDER BY experiment
    """
    code, out, err = sql(query, "--format", "json")
    assert code == 0, err
    assert json.loads(out) == [
        {"experiment": "allocation", "n": 2, "running": 2, "rn": 1},
        {"experiment": "word_association", "n": 1, "running": 3, "rn": 2},
        {"experiment": "word_association_explicit", "n": 1, "running": 4, "rn": 3},
    ]


def test_describe_show_summarize_explain(sql):
    code, out, err = sql("DESCRIBE allocation_decisions", "--format", "json")
    assert code == 0, err
    assert {"chosen", "none_reason", "pair_id"} <= {r["column_name"] for r in json.loads(out)}
    code, out, err = sql("SHOW TABLES", "--format", "csv")
    assert code == 0 and {"responses", "word_association_trials"} <= set(out.splitlines())
    code, out, err = sql("SUMMARIZE responses", "--format", "json")
    assert code == 0 and "content" in {r["column_name"] for r in json.loads(out)}
    code, out, err = sql("EXPLAIN SELECT * FROM responses", "--format", "json")
    assert code == 0 and json.loads(out)[0]["explain_key"]
    code, out, err = sql("FROM responses SELECT count(*) AS n;")
    assert code == 0 and "4" in out and "n" in out


def test_duckdbs_temp_folder_is_not_writable_by_a_query(refusal, sql, store, tmp_path):
    """External access off still lets DuckDB open files in its own temp folder (beside the
    store): a COPY there, however wrapped, is refused by the statement check."""
    copy = tmp_path / "store.duckdb"
    shutil.copy(store, copy)
    temp = tmp_path / "store.duckdb.tmp"  # DuckDB's temp folder of a read-only store
    temp.mkdir()
    for query in wrapped_writes(temp) + hidden_writes(temp):
        refusal(query, on=copy)
    assert list(temp.iterdir()) == []
    code, out, err = sql("EXPLAIN ANALYZE SELECT count(*) FROM responses", on=copy)
    assert code == 0 and "analyzed_plan" in out, err


# -- --output -------------------------------------------------------------------------------------

QUERY = "SELECT trial_key, model_id, content FROM responses ORDER BY trial_key"


@pytest.mark.parametrize(("ext", "read"), [(".parquet", pl.read_parquet), (".csv", pl.read_csv)])
def test_output_parquet_and_csv_read_back(sql, store, tmp_path, ext, read):
    out_file = tmp_path / f"result{ext}"
    code, out, err = sql(QUERY, "--output", str(out_file))
    assert code == 0, err
    assert out.strip() == f"wrote 4 rows to {out_file}"
    frame = read(out_file)
    direct = duckdb.connect(str(store), read_only=True)
    try:
        keys = [r[0] for r in direct.execute(QUERY).fetchall()]
    finally:
        direct.close()
    assert frame["trial_key"].to_list() == keys
    assert sorted(frame["content"].to_list()) == sorted(r["content"] for r in lines())
    assert set(frame["model_id"].to_list()) == {"ext"}


def test_output_json_reads_back_as_the_format_json_array(sql, tmp_path):
    out_file = tmp_path / "result.JSON"
    code, out, err = sql(QUERY, "--output", str(out_file))
    assert code == 0, err
    assert out.strip() == f"wrote 4 rows to {out_file}"
    _, printed, _ = sql(QUERY, "--format", "json")
    assert json.loads(out_file.read_text()) == json.loads(printed)
    assert pl.read_json(out_file).height == 4


def test_output_of_one_row_and_of_none(sql, tmp_path):
    code, out, err = sql("SELECT 1 AS x", "--output", str(tmp_path / "one.csv"))
    assert out.strip().startswith("wrote 1 row to ")
    empty = tmp_path / "none.parquet"
    code, out, err = sql(QUERY.replace("ORDER BY", "WHERE false ORDER BY"), "--output", str(empty))
    assert code == 0, err
    assert out.strip().startswith("wrote 0 rows to ")
    assert pl.read_parquet(empty).columns == ["trial_key", "model_id", "content"]


def test_output_refuses_an_unknown_extension_and_writes_nothing(sql, refusal, tmp_path):
    target = tmp_path / "result.xlsx"
    line = refusal(QUERY, "--output", str(target))
    assert "unknown extension" in line and ".parquet" in line
    assert not target.exists()


def test_output_never_overwrites_the_store_or_its_files(refusal, store, tmp_path):
    before = digest(store)
    for args in (("--output", str(store)), ("--output", str(store), "--force")):
        line = refusal(QUERY, *args)
        assert "--output" in line and "unknown extension" in line
    # A store named like an export is still its own file: refused even with --force, also
    # through a symbolic link, and so is the status file beside it.
    twin = tmp_path / "store.parquet"
    shutil.copy(store, twin)
    twin_before = digest(twin)
    link = tmp_path / "link.parquet"
    link.symlink_to(twin)
    status = tmp_path / "store.parquet.status.json"
    for target in (twin, link, status):
        line = refusal(QUERY, "--output", str(target), "--force", on=twin)
        assert "the store's own file" in line
    assert not status.exists()
    assert digest(twin) == twin_before and digest(store) == before


def test_output_overwrites_an_existing_file_only_with_force(sql, refusal, other, tmp_path):
    target = tmp_path / "result.csv"
    target.write_text("keep me\n")
    line = refusal(QUERY, "--output", str(target))
    assert "exists; pass --force" in line
    assert target.read_text() == "keep me\n"
    # Another store under an export's name is an existing file like any other.
    victim = other.rename(tmp_path / "victim.parquet")
    before = digest(victim)
    assert "exists; pass --force" in refusal(QUERY, "--output", str(victim))
    assert digest(victim) == before
    code, out, err = sql(QUERY, "--output", str(target), "--force")
    assert code == 0 and out.startswith("wrote 4 rows"), err
    assert pl.read_csv(target).height == 4
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_output_problems_are_one_line(sql, refusal, tmp_path):
    line = refusal(QUERY, "--output", str(tmp_path / "no" / "r.csv"))
    assert "does not exist" in line
    folder = tmp_path / "dir.csv"
    folder.mkdir()
    assert "is a directory" in refusal(QUERY, "--output", str(folder))
    line = refusal(QUERY, "--format", "json", "--output", str(tmp_path / "r.csv"))
    assert "not allowed with argument --format" in line
    assert "--force only applies with --output" in refusal(QUERY, "--force")
    # A refused query writes no file.
    target = tmp_path / "r.parquet"
    line = refusal(f"COPY responses TO '{target}'", "--output", str(target))
    assert "COPY statements are refused" in line and not target.exists()


@pytest.mark.parametrize("ext", [".csv", ".json", ".parquet"])
def test_output_never_follows_a_planted_link(sql, tmp_path, monkeypatch, ext):
    """The temporary file is created exclusively under a fresh name: links planted at the old
    predictable name and at the very name `mkstemp` tries first are left alone, and a link at
    the target itself is replaced (with --force), never written through."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / f"out{ext}"
    (tmp_path / f".{target.name}.{os.getpid()}.tmp").symlink_to(victim)
    (tmp_path / f".{target.name}.planted.tmp").symlink_to(victim)
    names = iter(["planted", "fresh"])
    monkeypatch.setattr(tempfile, "_get_candidate_names", lambda: names)
    code, _, err = sql(QUERY, "--output", str(target))
    assert code == 0, err
    assert victim.read_text() == "precious"
    assert target.is_file() and not target.is_symlink() and target.stat().st_size > 0
    assert not (tmp_path / f".{target.name}.fresh.tmp").exists()  # renamed into place
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~_umask()
    monkeypatch.undo()
    target.unlink()
    target.symlink_to(victim)
    code, _, err = sql(QUERY, "--output", str(target), "--force")
    assert code == 0, err
    assert victim.read_text() == "precious" and target.is_file() and not target.is_symlink()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- as a subprocess ------------------------------------------------------------------------------


def main_sql(store: Path, *args: str) -> tuple[int, str, str]:
    """`ibias sql` on another store, as a subprocess."""
    result = subprocess.run(
        [*IBIAS, "sql", "--store", str(store), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return result.returncode, result.stdout, result.stderr


def test_subprocess_refuses_copy_and_exports_json(store, other, tmp_path):
    before = digest(other)
    code, out, err = main_sql(store, f"COPY responses TO '{other}' (FORMAT csv)")
    assert "COPY statements are refused" in one_line_error(code, err) and out == ""
    code, out, err = main_sql(store, f"SELECT * FROM read_blob('{other}')")
    assert "disabled by configuration" in one_line_error(code, err)
    assert digest(other) == before
    target = tmp_path / "r.json"
    code, out, err = main_sql(store, QUERY, "--output", str(target))
    assert code == 0 and err == "" and out.strip() == f"wrote 4 rows to {target}"
    assert [r["model_id"] for r in json.loads(target.read_text())] == ["ext"] * 4


TYPED = (
    "SELECT 1::INTEGER AS a, 2.5 AS b, 1.10::DECIMAL(5, 2) AS c, NULL AS d, true AS e, "
    "TIMESTAMPTZ '2026-12-01 10:00:00.123456+00' AS f, DATE '2026-01-02' AS g, [1, 2] AS h, "
    "{'k': 1} AS i, '{\"a\": 1}'::JSON AS j, 9007199254740993::BIGINT AS k, "
    "'a'::BLOB AS l, TIME '10:00' AS m, ['x', NULL] AS n, 'é' AS o"
)


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_table_and_json_show_the_values_a_polars_frame_holds(sql, store, capsys, fmt):
    """The table and JSON formats print Python rows read straight from DuckDB (so Polars and
    pyarrow are not loaded); every value prints as the frame's row printed it before."""
    from ibias.runner.sql import _cells, _json, _print_table, converted, query_frame
    from ibias.store.reader import open_reader
    from ibias.store.sandbox import read_statement

    code, out, _ = sql("--format", fmt, TYPED)
    assert code == 0
    frame = query_frame(store, read_statement(TYPED), fmt)
    with open_reader(store) as reader:
        _, columns = converted(reader, TYPED, fmt)
    if fmt == "json":
        assert out == _json(frame, columns)
    else:
        capsys.readouterr()
        _print_table(frame.columns, _cells(frame.iter_rows(), columns, as_json=False))
        assert out == capsys.readouterr().out


def test_a_table_query_loads_neither_polars_nor_pyarrow(store):
    """`ibias sql` starts fast: a subprocess prints a query's table without importing them."""
    code = (
        "import sys; from ibias.runner.cli import main; "
        f"rc = main(['sql', '--store', {str(store)!r}, 'SELECT count(*) AS n FROM responses']); "
        "loaded = sorted(m for m in ('polars', 'pyarrow') if m in sys.modules); "
        "print('loaded:', loaded); sys.exit(rc)"
    )
    done = subprocess.run(
        [str(Path(IBIAS[0]).parent / "python"), "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "loaded: []" in done.stdout

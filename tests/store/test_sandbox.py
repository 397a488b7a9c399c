"""The user-query connection: DuckDB's own settings hold the boundary, without any statement check.

Every escape here is sent raw to the connection from `open_query_connection`, bypassing
`read_statement`, so these tests fail if the settings stop doing the work (the CLI tests in
tests/runner/test_sql.py cover the refusals a user sees).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import duckdb
import polars as pl
import pytest

from ibias.runner.cli import main
from ibias.store.db import StoreAccessError
from ibias.store.sandbox import QUERY_SETTINGS, open_query_connection, read_statement
from tests.store.test_importer import lines

DISABLED = "disabled by configuration"
LOCKED = "the configuration has been locked"
SECRET_TEXT = "not-for-your-eyes-7f3a"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("sandbox")
    src = folder / "replies.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in lines()) + "\n")
    path = folder / "store.duckdb"
    assert main(["import", str(src), "--store", str(path)]) == 0
    return path


@pytest.fixture
def con(store):
    con = open_query_connection(store)
    yield con
    con.close()


@pytest.fixture
def other(store, tmp_path) -> Path:
    """Another ibias store, the victim of ATTACH, COPY and EXPORT."""
    path = tmp_path / "other.duckdb"
    shutil.copy(store, path)
    return path


def refused(con: duckdb.DuckDBPyConnection, sql: str) -> str:
    with pytest.raises(duckdb.Error) as info:
        con.execute(sql).fetchall()
    return str(info.value)


def test_settings_are_in_force(con):
    for name, value in QUERY_SETTINGS.items():
        got = con.execute("SELECT current_setting(?)", [name]).fetchone()
        assert got is not None and str(got[0]).lower() == str(value).lower(), name


def test_store_tables_and_views_read(con):
    assert con.execute("SELECT count(*) FROM responses").fetchone() == (4,)
    assert con.execute("SELECT count(*) FROM allocation_decisions").fetchone() == (2,)
    bias = con.execute("SELECT bias FROM word_association_trials").fetchone()
    assert bias is not None and abs(bias[0] - 2 / 3) < 1e-12


def test_attach_read_write_cannot_reach_another_store(con, other):
    before = digest(other)
    assert DISABLED in refused(con, f"ATTACH '{other}' AS o (READ_WRITE)")
    assert DISABLED in refused(con, f"ATTACH '{other}' AS o (READ_ONLY)")
    databases = con.execute("SELECT database_name FROM duckdb_databases()").fetchall()
    assert "o" not in {r[0] for r in databases}
    assert digest(other) == before


def test_store_itself_is_read_only(con, store):
    before = digest(store)
    assert "read-only" in refused(con, "DELETE FROM responses")
    assert "read-only" in refused(con, "CREATE TABLE x AS SELECT 1")
    con.close()
    assert digest(store) == before


def test_copy_writes_no_file(con, other, tmp_path):
    target = tmp_path / "out.csv"
    before = digest(other)
    assert DISABLED in refused(con, f"COPY (SELECT * FROM responses) TO '{target}'")
    assert DISABLED in refused(con, f"COPY responses TO '{other}' (FORMAT parquet)")
    assert DISABLED in refused(con, f"EXPLAIN ANALYZE COPY responses TO '{target}'")
    assert not target.exists()
    assert digest(other) == before


def test_export_database_writes_nothing(con, tmp_path):
    target = tmp_path / "exported"
    assert DISABLED in refused(con, f"EXPORT DATABASE '{target}'")
    assert not target.exists()


@pytest.mark.parametrize(
    "template",
    [
        "SELECT * FROM read_text('{p}')",
        "SELECT * FROM read_blob('{p}')",
        "SELECT * FROM glob('{d}/*')",
        "SELECT * FROM read_csv('{p}')",
        "SELECT * FROM read_json('{p}')",
        "SELECT * FROM sniff_csv('{p}')",
        "SELECT * FROM read_parquet('{q}')",
        "SELECT * FROM parquet_metadata('{q}')",
    ],
)
def test_no_file_can_be_read(con, tmp_path, template):
    secret = tmp_path / "secret.txt"
    secret.write_text(f"a,b\n{SECRET_TEXT},1\n")
    parquet = tmp_path / "data.parquet"
    pl.DataFrame({"a": [SECRET_TEXT]}).write_parquet(parquet)
    message = refused(con, template.format(p=secret, d=tmp_path, q=parquet))
    assert DISABLED in message and SECRET_TEXT not in message


def test_a_path_in_from_is_not_scanned(con, tmp_path):
    secret = tmp_path / "secret.csv"
    secret.write_text(f"a\n{SECRET_TEXT}\n")
    message = refused(con, f"SELECT * FROM '{secret}'")
    assert DISABLED in message and SECRET_TEXT not in message


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9/data.csv", "https://example.com/data.parquet", "s3://b/k.csv"]
)
def test_no_url_is_fetched(con, url):
    assert DISABLED in refused(con, f"SELECT * FROM read_csv('{url}')")


def test_no_extension_is_installed_or_loaded(con, tmp_path):
    # Refused by the settings before any download is attempted (and there is no network here).
    assert DISABLED in refused(con, "INSTALL httpfs")
    assert "disabled through configuration" in refused(con, "LOAD httpfs")
    lib = tmp_path / "evil.duckdb_extension"
    lib.write_bytes(b"\0" * 64)
    assert "disabled through configuration" in refused(con, f"LOAD '{lib}'")
    # Nothing autoloads either: the s3 secret type lives in httpfs, which stays unloaded.
    message = refused(con, "CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')")
    assert "httpfs" in message
    assert con.execute("SELECT count(*) FROM duckdb_secrets()").fetchone() == (0,)


@pytest.mark.parametrize(
    "sql",
    [
        "SET enable_external_access = true",
        "RESET enable_external_access",
        "SET lock_configuration = false",
        "SET autoinstall_known_extensions = true",
        "SET allowed_directories = ['/']",
        "PRAGMA enable_profiling",
        "PRAGMA threads = 1",
        "SET profiling_output = '{d}/profile.txt'",
        "SET log_query_path = '{d}/queries.log'",
        "CALL enable_logging(storage_path = '{d}/logs')",
    ],
)
def test_configuration_is_locked(con, tmp_path, sql):
    assert LOCKED in refused(con, sql.format(d=tmp_path))
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET_TEXT)
    assert DISABLED in refused(con, f"SELECT * FROM read_text('{secret}')")
    assert [p.name for p in tmp_path.iterdir()] == ["secret.txt"]


def test_another_connection_to_the_store_in_this_process_is_named(store):
    plain = duckdb.connect(str(store), read_only=True)
    try:
        with pytest.raises(StoreAccessError, match="already open in this process"):
            open_query_connection(store)
        # ... and the plain connection was not locked down behind its back.
        assert plain.execute("SELECT current_setting('lock_configuration')").fetchone() == (False,)
    finally:
        plain.close()


def test_missing_and_foreign_files_are_one_line(tmp_path):
    with pytest.raises(StoreAccessError, match="no store at"):
        open_query_connection(tmp_path / "nope.duckdb")
    foreign = tmp_path / "foreign.duckdb"
    duckdb.connect(str(foreign)).close()
    with pytest.raises(StoreAccessError, match="not an ibias store"):
        open_query_connection(foreign)
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(
        StoreAccessError, match=r"junk\.duckdb cannot be opened: .*not a valid DuckDB"
    ):
        open_query_connection(junk)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1",
        "WITH a AS (SELECT 1 AS x) SELECT * FROM a",
        "FROM responses",
        "VALUES (1), (2)",
        "DESCRIBE responses",
        "SHOW TABLES",
        "SUMMARIZE responses",
        "PIVOT responses ON model_id IN ('ext') USING count(*)",
        "EXPLAIN SELECT 1",
        "EXPLAIN ANALYZE SELECT 1",
        "EXPLAIN (FORMAT json) SELECT 1",
        "EXPLAIN ANALYZE (FORMAT json) FROM responses",
        "EXPLAIN (SELECT 1)",
        "EXPLAIN ANALYZE WITH a AS (SELECT 1) SELECT * FROM a",
        "/* ( */ EXPLAIN -- )\n ANALYZE SELECT ')'",
        "SELECT 1;",
        "-- a comment\nSELECT 1 -- another\n",
    ],
)
def test_reads_pass_the_statement_check(sql):
    assert read_statement(sql).query.strip().rstrip(";").strip()


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        ("ATTACH 'x.duckdb'", "ATTACH"),
        ("DETACH x", "DETACH"),
        ("COPY t TO 'x.csv'", "COPY"),
        ("EXPORT DATABASE 'd'", "EXPORT"),
        ("INSTALL httpfs", "INSTALL/LOAD"),
        ("LOAD httpfs", "INSTALL/LOAD"),
        ("SET threads = 1", "SET/RESET/USE"),
        ("RESET threads", "SET/RESET/USE"),
        ("USE memory", "SET/RESET/USE"),
        ("PRAGMA table_info('responses')", "PRAGMA"),
        ("CALL pragma_version()", "CALL"),
        ("CREATE SECRET s (TYPE s3)", "CREATE"),
        ("CREATE TEMP TABLE t AS SELECT 1", "CREATE"),
        ("DELETE FROM responses", "DELETE"),
        ("INSERT INTO responses DEFAULT VALUES", "INSERT"),
        ("CHECKPOINT", "CALL"),
        ("VACUUM", "VACUUM"),
        ("BEGIN TRANSACTION", "TRANSACTION"),
        ("PIVOT responses ON model_id", "multi-part (dynamic PIVOT)"),
        ("COPY (PIVOT responses ON model_id) TO 'x.csv'", "multi-part (dynamic PIVOT)"),
        ("UPDATE EXTENSIONS", "this kind of"),
    ],
)
def test_other_statements_are_refused_by_name(sql, named):
    with pytest.raises(StoreAccessError) as info:
        read_statement(sql)
    message = str(info.value)
    assert message.startswith(f"{named} statements are refused")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT 1; SELECT 2", "2 statements"),
        ("ATTACH 'o.duckdb' (READ_WRITE); DELETE FROM o.responses", "2 statements"),
        ("", "empty"),
        ("  ;  ", "empty"),
        ("-- only a comment", "empty"),
        ("SELEC nonsense", "query failed: Parser Error"),
    ],
)
def test_one_statement_exactly(sql, expected):
    with pytest.raises(StoreAccessError, match=expected):
        read_statement(sql)


def wrapped_writes(folder: Path) -> list[str]:
    """Writes, COPY, EXPORT and ATTACH into `folder` (DuckDB's temp folder in the tests, which
    external access off does not protect), wrapped every way a statement can be wrapped."""
    x = f"'{folder}/x.csv'"
    return [
        f"EXPLAIN ANALYZE COPY (SELECT 1) TO {x}",
        f"EXPLAIN COPY (SELECT 1) TO {x}",
        f"explain analyse copy (select 1) to {x}",
        f"EXPLAIN (FORMAT json) COPY (SELECT 1) TO {x}",
        f"EXPLAIN ANALYZE (FORMAT json) COPY (SELECT 1) TO {x}",
        f"/* ( */ EXPLAIN /* ) */ ANALYZE -- (\n COPY (SELECT 1) TO {x}",
        f"EXPLAIN ANALYZE COPY (WITH a AS (SELECT 1) SELECT * FROM a) TO {x}",
        f"EXPLAIN ANALYZE COPY (PIVOT (SELECT 1 AS a) ON a IN (1)) TO {x}",
        f"EXPLAIN ANALYZE COPY (PIVOT responses ON model_id) TO {x}",
        f"EXPLAIN ANALYZE EXPORT DATABASE '{folder}/db'",
        f"EXPLAIN ANALYZE ATTACH '{folder}/a.duckdb'",
        "EXPLAIN ANALYZE INSERT INTO responses SELECT * FROM responses",
        "EXPLAIN ANALYZE CREATE TEMP TABLE t AS SELECT 1",
        f"EXPLAIN ANALYZE SELECT 1; COPY (SELECT 1) TO {x}",
        f"SELECT 1; EXPLAIN ANALYZE COPY (SELECT 1) TO {x}",
        f"WITH a AS (SELECT 1) SELECT * FROM a; COPY a TO {x}",
        f"COPY (WITH a AS (SELECT 1) SELECT * FROM a) TO {x}",
        f"COPY (PIVOT (SELECT 1 AS a) ON a IN (1)) TO {x}",
        f"COPY (SELECT 1) TO {x}",
        f"EXPORT DATABASE '{folder}/db'",
        f"ATTACH '{folder}/a.duckdb'",
    ]


def hidden_writes(folder: Path) -> list[str]:
    """Writes inside a string that a table function would run: the statement check sees one
    SELECT; DuckDB's `query()` takes nothing but one SELECT."""
    x = f"''{folder}/x.csv''"
    return [
        f"SELECT * FROM query('COPY (SELECT 1) TO {x}')",
        f"SELECT * FROM query('EXPLAIN ANALYZE COPY (SELECT 1) TO {x}')",
        f"SELECT * FROM query('SELECT 1; COPY (SELECT 1) TO {x}')",
    ]


@pytest.mark.parametrize("index", range(len(wrapped_writes(Path("/t")))))
def test_writes_are_refused_however_wrapped(index, tmp_path):
    """EXPLAIN (ANALYZE) is checked as the statement it wraps: no write passes the check."""
    with pytest.raises(StoreAccessError) as info:
        read_statement(wrapped_writes(tmp_path)[index])
    assert "\n" not in str(info.value)
    assert (
        "refused" in str(info.value)
        or "statements; exactly one" in str(info.value)
        or (str(info.value).startswith("query failed: Parser Error"))
    )

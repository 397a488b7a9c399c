"""Whose query failed decides what the user is told (issue 33).

ibias's own query whose text is wrong (it does not parse, or names a column that is not
there) is a bug: `internal error: ...` with exit 1, and the traceback under `IBIAS_DEBUG=1`.
The user's SQL that is wrong, a store file that is not a store and a store held by another
process stay the user's store errors: one line, exit 2, never a traceback. The bug is made
here by replacing one of the analysis's queries (or a migration) with a broken one."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

import ibias
from ibias.analysis import load
from ibias.runner.cli import main
from ibias.store import db
from ibias.store import reader as store_reader
from ibias.store.lock import StoreLock
from ibias.store.reader import InternalQueryFailure
from tests.helpers import model_block, write_config
from tests.store.conftest import _serving

BROKEN = {
    "parser": "SELECT experiment model_id FROM progress WHERE",
    "binder": "SELECT experiment, no_such_column FROM progress",
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("internal")
    config = write_config(folder, [model_block("m", provider="simulator")], n_prompts=3)
    path = folder / "store.duckdb"
    assert ibias.run(config, store=path).exit_code == 0
    return path


def _analyze(store: Path, out: Path) -> int:
    return main(["analyze", "--store", str(store), "--out", str(out), "--bootstrap", "20"])


@pytest.mark.parametrize("fault", sorted(BROKEN))
def test_a_fault_in_ibiass_own_query_is_an_internal_error(
    store: Path,
    tmp_path: Path,
    fault: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(load, "_PROGRESS_SQL", BROKEN[fault])
    monkeypatch.delenv("IBIAS_DEBUG", raising=False)
    assert _analyze(store, tmp_path / "out") == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("internal error: InternalQueryFailure: ibias's own query of store ")
    assert f"{fault.capitalize()} Error" in line
    assert "FROM progress" in line  # the query is named, so the bug can be found
    assert line.endswith("(set IBIAS_DEBUG=1 for a traceback)")


def test_under_ibias_debug_the_internal_error_keeps_its_traceback(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load, "_PROGRESS_SQL", BROKEN["parser"])
    monkeypatch.setenv("IBIAS_DEBUG", "1")
    with pytest.raises(InternalQueryFailure) as caught:
        _analyze(store, tmp_path / "out")
    # The traceback reaches the analysis's call, and the store's one line is its cause.
    frames = [str(entry.path) for entry in caught.traceback]
    assert any(name.endswith(str(Path("analysis", "load.py"))) for name in frames)
    assert isinstance(caught.value.__cause__, ibias.StoreError)
    assert "Parser Error" in str(caught.value.__cause__)


@pytest.mark.parametrize("debug", [False, True])
def test_the_users_wrong_sql_stays_a_store_error(
    store: Path,
    debug: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if debug:
        monkeypatch.setenv("IBIAS_DEBUG", "1")
    else:
        monkeypatch.delenv("IBIAS_DEBUG", raising=False)
    for sql in ("SELECT group FROM trials", "SELECT no_such_column FROM trials"):
        assert main(["sql", "--store", str(store), sql]) == 2
        err = capsys.readouterr().err
        (line,) = err.strip().splitlines()
        assert "query failed:" in line and "internal error" not in line
        assert "Traceback" not in err


def test_a_file_that_is_not_a_store_stays_a_store_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("IBIAS_DEBUG", "1")
    broken = tmp_path / "broken.duckdb"
    broken.write_bytes(b"this is not a DuckDB file\n" * 200)
    assert _analyze(broken, tmp_path / "out") == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert str(broken) in line and "internal error" not in line


def test_a_store_held_by_another_process_stays_a_store_error(
    store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Held, and serving no live reads (a run still starting, or one that never serves):
    busy, the store's error, after the reader's usual retries (no pause here)."""
    monkeypatch.setattr(store_reader, "PAUSE_S", 0.0)
    monkeypatch.setenv("IBIAS_DEBUG", "1")
    with StoreLock(store):
        assert _analyze(store, tmp_path / "out") == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "busy" in line and "internal error" not in line


def test_the_same_split_while_a_run_serves_the_store(
    store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Served live by the process holding the store (as `ibias run` serves it), the failures
    arrive as the run's one line: still internal for ibias's own query, the user's for theirs."""
    monkeypatch.delenv("IBIAS_DEBUG", raising=False)
    with _serving(store, tmp_path) as served:
        assert main(["sql", "--store", str(served.store), "SELECT group FROM trials"]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "Parser Error" in line and "internal error" not in line
        monkeypatch.setattr(load, "_PROGRESS_SQL", BROKEN["binder"])
        assert _analyze(served.store, tmp_path / "out") == 1
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("internal error: InternalQueryFailure: ") and "Binder Error" in line


def test_a_migration_of_ibiass_that_does_not_parse_is_an_internal_error(
    store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The store is fine (schema 12, one migration to go); ibias's migration text is not."""
    copy = tmp_path / "old.duckdb"
    shutil.copy(store, copy)
    con = duckdb.connect(str(copy))
    try:
        con.execute("DELETE FROM schema_version WHERE version > 12")
    finally:
        con.close()
    real = db.migrations()
    broken = [(v, "UPDATE attempts SET WHERE" if v == 13 else sql) for v, sql in real]
    monkeypatch.setattr(db, "migrations", lambda: broken)
    monkeypatch.delenv("IBIAS_DEBUG", raising=False)
    assert _analyze(copy, tmp_path / "out") == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("internal error: ParserException: ")
    monkeypatch.setattr(db, "migrations", lambda: real)
    assert _analyze(copy, tmp_path / "out") == 0  # the migration rolled back: nothing half-done

"""Opening the DuckDB store: migrations, schema checks and one-line errors for bad files.

Schema changes are numbered SQL files in `store/migrations/`; the version is checked on every
open so that an old ibias never writes into a store it does not understand.
"""

from __future__ import annotations

import contextlib
import os
import time
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from ibias import errors
from ibias.store.lock import check_store_path, holder


class StoreAccessError(errors.StoreError):
    """A store cannot be opened or read as asked: not there, busy, not a DuckDB or an ibias
    store, newer than this ibias, or a query (or the file its result goes to) refused; the
    one line the user sees.

    Its siblings under `ibias.StoreError` say what else went wrong (`StoreBusyError`,
    `StoreWriteError`, `ImportFileError`, ...)."""


def migrations() -> list[tuple[int, str]]:
    """(version, SQL) in order, from the package's migrations folder."""
    folder = resources.files("ibias.store") / "migrations"
    out: list[tuple[int, str]] = []
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:3].isdigit():
            out.append((int(name[:3]), entry.read_text(encoding="utf-8")))
    return sorted(out)


SCHEMA_VERSION = max(v for v, _ in migrations())


#: Descriptors of folders whose path is not UTF-8, by the folder's path as bytes
#: (`duckdb_path`); each is held open for the life of the process.
_FOLDERS: dict[bytes, int] = {}


def duckdb_path(path: Path) -> str:
    """The name to give DuckDB for the store at `path`.

    DuckDB takes only UTF-8 names (its Python API fails on the surrogate-escaped `str` that
    stands for other bytes), while a Linux path may hold any byte but NUL. So a store whose
    folders are named otherwise is reached through a descriptor of its folder,
    `/proc/self/fd/N/NAME`: DuckDB's `.wal` and temporary folder, which it names by adding to
    this name, still land beside the store. The store's own name must be UTF-8
    (`check_store_path` refuses it otherwise, before a lock file is made)."""
    text = str(path)
    if _is_utf8(text):
        return text
    folder = os.fsencode(absolute_folder(path))
    fd = _FOLDERS.get(folder)
    if fd is not None:
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(folder))
        except OSError:
            same = False
        if not same:  # the folder was replaced since: hold the new one
            os.close(fd)
            fd = None
    if fd is None:
        try:
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise StoreAccessError(
                f"store {path}: its folder cannot be opened: {exc.strerror or exc}"
            ) from None
        _FOLDERS[folder] = fd
    via = f"/proc/self/fd/{fd}"
    if not os.path.isdir(via):
        raise StoreAccessError(
            f"store {path}: DuckDB takes only UTF-8 paths, and without /proc this folder's "
            "name cannot be passed to it; move the store to a folder named in UTF-8"
        )
    return f"{via}/{path.name}"


def absolute_folder(path: Path) -> Path:
    """The absolute folder of `path` (not resolved: its symbolic links are the system's)."""
    return Path(os.path.abspath(path.parent))


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(duckdb_path(path), read_only=read_only)
    except duckdb.IOException as exc:
        text = str(exc)
        if "lock" in text.lower():
            who = holder(path)
            raise StoreAccessError(
                f"store {path} is busy: held by {who or 'another process'}"
            ) from None
        raise StoreAccessError(f"store {path} cannot be opened: {first_line(text)}") from None
    except duckdb.Error as exc:
        raise StoreAccessError(
            f"store {path} is not a usable DuckDB file: {first_line(str(exc))}"
        ) from None


def first_line(text: str) -> str:
    """The first line of an error's text (DuckDB's messages add context on further lines),
    for a refusal that must be one line; "unknown error" when there is no text."""
    return text.strip().splitlines()[0] if text.strip() else "unknown error"


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    rows = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'"
    ).fetchall()
    if not rows or rows[0][0] == 0:
        return 0
    got = con.execute("SELECT max(version) FROM schema_version").fetchall()
    return int(got[0][0]) if got and got[0][0] is not None else 0


def _check_is_a_database_file(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """DuckDB opens an existing CSV, JSON or Parquet file as an in-memory database over it:
    writes would then go nowhere while the command reports success."""
    try:
        rows = con.execute(
            "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
        ).fetchall()
    except duckdb.InvalidInputException:
        # DuckDB cannot show a path that is not UTF-8 (`duckdb_path`); only a file has one.
        return
    if not rows or rows[0][0] is None:
        raise StoreAccessError(f"store {path} is not a DuckDB database file (a data file?)")


def _check_not_foreign(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """A DuckDB file with tables but no ibias schema belongs to another program: never write
    ibias's tables into it."""
    rows = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_catalog = current_database()"
    ).fetchall()
    if rows and rows[0][0] > 0:
        raise StoreAccessError(
            f"store {path} is a DuckDB file of another program (it has tables but no ibias "
            "schema); pass another --store"
        )


def migrate(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    current = schema_version(con)
    if current == 0:
        _check_not_foreign(con, path)
    if current > SCHEMA_VERSION:
        raise StoreAccessError(
            f"store {path} has schema version {current}, newer than this ibias "
            f"({SCHEMA_VERSION}); upgrade ibias"
        )
    if current == SCHEMA_VERSION:
        return
    con.execute("BEGIN TRANSACTION").fetchall()
    try:
        con.execute(
            "CREATE TABLE IF NOT EXISTS schema_version "
            "(version INTEGER NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        ).fetchall()
        for version, sql in migrations():
            if version > current:
                con.execute(sql).fetchall()
                con.execute("INSERT INTO schema_version (version) VALUES (?)", [version]).fetchall()
        con.execute("COMMIT").fetchall()
    except BaseException:
        con.execute("ROLLBACK").fetchall()
        raise


def open_store(
    path: Path, *, create: bool = False, read_only: bool = False
) -> duckdb.DuckDBPyConnection:
    """Open (and, when writable, migrate) the store.

    `create=False` refuses to invent an empty store where the user expected data, so a typo in
    `--store` is an error rather than an empty result. A path that is not a regular file (a
    FIFO would block DuckDB's open for ever) is refused before it is opened (`check_store_path`).
    """
    # Here, not at the top: the experiments' DDL needs the experiment registry, which a
    # read-only session (`ibias status`, store/sandbox.py) never uses.
    from ibias.store.experiments import ExperimentSchemaError, apply_experiment_schemas

    check_store_path(path)
    if not path.exists():
        if not create:
            raise StoreAccessError(
                f"no store at {path} (run `ibias run CONFIG` first, or pass --store)"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
    con = _connect(path, read_only=read_only)
    try:
        _check_is_a_database_file(con, path)
        if read_only:
            version = schema_version(con)
            if version != SCHEMA_VERSION:
                if version == 0:
                    raise StoreAccessError(
                        f"store {path} is not an ibias store (no schema version)"
                    )
                raise StoreAccessError(
                    f"store {path} has schema version {version}, this ibias expects "
                    f"{SCHEMA_VERSION}; open it once with `ibias run` or `ibias analyze`"
                )
        else:
            migrate(con, path)
            apply_experiment_schemas(con)
    except ExperimentSchemaError as exc:
        con.close()
        raise StoreAccessError(f"store {path}: {exc}") from None
    except duckdb.ParserException:
        # ibias's own migration or generated DDL does not parse: a bug, whatever the store
        # holds; reported as an internal error (traceback under IBIAS_DEBUG=1), not the store's.
        con.close()
        raise
    except duckdb.Error as exc:
        con.close()
        raise StoreAccessError(
            f"store {path} is not a usable ibias store: {first_line(str(exc))}"
        ) from None
    except BaseException:
        con.close()
        raise
    return con


#: Tries of a ROLLBACK that failed (other than for want of a transaction).
ROLLBACK_TRIES = 3


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    """End whatever transaction a failed statement left on `con`, never raising: the error
    that failed it is the one to report. "No transaction is active" is the normal case (a
    failed COMMIT has ended it already; an autocommit read rolls back by itself); any other
    failure is tried again, because a connection left in an aborted transaction would fail
    every statement after it with "Current transaction is aborted" and hide the real cause."""
    for attempt in range(ROLLBACK_TRIES):
        try:
            con.execute("ROLLBACK").fetchall()
            return
        except duckdb.TransactionException as exc:
            if "no transaction is active" in str(exc).lower():
                return
        except duckdb.Error:
            pass
        time.sleep(0.01 * (attempt + 1))


def begin(con: duckdb.DuckDBPyConnection) -> None:
    """BEGIN a transaction; if `con` is still inside one a failure left behind, end that one
    first (`rollback`) instead of failing this flush too."""
    try:
        con.execute("BEGIN TRANSACTION").fetchall()
    except duckdb.TransactionException:
        rollback(con)
        con.execute("BEGIN TRANSACTION").fetchall()


def defer_final_checkpoint(con: duckdb.DuckDBPyConnection) -> None:
    """Make closing `con` (the run's store) leave the write-ahead log to `close_store`: DuckDB
    then checkpoints on shutdown only if asked. Call it before the instance's configuration is
    locked (store/live.py `lock_down`): afterwards DuckDB refuses the change."""
    con.execute("PRAGMA disable_checkpoint_on_shutdown").fetchall()


def close_store(con: duckdb.DuckDBPyConnection, *, stopped: bool) -> None:
    """Close the run's store (`defer_final_checkpoint` made it): checkpointed, unless the run
    was stopped from outside.

    The checkpoint folds the write-ahead log into the database file, and after a first run's
    planning (a log of about 15 MB for the demo grid) it was the longest step of a stop: 0.4 to
    0.9 s, more than the requests in flight or the final flush. Every transaction is committed
    and synced to the log already, so a stopped run loses nothing without it: the next open
    replays the log (as after `kill -9`, which the reliability tests cover), a writable one (the
    resume) checkpoints it then, and until then a read-only open (`status`, `sql`) replays it in
    memory, about 0.15 s more. A checkpoint that fails leaves the log for the next open too.
    """
    try:
        if not stopped:
            with contextlib.suppress(duckdb.Error):
                con.execute("CHECKPOINT").fetchall()
    finally:
        con.close()


if not TYPE_CHECKING:  # at run time only, so mypy holds the project to the new name

    def __getattr__(name: str) -> Any:
        """`StoreError`, `StoreAccessError`'s name in ibias 0.1 (it reused its branch's name,
        `ibias.StoreError`): importable for one more release, with a DeprecationWarning."""
        return errors.renamed(__name__, name, {"StoreError": StoreAccessError})

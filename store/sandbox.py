"""Connections for SQL that users write: the store, read-only, and nothing beyond it.

Every path that runs a user's SQL (`ibias sql`, and later `show --where` and queries served
during a run) opens its connection with `open_query_connection` and checks the text with
`read_statement`. The boundary is DuckDB's own configuration, fixed when the database instance
starts and then locked, not a filter on keywords: with external access off, DuckDB opens no file
but the store (and its WAL and temporary spill files), so `ATTACH`, `COPY`, `EXPORT DATABASE`,
`read_text`, `read_csv`, `read_parquet`, `glob`, http(s) URLs, `INSTALL` and `LOAD` all fail
inside DuckDB, and the locked configuration refuses the `SET`, `RESET` or `PRAGMA` that would
turn any of it back on. The store is opened read-only, so nothing can change it. The statement
check on top keeps the surface to exactly one read, so a refusal says what was refused instead
of surfacing whichever DuckDB error fires first.

One hole in DuckDB's settings makes that check load-bearing: external access off still leaves
DuckDB's own temp folder (`temp_directory`, `STORE.tmp` by default; DuckDB adds it to
`allowed_directories` by itself) open to any file operation, so `COPY ... TO 'STORE.tmp/x'`
writes there. So no COPY, EXPORT, ATTACH or write may reach DuckDB however it is wrapped:
`read_statement` checks `EXPLAIN [ANALYZE]` as the statement it wraps.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import duckdb

from ibias.store.db import SCHEMA_VERSION, StoreAccessError, duckdb_path, first_line, schema_version
from ibias.store.lock import check_store_path, holder

#: DuckDB settings of every user-query connection, given at connect time so that they hold
#: from the first statement and belong to this database instance only.
QUERY_SETTINGS: Mapping[str, bool] = {
    # No file, directory or URL but the store itself: ATTACH, COPY, EXPORT/IMPORT DATABASE,
    # the read_*/glob table functions, replacement scans of paths, INSTALL and LOAD.
    "enable_external_access": False,
    # No extension is installed or loaded behind the query's back (httpfs for a URL, ...).
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    # Even if an extension could be reached, only signed core ones would be accepted.
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    # Secrets never go to disk (~/.duckdb/stored_secrets).
    "allow_persistent_secrets": False,
    # Last: nothing above can be changed by SET, RESET or PRAGMA on this connection.
    "lock_configuration": True,
}

#: Statement types that only read, by the name of their `duckdb.StatementType` (names, so that
#: importing this module does not load DuckDB: `ibias status` during a run never needs it).
#: DuckDB classifies SELECT, WITH, FROM-first queries, VALUES, DESCRIBE, SHOW, SUMMARIZE and
#: PIVOT with listed values as SELECT.
READ_STATEMENTS = frozenset({"SELECT", "EXPLAIN"})

ALLOWED = "SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE, PIVOT ... IN (...), EXPLAIN"

_HINTS: Mapping[str, str] = {
    "COPY": "; use `ibias sql QUERY --output FILE.parquet|csv|json` to export a result",
    "EXPORT": "; use `ibias sql QUERY --output FILE.parquet|csv|json` to export a result",
    "PRAGMA": "; use DESCRIBE name, SHOW TABLES or SELECT * FROM pragma_table_info('name')",
    "CALL": "; use SELECT * FROM function(...)",
    "MULTI": (
        "; a PIVOT whose values come from the data runs as several statements: "
        "list them, PIVOT ... ON col IN (v1, v2, ...)"
    ),
}

_NAMES: Mapping[str, str] = {
    "LOAD": "INSTALL/LOAD",
    "SET": "SET/RESET/USE",
    "MULTI": "multi-part (dynamic PIVOT)",
}


def open_query_connection(
    store: Path, *, memory_limit: str | None = None
) -> duckdb.DuckDBPyConnection:
    """The store, read-only, under `QUERY_SETTINGS`; one-line `StoreAccessError` on any problem.
    `memory_limit` caps DuckDB's memory for this connection (e.g. "384MB"; DuckDB's own default,
    most of the machine's memory, when None): analysis sets it, so its reads of a store of any
    size stay bounded, spilling to disk past it; a user's `ibias sql` keeps DuckDB's default.

    The same checks and messages as `open_store(path, read_only=True)`: the file must exist
    and be an ibias store of this schema version. DuckDB shares one database instance per
    file and configuration within a process, so while another connection to the same store
    with other settings is open here (e.g. `ibias.connect`), this one is refused.
    """
    check_store_path(store)  # before opening: a FIFO would block the open for ever
    if not store.exists():
        raise StoreAccessError(
            f"no store at {store} (run `ibias run CONFIG` first, or pass --store)"
        )
    try:
        settings: dict[str, str | bool | int | float | list[str]] = dict(QUERY_SETTINGS)
        if memory_limit is not None:
            settings["memory_limit"] = memory_limit
        con = duckdb.connect(duckdb_path(store), read_only=True, config=settings)
    except duckdb.IOException as exc:
        text = str(exc)
        if "lock" in text.lower():
            who = holder(store)
            raise StoreAccessError(
                f"store {store} is busy: held by {who or 'another process'}"
            ) from None
        raise StoreAccessError(f"store {store} cannot be opened: {first_line(text)}") from None
    except duckdb.ConnectionException as exc:
        raise StoreAccessError(
            f"store {store} is already open in this process with other settings; close that "
            f"connection first ({first_line(str(exc))})"
        ) from None
    except duckdb.Error as exc:
        raise StoreAccessError(
            f"store {store} is not a usable DuckDB file: {first_line(str(exc))}"
        ) from None
    try:
        version = schema_version(con)
        if version != SCHEMA_VERSION:
            if version == 0:
                raise StoreAccessError(f"store {store} is not an ibias store (no schema version)")
            raise StoreAccessError(
                f"store {store} has schema version {version}, this ibias expects "
                f"{SCHEMA_VERSION}; open it once with `ibias run` or `ibias analyze`"
            )
    except duckdb.Error as exc:
        con.close()
        raise StoreAccessError(
            f"store {store} is not a usable ibias store: {first_line(str(exc))}"
        ) from None
    except BaseException:
        con.close()
        raise
    return con


def read_statement(query: str, parser: duckdb.DuckDBPyConnection | None = None) -> duckdb.Statement:
    """The query's one statement, parsed by DuckDB, if it is a read; else a one-line refusal.
    `parser`: the connection whose parser reads it, when there is one (else DuckDB's default
    connection, whose first use creates a database: tens of milliseconds of `ibias status`).

    `EXPLAIN` and `EXPLAIN ANALYZE` are checked as the statement they wrap: `EXPLAIN ANALYZE`
    executes it, so `EXPLAIN ANALYZE COPY (...) TO 'STORE.tmp/x.csv'` would write a file.
    DuckDB's settings alone do not stop that one: with external access off it still lets a
    query open files in its own `temp_directory` (beside the store, where it spills), so a
    COPY into that folder succeeds. The statement check is what keeps every write, COPY,
    EXPORT or ATTACH out, however it is wrapped (a CTE, a PIVOT and several statements are
    parsed by DuckDB as what they are: SELECT, or refused as MULTI or as more than one).
    """
    statement = _one_statement(query, parser)
    _check_read(statement, explained=False)
    return statement


def _one_statement(query: str, parser: duckdb.DuckDBPyConnection | None = None) -> duckdb.Statement:
    try:
        statements = (duckdb if parser is None else parser).extract_statements(query)
    except duckdb.Error as exc:
        raise StoreAccessError(f"query failed: {first_line(str(exc))}") from None
    if not statements:
        raise StoreAccessError("query is empty: give one SQL statement")
    if len(statements) > 1:
        raise StoreAccessError(
            f"query has {len(statements)} statements; exactly one is allowed ({ALLOWED})"
        )
    return statements[0]


def _check_read(statement: duckdb.Statement, *, explained: bool) -> None:
    try:
        kind = statement.type.name
    except ValueError:  # a statement type newer than this duckdb's Python enum
        kind = "this kind of"
    if kind == "EXPLAIN":
        _check_read(_explained(statement.query), explained=True)
        return
    if kind in READ_STATEMENTS:
        return
    where = " (also inside EXPLAIN)" if explained else ""
    raise StoreAccessError(
        f"{_NAMES.get(kind, kind)} statements are refused{where}: only one read is allowed "
        f"({ALLOWED}){_HINTS.get(kind, '')}"
    )


#: Words between EXPLAIN and the statement it wraps (`EXPLAIN ANALYZE SELECT ...`).
_EXPLAIN_WORDS = frozenset({"ANALYZE", "ANALYSE", "VERBOSE"})


def _explained(query: str) -> duckdb.Statement:
    """The statement an `EXPLAIN [ANALYZE] [(options)] STATEMENT` wraps, parsed by DuckDB.

    DuckDB's tokenizer finds where it starts (comments and quoted text are tokens of their
    own, so neither can hide a word); a parenthesised group right after the keywords is the
    options, unless nothing follows it, in which case it is the statement (`EXPLAIN (SELECT
    1)`). Whatever cannot be read this way is refused, never let through."""
    every = [(pos, kind.name) for pos, kind in duckdb.tokenize(query)]
    ends = [pos for pos, _ in every[1:]] + [len(query)]
    kept = [(t, end) for t, end in zip(every, ends, strict=True) if t[1] != "comment"]
    tokens = [t for t, _ in kept]
    words = [query[pos:end].strip() for (pos, _), end in kept]
    refused = StoreAccessError(
        f"EXPLAIN refused: the statement it wraps cannot be checked ({ALLOWED})"
    )
    if not words or words[0].upper() != "EXPLAIN":
        raise refused
    i = 1
    while i < len(words) and tokens[i][1] == "keyword" and words[i].upper() in _EXPLAIN_WORDS:
        i += 1
    if i < len(words) and words[i] == "(":
        depth, j = 0, i
        while j < len(words):
            depth += {"(": 1, ")": -1}.get(words[j], 0)
            j += 1
            if depth == 0:
                break
        if j < len(words) and words[j] != ";":
            i = j  # the group was the options; the statement follows it
    if i >= len(words):
        raise refused
    try:
        return _one_statement(query[tokens[i][0] :])
    except StoreAccessError:
        raise refused from None

"""The registered experiments' derived tables and views: DDL generated from their declarations.

Each parsed kind declares its derived table's columns and its view's item fields
(prompts/registry.py); this module turns them into DDL and applies it when a store is opened
writable. Versioning sits beside the numbered core migrations: `experiment_schemas` records,
per kind, the schema version and a hash of the DDL applied. A kind is (re)applied when its hash
differs from the recorded one (created if absent, declared columns added if missing, view
replaced); a store whose recorded version is newer than the code's is refused, so an old ibias
never reinterprets a newer experiment's table. Columns are only ever added.

Explicit checks of every experiment share `parsed_explicit` and one `explicit_answers` view;
the view covers every explicit kind the store has ever recorded, so opening a store from a
process without some third-party experiment does not drop its rows from the view.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb

if TYPE_CHECKING:
    import pyarrow as pa

from ibias import errors
from ibias.prompts.base import stable_hash
from ibias.prompts.registry import (
    EXPLICIT_TABLE,
    EXPLICIT_VIEW,
    Column,
    Parser,
    TrialKind,
    kinds,
)

ARROW_TYPE_NAMES: dict[str, str] = {
    "VARCHAR": "string",
    "JSON": "string",
    "INTEGER": "int32",
    "BIGINT": "int64",
    "DOUBLE": "float64",
    "BOOLEAN": "bool_",
}
"""The Arrow type (a `pyarrow` factory name) of each supported SQL type; pyarrow is imported
only when rows are written, so opening a store stays cheap for commands that never write."""


EXPLICIT_PARSER = Parser(
    version=0,
    table=EXPLICIT_TABLE,
    columns=(Column("answer", "VARCHAR", nullable=False),),
    parse=lambda item, content: {},
)
"""The shape every explicit kind's parser writes (checked when a kind registers)."""


class ExperimentSchemaError(errors.StoreError):
    """A store whose experiment tables are newer than this code understands."""


def sql_identifier(name: str) -> str:
    """`name` as ibias writes any identifier into SQL: double-quoted, an embedded `"` doubled
    (DuckDB's rule), so a declared name that is also a keyword (`group`, `select`) or holds
    other characters is read as the name it is, never as SQL. DuckDB matches quoted names
    case-insensitively, as unquoted ones, so quoting changes no name's meaning. The one thing
    refused is what no identifier can hold: nothing, or a NUL."""
    if not name or "\x00" in name:
        raise ValueError(f"{name!r} cannot be an SQL identifier")
    return '"' + name.replace('"', '""') + '"'


def sql_literal(text: str) -> str:
    """`text` as a SQL string literal in generated DDL."""
    return "'" + text.replace("'", "''") + "'"


def table_ddl(parser: Parser) -> str:
    cols = ",\n    ".join(
        f"{sql_identifier(c.name)} {c.sql}{'' if c.nullable else ' NOT NULL'}"
        for c in parser.columns
    )
    return (
        f"CREATE TABLE IF NOT EXISTS {sql_identifier(parser.table)} (\n"
        "    trial_key VARCHAR NOT NULL,\n    parser_version INTEGER NOT NULL,\n"
        f"    {cols},\n    parsed_at TIMESTAMPTZ NOT NULL DEFAULT now()\n)"
    )


#: The newest row per trial of a parse table (a reply is parsed again under each parser version,
#: and the views, the replies view and the analysis read only the newest).
NEWEST_PARSE = "QUALIFY row_number() OVER (PARTITION BY trial_key ORDER BY parser_version DESC) = 1"


def _newest(table: str) -> str:
    return f"WITH p AS (\n    SELECT * FROM {sql_identifier(table)}\n    {NEWEST_PARSE}\n)\n"


def _item_field(name: str, sql: str) -> str:
    extract = f"item ->> {sql_literal(name)}"
    return (
        f"{extract} AS {sql_identifier(name)}"
        if sql == "VARCHAR"
        else (f"CAST({extract} AS {sql}) AS {sql_identifier(name)}")
    )


def view_ddl(kind: TrialKind) -> str:
    """The kind's view: one row per answered trial, its item fields, its newest parse.

    The item fields are read once per spec (`s`), then joined to the trials: a spec is shared
    by every model and replicate of a trial, so this parses each item's JSON a few times fewer
    than reading it per trial, and the join carries the narrow fields rather than the JSON (at
    ten times the paper's grid the per-trial form held gigabytes in DuckDB). Only this kind's
    specs are read, so another kind's item field of the same name is never cast to this
    kind's type. A trial has at most one response (the writer's anti-join): the response is a
    semi-join, which keeps the same rows without carrying the responses' columns."""
    assert kind.parser is not None and kind.view is not None
    fields = [_item_field(n, sql) for n, sql in kind.view_field_types()]
    names = [sql_identifier(n) for n, _ in kind.view_field_types()]
    if kind.designs:
        default = sql_literal(kind.designs[0])
        fields.insert(0, f"coalesce(item ->> 'design', {default}) AS design")
        names.insert(0, "design")
    parsed = [f"p.{sql_identifier(c.name)}" for c in kind.parser.columns if c.in_view]
    select = ",\n    ".join(
        ["t.trial_key", "t.model_id", "t.language", *(f"s.{n}" for n in names), *parsed,
         "p.parser_version"]
    )  # fmt: skip
    experiment = sql_literal(kind.name)
    specs = ",\n        ".join(["spec_key", *fields])
    return (
        f"CREATE OR REPLACE VIEW {sql_identifier(kind.view)} AS\n{_newest(kind.parser.table)}"
        f", s AS (\n    SELECT\n        {specs}\n    FROM trial_specs\n    WHERE spec_key IN "
        f"(SELECT spec_key FROM trial_rows WHERE experiment = {experiment})\n)\n"
        f"SELECT\n    {select}\nFROM trial_rows t\nJOIN s ON s.spec_key = t.spec_key\n"
        f"JOIN p ON p.trial_key = t.trial_key\nWHERE t.experiment = {experiment}\n"
        "  AND t.trial_key IN (SELECT trial_key FROM responses)"
    )


def explicit_view_ddl(subjects: Sequence[tuple[str, str]]) -> str:
    """`explicit_answers` over the explicit kinds (kind name, item field naming the subject)."""
    if not subjects:
        cases, names = "NULL", "NULL"
    else:
        whens = " ".join(
            f"WHEN {sql_literal(k)} THEN t.item ->> {sql_literal(f)}" for k, f in sorted(subjects)
        )
        cases = f"CASE t.experiment {whens} END"
        names = ", ".join(sql_literal(k) for k, _ in sorted(subjects))
    return (
        f"CREATE OR REPLACE VIEW {sql_identifier(EXPLICIT_VIEW)} AS\n{_newest(EXPLICIT_TABLE)}"
        "SELECT\n    t.trial_key,\n    t.model_id,\n    t.language,\n    t.experiment,\n"
        f"    coalesce(t.item ->> 'subject', {cases}) AS subject,\n    p.answer,\n"
        "    r.content,\n    p.parser_version\nFROM trials t\n"
        "JOIN responses r ON r.trial_key = t.trial_key\nJOIN p ON p.trial_key = t.trial_key\n"
        f"WHERE t.experiment IN ({names})"
    )


@dataclass(frozen=True)
class _Recorded:
    version: int
    ddl_hash: str
    explicit_subject: str | None


def _recorded(con: duckdb.DuckDBPyConnection) -> dict[str, _Recorded]:
    rows = con.execute(
        "SELECT name, version, ddl_hash, explicit_subject FROM experiment_schemas "
        "QUALIFY row_number() OVER (PARTITION BY name ORDER BY applied_at DESC, version DESC) = 1"
    ).fetchall()
    return {r[0]: _Recorded(int(r[1]), str(r[2]), r[3]) for r in rows}


def _add_missing_columns(con: duckdb.DuckDBPyConnection, parser: Parser) -> None:
    present = {
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?",
            [parser.table],
        ).fetchall()
    }
    for c in parser.columns:
        if c.name not in present:
            # Added columns are nullable: rows parsed before the column existed have no value.
            table, column = sql_identifier(parser.table), sql_identifier(c.name)
            con.execute(f"ALTER TABLE {table} ADD COLUMN {column} {c.sql}")


def _kind_ddl(kind: TrialKind) -> list[str]:
    """The kind's tables (main parser first, then extra parsers'), then its view."""
    out = [table_ddl(p) for p in kind.parsers]
    if kind.parser is not None and kind.view is not None:
        out.append(view_ddl(kind))
    return out


def apply_experiment_schemas(
    con: duckdb.DuckDBPyConnection, registered: Sequence[TrialKind] | None = None
) -> int:
    """Bring every registered kind's table and view up to date; returns how many changed.

    Runs inside the caller's transaction-free connection; each kind commits on its own, so a
    failure leaves the kinds before it applied and recorded.
    """
    recorded = _recorded(con)
    changed = 0
    explicit: dict[str, str] = {
        name: r.explicit_subject for name, r in recorded.items() if r.explicit_subject
    }
    for kind in registered if registered is not None else kinds():
        if kind.parser is None:
            continue
        if kind.explicit_subject is not None:
            explicit[kind.name] = kind.explicit_subject
        changed += _apply_kind(con, kind, recorded.get(kind.name))
    changed += _apply_explicit_view(con, explicit, recorded)
    return changed + _apply_replies_view(con, recorded)


def _apply_kind(con: duckdb.DuckDBPyConnection, kind: TrialKind, before: _Recorded | None) -> int:
    """Apply one kind's tables and view unless the recorded hash is its DDL's; 1 if applied."""
    if before is not None and before.version > kind.schema_version:
        raise ExperimentSchemaError(
            f"its {kind.name!r} tables are at schema version {before.version}, newer than "
            f"this ibias ({kind.schema_version}); upgrade ibias"
        )
    ddl = _kind_ddl(kind)
    digest = stable_hash([kind.schema_version, ddl, kind.explicit_subject])
    if before is not None and before.ddl_hash == digest:
        return 0
    con.execute("BEGIN TRANSACTION")
    try:
        for parser, statement in zip(kind.parsers, ddl, strict=False):
            con.execute(statement)
            _add_missing_columns(con, parser)
        for statement in ddl[len(kind.parsers) :]:
            con.execute(statement)
        con.execute(
            "INSERT INTO experiment_schemas (name, version, ddl_hash, explicit_subject) "
            "VALUES (?, ?, ?, ?)",
            [kind.name, kind.schema_version, digest, kind.explicit_subject],
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return 1


def _apply_explicit_view(
    con: duckdb.DuckDBPyConnection, explicit: dict[str, str], recorded: dict[str, _Recorded]
) -> int:
    """(Re)create `explicit_answers` over every explicit kind, recorded or registered, when its
    DDL changed; 1 if applied."""
    view = explicit_view_ddl(sorted(explicit.items()))
    view_hash = stable_hash(view)
    if recorded.get(EXPLICIT_VIEW, _Recorded(0, "", None)).ddl_hash == view_hash:
        return 0
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(table_ddl(EXPLICIT_PARSER))
        con.execute(view)
        con.execute(
            "INSERT INTO experiment_schemas (name, version, ddl_hash) VALUES (?, 1, ?)",
            [EXPLICIT_VIEW, view_hash],
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return 1


def _apply_replies_view(con: duckdb.DuckDBPyConnection, recorded: dict[str, _Recorded]) -> int:
    """(Re)create the `replies` view (store/replies.py) when its generated DDL changed."""
    from ibias.store.replies import VIEW, replies_view_ddl

    present = {
        r[0]
        for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = "
            "current_database()"
        ).fetchall()
    }
    ddl = replies_view_ddl(kinds(), present)
    digest = stable_hash(ddl)
    if recorded.get(VIEW, _Recorded(0, "", None)).ddl_hash == digest:
        return 0
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(ddl)
        con.execute(
            "INSERT INTO experiment_schemas (name, version, ddl_hash) VALUES (?, 1, ?)",
            [VIEW, digest],
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return 1


def arrow_schema(parser: Parser) -> dict[str, pa.DataType]:
    """Arrow types of a derived table's row batch (keys first)."""
    import pyarrow as pa

    return {
        "trial_key": pa.string(),
        "parser_version": pa.int32(),
        **{c.name: getattr(pa, ARROW_TYPE_NAMES[c.sql])() for c in parser.columns},
    }


__all__ = [
    "ARROW_TYPE_NAMES",
    "Column",
    "ExperimentSchemaError",
    "apply_experiment_schemas",
    "arrow_schema",
    "explicit_view_ddl",
    "sql_identifier",
    "sql_literal",
    "table_ddl",
    "view_ddl",
]

"""Reading a store for analysis: parse what is pending, then pull the views into Polars.

Analysis reads only the store (never the network), and only through the views of DESIGN.md plus
the few raw columns the report needs (run config, provider-reported model versions). Everything
comes out as Polars frames via Arrow, so the rest of the analysis groups and aggregates without
Python loops over rows. The connection is closed before anything is written, so a long figure
or report step never holds the store's lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from ibias.prompts.registry import Parser, kinds, view_columns
from ibias.store.db import open_store
from ibias.store.derived import parse_pending

# Column lists are explicit (declared by each kind, see `registry.view_columns`) so that a view
# gaining a column does not change the analysis tables.
_EXPLICIT_SQL = """
SELECT trial_key, model_id, language, experiment, subject, answer, content
FROM explicit_answers
"""
_PROGRESS_SQL = "SELECT experiment, model_id, language, planned, done, failed FROM progress"
_RUNS_SQL = """
SELECT run_id, started_at, config, config_hash, version, git_rev
FROM runs ORDER BY started_at
"""
_PATIENTS_SQL = """
SELECT roster_id, person_id, language, age, sex_assigned_at_birth, gender_identity FROM patients
"""
# One row per response with the experiment it answered; narrow on purpose (no content, no raw).
_RESPONSES_SQL = """
SELECT r.trial_key, r.model_id, t.experiment, r.provider_model, r.system_fingerprint,
       r.finish_reason
FROM responses r
JOIN (SELECT DISTINCT ON (trial_key) trial_key, experiment FROM trials) t
  ON t.trial_key = r.trial_key
"""


@dataclass(frozen=True)
class StoreData:
    """Everything the analysis reads from one store, as Polars frames: each registered kind's
    view by kind name, the explicit answers, progress, runs and a narrow responses table, and
    each kind's extra parses (readings stored beside the main parse, never in a view) by table
    name: trial_key, parser_version and the parser's declared columns, newest version per
    trial."""

    views: dict[str, pl.DataFrame]
    explicit: pl.DataFrame
    progress: pl.DataFrame
    runs: pl.DataFrame
    responses: pl.DataFrame
    n_parsed_now: int
    store: Path
    extras: dict[str, pl.DataFrame] = field(default_factory=dict)
    #: The allocation roster's people (no names: the report shows only the make-up).
    patients: pl.DataFrame = field(default_factory=pl.DataFrame)


def _frame(con: duckdb.DuckDBPyConnection, sql: str) -> pl.DataFrame:
    frame = pl.from_arrow(con.sql(sql).to_arrow_table())
    assert isinstance(frame, pl.DataFrame)  # a table always converts to a DataFrame
    return frame


def _newest_sql(parser: Parser) -> str:
    """An extra parser's rows at the newest version each trial has, its declared columns only
    (the table may hold columns a later version added; `parsed_at` is left out)."""
    columns = ", ".join(["trial_key", "parser_version", *(c.name for c in parser.columns)])
    return (
        f"SELECT {columns} FROM {parser.table} QUALIFY row_number() OVER "
        "(PARTITION BY trial_key ORDER BY parser_version DESC) = 1 ORDER BY trial_key"
    )


#: What `by_reported_model` groups by: the configured id and what the provider said answered.
_REPORTED_LABEL = "coalesce(v.model_id || ' @ ' || r.provider_model, v.model_id)"


def _by_reported(sql: str) -> str:
    """`sql` (with trial_key and model_id columns) with model_id relabelled
    "id @ reported model" for trials whose response names a model (see `load_store`)."""
    return (
        f"SELECT v.* REPLACE ({_REPORTED_LABEL} AS model_id) FROM ({sql}) v LEFT JOIN "
        "(SELECT trial_key, any_value(provider_model) AS provider_model FROM responses "
        "GROUP BY trial_key) r ON r.trial_key = v.trial_key"
    )


def load_store(path: Path, *, by_reported_model: bool = False) -> StoreData:
    """Open the store writable, parse pending responses, read the views, close the store.

    Writable because `parse_pending` inserts derived rows for responses that have none at the
    current parser version (e.g. after a parser upgrade, or a store filled by `ibias import`).

    `by_reported_model` groups every analysis table by the model the provider reported rather
    than the configured id (for a store whose model drifted, store/drift.py): each trial's
    model_id becomes "id @ reported name". Progress stays per configured id (a trial without an
    answer has no reported model).
    """
    con = open_store(path)
    try:
        n_parsed = parse_pending(con)

        def relabel(sql: str) -> str:
            return _by_reported(sql) if by_reported_model else sql

        views = {
            k.name: _frame(con, relabel(f"SELECT {', '.join(view_columns(k))} FROM {k.view}"))
            for k in kinds()
            if k.view is not None
        }
        data = StoreData(
            views=views,
            explicit=_frame(con, relabel(_EXPLICIT_SQL)),
            progress=_frame(con, _PROGRESS_SQL),
            runs=_frame(con, _RUNS_SQL),
            responses=_frame(con, relabel(_RESPONSES_SQL)),
            n_parsed_now=n_parsed,
            store=path,
            extras={p.table: _frame(con, _newest_sql(p)) for k in kinds() for p in k.extra_parsers},
            patients=_frame(con, _PATIENTS_SQL),
        )
    finally:
        con.close()
    return data

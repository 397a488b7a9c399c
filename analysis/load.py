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

from ibias.analysis.planted import SimulatedModel, simulated_models
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
# One row per response with the experiment it answered; narrow on purpose (no content, no raw).
_RESPONSES_SQL = """
SELECT r.model_id, t.experiment, r.provider_model, r.system_fingerprint, r.finish_reason
FROM responses r
JOIN (SELECT DISTINCT ON (trial_key) trial_key, experiment FROM trials) t
  ON t.trial_key = r.trial_key
"""


# The people of each allocation pair as shown (controlled design), read from one model's trials:
# every model sees the same pairs. Only read for stores with simulated models (planted values).
_PEOPLE_SQL = """
SELECT DISTINCT language, item->>'$.pair_id' AS pair_id,
  item->>'$.candidates[0].identity' AS identity0, item->>'$.candidates[0].name' AS name0,
  item->>'$.candidates[0].age' AS age0, item->>'$.candidates[0].gender_identity' AS gi0,
  item->>'$.candidates[1].identity' AS identity1, item->>'$.candidates[1].name' AS name1,
  item->>'$.candidates[1].age' AS age1, item->>'$.candidates[1].gender_identity' AS gi1
FROM trials
WHERE experiment = 'allocation' AND model_id = ?
  AND coalesce(coords->>'$.design', 'controlled') = 'controlled'
"""


def _people(con: duckdb.DuckDBPyConnection, models: tuple[SimulatedModel, ...]) -> pl.DataFrame:
    """language, pair_id and the cis / trans candidate's name, age and gender identity."""
    schema = {c: pl.String() for c in PEOPLE_COLUMNS}
    if not models:
        return pl.DataFrame(schema=schema)
    ids = [m.model_id for m in models]
    present = con.execute(
        "SELECT min(model_id) FROM trials WHERE experiment = 'allocation' AND model_id IN "
        f"({', '.join('?' for _ in ids)})",
        ids,
    ).fetchall()
    if not present or present[0][0] is None:
        return pl.DataFrame(schema=schema)
    frame = pl.from_arrow(con.sql(_PEOPLE_SQL, params=[present[0][0]]).to_arrow_table())
    assert isinstance(frame, pl.DataFrame)
    cis0 = pl.col("identity0") == "cis"
    pick = {
        f"{who}_{field}": pl.when(cis0 == (who == "cis"))
        .then(pl.col(f"{src}0"))
        .otherwise(pl.col(f"{src}1"))
        for who in ("cis", "trans")
        for field, src in (("name", "name"), ("age", "age"), ("gi", "gi"))
    }
    return (
        frame.filter(
            pl.concat_list("identity0", "identity1").list.sort() == pl.lit(["cis", "trans"])
        )
        .select("language", "pair_id", **pick)
        .unique(["language", "pair_id"], keep="first")
        .select(list(PEOPLE_COLUMNS))
    )


PEOPLE_COLUMNS: tuple[str, ...] = (
    "language", "pair_id", "cis_name", "cis_age", "cis_gi", "trans_name", "trans_age", "trans_gi",
)  # fmt: skip


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
    simulated: tuple[SimulatedModel, ...] = ()
    """The latest run config's simulated models (`analysis.planted`)."""
    people: pl.DataFrame = field(default_factory=lambda: pl.DataFrame())
    """The people of each allocation pair, read only when `simulated` is not empty."""


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


def load_store(path: Path) -> StoreData:
    """Open the store writable, parse pending responses, read the views, close the store.

    Writable because `parse_pending` inserts derived rows for responses that have none at the
    current parser version (e.g. after a parser upgrade, or a store filled by `ibias import`).
    """
    con = open_store(path)
    try:
        n_parsed = parse_pending(con)
        views = {
            k.name: _frame(con, f"SELECT {', '.join(view_columns(k))} FROM {k.view}")
            for k in kinds()
            if k.view is not None
        }
        runs = _frame(con, _RUNS_SQL)
        simulated = simulated_models(runs["config"].to_list())
        data = StoreData(
            views=views,
            explicit=_frame(con, _EXPLICIT_SQL),
            progress=_frame(con, _PROGRESS_SQL),
            runs=runs,
            responses=_frame(con, _RESPONSES_SQL),
            n_parsed_now=n_parsed,
            store=path,
            extras={p.table: _frame(con, _newest_sql(p)) for k in kinds() for p in k.extra_parsers},
            simulated=simulated,
            people=_people(con, simulated),
        )
    finally:
        con.close()
    return data

"""Reading a store for analysis: parse what is pending, then pull the views into Polars.

Analysis reads only the store (never the network), and only through the views of DESIGN.md plus
the few raw columns the report needs (run config, provider-reported model versions). Everything
comes out as Polars frames via Arrow, so the rest of the analysis groups and aggregates without
Python loops over rows. Reads go through the store's read entry point (store/reader.py), so
analysis works while a run holds the store; the session is closed before anything is written,
so a long figure or report step never holds the store.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ibias.analysis.experiment import ExperimentAnalysis, LoadContext, analysis_of
from ibias.analysis.simulated import simulated_models
from ibias.prompts.registry import Parser, kinds, units, view_columns
from ibias.store.db import StoreAccessError, open_store
from ibias.store.derived import parse_pending, parsed_kinds
from ibias.store.experiments import NEWEST_PARSE, sql_identifier
from ibias.store.lock import StoreBusyError, StoreLock
from ibias.store.reader import StoreReader, open_reader

#: DuckDB's memory for the analysis's reads of a store file: the views of a store ten times
#: the paper's grid are read within it (DuckDB spills what does not fit), so the analysis's
#: peak is its own frames plus this, whatever the store's size and the machine's memory.
MEMORY_LIMIT = "384MB"

# Column lists are explicit (declared by each kind, see `registry.view_columns`) so that a view
# gaining a column does not change the analysis tables.
_EXPLICIT_SQL = """
SELECT trial_key, model_id, language, experiment, subject, answer, content
FROM explicit_answers
"""
_PROGRESS_SQL = "SELECT experiment, model_id, language, planned, done, failed FROM progress"
_RUNS_SQL = """
SELECT run_id, started_at, {ended}, config, config_hash, version, git_rev
FROM runs ORDER BY started_at
"""
#: The runs' optional columns (a later migration's), read when the store has them and NULL
#: otherwise, so the report works on stores from before and after that migration.
_RUNS_OPTIONAL = {"ended_at": "TIMESTAMPTZ", "exit_status": "VARCHAR"}


def _runs_sql(reader: StoreReader) -> str:
    """`_RUNS_SQL` over the columns this store's `runs` has (`ended_at` and `exit_status` are
    NULL on a store whose runs never recorded an end)."""
    present = set(reader.frame("SELECT * FROM runs LIMIT 0").columns)
    ended = ", ".join(
        name if name in present else f"CAST(NULL AS {kind}) AS {name}"
        for name, kind in _RUNS_OPTIONAL.items()
    )
    return _RUNS_SQL.format(ended=ended)


# Responses with the experiment they answered, narrow on purpose (no content, no raw)...
_RESPONSE_ROWS_SQL = """
SELECT r.trial_key, r.model_id, t.experiment, r.provider_model, r.system_fingerprint,
       r.finish_reason, r.outcome
FROM responses r
JOIN (SELECT DISTINCT ON (trial_key) trial_key, experiment FROM trial_rows) t
  ON t.trial_key = r.trial_key
"""
#: ... counted per distinct row (`n`): what the models table and the paper's comparison read
#: are per-model counts and distinct names, so a store of any size gives a frame of a few rows
#: per model rather than one per response (1.4 million at ten times the paper's grid).
_RESPONSES_SQL = """
SELECT model_id, experiment, provider_model, system_fingerprint, finish_reason, outcome,
       count(*) AS n
FROM ({rows}) GROUP BY ALL ORDER BY ALL
"""


# Imported paper-design replies by whether their prompt was checked against the paper's
# (`ibias import --stimuli`, store/importer.py) and what the check found.
_PROMPT_CHECKS_SQL = """
SELECT r.model_id, t.experiment, coalesce(c.status, 'not checked') AS status, c.difference,
       count(*) AS replies
FROM responses r
JOIN (SELECT DISTINCT ON (trial_key) trial_key, experiment, coords, item FROM trials) t
  ON t.trial_key = r.trial_key
LEFT JOIN prompt_checks c ON c.trial_key = r.trial_key
WHERE t.coords->>'$.imported' IS NOT NULL AND t.item->>'$.design' = 'paper'
GROUP BY ALL ORDER BY ALL
"""


@dataclass(frozen=True)
class StoreData:
    """Everything the analysis reads from one store, as Polars frames: each registered kind's
    view by kind name, the explicit answers, progress, runs, the responses counted (`n`) per
    model, experiment, reported model, fingerprint, finish reason and outcome, and each kind's
    extra parses (readings stored beside the main parse, never in a view) by table name:
    trial_key, parser_version and the parser's declared columns, newest version per trial (but
    those an experiment's loader reads summed, `ExperimentAnalysis.summed_extras`); and what
    each experiment's own loader read (its SQL stays in its analysis)."""

    views: dict[str, pl.DataFrame]
    explicit: pl.DataFrame
    progress: pl.DataFrame
    runs: pl.DataFrame
    responses: pl.DataFrame
    n_parsed_now: int
    store: Path
    extras: dict[str, pl.DataFrame] = field(default_factory=dict)
    """Also the frames the units' loaders read (`ExperimentAnalysis.load`), by their names."""
    prompt_checks: pl.DataFrame = field(default_factory=lambda: pl.DataFrame())
    """Imported paper-design replies counted by model, kind, check status and difference."""
    simulated: dict[str, str] = field(default_factory=dict)
    """The store's simulated models and why (analysis/simulated.py), so no table, figure or
    sentence shows their numbers as a real model's."""


def _newest_sql(parser: Parser) -> str:
    """An extra parser's rows at the newest version each trial has, its declared columns only
    (the table may hold columns a later version added; `parsed_at` is left out)."""
    names = ["trial_key", "parser_version", *(c.name for c in parser.columns)]
    columns = ", ".join(sql_identifier(n) for n in names)
    return f"SELECT {columns} FROM {sql_identifier(parser.table)} {NEWEST_PARSE} ORDER BY trial_key"


def _view_sql(view: str, columns: Sequence[str]) -> str:
    """A kind's view, its declared columns in order. The names are the plugin's (an item field
    may be called `group`): every one is quoted, so none is read as SQL."""
    return f"SELECT {', '.join(sql_identifier(c) for c in columns)} FROM {sql_identifier(view)}"


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


def load_store(
    path: Path, *, by_reported_model: bool = False, pair_people: bool = True
) -> StoreData:
    """Parse pending responses, then read the views in one snapshot.

    With no run holding the store, under its lock, `parse_pending` first inserts derived rows
    for responses that have none at the current parser version (after a parser upgrade, or a
    store filled by `ibias import`), on a writable connection closed before reading. While a
    run holds the store, the run serves the reads (store/reader.py) and parses what it writes
    as it lands; only the reads run there, everything else here.

    `by_reported_model` groups every analysis table by the model the provider reported rather
    than the configured id (for a store whose model drifted, store/drift.py): each trial's
    model_id becomes "id @ reported name". Progress stays per configured id (a trial without an
    answer has no reported model).

    Each registered experiment whose kinds have rows and whose analysis has a loader
    (`ExperimentAnalysis.load`) then reads its own frames into `extras`; `pair_people` False
    tells them the population intervals are skipped (so their inputs need not be read).
    """
    if not path.exists():  # before the lock: a mistyped --store leaves no STORE.lock behind
        raise StoreAccessError(
            f"no store at {path} (run `ibias run CONFIG` first, or pass --store)"
        )
    n_parsed = _parse_if_free(path)

    def relabel(sql: str) -> str:
        return _by_reported(sql) if by_reported_model else sql

    # ibias's own queries: one whose text is wrong is an internal error, not the store's.
    with open_reader(path, internal=True, memory_limit=MEMORY_LIMIT) as reader:
        if reader.live:
            _check_parsed(reader)
        loaders = _loaders(reader)
        summed = {table for part in loaders for table in part.summed_extras}
        views = _views(reader, relabel, loaders)
        runs = reader.frame(_runs_sql(reader))
        extras = {
            p.table: reader.frame(_newest_sql(p))
            for k in kinds()
            for p in k.parsers[1:]
            if p.table not in summed
        }
        ctx = LoadContext(runs, population=pair_people, relabel=relabel)
        for load in (part.load for part in loaders if part.load is not None):
            extras.update(load(reader, ctx))
        return StoreData(
            views=views,
            explicit=reader.frame(relabel(_EXPLICIT_SQL)),
            progress=reader.frame(_PROGRESS_SQL),
            runs=runs,
            responses=reader.frame(_RESPONSES_SQL.format(rows=relabel(_RESPONSE_ROWS_SQL))),
            n_parsed_now=n_parsed,
            store=path,
            extras=extras,
            prompt_checks=reader.frame(_PROMPT_CHECKS_SQL),
            simulated=simulated_models(reader),
        )


def with_trials(views: Mapping[str, pl.DataFrame]) -> set[str]:
    """The kinds with at least one row in their view: what the store holds."""
    return {name for name, frame in views.items() if frame.height}


def _views(
    reader: StoreReader, relabel: Callable[[str], str], loaders: Sequence[ExperimentAnalysis]
) -> dict[str, pl.DataFrame]:
    """Each registered kind's view, by kind name, without the columns its experiment's loader
    reads in its own way (`ExperimentAnalysis.unread_columns`)."""
    unread: defaultdict[str, set[str]] = defaultdict(set)
    labels: defaultdict[str, set[str]] = defaultdict(set)
    for part in loaders:
        for kind, columns in part.unread_columns.items():
            unread[kind].update(columns)
        for kind, columns in part.categorical_columns.items():
            labels[kind].update(columns)
    return {
        k.name: reader.frame(
            relabel(_view_sql(k.view, [c for c in view_columns(k) if c not in unread[k.name]])),
            categorical=labels[k.name],
        )
        for k in kinds()
        if k.view is not None
    }


def _loaders(reader: StoreReader) -> list[ExperimentAnalysis]:
    """The analyses with a loader (`ExperimentAnalysis.load`) of the experiments with rows in
    the store, in registry order: what they read in their own way is not read here (the extra
    parses they read summed, the view columns they read themselves). An absent experiment's
    analysis is not imported."""
    found: list[ExperimentAnalysis] = []
    for unit in units():
        present = any(
            k.view is not None
            and reader.execute(
                f"SELECT EXISTS (SELECT 1 FROM {sql_identifier(k.view)})"
            ).fetchall()[0][0]
            for k in unit.kinds
        )
        part = analysis_of(unit) if present else None
        if part is not None and part.load is not None:
            found.append(part)
    return found


def _parse_if_free(path: Path) -> int:
    """Parse what is pending under the store's lock, on a writable connection closed before
    reading; 0 while a run holds the store (it has parsed what it wrote, and serves reads)."""
    lock = StoreLock(path)
    try:
        lock.acquire()
    except StoreBusyError:
        return 0
    try:
        con = open_store(path)
        try:
            return parse_pending(con)
        finally:
            con.close()
    finally:
        lock.release()


def _check_parsed(reader: StoreReader) -> None:
    """The running process parses each response as it lands, with its own parsers; if they
    are older than this ibias's, the views lack rows this analysis would add, so say so
    rather than report partial numbers."""
    for kind in parsed_kinds().values():
        for p in kind.parsers:
            row = reader.execute(
                "SELECT count(*) FROM responses r JOIN (SELECT DISTINCT ON (trial_key) "
                "trial_key FROM trials WHERE experiment = ?) t ON t.trial_key = r.trial_key "
                f"WHERE NOT EXISTS (SELECT 1 FROM {sql_identifier(p.table)} d "
                "WHERE d.trial_key = r.trial_key "
                "AND d.parser_version = ?)"
                + (" AND r.logprobs IS NOT NULL" if p.reads_logprobs else ""),
                [kind.name, p.version],
            ).fetchone()
            if row is not None and row[0]:
                raise StoreAccessError(
                    f"store {reader.store}: {row[0]:,} responses have no {p.table} at parser "
                    f"version {p.version} (the running ibias parses with another version); "
                    "run `ibias analyze` again when the run ends"
                )

"""Reading a store for analysis: parse what is pending, then pull the views into Polars.

Analysis reads only the store (never the network), and only through the views of DESIGN.md plus
the few raw columns the report needs (run config, provider-reported model versions). Everything
comes out as Polars frames via Arrow, so the rest of the analysis groups and aggregates without
Python loops over rows. Reads go through the store's read entry point (store/reader.py), so
analysis works while a run holds the store; the session is closed before anything is written,
so a long figure or report step never holds the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ibias.analysis.planted import SimulatedModel, simulated_models
from ibias.prompts.registry import Parser, kinds, view_columns
from ibias.prompts.stimuli.composition import ORGAN_SERVICES
from ibias.store.db import StoreError, open_store
from ibias.store.derived import parse_pending, parsed_kinds
from ibias.store.lock import StoreBusyError, StoreLock
from ibias.store.reader import StoreReader, open_reader

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


_PATIENTS_SQL = """
SELECT roster_id, person_id, language, age, sex_assigned_at_birth, gender_identity FROM patients
"""
# One row per response with the experiment it answered; narrow on purpose (no content, no raw).
_RESPONSES_SQL = """
SELECT r.trial_key, r.model_id, t.experiment, r.provider_model, r.system_fingerprint,
       r.finish_reason, r.outcome
FROM responses r
JOIN (SELECT DISTINCT ON (trial_key) trial_key, experiment FROM trials) t
  ON t.trial_key = r.trial_key
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


# The two candidates' groups and sexes of each paper-design allocation trial of a service about
# an organ of one sex assigned at birth (`analysis/organ_pairs.py`), first-listed first.
_ORGAN_PAIRS_SQL = """
SELECT trial_key,
  item->>'$.candidates[0].identity' AS identity0,
  item->>'$.candidates[0].sex_assigned_at_birth' AS sex0,
  item->>'$.candidates[1].identity' AS identity1,
  item->>'$.candidates[1].sex_assigned_at_birth' AS sex1
FROM trials
WHERE experiment = 'allocation' AND item->>'$.design' = 'paper'
  AND item->>'$.service' IN ({services})
"""


# Each allocation pair's two people (person ids) in the original arm, any design: what the
# population intervals resample (analysis/allocation_population.py). Swapped-arm trials show
# the same people with their identities exchanged, so they are left out here.
PAIR_PEOPLE = "allocation_pair_people"
_PAIR_PEOPLE_SQL = """
SELECT DISTINCT item->>'$.pair_id' AS pair_id,
  CASE WHEN item->>'$.candidates[0].identity' = 'cis' THEN item->>'$.candidates[0].person_id'
       ELSE item->>'$.candidates[1].person_id' END AS cis_person,
  CASE WHEN item->>'$.candidates[0].identity' = 'cis' THEN item->>'$.candidates[1].person_id'
       ELSE item->>'$.candidates[0].person_id' END AS trans_person
FROM trials
WHERE experiment = 'allocation' AND coalesce(coords->>'$.identity_swap', 'false') <> 'true'
  AND item->>'$.pair_id' IS NOT NULL
ORDER BY pair_id, cis_person, trans_person
"""


# The people of each allocation pair as shown (controlled design), per arm of the identity-swap
# control (the swapped arm shows the other person as cisgender), read from one model's trials:
# every model sees the same pairs. Only read for stores with simulated models (planted values).
_PEOPLE_SQL = """
SELECT DISTINCT language, item->>'$.pair_id' AS pair_id,
  coalesce(CAST(item->>'$.identity_swap' AS BOOLEAN), false) AS identity_swap,
  item->>'$.candidates[0].identity' AS identity0, item->>'$.candidates[0].name' AS name0,
  item->>'$.candidates[0].age' AS age0, item->>'$.candidates[0].gender_identity' AS gi0,
  item->>'$.candidates[1].identity' AS identity1, item->>'$.candidates[1].name' AS name1,
  item->>'$.candidates[1].age' AS age1, item->>'$.candidates[1].gender_identity' AS gi1
FROM trials
WHERE experiment = 'allocation' AND model_id = ?
  AND coalesce(coords->>'$.design', 'controlled') = 'controlled'
"""


def _people(reader: StoreReader, models: tuple[SimulatedModel, ...]) -> pl.DataFrame:
    """language, pair_id, arm (`identity_swap`) and the cis / trans candidate's name, age and
    gender identity as shown in that arm: one row per pair and arm."""
    schema = {c: pl.Boolean() if c == "identity_swap" else pl.String() for c in PEOPLE_COLUMNS}
    if not models:
        return pl.DataFrame(schema=schema)
    ids = [m.model_id for m in models]
    present = reader.execute(
        "SELECT min(model_id) FROM trials WHERE experiment = 'allocation' AND model_id IN "
        f"({', '.join('?' for _ in ids)})",
        ids,
    ).fetchall()
    if not present or present[0][0] is None:
        return pl.DataFrame(schema=schema)
    frame = reader.frame(_PEOPLE_SQL, [present[0][0]])
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
        .select("language", "pair_id", "identity_swap", **pick)
        .unique(["language", "pair_id", "identity_swap"], keep="first")
        .select(list(PEOPLE_COLUMNS))
    )


PEOPLE_COLUMNS: tuple[str, ...] = (
    "language", "pair_id", "identity_swap",
    "cis_name", "cis_age", "cis_gi", "trans_name", "trans_age", "trans_gi",
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
    #: The allocation roster's people (no names: the report shows only the make-up).
    patients: pl.DataFrame = field(default_factory=pl.DataFrame)
    simulated: tuple[SimulatedModel, ...] = ()
    """The latest run config's simulated models (`analysis.planted`)."""
    people: pl.DataFrame = field(default_factory=lambda: pl.DataFrame())
    """The people of each allocation pair, read only when `simulated` is not empty."""
    organ_pairs: pl.DataFrame = field(default_factory=lambda: pl.DataFrame())
    """Candidates' groups and sexes of paper-design trials of organ services (trial_key,
    identity0, sex0, identity1, sex1)."""
    prompt_checks: pl.DataFrame = field(default_factory=lambda: pl.DataFrame())
    """Imported paper-design replies counted by model, kind, check status and difference."""


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

    `pair_people` reads each allocation pair's two person ids into
    `extras["allocation_pair_people"]` (for the population intervals,
    analysis/allocation_population.py); without it that key is absent and they are skipped.
    """
    n_parsed = 0
    if not path.exists():  # before the lock: a mistyped --store leaves no STORE.lock behind
        raise StoreError(f"no store at {path} (run `ibias run CONFIG` first, or pass --store)")
    lock = StoreLock(path)
    try:
        lock.acquire()
    except StoreBusyError:
        pass  # a run holds the store: it has parsed what it wrote; it serves the reads below
    else:
        try:  # no run: parse what is pending, then read like any reader
            con = open_store(path)
            try:
                n_parsed = parse_pending(con)
            finally:
                con.close()
        finally:
            lock.release()

    def relabel(sql: str) -> str:
        return _by_reported(sql) if by_reported_model else sql

    with open_reader(path) as reader:
        if reader.live:
            _check_parsed(reader)
        views = {
            k.name: reader.frame(relabel(f"SELECT {', '.join(view_columns(k))} FROM {k.view}"))
            for k in kinds()
            if k.view is not None
        }
        runs = reader.frame(_runs_sql(reader))
        simulated = simulated_models(runs["config"].to_list())
        return StoreData(
            views=views,
            explicit=reader.frame(relabel(_EXPLICIT_SQL)),
            progress=reader.frame(_PROGRESS_SQL),
            runs=runs,
            responses=reader.frame(relabel(_RESPONSES_SQL)),
            n_parsed_now=n_parsed,
            store=path,
            extras={
                **{p.table: reader.frame(_newest_sql(p)) for k in kinds() for p in k.parsers[1:]},
                **({PAIR_PEOPLE: reader.frame(_PAIR_PEOPLE_SQL)} if pair_people else {}),
            },
            patients=reader.frame(_PATIENTS_SQL),
            simulated=simulated,
            people=_people(reader, simulated),
            prompt_checks=reader.frame(_PROMPT_CHECKS_SQL),
            organ_pairs=reader.frame(
                _ORGAN_PAIRS_SQL.format(
                    services=", ".join(f"'{s}'" for s in sorted(ORGAN_SERVICES))
                )
            ),
        )


def _check_parsed(reader: StoreReader) -> None:
    """The running process parses each response as it lands, with its own parsers; if they
    are older than this ibias's, the views lack rows this analysis would add, so say so
    rather than report partial numbers."""
    for kind in parsed_kinds().values():
        for p in kind.parsers:
            row = reader.execute(
                "SELECT count(*) FROM responses r JOIN (SELECT DISTINCT ON (trial_key) "
                "trial_key FROM trials WHERE experiment = ?) t ON t.trial_key = r.trial_key "
                f"WHERE NOT EXISTS (SELECT 1 FROM {p.table} d WHERE d.trial_key = r.trial_key "
                "AND d.parser_version = ?)"
                + (" AND r.logprobs IS NOT NULL" if p.reads_logprobs else ""),
                [kind.name, p.version],
            ).fetchone()
            if row is not None and row[0]:
                raise StoreError(
                    f"store {reader.store}: {row[0]:,} responses have no {p.table} at parser "
                    f"version {p.version} (the running ibias parses with another version); "
                    "run `ibias analyze` again when the run ends"
                )

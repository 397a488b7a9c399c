"""Each spec's texts stored once (migration 008): `trials` is a view over `trial_rows` and
`trial_specs` that answers exactly what the table it replaced held.

What must hold: a store made with the previous schema (version 7, one wide `trials` table)
migrates with every trial row identical, in the same order, and every view answering the same;
a planned store has one spec row per spec and the trials the old layout had; importing a file
again adds no spec; a migrated store resumes with exactly the trials that had no response.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from unittest.mock import patch

import duckdb
import orjson
import pyarrow as pa
import pytest

from ibias import import_replies
from ibias.prompts.base import canonical_json, stable_hash
from ibias.prompts.registry import TrialKind
from ibias.runner.config import Config, load_config
from ibias.runner.execution.plan import (
    build_experiments,
    merge_specs,
    plan_hash,
    plan_inputs,
    trials_for,
)
from ibias.runner.execution.run import RunOptions, execute, prepare_plan
from ibias.store import db, experiments
from ibias.store.experiments import apply_experiment_schemas, sql_identifier, sql_literal
from ibias.store.plans import find_plan, remaining
from ibias.store.trial import Trial
from ibias.store.writer import TRIAL_COLUMNS
from tests.helpers import model_block, write_config
from tests.prompts.allocation.test_paper_golden import FIRST

#: The views over `trials` a user or the analysis reads (migration 001's `progress`, the
#: experiments' generated views, `replies`).
VIEWS = (
    "progress",
    "word_association_trials",
    "allocation_decisions",
    "explicit_answers",
    "replies",
)

#: What `trials` was (migration 001), column by column, and what the view must still be.
OLD_TYPES = [
    ("trial_key", "VARCHAR"),
    ("run_id", "VARCHAR"),
    ("experiment", "VARCHAR"),
    ("model_id", "VARCHAR"),
    ("language", "VARCHAR"),
    ("coords", "JSON"),
    ("item", "JSON"),
    ("messages", "JSON"),
    ("params", "JSON"),
    ("replicate", "INTEGER"),
]

#: The trial rows in plan order, read back through their specs: what `trials` held, in order.
ROWS_IN_ORDER = (
    "SELECT r.trial_key, r.run_id, r.experiment, r.model_id, r.language, s.coords, s.item, "
    "s.messages, r.params, r.replicate FROM trial_rows r "
    "JOIN trial_specs s ON s.spec_key = r.spec_key ORDER BY r.rowid"
)

EXPERIMENTS = """
[experiments.word_association]
languages = ["en", "es"]
trials_per_category = 2
explicit_per_category = 1

[experiments.allocation]
languages = ["en", "es"]
services = ["gynecology", "hiv_testing"]
pairs_per_service = 2
symptoms = ["none", "high"]
explicit_per_service = 1
"""


def insert_old_layout(con: duckdb.DuckDBPyConnection, run_id: str, trials: Iterable[Trial]) -> None:
    """Trials as ibias stored them before migration 008 (the old `insert_trials`): one wide
    row per trial in the `trials` table, texts as canonical JSON, keys already there
    skipped."""
    cols: dict[str, list[Any]] = {c: [] for c in TRIAL_COLUMNS}
    for t in trials:
        cols["trial_key"].append(t.trial_key)
        cols["run_id"].append(run_id)
        cols["experiment"].append(t.experiment)
        cols["model_id"].append(t.model_id)
        cols["language"].append(t.language)
        cols["coords"].append(canonical_json(t.coords).decode())
        cols["item"].append(canonical_json(t.item).decode())
        cols["messages"].append(canonical_json(t.messages).decode())
        cols["params"].append(canonical_json(t.params).decode())
        cols["replicate"].append(t.replicate)
    batch = pa.table(
        {
            c: pa.array(v, type=pa.int32() if c == "replicate" else pa.string())
            for c, v in cols.items()
        }
    )
    names = ", ".join(TRIAL_COLUMNS)
    con.register("_old_batch", batch)
    try:
        con.execute(
            f"INSERT INTO trials ({names}) SELECT {names} FROM _old_batch b "
            "WHERE b.trial_key NOT IN (SELECT trial_key FROM trials)"
        ).fetchall()
    finally:
        con.unregister("_old_batch")


def _schema_7(path: Path) -> duckdb.DuckDBPyConnection:
    """A store at schema version 7 (the last with a `trials` table), with the experiments'
    tables and views as ibias made them over that table."""
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TIMESTAMPTZ "
        "NOT NULL DEFAULT now())"
    )
    for version, sql in db.migrations():
        if version <= 7:
            con.execute(sql)
            con.execute("INSERT INTO schema_version (version) VALUES (?)", [version])
    assert db.schema_version(con) == 7
    with patch.object(experiments, "view_ddl", _view_ddl_over_trials):
        apply_experiment_schemas(con)
    return con


def _view_ddl_over_trials(kind: TrialKind) -> str:
    """A kind's view as ibias made it before the views read `trial_rows` and `trial_specs`:
    over the `trials` table, each item field read per trial."""
    assert kind.parser is not None and kind.view is not None
    fields = [
        f"t.item ->> {sql_literal(n)} AS {sql_identifier(n)}"
        if sql == "VARCHAR"
        else f"CAST(t.item ->> {sql_literal(n)} AS {sql}) AS {sql_identifier(n)}"
        for n, sql in kind.view_field_types()
    ]
    if kind.designs:
        fields.insert(0, f"coalesce(t.item ->> 'design', {sql_literal(kind.designs[0])}) AS design")
    parsed = [f"p.{sql_identifier(c.name)}" for c in kind.parser.columns if c.in_view]
    select = ", ".join(["t.trial_key", "t.model_id", "t.language", *fields, *parsed])
    table = sql_identifier(kind.parser.table)
    return (
        f"CREATE OR REPLACE VIEW {sql_identifier(kind.view)} AS WITH p AS (SELECT * FROM {table} "
        "QUALIFY row_number() OVER (PARTITION BY trial_key ORDER BY parser_version DESC) = 1) "
        f"SELECT {select}, p.parser_version FROM trials t "
        "JOIN responses r ON r.trial_key = t.trial_key JOIN p ON p.trial_key = t.trial_key "
        f"WHERE t.experiment = {sql_literal(kind.name)}"
    )


def _config(folder: Path, *models: str) -> Config:
    blocks = [model_block(m, provider="simulator", sampling_seed=i) for i, m in enumerate(models)]
    return load_config(write_config(folder, blocks, n_prompts=4, replicates=2, extra=EXPERIMENTS))


def _run(config: Config, store: Path) -> None:
    result = asyncio.run(execute(config, RunOptions(store=store, quiet=True)))
    assert result.exit_code == 0, result.lines


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple[Any, ...]]:
    return con.execute(sql).fetchall()


def _base_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [
        r[0]
        for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
            "ORDER BY 1"
        ).fetchall()
    ]


@pytest.fixture(scope="module")
def answered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Config]:
    """A store of today's layout, planned and answered end to end by the in-process
    simulator (two models, every experiment, Spanish texts)."""
    folder = tmp_path_factory.mktemp("answered")
    config = _config(folder, "a", "b")
    store = folder / "store.duckdb"
    _run(config, store)
    return store, config


def _old_store_from(source: Path, target: Path, *, skip_every: int) -> set[str]:
    """The same data in a version-7 store: its trials as the old layout held them (plus, as
    old stores may hold, a trial stored twice and one imported with non-canonical JSON), every
    other table copied, and the responses (with their parses and attempts) of every
    `skip_every`-th trial left out. Returns the keys left without a response."""
    con = _schema_7(target)
    try:
        con.execute(f"ATTACH '{source}' AS src (READ_ONLY)")
        in_source = ROWS_IN_ORDER.replace("FROM trial_rows", "FROM src.trial_rows").replace(
            "JOIN trial_specs", "JOIN src.trial_specs"
        )
        con.execute(f"INSERT INTO trials {in_source}")
        keys = [r[0] for r in _rows(con, "SELECT trial_key FROM trials ORDER BY rowid")]
        # A duplicate row (keys were kept unique by anti-joins only) and an imported trial
        # whose texts are not canonical: both must come back byte for byte.
        con.execute("INSERT INTO trials SELECT * FROM trials WHERE rowid = 4")
        con.execute(
            "INSERT INTO trials VALUES ('f' || repeat('0', 63), 'imp', 'prompts', 'ext', 'es', "
            """'{"id":  "x"}', '{ }', '[{"role": "user", "content": "¿Qué tal?\\u00e9"}]', """
            "'{}', 0)"
        )
        unanswered = set(keys[::skip_every])
        assert keys[4] not in unanswered
        con.execute("CREATE TEMP TABLE skip (trial_key VARCHAR)")
        con.executemany("INSERT INTO skip VALUES (?)", [[k] for k in sorted(unanswered)])
        keyed = {
            r[0]
            for r in con.execute(
                "SELECT table_name FROM duckdb_columns() WHERE column_name = 'trial_key' "
                "AND database_name = current_database()"
            ).fetchall()
        }
        for table in _base_tables(con):
            if table in ("schema_version", "experiment_schemas", "trials"):
                continue
            answer = table in keyed and table != "plan_trials"  # responses, attempts, parses
            where = " WHERE trial_key NOT IN (SELECT trial_key FROM skip)" if answer else ""
            # the old layout's columns only (later migrations add some, e.g. 009's outcome)
            cols = ", ".join(
                f'"{r[0]}"'
                for r in con.execute(
                    "SELECT column_name FROM duckdb_columns() WHERE table_name = ? "
                    "AND database_name = current_database() ORDER BY column_index",
                    [table],
                ).fetchall()
            )
            con.execute(f"INSERT INTO {table} SELECT {cols} FROM src.{table}{where}")
        con.execute("DETACH src")
    finally:
        con.close()
    return unanswered


def _snapshot(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[Any, ...]]]:
    out = {view: _rows(con, f"SELECT * FROM {view} ORDER BY ALL") for view in VIEWS}
    out["trials (sorted)"] = _rows(con, "SELECT * FROM trials ORDER BY ALL")
    out["describe trials"] = _rows(con, "SELECT column_name, column_type FROM (DESCRIBE trials)")
    return out


def test_a_version_7_store_migrates_with_every_trial_and_view_unchanged(tmp_path, answered):
    source, config = answered
    old = tmp_path / "old.duckdb"
    unanswered = _old_store_from(source, old, skip_every=3)

    con = duckdb.connect(str(old), read_only=True)
    try:
        before_rows = _rows(con, "SELECT * FROM trials ORDER BY rowid")
        before = _snapshot(con)
    finally:
        con.close()
    assert before["describe trials"] == OLD_TYPES
    assert all(before[view] for view in VIEWS)  # every view has rows to compare

    con = db.open_store(old)  # migrates to 8
    try:
        assert db.schema_version(con) == db.SCHEMA_VERSION >= 8
        assert "trials" not in _base_tables(con)
        assert _rows(con, ROWS_IN_ORDER) == before_rows  # every row, in rowid order
        assert _snapshot(con) == before
        # The specs were deduplicated: one row per distinct text, and each names the same.
        n_specs = _rows(con, "SELECT count(*), count(DISTINCT spec_key) FROM trial_specs")[0]
        distinct = len({(r[2], r[4], r[5], r[6], r[7], r[9]) for r in before_rows})
        assert n_specs == (distinct, distinct)
        assert distinct < len(before_rows)  # two models share each planned spec
    finally:
        con.close()

    # The migration's spec keys (SQL) are the planner's (Python): a spec migrated from an old
    # store is the spec a later plan of the same texts names, never a second copy.
    src = duckdb.connect(str(source), read_only=True)
    mig = duckdb.connect(str(old), read_only=True)
    try:
        planned = _rows(src, "SELECT trial_key, spec_key FROM trial_rows ORDER BY rowid")
        migrated = dict(_rows(mig, "SELECT trial_key, spec_key FROM trial_rows"))
        assert all(migrated[k] == s for k, s in planned)
    finally:
        src.close()
        mig.close()

    # Resume finds exactly the trials without a response, and asks only for those.
    con = db.open_store(old)
    try:
        plan = find_plan(con, plan_hash(plan_inputs(config)))
        assert plan is not None and plan.complete
        left = {
            p.trial_key
            for m in config.models
            for batch in remaining(con.cursor(), plan, m.id)
            for p in batch
        }
    finally:
        con.close()
    assert left == unanswered
    con = duckdb.connect(str(old), read_only=True)
    try:
        runs_before = _rows(con, "SELECT count(*) FROM runs")[0][0]
    finally:
        con.close()
    _run(config, old)
    con = duckdb.connect(str(old), read_only=True)
    try:
        (new_run,) = _rows(con, "SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1")[0]
        asked = {
            r[0] for r in _rows(con, f"SELECT trial_key FROM responses WHERE run_id = '{new_run}'")
        }
        assert asked == unanswered
        assert _rows(con, "SELECT count(*) FROM runs") == [(runs_before + 1,)]
        # Nothing planned again: the specs and rows are those migrated.
        assert _rows(con, "SELECT count(*) FROM trial_specs")[0][0] == n_specs[0]
    finally:
        con.close()


def test_a_plan_stores_each_spec_once_and_the_trials_the_old_layout_had(
    tmp_path: Path, paper_pack_dir: Path
) -> None:
    """The paper design (the authors' stimuli) with three models: one spec row per spec, one
    trial row per trial, and `trials` holding what the old layout stored for the same config,
    row for row in plan order, with the golden keys."""
    extra = f"""
[experiments.allocation]
design = "paper"
stimuli = "{paper_pack_dir}"
languages = ["en", "es"]
services = ["hiv", "gynecology", "prep"]
pairs_per_service = 3

[experiments.word_association]
design = "paper"
stimuli = "{paper_pack_dir}"
languages = ["en", "es"]
"""
    blocks = [
        model_block("gpt", provider="openai", base_url="https://api.example.com/v1", model="g-1"),
        model_block("sim", provider="simulator", model="sim-1"),
        model_block("third", provider="simulator", model="sim-2", temperature=0.5),
    ]
    config = load_config(write_config(tmp_path, blocks, n_prompts=1, seed=123, extra=extra))
    experiments = build_experiments(config)
    specs = sum(1 for _ in merge_specs(experiments))
    expected = list(trials_for(experiments, config.models))
    assert len(expected) == 3 * specs

    old = _schema_7(tmp_path / "old.duckdb")
    try:
        insert_old_layout(old, "r1", expected)
        old_rows = _rows(old, "SELECT * FROM trials ORDER BY rowid")
    finally:
        old.close()

    con = db.open_store(tmp_path / "new.duckdb", create=True)
    try:
        asyncio.run(prepare_plan(con, config, "r1", experiments, plan_inputs(config)))
        assert _rows(con, "SELECT count(*), count(DISTINCT spec_key) FROM trial_specs") == [
            (specs, specs)
        ]
        assert _rows(con, "SELECT count(*) FROM trial_rows") == [(3 * specs,)]
        assert _rows(con, ROWS_IN_ORDER) == old_rows
        assert _rows(con, "SELECT * FROM trials ORDER BY ALL") == sorted(old_rows)
        first: dict[tuple[str, int, str], str] = {}
        for key, experiment, model, language, coords in _rows(
            con,
            "SELECT r.trial_key, r.experiment, r.model_id, r.language, s.coords "
            "FROM trial_rows r JOIN trial_specs s USING (spec_key) ORDER BY r.rowid",
        ):
            if experiment == "allocation":
                first.setdefault((language, orjson.loads(coords)["order"], model), key)
        assert {k: first[k] for k in FIRST} == FIRST
        # The spec key is the documented digest of the spec's parts.
        key, spec = _rows(
            con,
            "SELECT s.spec_key, json_object('coords', s.coords, 'experiment', r.experiment, "
            "'item', s.item, 'language', r.language, 'messages', s.messages, "
            "'replicate', r.replicate) FROM trial_rows r JOIN trial_specs s USING (spec_key) "
            "LIMIT 1",
        )[0]
        assert key == stable_hash(orjson.loads(spec))[:32]
    finally:
        con.close()


def test_the_controlled_grid_has_one_spec_row_per_spec(tmp_path: Path) -> None:
    """configs/controlled.toml: 142,240 trials of 20,320 specs sent to seven models."""
    config = load_config(Path(__file__).parents[2] / "configs" / "controlled.toml")
    experiments = build_experiments(config)
    con = db.open_store(tmp_path / "paper.duckdb", create=True)
    try:
        asyncio.run(prepare_plan(con, config, "r1", experiments, plan_inputs(config)))
        assert _rows(con, "SELECT count(*), count(DISTINCT spec_key) FROM trial_specs") == [
            (20_320, 20_320)
        ]
        assert _rows(con, "SELECT count(*), count(DISTINCT trial_key) FROM trials") == [
            (142_240, 142_240)
        ]
        keys = [r[0] for r in _rows(con, "SELECT trial_key FROM trial_rows ORDER BY rowid")]
    finally:
        con.close()
    assert keys == [t.trial_key for t in trials_for(build_experiments(config), config.models)]


def test_importing_the_same_file_twice_adds_no_spec(tmp_path: Path) -> None:
    """An imported trial's coords name the trial (store/importer.py), so each line is a spec
    of its own; importing the file again adds neither a spec nor a row."""
    from tests.store.test_importer import WA_ITEM, WA_REPLY

    line = {"experiment": "word_association", "language": "en", "item": WA_ITEM}
    path = tmp_path / "replies.jsonl"
    path.write_text(
        "\n".join(
            orjson.dumps({**line, "model_id": model, "content": WA_REPLY}).decode()
            for model in ("m1", "m2", "m3")
        )
        + "\n"
    )
    store = tmp_path / "s.duckdb"
    counts = "SELECT (SELECT count(*) FROM trial_specs), count(*) FROM trial_rows"

    def read() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        con = duckdb.connect(str(store), read_only=True)
        try:
            return _rows(con, counts), _rows(con, "SELECT * FROM trials ORDER BY ALL")
        finally:
            con.close()

    import_replies(path, store)
    first, view = read()
    assert first == [(3, 3)]
    import_replies(path, store)
    assert read() == (first, view)
    other = tmp_path / "other.jsonl"  # the file plus a fourth model: one new spec and row
    other.write_text(
        path.read_text()
        + orjson.dumps({**line, "model_id": "m4", "content": WA_REPLY}).decode()
        + "\n"
    )
    import_replies(other, store)
    again, grown = read()
    assert again == [(4, 4)]
    assert [r for r in grown if r[3] != "m4"] == view


def test_a_new_model_on_a_planned_store_adds_trial_rows_but_no_spec(tmp_path: Path) -> None:
    """Re-planning a store that is not fresh (a model added) anti-joins on spec_key: the new
    model's trials name the specs already stored."""
    first = _config(tmp_path, "a")
    store = tmp_path / "store.duckdb"
    con = db.open_store(store, create=True)
    try:
        asyncio.run(prepare_plan(con, first, "r1", build_experiments(first), plan_inputs(first)))
        specs, rows = _rows(
            con, "SELECT (SELECT count(*) FROM trial_specs), count(*) FROM trial_rows"
        )[0]
        assert specs == rows
        second = _config(tmp_path, "a", "b")
        asyncio.run(prepare_plan(con, second, "r2", build_experiments(second), plan_inputs(second)))
        assert _rows(
            con, "SELECT (SELECT count(*) FROM trial_specs), count(*) FROM trial_rows"
        ) == [(specs, 2 * rows)]
        expected = list(trials_for(build_experiments(second), second.models))
        got = {r[0]: r[1:] for r in _rows(con, "SELECT trial_key, model_id, messages FROM trials")}
        assert {
            t.trial_key: (t.model_id, canonical_json(t.messages).decode()) for t in expected
        } == got
    finally:
        con.close()

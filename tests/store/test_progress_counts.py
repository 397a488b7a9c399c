"""The progress counts the store keeps (migration 016, store/progress_counts.py) equal a recount
from the rows after every way rows get in: a run, a resume that answers trials an earlier run
gave up on, an import, a store migrated from schema 15, and rows deleted by hand.

Runs use an in-process provider that refuses chosen prompts (with one attempt allowed, the
trial is given up and counts as failed), so each test takes a second or two.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ibias import FakeFailure, FakeProvider
from ibias.runner.config import Config, ModelConfig, load_config
from ibias.runner.execution.plan import build_experiments, plan_hash, plan_inputs
from ibias.runner.execution.run import RunOptions, RunResult, execute
from ibias.runner.providers.base import Provider, ProviderContext, Reply
from ibias.runner.providers.retries import Backoff
from ibias.store import db, drift, progress_counts
from ibias.store.importer import import_file
from ibias.store.plans import find_plan, plan_progress
from ibias.store.writer import AttemptRow, ResponseRow, insert_attempts, insert_responses
from tests.helpers import model_block, write_config

ONCE = Backoff(base_s=0.001, cap_s=0.01, max_attempts=1)

#: The `progress` view as migrations 001 and 008 defined it: a join of every row.
OLD_PROGRESS_SQL = """
SELECT t.experiment, t.model_id, t.language, count(*) AS planned, count(r.trial_key) AS done,
    count(*) FILTER (WHERE r.trial_key IS NULL AND f.trial_key IS NOT NULL) AS failed
FROM (SELECT DISTINCT trial_key, experiment, model_id, language FROM trial_rows) t
LEFT JOIN (SELECT DISTINCT trial_key FROM responses) r ON r.trial_key = t.trial_key
LEFT JOIN (
    SELECT DISTINCT trial_key FROM attempts WHERE outcome IN ('fatal', 'gave_up')
) f ON f.trial_key = t.trial_key
GROUP BY ALL ORDER BY ALL
"""


def refusing(refuse: frozenset[str]) -> FakeProvider:
    """Answers every prompt but those in `refuse` (a retryable error: with one attempt
    allowed, the trial is given up)."""
    fake = FakeProvider(completion_tokens=3, model="refusing")

    def answer(text: str) -> Reply | FakeFailure:
        return FakeFailure(503) if text in refuse else fake.reply("ok", prompt_tokens=len(text))

    fake.answer = answer
    return fake


async def _run(config: Config, store: Path, refuse: frozenset[str] = frozenset()) -> RunResult:
    def factory(model: ModelConfig, key: str | None, context: ProviderContext) -> Provider:
        return refusing(refuse)

    return await execute(
        config, RunOptions(store=store, quiet=True, backoff=ONCE), provider_factory=factory
    )


def _config(folder: Path, n: int = 24) -> Config:
    blocks = [
        model_block(m, provider="simulator", model="sim", price_input=1.5, price_output=2.5)
        for m in ("a", "b")
    ]
    return load_config(write_config(folder, blocks, n_prompts=n))


def _prompt(i: int) -> str:
    return f"Say something about item p{i}."


def _check(store: Path) -> list[tuple[Any, ...]]:
    """Assert the kept counts agree with a recount and the view with the old join, and what
    was reported per model (store/drift.py) reads as the rows say; the `progress` view's rows."""
    con = db.open_store(store, read_only=True)
    try:
        assert progress_counts.verify(con) == []
        assert progress_counts.current(con)
        assert drift.model_drift(con, kept=True) == drift.model_drift(con, kept=False)
        rows = con.execute("SELECT * FROM progress").fetchall()
        assert rows == con.execute(OLD_PROGRESS_SQL).fetchall()
        return rows
    finally:
        con.close()


def _totals(rows: list[tuple[Any, ...]]) -> tuple[int, int, int]:
    return (sum(r[3] for r in rows), sum(r[4] for r in rows), sum(r[5] for r in rows))


async def test_a_resume_moves_given_up_trials_to_answered(tmp_path: Path) -> None:
    config = _config(tmp_path)
    store = tmp_path / "store.duckdb"
    refused = frozenset(_prompt(i) for i in range(24) if i % 5 == 2)  # 5 prompts, 2 models
    first = await _run(config, store, refused)
    assert first.exit_code != 0  # trials failed for good
    assert _totals(_check(store)) == (48, 38, 10)
    second = await _run(config, store)
    assert second.exit_code == 0, second.lines
    assert _totals(_check(store)) == (48, 48, 0)
    con = db.open_store(store)
    try:
        plan = find_plan(con, plan_hash(plan_inputs(config, build_experiments(config))))
        assert plan is not None
        totals, usage = plan_progress(con, plan, ["a", "b"])
        recount = con.execute(
            "SELECT model_id, sum(prompt_tokens), sum(completion_tokens), sum(cost_usd) "
            "FROM responses GROUP BY 1"
        ).fetchall()
        attempts = dict(con.execute("SELECT outcome, count(*) FROM attempts GROUP BY 1").fetchall())
    finally:
        con.close()
    assert totals == {"a": (24, 24), "b": (24, 24)}
    for model_id, prompt, completion, cost in recount:
        assert usage[model_id].prompt_tokens == prompt
        assert usage[model_id].completion_tokens == completion
        assert usage[model_id].cost_usd == pytest.approx(cost, rel=1e-12)
    assert attempts["gave_up"] == 10  # the given-up attempts stay; the trials are answered


def test_a_reply_in_the_flush_that_gives_its_trial_up_counts_once(tmp_path: Path) -> None:
    """The writer stores attempts before responses: a trial given up and answered within one
    transaction, or given up twice, is counted answered once and failed never."""
    store = tmp_path / "store.duckdb"
    con = db.open_store(store, create=True)
    try:
        from ibias.store.trial import Trial
        from ibias.store.writer import insert_trials

        trials = [
            Trial(f"k{i}", "prompts", "m", "en", {"i": i}, {"i": i}, [], {}, 0) for i in range(3)
        ]
        con.execute("BEGIN TRANSACTION")
        insert_trials(con, "r1", trials)
        con.execute("COMMIT")

        def attempt(key: str, outcome: str) -> AttemptRow:
            return AttemptRow("r2", key, "m", 1, 0.0, None, None, "x", None, outcome)

        def reply(key: str) -> ResponseRow:
            return ResponseRow(
                key, "r2", "m", None, "ok", None, "stop", 4, 2, 0.25, None, 0.0, None
            )

        con.execute("BEGIN TRANSACTION")
        insert_attempts(con, [attempt("k0", "gave_up"), attempt("k1", "fatal")])
        insert_attempts(con, [attempt("k1", "gave_up")])  # given up again: still one
        con.execute("COMMIT")
        assert con.execute("SELECT planned, done, failed FROM progress").fetchall() == [(3, 0, 2)]
        con.execute("BEGIN TRANSACTION")
        insert_attempts(con, [attempt("k2", "fatal")])
        insert_responses(con, [reply("k2"), reply("k0"), reply("k0")])
        con.execute("COMMIT")
        assert con.execute("SELECT planned, done, failed FROM progress").fetchall() == [(3, 2, 1)]
        # A rolled-back flush leaves no count behind.
        con.execute("BEGIN TRANSACTION")
        insert_responses(con, [reply("k1")])
        con.execute("ROLLBACK")
        assert progress_counts.verify(con) == []
        assert con.execute(
            "SELECT answered, failed, prompt_tokens, completion_tokens, cost_usd "
            "FROM progress_counts"
        ).fetchall() == [(2, 1, 8, 4, pytest.approx(0.5))]
    finally:
        con.close()


def _import_lines(path: Path, items: range, model_id: str = "ext") -> Path:
    rows = [
        {
            "experiment": "prompts",
            "model_id": model_id,
            "language": "en",
            "item": {"id": f"x{i}", "text": f"item {i}"},
            "messages": [{"role": "user", "content": f"item {i}?"}],
            "content": f"reply {i}",
        }
        for i in items
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_imports_are_counted_with_the_rows_they_store(tmp_path: Path) -> None:
    store = tmp_path / "store.duckdb"
    con = db.open_store(store, create=True)
    try:
        first = import_file(con, _import_lines(tmp_path / "a.jsonl", range(6)))
        again = import_file(con, _import_lines(tmp_path / "b.jsonl", range(3, 9)))
        other = import_file(con, _import_lines(tmp_path / "c.jsonl", range(2), "ext2"))
    finally:
        con.close()
    assert (first.imported, again.imported, other.imported) == (6, 3, 2)
    assert _check(store) == [("prompts", "ext", "en", 9, 9, 0), ("prompts", "ext2", "en", 2, 2, 0)]


async def test_a_schema_15_store_is_backfilled_on_first_open(tmp_path: Path) -> None:
    config = _config(tmp_path, n=12)
    store = tmp_path / "store.duckdb"
    await _run(config, store, frozenset({_prompt(3), _prompt(7)}))
    con = duckdb.connect(str(store))
    try:  # the store as schema 15 left it: no counts, the view a join of the rows
        before = con.execute(OLD_PROGRESS_SQL).fetchall()
        for table in ("progress_counts", "attempt_counts", "progress_rows"):
            con.execute(f"DROP TABLE {table}")
        con.execute(f"CREATE OR REPLACE VIEW progress AS {OLD_PROGRESS_SQL}")
        con.execute("DELETE FROM schema_version WHERE version > 15")
    finally:
        con.close()
    assert _totals(before) == (24, 20, 4)
    db.open_store(store).close()  # migrates to 16
    assert _check(store) == before
    assert (await _run(config, store)).exit_code == 0  # and the counts go on from there
    assert _totals(_check(store)) == (24, 24, 0)


async def test_rows_deleted_by_hand_are_recounted_and_a_run_rebuilds_the_counts(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path, n=10)
    store = tmp_path / "store.duckdb"
    assert (await _run(config, store)).exit_code == 0
    con = duckdb.connect(str(store))
    try:
        con.execute("DELETE FROM responses WHERE hash(trial_key) % 2 = 0")
        left = con.execute("SELECT count(*) FROM responses").fetchall()[0][0]
        assert not progress_counts.current(con)
        # The readers count from the rows meanwhile.
        recounted = progress_counts.cells(con, kept=False)
        assert recounted == con.execute(OLD_PROGRESS_SQL).fetchall()
        assert sum(r[4] for r in recounted) == left < 20
        assert progress_counts.verify(con) != []
    finally:
        con.close()
    assert (await _run(config, store)).exit_code == 0  # the resume's start rebuilds them
    assert _totals(_check(store)) == (20, 20, 0)


def test_verify_names_each_difference_and_rebuild_repairs_them(tmp_path: Path) -> None:
    store = tmp_path / "store.duckdb"
    con = db.open_store(store, create=True)
    try:
        import_file(con, _import_lines(tmp_path / "a.jsonl", range(4)))
        run_id = con.execute("SELECT run_id FROM progress_counts").fetchall()[0][0]
        con.execute("UPDATE progress_counts SET answered = answered - 1")
        con.execute("UPDATE attempt_counts SET attempts = 5")  # none: imports make no attempts
        con.execute("INSERT INTO attempt_counts VALUES ('r', 'ext', 'retry', 2)")
        assert progress_counts.verify(con) == [
            f"run {run_id}, model ext, experiment prompts, language en: answered kept 3, counted 4",
            "run r, model ext: retry attempts kept 2, counted 0",
        ]
        progress_counts.rebuild(con)
        assert progress_counts.verify(con) == []
        assert progress_counts.trials_counted(con) == 4
    finally:
        con.close()

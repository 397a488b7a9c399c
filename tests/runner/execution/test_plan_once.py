"""Plan once: a run whose plan inputs are unchanged skips planning and sends exactly what is
left; any change to an input of the plan plans again.

Runs use an in-process provider (`ibias.FakeProvider`, no HTTP) whose calls are counted, and a
spy on the planner (`plan_batches`), so every assertion is on observable state: planner calls,
rows in `trials`, `plans` and `runs`, and the requests the provider received.
"""

from __future__ import annotations

import gc
import re
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest

import ibias.runner.execution.planning as run_module
from ibias import FakeFailure, FakeProvider
from ibias.prompts.base import TrialSpec, stable_hash
from ibias.runner.config import Config, ModelConfig, load_config
from ibias.runner.execution.plan import (
    build_experiments,
    plan_batches,
    plan_hash,
    plan_inputs,
    trials_for,
)
from ibias.runner.execution.run import TRIAL_BATCH, RunOptions, RunResult, execute, prepare_plan
from ibias.runner.providers.base import Provider, ProviderContext
from ibias.runner.providers.retries import Backoff
from ibias.runner.scheduling.scheduler import estimate_tokens
from ibias.runner.scheduling.stop import Stop
from ibias.store.db import open_store
from ibias.store.plans import find_plan, plan_progress, remaining
from ibias.store.writer import ResponseRow, insert_responses
from tests.helpers import model_block, write_config, write_prompts

ONCE = Backoff(base_s=0.001, cap_s=0.01, max_attempts=1)


def counting(refuse: frozenset[str], log: list[str]) -> FakeProvider:
    """Answers every prompt, except those in `refuse` (a retryable error: with one attempt
    allowed, the trial fails for good and has no response). Records the prompts it got."""

    def answer(text: str) -> str | FakeFailure:
        log.append(text)
        return FakeFailure(503) if text in refuse else "ok"

    return FakeProvider(answer, prompt_tokens=5, completion_tokens=1, model="counting")


class Run:
    """Runs `execute` with a counting provider and a spy on the planner."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.planner_calls = 0
        self.providers_built = 0
        self.requests: list[str] = []
        real = run_module.plan_batches

        def spy(*args: Any, **kwargs: Any) -> Any:
            self.planner_calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(run_module, "plan_batches", spy)

    async def __call__(
        self,
        config: Config,
        store: Path,
        refuse: frozenset[str] = frozenset(),
        stop: Stop | None = None,
    ) -> RunResult:
        def factory(model: ModelConfig, key: str | None, context: ProviderContext) -> Provider:
            self.providers_built += 1
            return counting(refuse, self.requests)

        return await execute(
            config,
            RunOptions(store=store, quiet=True, backoff=ONCE),
            provider_factory=factory,
            stop=stop,
        )


def _rows(store: Path, sql: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _count(store: Path, sql: str) -> int:
    return int(_rows(store, sql)[0][0])


def _config(folder: Path, n: int = 20, **keys: object) -> Config:
    block = model_block("m", provider="simulator", model="sim", **keys)
    return load_config(write_config(folder, [block], n_prompts=n))


def _prompt(i: int) -> str:
    return f"Say something about item p{i}."


async def test_a_finished_store_resumes_without_planning(tmp_path, monkeypatch):
    run = Run(monkeypatch)
    store = tmp_path / "store.duckdb"
    collector = gc.get_threshold()
    first = await run(_config(tmp_path), store)
    assert gc.get_threshold() == collector  # the run's collector setting is undone
    assert first.exit_code == 0 and run.planner_calls == 1 and len(run.requests) == 20
    again = await run(_config(tmp_path), store)
    assert again.exit_code == 0
    assert run.planner_calls == 1  # not called again
    assert len(run.requests) == 20  # nothing sent
    assert run.providers_built == 1  # nothing left: no provider was even started
    assert again.lines[0] == "0 responses stored this run; 20 of 20 trials done"
    assert _count(store, "SELECT count(*) FROM trials") == 20
    # one plan, planned by the first run; both runs worked from it
    assert _rows(store, "SELECT state, trials FROM plans ORDER BY recorded_at") == [
        ("started", None),
        ("complete", 20),
    ]
    hashes = _rows(store, "SELECT DISTINCT plan_hash FROM runs")
    assert hashes == _rows(store, "SELECT DISTINCT plan_hash FROM plans")
    assert _count(store, "SELECT count(*) FROM runs") == 2
    # the run reports where its time went, and whether it planned
    assert (first.timings["planned"], again.timings["planned"]) == (1.0, 0.0)
    assert {"open", "inputs", "plan", "totals", "schedule", "total"} <= set(again.timings)


async def test_a_ninety_percent_done_store_sends_exactly_the_missing_trials(tmp_path, monkeypatch):
    run = Run(monkeypatch)
    store = tmp_path / "store.duckdb"
    config = _config(tmp_path, n=100, max_concurrency=1)
    missing = [_prompt(i) for i in range(100) if i % 10 == 3]
    first = await run(config, store, refuse=frozenset(missing))
    assert first.exit_code == 1  # ten trials failed for good
    assert _count(store, "SELECT count(*) FROM responses") == 90
    run.requests.clear()
    second = await run(_config(tmp_path, n=100, max_concurrency=1), store)
    assert second.exit_code == 0
    assert run.planner_calls == 1  # the second run did not plan
    assert run.requests == missing  # exactly the missing ones, in plan order, each once
    assert second.lines[0] == "10 responses stored this run; 100 of 100 trials done"
    assert _count(store, "SELECT count(DISTINCT trial_key) FROM responses") == 100
    assert _count(store, "SELECT count(*) FROM responses") == 100


async def test_a_changed_data_file_plans_again_and_sends_only_what_changed(tmp_path, monkeypatch):
    run = Run(monkeypatch)
    store = tmp_path / "store.duckdb"
    await run(_config(tmp_path, n=10), store)
    # Same number of lines, one prompt's text changed: same size would not be enough to tell.
    path = tmp_path / "prompts.jsonl"
    lines = path.read_text().splitlines()
    lines[4] = lines[4].replace("item p4.", "item p4!")
    path.write_text("\n".join(lines) + "\n")
    run.requests.clear()
    config = load_config(tmp_path / "config.toml")
    result = await run(config, store)
    assert result.exit_code == 0
    assert run.planner_calls == 2
    assert run.requests == ["Say something about item p4!"]
    assert _count(store, "SELECT count(*) FROM trials") == 11
    # The new plan lists the nine trials the first plan had stored (they keep its run id).
    assert _count(store, "SELECT count(*) FROM plan_trials") == 9
    assert result.lines[0] == "1 responses stored this run; 10 of 10 trials done"
    # Back to the first file: that plan is complete, nothing is planned or sent.
    write_prompts(path, 10)
    run.requests.clear()
    back = await run(load_config(config.path), store)
    assert run.planner_calls == 2 and run.requests == []
    assert back.lines[0] == "0 responses stored this run; 10 of 10 trials done"


def _hash(folder: Path, **keys: object) -> str:
    return plan_hash(plan_inputs(_config(folder, **keys)))


def test_operational_settings_keep_the_plan_and_everything_else_changes_it(tmp_path):
    base = _hash(tmp_path)
    assert _hash(tmp_path) == base
    # How requests are sent: not an input of the plan.
    for keys in (
        {"rpm": 100},
        {"tpm": 5000},
        {"max_concurrency": 3},
        {"timeout_s": 5},
        {"outage_limit_s": 30},
        {"price_input": 1.0},
    ):
        assert _hash(tmp_path, **keys) == base, keys
    # What is sent: a new plan.
    for keys in ({"temperature": 0.5}, {"max_tokens": 100}, {"sampling_seed": 1}):
        assert _hash(tmp_path, **keys) != base, keys
    assert _hash(tmp_path, n=21) != base
    block = model_block("m", provider="simulator", model="sim")
    for changed in (
        write_config(tmp_path, [block], n_prompts=20, seed=8),
        write_config(tmp_path, [block], n_prompts=20, replicates=2),
        write_config(tmp_path, [block, model_block("m2", provider="simulator")], n_prompts=20),
        write_config(tmp_path, [model_block("m", provider="simulator", model="x")], n_prompts=20),
    ):
        assert plan_hash(plan_inputs(load_config(changed))) != base


def test_a_filter_on_models_or_experiments_changes_the_plan(tmp_path):
    from dataclasses import replace

    blocks = [model_block("a", provider="simulator"), model_block("b", provider="simulator")]
    config = load_config(write_config(tmp_path, blocks, n_prompts=5))
    whole = plan_hash(plan_inputs(config))
    only_a = replace(config, models=config.models[:1])
    assert plan_hash(plan_inputs(only_a)) != whole
    assert plan_hash(plan_inputs(config, extra={"filter": "x"})) != whole


class Listed:
    """An experiment that names the files it reads through `plan_inputs()`."""

    name = "listed"

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def count(self) -> int:
        return 1

    def specs(self) -> Any:
        yield TrialSpec(experiment="prompts", language="", coords={"id": "x"}, item={}, messages=())

    def plan_inputs(self) -> list[Path]:
        return [self.folder]


def test_files_an_experiment_lists_are_inputs(tmp_path):
    config = _config(tmp_path)
    pack = tmp_path / "pack"
    (pack / "en").mkdir(parents=True)
    (pack / "en" / "texts.txt").write_text("one")
    experiments = [*build_experiments(config), Listed(pack)]
    before = plan_inputs(config, experiments)
    assert "file:pack" in before
    (pack / "en" / "texts.txt").write_text("two")
    assert plan_hash(plan_inputs(config, experiments)) != plan_hash(before)
    (pack / "en" / "more.txt").write_text("")
    assert plan_inputs(config, experiments)["file:pack"] != before["file:pack"]


def test_inputs_name_the_config_the_planner_the_code_and_the_data(tmp_path):
    inputs = plan_inputs(_config(tmp_path))
    assert {
        "planner",
        "config",
        "code:ibias.prompts",
        "kinds:prompts",
        "file:prompts.jsonl",
    } <= set(inputs)
    assert "file:store.duckdb" not in inputs  # [run].store is where results go, not an input


async def test_interrupted_planning_is_finished_by_the_next_run(tmp_path, monkeypatch):
    run = Run(monkeypatch)
    store = tmp_path / "store.duckdb"
    n = TRIAL_BATCH + 10
    stop = Stop()
    stop.request("interrupted by test")
    first = await run(_config(tmp_path, n=n), store, stop=stop)
    assert first.exit_code == 130 and run.requests == []
    assert _count(store, "SELECT count(*) FROM trials") == TRIAL_BATCH
    assert _rows(store, "SELECT state FROM plans") == [("started",)]
    second = await run(_config(tmp_path, n=n), store)
    assert second.exit_code == 0 and len(run.requests) == n
    assert _count(store, "SELECT count(*) FROM trials") == n
    # the trials of the interrupted run belong to the same plan: nothing listed as reused
    assert _count(store, "SELECT count(*) FROM plan_trials") == 0
    third = await run(_config(tmp_path, n=n), store)
    assert run.planner_calls == 2 and len(run.requests) == n
    assert third.lines[0] == f"0 responses stored this run; {n:,} of {n:,} trials done"


def test_plan_batches_are_the_trials_of_trials_for(tmp_path):
    extra = (
        "\n[experiments.word_association]\nlanguages = ['en', 'es']\ntrials_per_category = 2\n"
        "explicit_per_category = 1\n\n[experiments.allocation]\nlanguages = ['en']\n"
        "pairs_per_service = 1\nexplicit_per_service = 1\n"
    )
    blocks = [
        model_block("a", provider="simulator", sampling_seed=3),
        model_block("b", provider="simulator", temperature=0.5),
    ]
    config = load_config(write_config(tmp_path, blocks, n_prompts=3, replicates=2, extra=extra))

    expected = [
        (
            t.trial_key,
            t.experiment,
            t.model_id,
            t.language,
            orjson.loads(orjson.dumps(t.coords)),
            orjson.loads(orjson.dumps(t.item)),
            orjson.loads(orjson.dumps(t.messages)),
            t.params,
            t.replicate,
        )
        for t in trials_for(build_experiments(config), config.models)
    ]
    got = []
    sizes = []
    for batch in plan_batches(build_experiments(config), config.models, 7):
        sizes.append(len(batch))
        cols = batch.columns()
        assert len(cols["spec_key"]) * 2 == len(batch)  # each spec once, for both models
        for i in range(len(batch)):
            j = cols["spec"][i]  # the trial's spec: per-spec columns are not repeated
            got.append(
                (
                    cols["trial_key"][i],
                    cols["experiment"][j],
                    cols["model_id"][i],
                    cols["language"][j],
                    orjson.loads(cols["coords"][j]),
                    orjson.loads(cols["item"][j]),
                    orjson.loads(cols["messages"][j]),
                    orjson.loads(cols["params"][i]),
                    cols["replicate"][j],
                )
            )
            spec = {
                "coords": got[-1][4],
                "experiment": got[-1][1],
                "item": got[-1][5],
                "language": got[-1][3],
                "messages": got[-1][6],
                "replicate": got[-1][8],
            }
            assert cols["spec_key"][j] == stable_hash(spec)[:32]  # store/specs.py
    assert got == expected
    assert all(size % 2 == 0 for size in sizes)  # whole specs: every model in each batch
    assert len(set(re.findall(r"[0-9a-f]{64}", str([g[0] for g in got])))) == len(got)


async def test_what_is_left_is_read_back_exactly_in_plan_order(tmp_path):
    """The stored plan, read back per model, is the planner's stream: same keys in the same
    order, same messages, items and params, and the character count DuckDB makes for the
    token estimate is the one Python makes (accents and Spanish included)."""
    extra = (
        "\n[experiments.word_association]\nlanguages = ['en', 'es']\ntrials_per_category = 1\n"
        "explicit_per_category = 1\n\n[experiments.allocation]\nlanguages = ['es']\n"
        "pairs_per_service = 1\nexplicit_per_service = 1\n"
    )
    blocks = [model_block("a", provider="simulator"), model_block("b", provider="simulator")]
    config = load_config(write_config(tmp_path, blocks, n_prompts=3, extra=extra))
    experiments = build_experiments(config)
    con = open_store(tmp_path / "s.duckdb", create=True)
    try:
        plan, planned = await prepare_plan(con, config, "r1", experiments, plan_inputs(config))
        assert planned
        # every third trial answered: what is left skips them, across windows of 7 rowids
        answered = {t.trial_key for t in trials_for(experiments, config.models)}
        answered = set(sorted(answered)[::3])
        insert_responses(
            con,
            [
                ResponseRow(k, "r1", "x", None, "ok", None, "stop", 1, 1, 0.0, None, 0.0, None)
                for k in answered
            ],
        )
        for model in config.models:
            expected = [
                t
                for t in trials_for(experiments, config.models)
                if t.model_id == model.id and t.trial_key not in answered
            ]
            got = [
                p
                for batch in remaining(con.cursor(), plan, model.id, batch=5, window=7)
                for p in batch
            ]
            assert [p.trial_key for p in got] == [t.trial_key for t in expected]
            for p, t in zip(got, expected, strict=True):
                assert (p.experiment, p.language, p.params) == (t.experiment, t.language, t.params)
                assert list(p.messages) == list(t.messages)
                assert p.item == orjson.loads(orjson.dumps(t.item))  # tuples are JSON arrays
                python_chars = sum(len(m["content"]) + 8 for m in t.messages)
                assert p.prompt_chars == python_chars
                assert estimate_tokens(p, 7) == estimate_tokens(t, 7)
    finally:
        con.close()


async def test_plan_report_reads_a_stored_plan_and_agrees_with_generating_it(tmp_path, monkeypatch):
    from ibias.runner.execution import planning_report

    run = Run(monkeypatch)
    store = tmp_path / "store.duckdb"
    extra = "\n[experiments.word_association]\nlanguages = ['en', 'es']\ntrials_per_category = 1\n"
    blocks = [
        model_block("a", provider="simulator", price_input=1.5, price_output=4.0),
        model_block("b", provider="simulator", max_tokens=100, price_input=0.5),
    ]
    path = write_config(tmp_path, blocks, n_prompts=6, extra=extra)
    refuse = frozenset({_prompt(1), _prompt(4)})
    await run(load_config(path), store, refuse=refuse)
    config = load_config(path)
    generated = [0]
    real = planning_report._generated

    def counting(*args: Any) -> Any:
        generated[0] += 1
        return real(*args)

    monkeypatch.setattr(planning_report, "_generated", counting)
    from_store = planning_report.plan_report(config, store)
    assert generated[0] == 0  # read from the stored plan
    con = duckdb.connect(str(store), read_only=True)
    try:
        done = {r[0] for r in con.execute("SELECT trial_key FROM responses").fetchall()}
        means = planning_report.mean_tokens(con)
    finally:
        con.close()
    by_generating = real(config, build_experiments(config), done, means)
    cost = from_store.pop("estimated_cost_usd")
    assert cost == pytest.approx(by_generating.pop("estimated_cost_usd"), abs=1e-4) and cost > 0
    assert from_store == by_generating
    assert from_store["remaining"] == 4  # two prompts refused, for each of the two models


async def test_a_store_made_before_plans_were_recorded_resumes_without_re_requesting(
    tmp_path, monkeypatch
):
    """A store at schema version 3 (trials planned and partly answered the old way, no `plans`
    table) is migrated, planned once (its trials listed as the plan's), and only the trials
    without a response are sent."""
    import duckdb as ddb

    from ibias.store import db
    from tests.store.test_trial_specs import insert_old_layout

    config = _config(tmp_path, n=12)
    store = tmp_path / "store.duckdb"
    con = ddb.connect(str(store))
    con.execute(
        "CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TIMESTAMPTZ "
        "NOT NULL DEFAULT now())"
    )
    for version, sql in db.migrations():
        if version <= 3:
            con.execute(sql)
            con.execute("INSERT INTO schema_version (version) VALUES (?)", [version])
    trials = list(trials_for(build_experiments(config), config.models))
    insert_old_layout(con, "old", trials)  # the `trials` table of that version
    from datetime import UTC, datetime

    answered = trials[::2]
    # the responses of that version (no `outcome`, migration 009): written as it wrote them
    con.executemany(
        "INSERT INTO responses (trial_key, run_id, model_id, content, finish_reason, "
        "prompt_tokens, completion_tokens, cost_usd, received_at) "
        "VALUES (?, 'old', ?, 'ok', 'stop', 1, 1, 0.0, ?)",
        [[t.trial_key, t.model_id, datetime.now(UTC)] for t in answered],
    )
    con.close()
    run = Run(monkeypatch)
    result = await run(config, store)
    assert result.exit_code == 0
    assert sorted(run.requests) == sorted(t.messages[-1]["content"] for t in trials[1::2])
    assert result.lines[0] == "6 responses stored this run; 12 of 12 trials done"
    assert _count(store, "SELECT count(*) FROM trials") == 12
    assert _count(store, "SELECT count(*) FROM plan_trials") == 12  # all planned by the old run
    assert _count(store, "SELECT max(version) FROM schema_version") == db.SCHEMA_VERSION


def test_a_folder_the_config_names_is_an_input(tmp_path):
    """A folder named in an experiment's table (here `templates_dir`; a stimuli pack is named
    the same way) is hashed file by file: editing one of its files plans again."""
    import shutil

    from ibias.prompts.word_association import data as wa_data

    pack = tmp_path / "my_templates"
    shutil.copytree(wa_data.DATA_DIR / "templates" / "en", pack / "en")
    extra = (
        "\n[experiments.word_association]\nlanguages = ['en']\ntrials_per_category = 1\n"
        'templates_dir = "my_templates"\n'
    )
    path = write_config(
        tmp_path, [model_block("m", provider="simulator")], n_prompts=2, extra=extra
    )
    before = plan_inputs(load_config(path))
    assert "file:my_templates" in before
    template = pack / "en" / "implicit_1.txt"
    template.write_text(template.read_text() + "\n")
    after = plan_inputs(load_config(path))
    assert after["file:my_templates"] != before["file:my_templates"]
    assert plan_hash(after) != plan_hash(before)


async def test_plan_progress_counts_the_plan_against_its_rows(tmp_path, monkeypatch):
    """What a resumed run starts from (trials, done, tokens, cost per model), computed in one
    query, against the same figures counted here from the stored rows: a response to a trial
    outside the plan counts nowhere."""
    run = Run(monkeypatch)
    store = tmp_path / "store.duckdb"
    config = _config(tmp_path, n=30, max_concurrency=1)
    missing = frozenset(_prompt(i) for i in range(30) if i % 4 == 1)
    await run(config, store, refuse=missing)
    con = open_store(store)
    try:
        stray = ResponseRow(
            "not-a-planned-key", "r", "m", "counting", "ok", None, "stop", 7, 3, 1.5, None,
            0.0, {"x": 1},
        )  # fmt: skip
        con.execute("BEGIN TRANSACTION")
        insert_responses(con, [stray])
        con.execute("COMMIT")
        plan = find_plan(con, plan_hash(plan_inputs(config, build_experiments(config))))
        assert plan is not None and plan.complete
        totals, usage = plan_progress(con, plan, ["m", "absent"])
        keys = {k for (k,) in con.execute("SELECT trial_key FROM trials").fetchall()}
        answered = con.execute(
            "SELECT trial_key, model_id, prompt_tokens, completion_tokens, cost_usd FROM responses"
        ).fetchall()
    finally:
        con.close()
    mine = [r for r in answered if r[0] in keys]
    assert len(keys) == 30 and len(mine) == 30 - len(missing)
    assert totals == {"m": (30, len(mine)), "absent": (0, 0)}
    assert set(usage) == {"m"}
    assert usage["m"].prompt_tokens == sum(r[2] for r in mine)
    assert usage["m"].completion_tokens == sum(r[3] for r in mine)
    assert usage["m"].cost_usd == pytest.approx(sum(r[4] or 0.0 for r in mine))

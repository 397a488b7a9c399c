"""The Python API matches the command line (issue 24): `run(models=, experiments=)` runs part
of a config as `ibias run --model --experiment` does; `plan()` is `plan --json` with its lists
as Polars frames; `sql()` answers on a closed store and, through the live server, on one a
running `ibias run` holds, while `connect()` then names `ibias.sql`. During that run `show
--random` picks answered trials and `--unanswered` the others, and the run's end is recorded."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import polars as pl
import pytest

import ibias
from ibias.runner.cli import main
from tests.helpers import IBIAS, model_block, wait_for_status, write_config


def _sim_config(tmp_path: Path, *ids: str, n: int = 5) -> Path:
    blocks = [model_block(m, provider="simulator", max_tokens=16) for m in ids]
    return write_config(tmp_path, blocks, n_prompts=n)


def test_run_with_models_runs_only_those(tmp_path: Path) -> None:
    config = _sim_config(tmp_path, "a", "b", "c")
    store = tmp_path / "s.duckdb"
    result = ibias.run(config, store=store, models=["a", "c"], experiments=["prompts"])
    assert result.exit_code == 0, result.lines
    answered = ibias.sql(store, "SELECT model_id, count(*) AS n FROM responses GROUP BY 1")
    assert sorted(answered.rows()) == [("a", 5), ("c", 5)]
    with pytest.raises(ibias.ConfigError, match="no model 'z' in this config"):
        ibias.run(config, store=store, models=["z"])


def test_plan_is_plan_json_with_frames(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _sim_config(tmp_path, "a", "b")
    store = tmp_path / "s.duckdb"
    before = ibias.plan(config, store=store)
    assert before.typical_cost_usd is None  # no replies yet: only the bound
    assert ibias.run(config, store=store, models=["a"]).exit_code == 0
    report = ibias.plan(config, store=store)
    assert main(["plan", str(config), "--store", str(store), "--json"]) == 0
    assert report.to_dict() == json.loads(capsys.readouterr().out)
    assert main(["plan", str(config), "--store", str(store), "--json", "--batch"]) == 0
    assert ibias.plan(config, store=store, batch=True).to_dict() == json.loads(
        capsys.readouterr().out
    )
    assert report.by.columns == ["experiment", "design", "model_id", "language", "trials", "done"]
    assert report.by.select("model_id", "trials", "done").rows() == [("a", 5, 5), ("b", 5, 0)]
    assert isinstance(report.models, pl.DataFrame)
    assert report.models["model_id"].to_list() == ["a", "b"]
    assert report.models.columns[:5] == [
        "model_id", "remaining", "estimated_tokens", "estimated_cost_usd", "typical_cost_usd"
    ]  # fmt: skip
    assert (report.total, report.done, report.remaining) == (10, 5, 5)
    # "b" has no reply of its own to take mean tokens from: only its bound is known.
    assert report.models.filter(pl.col("model_id") == "b")["typical_cost_usd"].to_list() == [None]
    part = ibias.plan(config, store=store, models=["b"])
    assert part.by["model_id"].unique().to_list() == ["b"]


def test_sql_is_sandboxed_on_a_closed_store(tmp_path: Path) -> None:
    config = _sim_config(tmp_path, "a", n=2)
    store = tmp_path / "s.duckdb"
    assert ibias.run(config, store=store).exit_code == 0
    assert ibias.sql(store, "SELECT count(*) AS n FROM trials").rows() == [(2,)]
    with pytest.raises(ibias.StoreError):
        ibias.sql(store, f"COPY trials TO '{tmp_path / 'x.csv'}'")
    assert not (tmp_path / "x.csv").exists()


def _answered(store: Path, least: int, proc: subprocess.Popen[str]) -> int:
    """Wait (bounded, polling like wait_for_status) until the running store has `least`
    replies committed; the count read through ibias.sql, served by the run."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended early"
        n = int(ibias.sql(store, "SELECT count(*) AS n FROM responses")["n"][0])
        if n >= least:
            return n
        time.sleep(0.05)
    raise AssertionError(f"fewer than {least} replies after 60 s")


def test_during_a_run_sql_answers_connect_names_it_and_show_picks_answered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    total = 2000  # 40 requests/s: about 50 s to finish, interrupted long before
    cfg = write_config(
        tmp_path,
        [model_block("m", provider="simulator", model="x", rpm=2400, max_concurrency=4)],
        n_prompts=total,
    )
    store = tmp_path / "store.duckdb"
    run = subprocess.Popen(
        [*IBIAS, "run", str(cfg), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_status(store, lambda data: data.get("state") == "running", proc=run)
        n = _answered(store, 20, run)
        assert 20 <= n < total
        with pytest.raises(ibias.StoreError, match=r"ibias\.sql\(store, query\)"):
            ibias.connect(store)
        for _ in range(4):
            assert main(["show", "--store", str(store), "--random", "1", "--json"]) == 0
            (shown,) = json.loads(capsys.readouterr().out)
            assert shown["reply"] is not None and shown["reply"]["content"]
        assert main(["show", "--store", str(store), "--random", "2", "--unanswered", "--json"]) == 0
        assert all(t["reply"] is None for t in json.loads(capsys.readouterr().out))
        assert run.poll() is None, "the run ended before every call answered"
    finally:
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=120)
    assert run.returncode == 130, stderr
    con = duckdb.connect(str(store), read_only=True)
    try:
        ((started, ended, status),) = con.execute(
            "SELECT started_at, ended_at, exit_status FROM runs"
        ).fetchall()
    finally:
        con.close()
    assert status == 130 and ended is not None and ended > started


def test_plan_prices_what_is_left_at_the_stored_mean_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = [
        model_block(m, provider="simulator", max_tokens=64, price_input=1000.0, price_output=2000.0)
        for m in ("a", "b")
    ]
    store = tmp_path / "s.duckdb"
    assert ibias.run(write_config(tmp_path, blocks, n_prompts=6), store=store).exit_code == 0
    # A second replicate of each prompt: 6 trials left per model, of a kind both answered.
    config = write_config(tmp_path, blocks, n_prompts=6, replicates=2)
    report = ibias.plan(config, store=store)
    means = ibias.sql(
        store,
        "SELECT t.model_id, avg(r.prompt_tokens) AS p, avg(r.completion_tokens) AS c "
        "FROM responses r JOIN trials t USING (trial_key) GROUP BY 1 ORDER BY 1",
    )
    for (model_id, p, c), row in zip(means.rows(), report.to_dict()["models"], strict=True):
        assert row["model_id"] == model_id and row["remaining"] == 6
        expected = (round(6 * p) * 1000.0 + round(6 * c) * 2000.0) / 1e6  # USD per 10^6 tokens
        assert row["typical_cost_usd"] == pytest.approx(expected, abs=1e-4)
        assert 0 < row["typical_cost_usd"] <= row["estimated_cost_usd"]
    assert main(["plan", str(config), "--store", str(store)]) == 0
    assert "typical cost about $" in capsys.readouterr().out
    fresh = ibias.plan(config, store=tmp_path / "none.duckdb")
    assert fresh.typical_cost_usd is None
    assert main(["plan", str(config), "--store", str(tmp_path / "none.duckdb")]) == 0
    assert "only the bound is known" in capsys.readouterr().out


def test_import_replies_checks_prompts_against_a_pack_like_import_stimuli(
    tmp_path: Path, paper_pack_dir: Path
) -> None:
    from tests.store.test_import_prompt_checks import line, paper_trials

    trials = paper_trials(tmp_path / "plan", paper_pack_dir)
    source = tmp_path / "replies.jsonl"
    source.write_text("\n".join(json.dumps(line(t, id=f"a{i}")) for i, t in enumerate(trials)))
    result = ibias.import_replies(source, tmp_path / "s.duckdb", stimuli=paper_pack_dir)
    assert result.imported == len(trials) and result.checked == {"identical": len(trials)}

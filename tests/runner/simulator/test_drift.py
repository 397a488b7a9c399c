"""Drift: a simulated model that reports a newer version after N answers, found in the store by
`ibias status` (text and JSON) and the report, and split by `analyze --by-reported-model`;
system fingerprints are listed, never called drift."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pytest

import ibias
from ibias.analysis.load import load_store
from ibias.runner.cli import main
from ibias.runner.simulator.drift import DRIFTED_VERSION_SUFFIX, MODEL_VERSION_SUFFIX
from ibias.store.drift import model_drift
from tests.helpers import model_block, write_config

N = 30
AFTER = 12


@pytest.fixture(scope="module")
def drifted_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("drift")
    blocks = [
        model_block("moving", provider="simulator", max_concurrency=1, sim={"drift_after": AFTER}),
        model_block("steady", provider="simulator", max_concurrency=1),
    ]
    config = write_config(folder, blocks, n_prompts=N)
    result = ibias.run(config)
    assert result.exit_code == 0, result.lines
    return folder / "store.duckdb"


def test_the_store_records_the_change_and_only_the_moving_model_drifted(drifted_store):
    con = duckdb.connect(str(drifted_store), read_only=True)
    try:
        drift = {d.model_id: d for d in model_drift(con)}
    finally:
        con.close()
    moving, steady = drift["moving"], drift["steady"]
    assert moving.drifted and not steady.drifted
    assert [(r.name, r.responses) for r in moving.reported] == [
        ("moving" + MODEL_VERSION_SUFFIX, AFTER),
        ("moving" + DRIFTED_VERSION_SUFFIX, N - AFTER),
    ]
    assert moving.reported[0].last <= moving.reported[1].first
    # one fingerprint each: listed, and not what makes a model drift
    assert steady.n_fingerprints == 1 and len(steady.fingerprints) == 1
    assert moving.line().startswith(
        f"model moving drifted: reported as moving{MODEL_VERSION_SUFFIX} ({AFTER} responses, "
    )


def test_status_says_so(drifted_store, capsys):
    assert main(["status", "--store", str(drifted_store), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["drift"]) == 1 and report["drift"][0].startswith("model moving drifted")
    assert {m["model_id"] for m in report["reported_models"]} == {"moving", "steady"}
    assert main(["status", "--store", str(drifted_store)]) == 0
    text = capsys.readouterr().out
    assert "drift: model moving drifted" in " ".join(text.split())
    assert "steady drifted" not in text


def test_the_report_says_so_and_the_tables_split_by_reported_model(drifted_store, tmp_path):
    result = ibias.analyze(drifted_store, tmp_path / "out", bootstrap=10)
    page = Path(result.report).read_text(encoding="utf-8")
    assert "<strong>Drift:</strong>" in page and "for moving:" in page
    split = load_store(drifted_store, by_reported_model=True)
    counts = split.responses.group_by("model_id").agg(pl.col("n").sum()).sort("model_id").rows()
    assert counts == [
        (f"moving @ moving{MODEL_VERSION_SUFFIX}", AFTER),
        (f"moving @ moving{DRIFTED_VERSION_SUFFIX}", N - AFTER),
        (f"steady @ steady{MODEL_VERSION_SUFFIX}", N),
    ]
    assert load_store(drifted_store).responses["model_id"].unique().sort().to_list() == [
        "moving",
        "steady",
    ]


def test_status_during_a_run_says_so_from_the_status_file(tmp_path):
    """While a run holds the store, `ibias status` reads the status file: the reported models
    the run has seen per model come from there."""
    from datetime import UTC, datetime

    from ibias.runner.status import ModelStats, snapshot, status_path, write_status
    from ibias.runner.status_report import status_report
    from ibias.store.lock import StoreLock

    store = tmp_path / "live.duckdb"
    moving = ModelStats("moving", reported={"m-2026-01", "m-2026-02"})
    steady = ModelStats("steady", reported={"s-2026-01"})
    write_status(status_path(store), snapshot("r", "running", datetime.now(UTC), [moving, steady]))
    lock = StoreLock(store)
    lock.acquire()
    try:
        report = status_report(store)
    finally:
        lock.release()
    assert report["running"]
    assert report["drift"] == ["model moving drifted this run: reported as m-2026-01, m-2026-02"]

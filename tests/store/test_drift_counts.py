"""What providers reported per model, kept in the store (migration 017, store/drift.py): equal to
a recount from the responses after each way responses get in (a flush, a run whose model
drifts, an import), read by `ibias status` as the rows would say it, bypassed when rows were
deleted by hand, backfilled for a store from before it, and checked by `verify`.

The other ways in (a kill -9 inside a flush, a batch ingest, a resume) are covered by the
progress-count tests (tests/store/test_progress_counts.py, tests/runner/test_status_verify.py):
`progress_counts.verify` checks these counts too.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

import ibias
from ibias.runner.cli import main
from ibias.runner.simulator.drift import DRIFTED_VERSION_SUFFIX, MODEL_VERSION_SUFFIX
from ibias.store import db, drift, progress_counts
from ibias.store.importer import import_file
from ibias.store.trial import Trial
from ibias.store.writer import ResponseRow, insert_responses, insert_trials
from tests.helpers import model_block, write_config

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _agree(con: duckdb.DuckDBPyConnection) -> list[drift.ModelDrift]:
    """Assert the kept counts equal a recount and read as the rows do; what status shows."""
    assert drift.verify(con) == []
    kept = drift.model_drift(con, kept=True)
    assert kept == drift.model_drift(con, kept=False)
    return kept


def _reply(key: str, name: str | None, fingerprint: str | None, minutes: int) -> ResponseRow:
    return ResponseRow(
        key, "r1", "m", name, "ok", None, "stop", 1, 1, 0.0, fingerprint,
        T0 + timedelta(minutes=minutes), None,
    )  # fmt: skip


def test_flushes_merge_into_the_groups_with_missing_names_and_fingerprints(tmp_path: Path) -> None:
    """A reply may report a name without a fingerprint or the reverse (or neither: not kept);
    later flushes add to the same groups, and the first and last times span them all."""
    con = db.open_store(tmp_path / "store.duckdb", create=True)
    try:
        trials = [Trial(f"k{i}", "prompts", "m", "en", {"i": i}, {}, (), {}, 0) for i in range(8)]
        insert_trials(con, "r1", trials)
        con.execute("BEGIN TRANSACTION")
        insert_responses(
            con,
            [
                _reply("k0", "m-1", None, 5),
                _reply("k1", "m-1", "fp_a", 1),
                _reply("k2", None, "fp_a", 2),
                _reply("k3", None, None, 3),
            ],
        )
        con.execute("COMMIT")
        con.execute("BEGIN TRANSACTION")
        insert_responses(
            con,
            [
                _reply("k4", "m-1", None, 0),
                _reply("k5", "m-2", "fp_b", 9),
                _reply("k0", "x", "y", 9),
            ],
        )  # k0 again: not stored, not counted
        con.execute("COMMIT")
        con.execute("BEGIN TRANSACTION")
        insert_responses(con, [_reply("k6", "m-3", None, 10)])
        con.execute("ROLLBACK")  # nothing kept of a rolled-back flush
        (moved,) = _agree(con)
        assert con.execute("SELECT count(*) FROM reported_counts").fetchall() == [(4,)]
    finally:
        con.close()
    assert moved.drifted
    assert [(r.name, r.responses, r.first, r.last) for r in moved.reported] == [
        ("m-1", 3, T0, T0 + timedelta(minutes=5)),
        ("m-2", 1, T0 + timedelta(minutes=9), T0 + timedelta(minutes=9)),
    ]
    assert (moved.n_fingerprints, moved.fingerprints) == (2, ("fp_a", "fp_b"))


@pytest.fixture(scope="module")
def drifted_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("drift_counts")
    blocks = [
        model_block("moving", provider="simulator", max_concurrency=1, sim={"drift_after": 5}),
        model_block("steady", provider="simulator", max_concurrency=2),
    ]
    result = ibias.run(write_config(folder, blocks, n_prompts=12))
    assert result.exit_code == 0, result.lines
    return folder / "store.duckdb"


def _status_json(capsys: pytest.CaptureFixture[str], store: Path) -> dict[str, object]:
    assert main(["status", "--store", str(store), "--json"]) == 0
    report: dict[str, object] = json.loads(capsys.readouterr().out)
    return report


def test_a_run_keeps_them_and_status_reads_them(
    drifted_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    con = duckdb.connect(str(drifted_store), read_only=True)
    try:
        moving = {d.model_id: d for d in _agree(con)}["moving"]
        assert progress_counts.verify(con) == []
    finally:
        con.close()
    assert [(r.name, r.responses) for r in moving.reported] == [
        ("moving" + MODEL_VERSION_SUFFIX, 5),
        ("moving" + DRIFTED_VERSION_SUFFIX, 7),
    ]
    report = _status_json(capsys, drifted_store)
    assert report["reported_models"] == [
        d.to_json() for d in sorted([moving, *_steady(drifted_store)], key=lambda d: d.model_id)
    ]


def _steady(store: Path) -> list[drift.ModelDrift]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return [d for d in drift.model_drift(con, kept=False) if d.model_id == "steady"]
    finally:
        con.close()


def test_rows_deleted_by_hand_are_read_from_the_rows_until_rebuilt(
    drifted_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "copy.duckdb"
    store.write_bytes(drifted_store.read_bytes())
    con = duckdb.connect(str(store))
    try:  # the drifted replies go, outside ibias: the kept counts still list them
        con.execute(
            "DELETE FROM responses WHERE provider_model = ?", ["moving" + DRIFTED_VERSION_SUFFIX]
        )
        assert drift.verify(con) != []
        assert not progress_counts.current(con)
        # Asked without saying which, model_drift reads the rows, as status does.
        assert drift.model_drift(con) == drift.model_drift(con, kept=False)
    finally:
        con.close()
    report = _status_json(capsys, store)
    assert report["drift"] == []  # what the rows say now, not the stale counts
    con = db.open_store(store)
    try:
        progress_counts.rebuild(con)
        _agree(con)
        assert progress_counts.current(con)
    finally:
        con.close()


def test_verify_names_a_wrong_group_and_rebuild_repairs_it(tmp_path: Path) -> None:
    store = tmp_path / "store.duckdb"
    lines = [
        {
            "experiment": "prompts",
            "model_id": "ext",
            "language": "en",
            "item": {"id": f"x{i}", "text": f"item {i}"},
            "messages": [{"role": "user", "content": f"item {i}?"}],
            "content": f"reply {i}",
            "provider_model": "ext-2026",
        }
        for i in range(4)
    ]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    con = db.open_store(store, create=True)
    try:
        assert import_file(con, tmp_path / "a.jsonl").imported == 4
        (imported,) = _agree(con)
        assert [(r.name, r.responses) for r in imported.reported] == [("ext-2026", 4)]
        con.execute("UPDATE reported_counts SET responses = 3")
        con.execute("INSERT INTO reported_counts VALUES ('ext', NULL, 'fp', 1, now(), now())")
        differences = progress_counts.verify(con)
        assert len(differences) == 2
        # a group missing a name sorts first
        assert differences[0].startswith(
            "reported_counts: model ext, reported (none), fingerprint fp: kept 1 responses"
        )
        assert differences[0].endswith("counted none")
        assert differences[1].startswith(
            "reported_counts: model ext, reported ext-2026, fingerprint (none): kept 3 responses"
        )
        assert ", counted 4 responses" in differences[1]
        progress_counts.rebuild(con)
        assert progress_counts.verify(con) == []
    finally:
        con.close()


def test_a_schema_16_store_is_backfilled_on_first_open(drifted_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "old.duckdb"
    store.write_bytes(drifted_store.read_bytes())
    con = duckdb.connect(str(store))
    try:  # the store as schema 16 left it: no reported_counts
        expected = drift.model_drift(con, kept=False)
        con.execute("DROP TABLE reported_counts")
        con.execute("DELETE FROM schema_version WHERE version > 16")
    finally:
        con.close()
    db.open_store(store).close()  # migrates
    con = duckdb.connect(str(store), read_only=True)
    try:
        assert _agree(con) == expected
    finally:
        con.close()

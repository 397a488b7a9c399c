"""One spelling of a cancelled batch request (issue 33): Anthropic's `canceled` result lines are
stored as `batch_cancelled`, the others' spelling, and migration 013 rewrites the rows a store
holds in the old spelling, leaving every other row as it was."""

from __future__ import annotations

from pathlib import Path

import orjson

from ibias.runner.batch.anthropic import _result
from ibias.runner.batch.engine import stored_kind
from ibias.store import db

ROWS = [
    ("k1", 1, "batch_canceled", "the request canceled", "retry"),
    ("k2", 1, "batch_cancelled", "not run: the batch ended cancelled", "retry"),
    ("k3", 1, "batch_expired", "the request expired", "retry"),
    ("k4", 2, None, None, "ok"),
    ("k5", 1, "batch_canceled_by_user", "a kind that only starts alike", "retry"),
]


def _store_at_schema_12(path: Path) -> None:
    """A store as schema 12 left it: today's store with migration 013 taken back out, holding
    attempts in both spellings."""
    con = db.open_store(path, create=True)
    try:
        for key, no, kind, message, outcome in ROWS:
            con.execute(
                "INSERT INTO attempts (run_id, trial_key, model_id, attempt_no, started_at, "
                "error_kind, error_message, outcome) VALUES ('r1', ?, 'claude', ?, now(), ?, ?, ?)",
                [key, no, kind, message, outcome],
            )
        con.execute("DELETE FROM schema_version WHERE version > 12")
        assert db.schema_version(con) == 12
    finally:
        con.close()


def test_a_store_with_the_old_spelling_is_rewritten_on_open(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    _store_at_schema_12(path)
    con = db.open_store(path)
    try:
        assert db.schema_version(con) == db.SCHEMA_VERSION >= 13
        rows = con.execute(
            "SELECT trial_key, attempt_no, error_kind, error_message, outcome FROM attempts "
            "ORDER BY trial_key"
        ).fetchall()
    finally:
        con.close()
    expected = [(k, n, "batch_cancelled" if kind == "batch_canceled" else kind, m, o)
                for k, n, kind, m, o in ROWS]  # fmt: skip
    assert rows == expected
    # The message, as the provider worded it, is untouched; only the kind changed.
    assert rows[0][3] == "the request canceled"


def test_opening_again_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    _store_at_schema_12(path)
    db.open_store(path).close()
    con = db.open_store(path)
    try:
        kinds = con.execute(
            "SELECT error_kind, count(*) FROM attempts GROUP BY ALL ORDER BY ALL"
        ).fetchall()
        versions = con.execute("SELECT count(*) FROM schema_version WHERE version = 13").fetchall()
    finally:
        con.close()
    assert kinds == [
        ("batch_canceled_by_user", 1),
        ("batch_cancelled", 2),
        ("batch_expired", 1),
        (None, 1),
    ]
    assert versions == [(1,)]


def test_an_anthropic_canceled_line_is_stored_in_the_one_spelling() -> None:
    line = {"custom_id": "k", "result": {"type": "canceled"}}
    result = _result(orjson.dumps(line))
    assert result is not None and result.reply is None
    assert (result.kind, result.message) == ("batch_cancelled", "the request cancelled")
    expired = _result(orjson.dumps({"custom_id": "k", "result": {"type": "expired"}}))
    assert expired is not None and expired.kind == "batch_expired"


def test_the_engine_spells_any_providers_code_one_way() -> None:
    assert stored_kind("batch_canceled") == "batch_cancelled"
    assert stored_kind("batch_cancelled") == "batch_cancelled"
    assert stored_kind("batch_expired") == "batch_expired"
    assert stored_kind("batch_http_500") == "batch_http_500"

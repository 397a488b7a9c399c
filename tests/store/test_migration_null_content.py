"""Migration 014 (issue 33): a stored empty reply whose content is NULL though it stopped
normally gets `null_content`, the reason new rows get (store/outcome.py); an empty string, a
reply that only thought, another finish reason and every answered row keep theirs."""

from __future__ import annotations

from pathlib import Path

from ibias.store import db
from ibias.store.outcome import reply_outcome

#: (trial_key, content, finish_reason, reasoning, outcome, outcome_reason as migration 009 left it)
ROWS = [
    ("null-stop", None, "stop", None, "empty", "no_text"),
    ("empty-stop", "", "stop", None, "empty", "no_text"),
    ("null-none", None, None, None, "empty", "no_text"),
    ("null-length", None, "length", None, "empty", "length"),
    ("null-thought", None, "stop", "hmm", "empty", "thinking_only"),
    ("answered", "yes", "stop", None, "answered", None),
]


def _store_at_schema_13(path: Path) -> None:
    con = db.open_store(path, create=True)
    try:
        for key, content, finish, reasoning, outcome, reason in ROWS:
            con.execute(
                "INSERT INTO responses (trial_key, run_id, model_id, content, finish_reason, "
                "reasoning_content, received_at, outcome, outcome_reason) "
                "VALUES (?, 'r1', 'm', ?, ?, ?, now(), ?, ?)",
                [key, content, finish, reasoning, outcome, reason],
            )
        con.execute("DELETE FROM schema_version WHERE version > 13")
    finally:
        con.close()


def test_null_content_that_stopped_is_relabelled_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    _store_at_schema_13(path)
    con = db.open_store(path)
    try:
        assert db.schema_version(con) == db.SCHEMA_VERSION >= 14
        got = dict(con.execute("SELECT trial_key, outcome_reason FROM responses").fetchall())
    finally:
        con.close()
    assert got == {
        "null-stop": "null_content",
        "empty-stop": "no_text",
        "null-none": "no_text",
        "null-length": "length",
        "null-thought": "thinking_only",
        "answered": None,
    }
    # The migrated rows now say what the writer's own rule says of them.
    for key, content, finish, reasoning, _, _ in ROWS:
        assert reply_outcome(content, finish, None, reasoning)[1] == got[key]

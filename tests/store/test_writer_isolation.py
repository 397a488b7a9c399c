"""One bad reply never ends a run: a batch the store refuses whole is stored in parts, the
reply it cannot take is recorded as its attempt's error, and a flush that found DuckDB's
memory full is tried again after the readers are asked to give theirs back."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import anyio
import duckdb
import pyarrow as pa
import pytest

from ibias.store.arrow_scan import registered
from ibias.store.db import open_store
from ibias.store.memory import MemoryGuard, is_out_of_memory
from ibias.store.writer import UNSTORABLE, AttemptRow, Landed, ResponseRow, Writer

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _attempt(key: str) -> AttemptRow:
    return AttemptRow("r", key, "m", 1, NOW, 2.0, 200, None, None, "ok")


def _response(key: str, **change: Any) -> ResponseRow:
    row = ResponseRow(key, "r", "m", "pm", f"text {key}", None, "stop", 3, 1, 0.5, None, NOW, None)
    return row._replace(**change)


async def _flush(writer: Writer, rows: list[tuple[AttemptRow, ResponseRow, Landed | None]]) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        for attempt, response, landed in rows:
            writer.add_attempt(attempt)
            writer.add_response(response, landed)
        await writer.close()


async def test_a_reply_the_store_refuses_costs_only_that_reply(tmp_path):
    """A token count beyond 32 bits (the column is INTEGER) in one reply of 40: the other 39
    are stored, that trial has no response and its attempt says why."""
    con = open_store(tmp_path / "w.duckdb", create=True)
    writer = Writer(con)
    keys = [f"k{i:02d}" for i in range(40)]
    rows = [
        (_attempt(k), _response(k, prompt_tokens=2**31 if k == "k17" else 3), None) for k in keys
    ]
    await _flush(writer, rows)
    stored = {k for (k,) in con.execute("SELECT trial_key FROM responses").fetchall()}
    assert stored == set(keys) - {"k17"}
    assert writer.failure is None and writer.stored == 39 and writer.unstorable == 1
    got = con.execute(
        "SELECT trial_key, outcome, error_kind, error_message FROM attempts WHERE outcome <> 'ok'"
    ).fetchall()
    assert [(k, o, e) for k, o, e, _ in got] == [("k17", "error", UNSTORABLE)]
    assert "the store refused the reply" in got[0][3]
    assert con.execute("SELECT count(*) FROM attempts").fetchall()[0][0] == 40
    con.close()


async def test_a_parse_that_fails_keeps_the_reply_and_the_other_parses(tmp_path):
    """The parser raising on one reply: every reply is stored; only that one is unparsed."""
    con = open_store(tmp_path / "w.duckdb", create=True)
    parsed: list[str] = []

    def parse(_con: duckdb.DuckDBPyConnection, landed: Any) -> None:
        if any(item.trial_key == "k3" for item in landed):
            raise ValueError("parser bug")
        parsed.extend(item.trial_key for item in landed)

    writer = Writer(con, on_landed=parse)
    keys = [f"k{i}" for i in range(8)]
    await _flush(writer, [(_attempt(k), _response(k), Landed(k, "x", {}, "t")) for k in keys])
    assert con.execute("SELECT count(*) FROM responses").fetchall()[0][0] == 8
    assert con.execute("SELECT count(*) FROM attempts WHERE outcome = 'ok'").fetchall()[0][0] == 8
    # committed parses only: the halves holding k3 were rolled back and parsed again apart
    assert sorted(set(parsed)) == sorted(set(keys) - {"k3"})
    con.close()


@pytest.mark.parametrize("rows", [1, 10])
async def test_a_flush_that_finds_the_memory_full_relieves_and_keeps_every_row(tmp_path, rows):
    """The first two commits fail for want of memory (as when a served query holds the
    pool): the readers are asked to give memory back and every row is stored once; no retry
    left a partial batch behind. One reply is tried again after each relief; a batch of
    several is tried twice, then halved (it may be too large for the memory by itself)."""
    con = open_store(tmp_path / "w.duckdb", create=True)
    relieved: list[int] = []
    pauses: list[float] = []
    guard = MemoryGuard(relieved.append, sleep=pauses.append)
    failures = [2]

    def before_commit(_closing: bool) -> None:
        if failures[0]:
            failures[0] -= 1
            raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block")

    writer = Writer(con, guard=guard, before_commit=before_commit)
    keys = [f"k{i}" for i in range(rows)]
    await _flush(writer, [(_attempt(k), _response(k), None) for k in keys])
    assert con.execute("SELECT count(*) FROM responses").fetchall()[0][0] == rows
    assert con.execute("SELECT count(*) FROM attempts").fetchall()[0][0] == rows
    assert guard.pressure == 2 and writer.unstorable == 0
    if rows == 1:
        assert relieved == [1, 2] and pauses == [0.05, 0.1]
    else:
        assert relieved == [1] and pauses == [0.05]  # then halved: 5 + 5, both commit
    con.close()


def test_the_guard_gives_up_after_its_tries_with_the_memory_error():
    guard = MemoryGuard(sleep=lambda _s: None, tries=3)
    calls: list[int] = []

    def full() -> None:
        calls.append(1)
        raise duckdb.OutOfMemoryException("Out of Memory Error: full")

    with pytest.raises(duckdb.OutOfMemoryException):
        guard.call(full)
    assert len(calls) == 3
    other = duckdb.ConversionException("Conversion Error: no")
    assert not is_out_of_memory(other)
    assert is_out_of_memory(duckdb.TransactionException("Failed to commit: Out of Memory Error"))


def test_an_error_inside_a_transaction_surfaces_as_itself():
    """The run once showed "Current transaction is aborted" instead of the out-of-memory error
    behind it: the name's `unregister` in a `finally` failed in the aborted transaction."""
    con = duckdb.connect()
    con.execute("CREATE TABLE x (i INTEGER)")
    con.execute("BEGIN TRANSACTION")
    with (
        pytest.raises(duckdb.InvalidInputException, match="boom"),
        registered(con, "_b", pa.table({"i": [1]})),
    ):
        con.execute("INSERT INTO x SELECT i FROM _b WHERE error('boom') IS NULL")
    con.execute("ROLLBACK")
    with registered(con, "_b", pa.table({"i": [2]})):  # the name is usable again
        con.execute("INSERT INTO x SELECT i FROM _b")
    assert con.execute("SELECT i FROM x").fetchall() == [(2,)]


async def test_memory_that_stays_full_ends_the_flush_instead_of_bisecting_forever(tmp_path):
    """Out of memory even for one reply, after relief: not the reply's fault, so it is not
    recorded as unstorable; the flush gives up after one descent of the halving."""
    con = open_store(tmp_path / "w.duckdb", create=True)
    commits: list[int] = []

    def before_commit(_closing: bool) -> None:
        commits.append(1)
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block")

    guard = MemoryGuard(sleep=lambda _s: None, tries=2)
    writer = Writer(con, guard=guard, before_commit=before_commit)
    keys = [f"k{i:02d}" for i in range(64)]
    for k in keys:
        writer.add_attempt(_attempt(k))
        writer.add_response(_response(k))
    with pytest.raises(duckdb.OutOfMemoryException):
        await writer.flush()
    # 64 -> 32 -> 16 -> 8 -> 4 -> 2 -> 1: seven commits, two tries each
    assert len(commits) == 7 * 2 and writer.unstorable == 0
    assert con.execute("SELECT count(*) FROM attempts").fetchall()[0][0] == 0
    con.close()


def test_a_transaction_a_failure_left_behind_never_fails_the_next_flush():
    """A connection still inside an aborted transaction (its ROLLBACK lost) would fail every
    statement after it with "Current transaction is aborted": `begin` ends it first, and
    `rollback` never raises."""
    from ibias.store.db import begin, rollback

    con = duckdb.connect()
    con.execute("CREATE TABLE x (i INTEGER)")
    con.execute("BEGIN TRANSACTION")
    with pytest.raises(duckdb.InvalidInputException):
        con.execute("INSERT INTO x SELECT 1 WHERE error('boom') IS NULL")
    with pytest.raises(duckdb.TransactionException, match="aborted"):
        con.execute("INSERT INTO x VALUES (1)")
    begin(con)  # ends the aborted one, starts a fresh one
    con.execute("INSERT INTO x VALUES (2)")
    con.execute("COMMIT")
    rollback(con)  # nothing to roll back: no error
    assert con.execute("SELECT i FROM x").fetchall() == [(2,)]

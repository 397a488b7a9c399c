"""DuckDB's memory is shared by a run and the readers it serves; the run comes first.

A served query once took the pool while the writer flushed: the writer's insert failed for
want of memory, and the run died (the error hidden behind "Current transaction is aborted",
see tests/store/test_writer_isolation.py). Now a query of the run that finds the pool full
interrupts the served readers and tries again; each reader is told in one line; a reader's
query too large for the pool fails alone.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import duckdb
import pytest

from ibias.store import live
from ibias.store.db import StoreAccessError
from ibias.store.memory import MemoryGuard
from ibias.store.reader import open_reader
from ibias.store.writer import AttemptRow, ResponseRow, Writer
from tests.helpers import IBIAS, model_block, wait_for_status, write_config
from tests.store.conftest import Served

#: A query that runs for minutes unless interrupted.
ENDLESS = "SELECT count(*) FROM range(1000000000000)"


def _wait_until(done: object, what: str) -> None:
    deadline = time.monotonic() + 30
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _executing(server: live.LiveServer) -> bool:
    with server._guard:
        return any(cursors for _, cursors in server._sessions.values())


def test_a_flush_that_finds_the_memory_full_interrupts_the_readers_first(served: Served) -> None:
    """The sequence of the failed run, with the run's side fixed: a reader's query is running,
    the writer's commit finds the pool full; the reader is interrupted and told why in one
    line, the flush is tried again and commits, and the reader's session goes on."""
    errors: list[str] = []

    def read() -> None:
        with open_reader(served.store) as reader:
            try:
                reader.table(ENDLESS)
            except StoreAccessError as exc:
                errors.append(str(exc))
            errors.append(str(reader.execute("SELECT count(*) FROM responses").fetchone()))

    thread = threading.Thread(target=read)
    thread.start()
    _wait_until(lambda: _executing(served.server), "the reader's query never started")
    time.sleep(0.2)  # inside DuckDB, not still arriving
    full = [1]

    def before_commit(_closing: bool) -> None:
        if full[0]:
            full[0] = 0
            raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block")

    guard = MemoryGuard(served.server.relieve)
    writer = Writer(served.con, guard=guard, before_commit=before_commit)
    now = time.time()
    writer._write(
        [AttemptRow("r", "new", "m", 1, now, 1.0, 200, None, None, "ok")],
        [ResponseRow("new", "r", "m", "pm", "hi", None, "stop", 1, 1, 0.0, None, now, None)],
        [],
    )
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert errors[0] == live.RELIEVED and "\n" not in errors[0]
    assert errors[1] == "(4,)"  # the same snapshot's session goes on (4 imported replies)
    got = served.con.execute("SELECT count(*) FROM responses WHERE trial_key = 'new'")
    assert got.fetchall() == [(1,)]
    assert guard.pressure == 1


def test_relief_hangs_up_on_a_reader_that_does_not_read(served: Served) -> None:
    """A result waiting for a client that never reads holds its memory until the session
    ends; an interrupt does not reach it, so from the third try in a row relief hangs up."""
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(served.server.path))
    body = json.dumps(
        {
            "store": str(served.store.resolve()),
            "sql": ENDLESS.replace("count(*)", "*"),
            "params": [],
        }
    ).encode()
    sock.sendall(live._LEN.pack(len(body)) + body)  # and never reads the answer
    _wait_until(lambda: _executing(served.server), "the session never started")
    served.server.relieve(1)
    served.server.relieve(live.HANG_UP_AFTER)
    _wait_until(lambda: not served.server._sessions, "the session was not ended")
    sock.close()


def test_a_served_query_larger_than_the_memory_fails_alone_and_the_run_finishes(
    tmp_path: Path,
) -> None:
    """During a real run (its DuckDB memory capped as always), a reader asks for far more
    memory than the cap: the reader gets one line, the run answers every trial."""
    total = 2000  # 10 s at 12,000 RPM: the reader asks well before the end
    cfg = write_config(
        tmp_path,
        [model_block("m", provider="simulator", model="x", rpm=12_000, max_concurrency=8)],
        n_prompts=total,
    )
    store = tmp_path / "store.duckdb"
    run = subprocess.Popen(
        [*IBIAS, "run", str(cfg), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "IBIAS_DEBUG": "1"},  # a failure shows its traceback
    )
    try:
        wait_for_status(store, lambda data: data.get("state") == "running", proc=run)
        hog = subprocess.run(
            [
                *IBIAS,
                "sql",
                "--store",
                str(store),
                "SELECT length(string_agg(repeat('x', 2000) || i::VARCHAR, ',')) "
                "FROM range(2000000) t(i)",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        _, err = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    assert hog.returncode == 2, hog
    line = hog.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "Out of Memory" in line or line.endswith(live.RELIEVED), line
    assert run.returncode == 0, err
    con = duckdb.connect(str(store), read_only=True)
    try:
        got = con.execute("SELECT count(*), count(DISTINCT trial_key) FROM responses")
        assert got.fetchall() == [(total, total)]
    finally:
        con.close()


pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

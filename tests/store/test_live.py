"""Live queries: while a run holds the store, the read-only commands are served by the run.

The end-to-end test runs `ibias run` as its own process against the in-process simulator and
asks `ibias sql`, `status`, `plan` and `analyze` (real subprocesses) while it writes. The other
tests serve a store in-process (`LiveServer` on the writer's connection, the store's lock held
as a run holds it) to check the snapshot, the sandbox and the socket fallbacks directly.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from ibias.runner.cli import main
from ibias.store import live
from ibias.store.db import StoreAccessError, open_store
from ibias.store.live import LiveServer, socket_paths
from ibias.store.lock import StoreLock
from ibias.store.reader import open_reader
from tests.helpers import IBIAS, model_block, wait_for_status, write_config
from tests.store.conftest import Served, _serving
from tests.store.test_sandbox import hidden_writes, wrapped_writes

TOTAL = 2000


def ibias(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*IBIAS, *args], capture_output=True, text=True, timeout=120)


def count_responses(store: Path) -> int:
    got = ibias(
        "sql", "--store", str(store), "--format", "json", "SELECT count(*) AS n FROM responses"
    )
    assert got.returncode == 0, got.stderr
    n = json.loads(got.stdout)[0]["n"]
    assert isinstance(n, int)
    return n


def wait_for_responses(store: Path, run: subprocess.Popen[str], timeout: float = 60.0) -> int:
    """Ask the running store (through `ibias sql`) until a first flush has stored a response:
    on a fast machine the commands before it can all answer before the run's first flush."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert run.poll() is None, "the run ended before storing a response"
        n = count_responses(store)
        if n > 0:
            return n
        time.sleep(0.1)
    raise AssertionError("the run stored no response in time")


def test_sql_status_plan_show_and_analyze_answer_while_a_run_writes(tmp_path: Path) -> None:
    # 40 requests/s, flushed every second: far from done (50 s) when it is interrupted below,
    # once every command has answered mid-run.
    cfg = write_config(
        tmp_path,
        [model_block("m", provider="simulator", model="x", rpm=2400, max_concurrency=4)],
        n_prompts=TOTAL,
    )
    store = tmp_path / "store.duckdb"
    run = subprocess.Popen(
        [*IBIAS, "run", str(cfg), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    counts: list[int] = []
    try:
        wait_for_status(store, lambda data: data.get("state") == "running", proc=run)
        counts.append(count_responses(store))
        status = ibias("status", "--store", str(store), "--json")
        assert status.returncode == 0, status.stderr
        report = json.loads(status.stdout)
        assert report["running"] is True and report["planned"] == TOTAL
        assert 0 <= report["done"] < TOTAL
        counts.append(count_responses(store))
        plan = ibias("plan", str(cfg), "--json")
        assert plan.returncode == 0, plan.stderr
        assert json.loads(plan.stdout)["total"] == TOTAL
        counts.append(wait_for_responses(store, run))
        shown = ibias("show", "--store", str(store), "--random", "1", "--json")
        assert shown.returncode == 0, shown.stderr
        (trial,) = json.loads(shown.stdout)
        assert trial["trial_key"] and trial["messages"]
        counts.append(count_responses(store))
        out = tmp_path / "out"
        analyzed = ibias("analyze", "--store", str(store), "--out", str(out), "--bootstrap", "50")
        assert analyzed.returncode == 0, analyzed.stderr
        assert (out / "report.html").exists()
        counts.append(count_responses(store))
        assert run.poll() is None, "the run ended before every command answered"
    finally:
        run.send_signal(signal.SIGINT)
        stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 130, stderr
    done = re.search(r"([\d,]+) of ([\d,]+) trials done", stdout + stderr)
    assert done is not None, stdout + stderr
    final = int(done.group(1).replace(",", ""))
    mid = [n for n in counts if 0 < n < TOTAL]
    assert len(set(mid)) >= 2, counts
    assert counts == sorted(counts) and max(counts) <= final < TOTAL
    # after the run, the same command reads the file itself and finds what the run reported
    assert count_responses(store) == final
    assert not any(p.exists() for p in socket_paths(store))


# -- a store served in-process --------------------------------------------------------------


def test_the_socket_is_beside_the_store_and_private(served: Served) -> None:
    assert served.server.path == Path(os.path.realpath(served.store)).with_name("store.duckdb.sock")
    assert stat.S_IMODE(served.server.path.stat().st_mode) == 0o600
    with open_reader(served.store) as reader:
        assert reader.live
        assert reader.frame("SELECT count(*) AS n FROM responses")["n"].to_list() == [4]


def test_a_session_is_one_snapshot_and_never_sees_an_open_batch(served: Served) -> None:
    con = served.con
    with open_reader(served.store) as reader:
        before = reader.execute("SELECT count(*) FROM runs").fetchone()
        con.execute("BEGIN TRANSACTION").fetchall()
        con.execute(
            "INSERT INTO runs (run_id, started_at, config, config_hash, version) "
            "VALUES ('x', now(), '{}', 'h', 'v')"
        ).fetchall()
        with open_reader(served.store) as other:  # the batch is not committed yet
            assert other.execute("SELECT count(*) FROM runs").fetchone() == before
        con.execute("COMMIT").fetchall()
        assert reader.execute("SELECT count(*) FROM runs").fetchone() == before  # same snapshot
    with open_reader(served.store) as reader:  # a new session sees the committed batch
        after = reader.execute("SELECT count(*) FROM runs").fetchone()
    assert before is not None and after == (before[0] + 1,)


ESCAPES = [
    ("ATTACH '{other}' AS o (READ_WRITE)", "ATTACH statements are refused"),
    ("DELETE FROM responses", "DELETE statements are refused"),
    ("COPY responses TO '{other}' (FORMAT parquet)", "COPY statements are refused"),
    ("EXPORT DATABASE '{dir}/exported'", "EXPORT statements are refused"),
    ("SELECT * FROM read_text('{other}')", "disabled by configuration"),
    ("SELECT * FROM read_blob('{other}')", "disabled by configuration"),
    ("SELECT * FROM read_parquet('{dir}/x.parquet')", "disabled by configuration"),
    ("SELECT * FROM glob('{dir}/*')", "disabled by configuration"),
    ("SELECT * FROM 'http://127.0.0.1:9/x.csv'", "disabled by configuration"),
    ("INSTALL httpfs", "INSTALL/LOAD statements are refused"),
    ("LOAD httpfs", "INSTALL/LOAD statements are refused"),
    ("SET enable_external_access = true", "SET/RESET/USE statements are refused"),
    ("PRAGMA enable_profiling", "PRAGMA statements are refused"),
    ("CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')", "CREATE statements are refused"),
    ("SELECT 1; SELECT 2", "exactly one is allowed"),
]


@pytest.mark.parametrize(("template", "expected"), ESCAPES)
def test_sandbox_escapes_are_refused_when_served_live(
    served: Served, tmp_path: Path, template: str, expected: str
) -> None:
    other = tmp_path / "other.txt"
    other.write_text("secret")
    query = template.format(other=other, dir=tmp_path)
    before = {p.name for p in tmp_path.iterdir()}
    with open_reader(served.store) as reader:
        assert reader.live
        with pytest.raises(StoreAccessError) as info:
            reader.table(query)
        assert expected in str(info.value) and "\n" not in str(info.value)
        # the session is still usable after a refusal
        assert reader.execute("SELECT count(*) FROM responses").fetchone() == (4,)
    assert {p.name for p in tmp_path.iterdir()} == before and other.read_text() == "secret"


def test_the_runs_temp_folder_is_not_writable_by_a_served_query(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's DuckDB may open files in its temp folder whatever its settings; no served
    query, EXPLAIN ANALYZE COPY or otherwise, reaches it."""
    (setting,) = served.con.execute("SELECT current_setting('temp_directory')").fetchall()[0]
    temp = Path(setting)
    temp.mkdir(parents=True, exist_ok=True)
    before = sorted(temp.iterdir())
    with open_reader(served.store) as reader:
        assert reader.live
        for query in wrapped_writes(temp) + hidden_writes(temp):
            with pytest.raises(StoreAccessError) as info:
                reader.table(query)
            assert "\n" not in str(info.value)
        plan = reader.table("EXPLAIN ANALYZE SELECT count(*) FROM responses")
        assert plan.num_rows == 1
    query = f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{temp}/x.csv'"
    assert main(["sql", "--store", str(served.store), query]) == 2
    err = capsys.readouterr().err
    assert "COPY statements are refused (also inside EXPLAIN)" in err
    assert len(err.strip().splitlines()) == 1
    assert sorted(temp.iterdir()) == before


def test_the_settings_hold_on_the_served_database_itself(served: Served) -> None:
    """Below the statement check: the run's database instance itself refuses files and SET."""
    cursor = served.con.cursor()
    try:
        with pytest.raises(duckdb.PermissionException):
            cursor.execute("SELECT * FROM read_text('/etc/hostname')").fetchall()
        with pytest.raises(duckdb.Error, match="locked"):
            cursor.execute("SET enable_external_access = true").fetchall()
    finally:
        cursor.close()


def test_legitimate_queries_are_served(served: Served) -> None:
    with open_reader(served.store) as reader:
        assert reader.frame("DESCRIBE responses").height > 5
        cte = reader.frame("WITH x AS (SELECT model_id FROM responses) SELECT count(*) n FROM x")
        assert cte["n"].to_list() == [4]
        window = reader.frame(
            "SELECT row_number() OVER (ORDER BY trial_key) AS i FROM responses ORDER BY i"
        )
        assert window["i"].to_list() == [1, 2, 3, 4]
        params = reader.execute("SELECT count(*) FROM responses WHERE model_id = ?", ["nope"])
        assert params.fetchall() == [(0,)]


def test_sql_command_is_served_live(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "sql",
                "--store",
                str(served.store),
                "--format",
                "json",
                "SELECT count(*) AS n FROM allocation_decisions",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out) == [{"n": 2}]
    assert (
        main(["sql", "--store", str(served.store), "SELECT * FROM read_text('/etc/hostname')"]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: query refused: ") and len(err.strip().splitlines()) == 1


def test_closing_the_server_ends_an_idle_session_at_once(source: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.duckdb"
    shutil.copy(source, store)
    with StoreLock(store):
        con = open_store(store)
        server = LiveServer.start(con, store)
        assert server is not None
        reader_cm = open_reader(store)
        reader = reader_cm.__enter__()
        reader.table("SELECT 1")
        started = time.monotonic()
        server.close()
        closed_in = time.monotonic() - started
        con.close()
        with pytest.raises(StoreAccessError, match="live read"):
            reader.table("SELECT 1")
        reader_cm.__exit__(None, None, None)
    assert closed_in < live.IO_TIMEOUT_S  # did not wait for the idle client to time out
    assert not server.path.exists()


def test_closing_the_server_wakes_its_accept_loop_without_a_session(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`close` (the end of every run) does not wait for the accept loop's poll: with a poll
    longer than the guard below, the loop still ends, and the wake-up is no session."""
    monkeypatch.setattr(live, "ACCEPT_POLL_S", 600.0)
    store = tmp_path / "store.duckdb"
    shutil.copy(source, store)
    with StoreLock(store):
        con = open_store(store)
        server = LiveServer.start(con, store)
        assert server is not None
        closer = threading.Thread(target=server.close, daemon=True)
        closer.start()
        closer.join(timeout=60)  # a hang guard, not a timing: a missed wake-up waits 600 s
        con.close()
    assert not closer.is_alive()
    assert not server._thread.is_alive()
    assert server._sessions == {}
    assert not server.path.exists()


# -- where the socket goes ---------------------------------------------------------------------


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A short TMPDIR of this test's own, for the fallback folder."""
    short = Path(f"/tmp/ibl{os.getpid()}{threading.get_ident() % 1000}")
    short.mkdir()
    monkeypatch.setattr(live, "private_dir", lambda: short / f"ibias-{os.getuid()}")
    yield short
    shutil.rmtree(short, ignore_errors=True)


def test_a_store_path_too_long_for_a_socket_uses_the_private_folder(
    source: Path, tmp_path: Path, private_tmp: Path
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    store = deep / "store.duckdb"
    shutil.copy(source, store)
    assert len(os.fsencode(str(store) + ".sock")) > live.MAX_SOCKET_PATH
    with StoreLock(store):
        con = open_store(store)
        server = LiveServer.start(con, store)
        assert server is not None
        try:
            assert server.path.parent == private_tmp / f"ibias-{os.getuid()}"
            assert stat.S_IMODE(server.path.parent.stat().st_mode) == 0o700
            assert stat.S_IMODE(server.path.stat().st_mode) == 0o600
            with open_reader(store) as reader:
                assert reader.live and reader.execute(
                    "SELECT count(*) FROM responses"
                ).fetchone() == (4,)
        finally:
            server.close()
            con.close()


def test_a_file_system_without_sockets_uses_the_private_folder(
    source: Path, tmp_path: Path, private_tmp: Path
) -> None:
    store = tmp_path / "store.duckdb"
    shutil.copy(source, store)
    beside = socket_paths(store)[0]

    def bind(path: Path) -> socket.socket:
        if path == beside:
            raise OSError(95, "Operation not supported")
        return live._bind(path)

    with StoreLock(store):
        con = open_store(store)
        server = LiveServer.start(con, store, bind=bind)
        assert server is not None
        try:
            assert server.path != beside and not beside.exists()
            with open_reader(store) as reader:
                assert reader.live
        finally:
            server.close()
            con.close()


def test_a_private_folder_of_someone_else_is_not_used(
    source: Path, tmp_path: Path, private_tmp: Path
) -> None:
    folder = private_tmp / f"ibias-{os.getuid()}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)  # open to others: a socket there could be hijacked
    store = tmp_path / "store.duckdb"
    shutil.copy(source, store)

    def bind(path: Path) -> socket.socket:
        if path.parent != folder:
            raise OSError(95, "Operation not supported")
        return live._bind(path)

    with StoreLock(store):
        con = open_store(store)
        try:
            assert LiveServer.start(con, store, bind=bind) is None
            # no server: a reader says in one line that the store is busy
            with (
                pytest.raises(StoreAccessError, match="busy: held by pid") as info,
                open_reader(store),
            ):
                pass
            assert "\n" not in str(info.value)
        finally:
            con.close()


def test_a_runaway_query_is_interrupted_and_the_session_goes_on(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live, "QUERY_TIMEOUT_S", 0.2)
    with open_reader(served.store) as reader:
        with pytest.raises(StoreAccessError, match="query interrupted after its time limit"):
            reader.table("SELECT count(*) FROM range(1000000000000)")
        assert reader.execute("SELECT count(*) FROM responses").fetchone() == (4,)


@pytest.fixture
def one_session(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """A served store whose run serves one reader at a time (set before the server starts)."""
    monkeypatch.setattr(live, "MAX_SESSIONS", 1)
    with _serving(source, tmp_path) as held:
        yield held


def test_readers_beyond_the_limit_are_told_to_try_again(one_session: Served) -> None:
    store = one_session.store
    with open_reader(store) as first:
        first.table("SELECT 1")
        refused = pytest.raises(StoreAccessError, match="serving 1 readers; try again")
        with refused, open_reader(store) as second:
            second.table("SELECT 1")
    with open_reader(store) as again:  # the slot is free once the first is done
        assert again.execute("SELECT 1").fetchone() == (1,)


def test_a_reader_arriving_as_another_leaves_is_served(one_session: Served) -> None:
    """At the limit, a reader waits up to `SLOT_WAIT_S` for a slot rather than being refused
    while the reader before it is hanging up."""
    store = one_session.store
    answers: list[object] = []
    with open_reader(store) as first:
        first.table("SELECT 1")

        def second() -> None:
            with open_reader(store) as reader:
                answers.append(reader.execute("SELECT 2").fetchone())

        waiting = threading.Thread(target=second)
        waiting.start()
        time.sleep(0.3)  # the second reader is connected and waiting for the slot
        assert answers == []
    waiting.join(timeout=10)
    assert answers == [(2,)]


def test_analysis_reads_the_same_data_live_as_from_the_file(source: Path, tmp_path: Path) -> None:
    from ibias.analysis.load import load_store

    with _serving(source, tmp_path) as held:
        served = load_store(held.store)
    from_file = load_store(held.store)
    assert served.n_parsed_now == from_file.n_parsed_now == 0
    assert served.views.keys() == from_file.views.keys()
    for name, frame in served.views.items():
        assert frame.equals(from_file.views[name]), name
    for got, want in [
        (served.explicit, from_file.explicit),
        (served.progress, from_file.progress),
        (served.runs, from_file.runs),
        (served.responses, from_file.responses),
    ]:
        assert got.equals(want)
    assert sum(f.height for f in served.views.values()) > 0


def test_live_analysis_refuses_replies_the_run_has_not_parsed(served: Served) -> None:
    from ibias.analysis.load import load_store

    served.con.execute("DELETE FROM parsed_word_association").fetchall()
    with pytest.raises(StoreAccessError, match="parsed_word_association at parser version"):
        load_store(served.store)


def test_readers_probing_the_lock_never_make_a_run_fail_as_busy(
    source: Path, tmp_path: Path
) -> None:
    from ibias.store.lock import holder, lock_path

    store = tmp_path / "store.duckdb"
    shutil.copy(source, store)
    lock_path(store).touch()  # an unnamed lock file, as a finished run leaves it
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            holder(store)

    probers = [threading.Thread(target=probe) for _ in range(2)]
    for t in probers:
        t.start()
    try:
        for _ in range(500):
            lock = StoreLock(store)
            lock.acquire()
            lock.release()
    finally:
        stop.set()
        for t in probers:
            t.join()


def test_status_while_a_process_holds_the_store_without_serving(
    source: Path, tmp_path: Path
) -> None:
    """`ibias import` holds the store and serves no reads: status says who, from its lock."""
    from ibias.runner.status_report import status_report

    store = tmp_path / "store.duckdb"
    shutil.copy(source, store)
    with StoreLock(store):
        report = status_report(store)
    assert report["running"] is True and report["holder"].startswith(f"pid {os.getpid()} ")
    assert "by" not in report
    assert status_report(store)["done"] == 4  # released: read from the file


def test_show_is_served_live_and_its_where_stays_in_the_sandbox(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    store = ["--store", str(served.store)]
    assert main(["show", *store, "--experiment", "allocation", "--json"]) == 0
    (trial,) = json.loads(capsys.readouterr().out)
    assert trial["experiment"] == "allocation"
    escape = "trial_key IN (SELECT content FROM read_text('/etc/hostname'))"
    assert main(["show", *store, "--where", escape]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert "file system operations are disabled" in err  # the served database refuses it

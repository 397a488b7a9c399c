"""A store that cannot be written (a full disk) stops the run at once, names the system's reason
in one line, leaves the store readable and the status file final, and a rerun finishes.

Real write failures come from `RLIMIT_FSIZE` in a subprocess: no file of the process may grow
past the limit, so DuckDB's WAL write fails with EFBIG ("File too large") exactly where a full
disk gives ENOSPC, with no mount privileges needed. SIGXFSZ is ignored in the child, or the
kernel would kill it instead of failing the write. The in-process test injects the error into
the writer's insert to check, exactly, that no request starts after the failure is seen.
"""

from __future__ import annotations

import json
import re
import resource
import signal
import subprocess
from pathlib import Path
from typing import Any

import anyio
import duckdb
import pytest

import ibias.store.writer as writer_module
from ibias import FakeProvider
from ibias.runner import cli
from ibias.runner.config import ModelConfig, load_config
from ibias.runner.execution import run_schedule as run_module
from ibias.runner.execution.run import RunOptions, execute
from ibias.runner.providers.base import ProviderContext
from ibias.store.writer import StoreWriteError, Writer, os_cause
from tests.helpers import IBIAS, model_block, write_config


def _counts(store: Path) -> tuple[int, int, int, int]:
    """trials, responses, distinct answered trials, attempts (reopening the store read-only)."""
    con = duckdb.connect(str(store), read_only=True)
    try:
        row = con.execute(
            "SELECT (SELECT count(*) FROM trials), (SELECT count(*) FROM responses), "
            "(SELECT count(DISTINCT trial_key) FROM responses), (SELECT count(*) FROM attempts)"
        ).fetchone()
    finally:
        con.close()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def _status(store: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(store.with_name(store.name + ".status.json").read_text())
    return data


# ------------------------------------------------------------------ in-process: exactly when


def slow_echo(model: ModelConfig) -> FakeProvider:
    """Answers every prompt after a short sleep; counts the requests it was asked to start
    (its `requests`)."""

    async def answer(text: str) -> str:
        await anyio.sleep(0.002)
        return "ok " + text

    return FakeProvider(answer, prompt_tokens=5, completion_tokens=2, model=model.model)


NO_SPACE = 'IO Error: Could not write file "/data/s.duckdb.wal": No space left on device'


async def test_a_failed_write_stops_scheduling_at_once_and_names_the_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    n = 400
    cfg = load_config(
        write_config(
            tmp_path,
            [model_block(m, provider="simulator", model=m) for m in ("a", "b")],
            n_prompts=n,
        )
    )
    built: dict[str, FakeProvider] = {}

    def factory(model: ModelConfig, key: str | None, context: ProviderContext) -> FakeProvider:
        built[model.id] = slow_echo(model)
        return built[model.id]

    def started() -> int:
        return sum(len(p.requests) for p in built.values())

    seen_at: list[int] = []

    class Recording(Writer):
        """The run's writer with a short interval, noting how many requests had started
        when its failure reached the event loop."""

        async def flush(self) -> None:
            try:
                await super().flush()
            except StoreWriteError:
                seen_at.append(started())
                raise

    def short_interval(con: duckdb.DuckDBPyConnection, **kw: Any) -> Writer:
        return Recording(con, interval=0.05, **kw)

    monkeypatch.setattr(run_module, "Writer", short_interval)
    real_insert = writer_module.insert_attempts
    calls = [0]

    def insert_failing_on_the_third_flush(con: duckdb.DuckDBPyConnection, rows: Any) -> None:
        calls[0] += 1
        if calls[0] == 3:
            raise duckdb.IOException(NO_SPACE)
        real_insert(con, rows)

    monkeypatch.setattr(writer_module, "insert_attempts", insert_failing_on_the_third_flush)
    store = tmp_path / "store.duckdb"
    options = RunOptions(store=store, quiet=True, concurrency=4)
    with pytest.raises(StoreWriteError) as caught:
        await execute(cfg, options, provider_factory=factory)

    message = str(caught.value)
    assert "\n" not in message
    assert "(/data/s.duckdb.wal: No space left on device)" in message
    assert "cannot rollback" not in message
    # no request started after the failure reached the loop, and the run did not go on
    assert seen_at and started() == seen_at[0] < 2 * n
    trials, responses, answered, attempts = _counts(store)
    assert trials == 2 * n and responses == answered == attempts  # two whole flushes
    assert 0 < responses < 2 * n
    assert f"{responses:,} responses of this run are stored" in message
    status = _status(store)
    assert status["state"] == "failed" and status["error"] == message
    assert sum(m["done"] for m in status["models"]) == responses
    assert cli.main(["status", "--store", str(store)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert f"the last run failed: {message}" in shown

    monkeypatch.setattr(writer_module, "insert_attempts", real_insert)
    result = await execute(cfg, options, provider_factory=factory)
    assert result.exit_code == 0, result.lines
    assert _counts(store)[1:3] == (2 * n, 2 * n)
    assert _status(store)["state"] == "finished"


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (
            duckdb.TransactionException(
                "TransactionContext Error: Failed to commit: Could not write file "
                '"/d/s.duckdb.wal": File too large'
            ),
            "/d/s.duckdb.wal: File too large",
        ),
        (duckdb.IOException(NO_SPACE), "/data/s.duckdb.wal: No space left on device"),
        (
            duckdb.FatalException(
                "FATAL Error: Failed: database has been invalidated because of a previous "
                'fatal error. Original error: "Could not fsync file "/d/s.duckdb": '
                'Input/output error"'
            ),
            "/d/s.duckdb: Input/output error",
        ),
        (OSError(28, "No space left on device", "/d/x"), "/d/x: No space left on device"),
        (duckdb.IOException("IO Error: disk quota exceeded"), "disk quota exceeded"),
    ],
)
def test_the_cause_is_unwrapped_from_duckdbs_errors(error: BaseException, cause: str) -> None:
    assert os_cause(error) == cause
    assert writer_module.is_write_failure(error)


def test_a_bug_is_not_mistaken_for_a_full_disk() -> None:
    assert not writer_module.is_write_failure(duckdb.BinderException("column x not found"))
    assert not writer_module.is_write_failure(ValueError("bad"))


# ------------------------------------------------------------------ subprocess: a real limit


def _limited_run(config: Path, limit: int) -> subprocess.CompletedProcess[str]:
    """`ibias run CONFIG` where no file may grow past `limit` bytes (soft limit only, so
    nothing else in the test is affected), with SIGXFSZ ignored so writes fail with EFBIG."""

    def limit_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return subprocess.run(
        [*IBIAS, "run", str(config), "--quiet"],
        preexec_fn=limit_files,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    return lines[0]


#: Planning 600 prompts writes about 170 KB of WAL and each response about 1 KB more (DuckDB
#: 2.0), so a 600 KB limit lets planning and a few flushes through, then fails a flush.
N_PROMPTS, LIMIT = 600, 600_000


def test_a_full_disk_mid_run_stops_it_in_one_line_and_a_rerun_finishes(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        [model_block("m", provider="simulator", max_concurrency=8, rpm=12_000)],
        n_prompts=N_PROMPTS,
    )
    store = tmp_path / "store.duckdb"
    line = _one_line(_limited_run(config, LIMIT))
    assert line.startswith("error: the store could not be written (")
    assert f"{store}.wal: File too large" in line
    found = re.search(r"([\d,]+) responses of this run are stored", line)
    assert found is not None
    stored = int(found.group(1).replace(",", ""))

    trials, responses, answered, attempts = _counts(store)  # reopens: readable
    assert trials == N_PROMPTS
    assert responses == answered == stored < N_PROMPTS
    assert attempts == responses  # the simulator here has no faults: one attempt each
    status = _status(store)
    assert status["state"] == "failed" and status["error"] == line.removeprefix("error: ")
    assert status["models"][0]["done"] == stored

    again = subprocess.run(
        [*IBIAS, "run", str(config), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert _counts(store)[1:3] == (N_PROMPTS, N_PROMPTS)
    assert _status(store)["state"] == "finished"


def test_a_full_disk_while_planning_stops_it_in_one_line(tmp_path: Path) -> None:
    config = write_config(tmp_path, [model_block("m", provider="simulator")], n_prompts=2000)
    store = tmp_path / "store.duckdb"
    line = _one_line(_limited_run(config, 150_000))
    assert line.startswith("error: the store could not be written (")
    assert "File too large" in line and str(store) in line
    assert _status(store)["state"] == "failed"
    _counts(store)  # readable
    again = subprocess.run(
        [*IBIAS, "run", str(config), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert _counts(store)[1:3] == (2000, 2000)


def test_a_status_file_the_disk_refuses_does_not_end_the_run(tmp_path: Path) -> None:
    from ibias.runner.status import read_status, try_write_status

    missing = tmp_path / "gone" / "s.duckdb.status.json"  # the system refuses: no such folder
    assert try_write_status(missing, {"state": "running"}) is False
    ok = tmp_path / "s.duckdb.status.json"
    assert try_write_status(ok, {"state": "failed", "error": "x"}) is True
    assert read_status(ok) == {"state": "failed", "error": "x"}
    assert [p.name for p in tmp_path.iterdir()] == ["s.duckdb.status.json"]  # no temp left

"""The command line as a user meets it: real subprocesses, exit codes, one-line errors."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tests.helpers import (
    IBIAS,
    model_block,
    models_done,
    sim_stats,
    start_simulator,
    stop_simulator,
    wait_for_status,
    write_config,
)


def ibias(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*IBIAS, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
        check=False,
    )


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def count(store: Path, sql: str) -> int:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return int(con.execute(sql).fetchall()[0][0])
    finally:
        con.close()


def background_run(
    tmp_path: Path, url: str, n: int, *extra: str, **model: object
) -> tuple[Path, Path, subprocess.Popen[str]]:
    """Config for one model on the simulator at `url`, and `ibias run` started on it."""
    cfg = write_config(
        tmp_path,
        [model_block("m", provider="openai", base_url=url, model="x", **model)],
        n_prompts=n,
    )
    proc = subprocess.Popen(
        [*IBIAS, "run", str(cfg), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return cfg, tmp_path / "store.duckdb", proc


@pytest.fixture()
def simulator():
    proc, url = start_simulator("--latency-ms", "30", "--seed", "5")
    yield url
    stop_simulator(proc)


def test_kill_9_then_resume_loses_only_in_flight_and_last_second(tmp_path, simulator):
    concurrency, rpm = 16, 12_000  # at most 200 requests/s
    cfg, store, proc = background_run(
        tmp_path, simulator, 1500, "--quiet", max_concurrency=concurrency, rpm=rpm
    )
    wait_for_status(store, lambda data: models_done(data) >= 300, proc=proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    served_before = sim_stats(simulator)["served"]
    stored_before = count(store, "SELECT count(*) FROM responses")
    assert 0 < stored_before < 1500
    result = ibias("run", str(cfg), "--quiet")
    assert result.returncode == 0, result.stderr
    assert count(store, "SELECT count(*) FROM responses") == 1500
    assert count(store, "SELECT count(DISTINCT trial_key) FROM responses") == 1500
    stats = sim_stats(simulator)
    re_requested = stats["served"] - 1500
    lost = served_before - stored_before
    assert re_requested == lost
    # bound: every in-flight request plus one second of results at the paced rate, plus the
    # requests served while the kill signal was on its way (another 0.1 s of pace).
    assert re_requested <= concurrency + rpm / 60 * 1.1


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_sigint_sigterm_and_sighup_stop_cleanly_with_130_and_flush(tmp_path, simulator, sig):
    _, store, proc = background_run(tmp_path, simulator, 3000, max_concurrency=4, rpm=3000)
    try:
        wait_for_status(store, lambda data: models_done(data) >= 20, proc=proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert f"interrupted by {sig.name}: results so far are stored" in err
    assert "Traceback" not in err
    served = sim_stats(simulator)["served"]
    stored = count(store, "SELECT count(*) FROM responses")
    assert stored > 0
    assert stored == served  # nothing answered was lost: in-flight finished and were flushed


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signal_during_planning_exits_130_with_one_line_and_a_consistent_store(tmp_path, sig):
    # 8 models x 1,000 prompts x 100 replicates = 800,000 trials: planning takes seconds, and
    # the signal is sent as soon as the status file shows planning under way.
    total = 800_000
    cfg = write_config(
        tmp_path,
        [model_block(f"s{i}", provider="simulator") for i in range(8)],
        n_prompts=1000,
        replicates=100,
    )
    store = tmp_path / "store.duckdb"
    proc = subprocess.Popen(
        [*IBIAS, "run", str(cfg), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_status(
            store, lambda data: data["state"] == "planning" and data["models"], proc=proc
        )
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"interrupted by {sig.name} while planning: ")
    assert lines[0].endswith(" planned trials are stored; run again to resume")
    # the store opens, holds the run and whole batches of trials, nothing else
    planned = count(store, "SELECT count(*) FROM trials")
    assert 0 < planned < total and planned % 5000 == 0
    assert count(store, "SELECT count(DISTINCT trial_key) FROM trials") == planned
    assert count(store, "SELECT count(*) FROM runs") == 1
    assert count(store, "SELECT count(*) FROM responses") == 0
    assert f"{planned:,} planned trials" in lines[0]
    status = ibias("status", "--store", str(store), "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["running"] is False and report["planned"] == planned
    assert report["last_status"]["state"] == "interrupted"


def test_second_run_on_same_store_exits_2_naming_holder(tmp_path, simulator):
    cfg, store, proc = background_run(
        tmp_path, simulator, 500, "--quiet", max_concurrency=2, rpm=600
    )
    try:
        wait_for_status(store, lambda data: data["state"] == "running", proc=proc)
        second = ibias("run", str(cfg), "--quiet")
        assert second.returncode == 2
        assert f"pid {proc.pid}" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
        status = ibias("status", "--store", str(store), "--json")
        assert status.returncode == 0, status.stderr
        report = json.loads(status.stdout)
        assert report["running"] is True and report["models"][0]["total"] == 500
        sql = ibias("sql", "--store", str(store), "SELECT 1")
        assert sql.returncode == 0, sql.stderr  # served live by the running process
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


BAD_CONFIGS = {
    "unknown key": ("[[models]]\nid='a'\nprovider='simulator'\ncolour='red'\n", "colour"),
    "wrong type": ("[[models]]\nid='a'\nprovider='simulator'\nrpm='fast'\n", "models[0].rpm"),
    "negative limit": ("[[models]]\nid='a'\nprovider='simulator'\ntpm=-5\n", "models[0].tpm"),
    "bad url": ("[[models]]\nid='a'\nprovider='openai'\nbase_url='ftp//x'\n", "base_url"),
    "duplicate id": (
        "[[models]]\nid='a'\nprovider='simulator'\n[[models]]\nid='a'\nprovider='simulator'\n",
        "duplicate",
    ),
    "missing key variable": (
        "[[models]]\nid='a'\nprovider='openai'\nbase_url='http://127.0.0.1:9/v1'\n"
        "api_key_env='IBIAS_SURELY_UNSET_VAR'\n",
        "IBIAS_SURELY_UNSET_VAR",
    ),
    "not toml": ("[[models]\nid=", "TOML"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_exits_2_with_one_line_and_store_untouched(tmp_path, case):
    body, needle = BAD_CONFIGS[case]
    # first make a real store with data in it
    good = write_config(tmp_path, [model_block("s", provider="simulator")], n_prompts=3)
    assert ibias("run", str(good), "--quiet").returncode == 0
    store = tmp_path / "store.duckdb"
    before = digest(store)
    bad = tmp_path / "bad.toml"
    bad.write_text(
        f'[run]\nstore = "{store}"\n' + body + '\n[experiments.prompts]\nfile = "prompts.jsonl"\n'
        if case != "not toml"
        else body
    )
    result = ibias("run", str(bad))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert needle in lines[0] and "bad.toml" in lines[0]
    assert digest(store) == before


def test_missing_key_is_not_an_error_for_plan(tmp_path):
    cfg = write_config(
        tmp_path,
        [
            model_block(
                "a",
                provider="openai",
                base_url="http://127.0.0.1:9/v1",
                api_key_env="IBIAS_SURELY_UNSET_VAR",
                price_input=1.0,
                price_output=2.0,
            )
        ],
        n_prompts=4,
        replicates=3,
    )
    result = ibias("plan", str(cfg), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["total"] == 12 and report["done"] == 0 and report["remaining"] == 12
    assert report["by"] == [
        {
            "experiment": "prompts",
            "design": None,
            "model_id": "a",
            "language": "",
            "trials": 12,
            "done": 0,
        }
    ]
    assert report["estimated_cost_usd"] > 0


def test_missing_config_file_and_bad_arguments(tmp_path):
    missing = ibias("run", str(tmp_path / "nope.toml"))
    assert missing.returncode == 2 and "not found" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    bad_arg = ibias("run", "x.toml", "--concurrency", "-3")
    assert bad_arg.returncode == 2 and len(bad_arg.stderr.strip().splitlines()) == 1
    no_cmd = ibias()
    assert no_cmd.returncode == 2 and "Traceback" not in no_cmd.stderr


def test_broken_store_file_is_an_error_and_kept(tmp_path):
    store = tmp_path / "store.duckdb"
    store.write_bytes(b"this is not a database" * 100)
    before = digest(store)
    cfg = write_config(tmp_path, [model_block("s", provider="simulator")], n_prompts=3)
    for args in (
        ("run", str(cfg)),
        ("sql", "--store", str(store), "SELECT 1"),
        ("status", "--store", str(store)),
    ):
        result = ibias(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
        assert str(store) in result.stderr
    assert digest(store) == before


def test_sql_formats(tmp_path):
    cfg = write_config(tmp_path, [model_block("s", provider="simulator")], n_prompts=3)
    assert ibias("run", str(cfg), "--quiet").returncode == 0
    store = str(tmp_path / "store.duckdb")
    q = "SELECT model_id, count(*) AS n FROM responses GROUP BY 1"
    as_json = ibias("sql", "--store", store, q, "--format", "json")
    assert json.loads(as_json.stdout) == [{"model_id": "s", "n": 3}]
    as_csv = ibias("sql", "--store", store, q, "--format", "csv")
    assert as_csv.stdout.splitlines() == ["model_id,n", "s,3"]
    table = ibias("sql", "--store", store, q)
    assert "model_id" in table.stdout and "3" in table.stdout
    bad = ibias("sql", "--store", store, "SELEC nonsense")
    assert bad.returncode == 2 and "query failed" in bad.stderr


def test_status_after_run_reads_the_store(tmp_path):
    cfg = write_config(tmp_path, [model_block("s", provider="simulator")], n_prompts=5)
    assert ibias("run", str(cfg), "--quiet").returncode == 0
    result = ibias("status", "--store", str(tmp_path / "store.duckdb"), "--json")
    report = json.loads(result.stdout)
    assert report["running"] is False
    assert report["by"] == [
        {
            "experiment": "prompts",
            "model_id": "s",
            "language": "",
            "planned": 5,
            "done": 5,
            "failed": 0,
        }
    ]


def test_no_env_leak_into_child(tmp_path):
    # the CLI runs with no special environment; sanity check that tests do not depend on it
    assert "IBIAS_SURELY_UNSET_VAR" not in os.environ


def _modules_after(*args: str) -> set[str]:
    """Top-level modules loaded by `ibias ARGS` (run in a fresh interpreter)."""
    code = (
        "import sys\nfrom ibias.runner.cli import main\ntry:\n    main(sys.argv[1:])\n"
        "finally:\n    print(sorted({m.split('.')[0] for m in sys.modules}), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1].replace("'", '"')))


HEAVY = {"pyarrow", "polars", "numpy", "aiohttp", "matplotlib", "scipy", "rich"}


def test_help_and_status_load_no_heavy_library(tmp_path):
    """Start-up is measured in bench/, never asserted; what is asserted is what loads: `--help`
    needs neither DuckDB nor any heavy library, `status` only DuckDB (and rich to draw)."""
    assert not _modules_after("--help") & (HEAVY | {"duckdb"})
    cfg = write_config(tmp_path, [model_block("m", provider="simulator")], n_prompts=3)
    assert ibias("run", str(cfg), "--quiet").returncode == 0
    loaded = _modules_after("status", "--store", str(tmp_path / "store.duckdb"))
    assert "duckdb" in loaded
    assert not loaded & (HEAVY - {"rich"})

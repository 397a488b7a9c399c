"""`ibias status --verify`: the store's kept progress counts against a recount from its rows,
on a closed store, during a run (served by it), after a `kill -9` inside a flush and after a
batch ingest."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

from ibias.runner.batch.limits import BatchLimits
from ibias.runner.batch.run import BatchOptions
from ibias.runner.cli import main
from ibias.runner.config import load_config
from ibias.runner.execution.run import EXIT_OK, RunOptions, execute
from ibias.runner.providers.retries import Backoff
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from ibias.store import progress_counts
from tests.helpers import IBIAS, model_block, write_config
from tests.runner.batch.batching import no_sleep, query


def _verify(capsys: pytest.CaptureFixture[str], store: Path) -> tuple[int, list[str]]:
    code = main(["status", "--store", str(store), "--verify"])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out.splitlines()


def _sim_config(folder: Path, n: int, **keys: object) -> Path:
    blocks = [model_block(m, provider="simulator", **keys) for m in ("a", "b")]
    return write_config(folder, blocks, n_prompts=n)


def test_verify_says_they_agree_or_names_each_difference(tmp_path, capsys):
    config = _sim_config(tmp_path, 15, sim={"faults": {"500": 0.1}})
    assert main(["run", str(config), "--quiet"]) in (0, 1)
    capsys.readouterr()
    store = tmp_path / "store.duckdb"
    assert _verify(capsys, store) == (0, ["progress counts agree with the tables (30 trials)"])
    con = duckdb.connect(str(store))
    try:
        con.execute("UPDATE progress_counts SET planned = planned + 2 WHERE model_id = 'a'")
    finally:
        con.close()
    code, lines = _verify(capsys, store)
    assert code == 1
    assert (
        len(lines) == 1
        and "model a, experiment prompts, language (none): planned kept 17, counted 15" in lines[0]
    )
    # Only the store's own rows are recounted: no config needed, and none is read.
    assert main(["status", "--store", str(tmp_path / "none.duckdb"), "--verify"]) == 2
    assert "no store at" in capsys.readouterr().err


def _hooked_run(config: Path, hooks: Path, phase: str) -> subprocess.Popen[str]:
    """`ibias run` that waits inside the transaction of its `phase` flush
    (runner/execution/phase_hook.py) until `release` appears."""
    (hooks / "hold").write_text(phase)
    env = {**os.environ, "IBIAS_PHASE_HOOK": str(hooks)}
    return subprocess.Popen(
        [*IBIAS, "run", str(config), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_held(proc: subprocess.Popen[str], hooks: Path) -> None:
    deadline = time.monotonic() + 120
    while not (hooks / "held").exists():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended first: {proc.returncode} {proc.stderr}")
        assert time.monotonic() < deadline, "the flush was never held"
        time.sleep(0.01)


def test_counts_survive_a_kill_inside_a_flush_and_agree_during_a_run(tmp_path, capsys):
    """While a flush is held before its COMMIT, `status --verify` is served by the run (its
    snapshot is the last committed flush); a `kill -9` then loses that flush's rows and counts
    together; the resume finishes with counts that still agree."""
    config = _sim_config(tmp_path, 60, rpm=1200, max_concurrency=4)
    store = tmp_path / "store.duckdb"
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    proc = _hooked_run(config, hooks, "requests 2")
    try:
        _wait_held(proc, hooks)
        code, lines = _verify(capsys, store)
        assert code == 0 and lines[0].startswith("progress counts agree with the tables (120")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    answered = query(store, "SELECT count(*) FROM responses")[0][0]
    assert 0 < answered < 120  # interrupted with trials left
    assert _verify(capsys, store)[0] == 0
    # what the providers reported (store/drift.py) lost the killed flush with its rows
    reported = "SELECT sum(responses) FROM reported_counts WHERE provider_model IS NOT NULL"
    assert query(store, reported)[0][0] == answered
    assert main(["run", str(config), "--quiet"]) in (0, 1)
    capsys.readouterr()
    code, lines = _verify(capsys, store)
    assert (code, lines) == (0, ["progress counts agree with the tables (120 trials)"])
    assert query(store, "SELECT sum(done) FROM progress")[0][0] > answered


async def test_counts_agree_after_a_batch_ingest_with_lines_to_retry(tmp_path):
    fast = Backoff(base_s=0.001, cap_s=0.01, max_attempts=4)
    store = tmp_path / "s.duckdb"
    async with Simulator(SimProfile(seed=3, default=ModelProfile())) as sim:
        block = model_block(
            "gpt", provider="openai", base_url=sim.base_url, model="sim-gpt", batch=True,
            price_input=2.0, price_output=8.0,
        )  # fmt: skip
        config = load_config(write_config(tmp_path, [block], n_prompts=12))
        sim.batches.error_every = 4  # lines 4 and 8 of each batch answer a 500: retried
        options = BatchOptions(
            forced=True,
            wait=True,
            limits=BatchLimits(max_requests=12, max_attempts=fast.max_attempts),
            sleep=no_sleep,
        )
        result = await execute(
            config, RunOptions(store=store, quiet=True, backoff=fast, batch=options), environ={}
        )
        assert result.exit_code == EXIT_OK, result.lines
    con = duckdb.connect(str(store), read_only=True)
    try:
        assert progress_counts.verify(con) == []
        assert con.execute("SELECT planned, done, failed FROM progress").fetchall() == [(12, 12, 0)]
        retries = con.execute(
            "SELECT sum(attempts) FROM attempt_counts WHERE outcome = 'retry'"
        ).fetchall()
        assert retries == [(3,)]  # lines 4 and 8, then line 4 of the second batch
        reported = con.execute(
            "SELECT sum(responses) FROM reported_counts WHERE provider_model IS NOT NULL"
        ).fetchall()
        assert reported == [(12,)]  # each ingested reply names its model (store/drift.py)
    finally:
        con.close()

"""Each run's end time and exit status in `runs` (migration 011), a store from schema 10
upgrading to it, and budget messages that never print a positive bound as `$0.00`."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

from ibias.runner.cli import main
from ibias.runner.config import load_config
from ibias.runner.execution.run import EXIT_FAILED, EXIT_OK, RunOptions, execute
from ibias.runner.money import usd
from ibias.runner.providers.retries import Backoff
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import SimProfile
from ibias.store import db
from tests.helpers import model_block, write_config

FAST = Backoff(base_s=0.001, cap_s=0.01, max_attempts=10)


def _runs(store: Path) -> list[tuple[datetime, datetime | None, int | None]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(
            "SELECT started_at, ended_at, exit_status FROM runs ORDER BY started_at"
        ).fetchall()
    finally:
        con.close()


async def test_each_run_records_when_it_ended_and_its_exit_status(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    async with Simulator(SimProfile(seed=2)) as sim:
        block = model_block(
            "m", provider="openai", base_url=sim.base_url, model="x",
            price_output=10_000.0, max_tokens=64, max_concurrency=2,
        )  # fmt: skip
        config = load_config(write_config(tmp_path, [block], n_prompts=20))
        capped = await execute(
            config, RunOptions(store=store, quiet=True, backoff=FAST, max_cost=1.0)
        )
        done = await execute(config, RunOptions(store=store, quiet=True, backoff=FAST))
    assert (capped.exit_code, done.exit_code) == (EXIT_FAILED, EXIT_OK)
    rows = _runs(store)
    assert [status for _, _, status in rows] == [EXIT_FAILED, EXIT_OK]
    for started, ended, _ in rows:
        assert ended is not None and ended >= started
    assert rows[0][1] is not None and rows[0][1] <= rows[1][0]  # the first ended first


def test_a_schema_10_store_gains_the_end_columns_unchanged(tmp_path: Path) -> None:
    """A store as schema 10 left it (no ended_at / exit_status: this code's store with
    migration 011 taken back out) upgrades on open; its runs read NULL, rows unchanged."""
    path = tmp_path / "s.duckdb"
    con = db.open_store(path, create=True)
    try:
        con.execute(
            "INSERT INTO runs (run_id, started_at, config, config_hash, version) "
            "VALUES ('r1', now(), '', 'h', 'v')"
        )
        con.execute("ALTER TABLE runs DROP COLUMN ended_at")
        con.execute("ALTER TABLE runs DROP COLUMN exit_status")
        con.execute("DROP VIEW batch_state")  # and the later migrations' (012)
        con.execute("DROP TABLE batches")
        con.execute("DELETE FROM schema_version WHERE version > 10")
        assert db.schema_version(con) == 10
    finally:
        con.close()
    con = db.open_store(path)
    try:
        assert db.schema_version(con) == db.SCHEMA_VERSION >= 11
        assert con.execute("SELECT run_id, ended_at, exit_status FROM runs").fetchall() == [
            ("r1", None, None)
        ]
    finally:
        con.close()


async def test_a_budget_stop_names_a_sub_cent_bound_in_significant_digits(tmp_path: Path) -> None:
    """A request whose worst case is a fraction of a cent: the stop line gives its digits."""
    async with Simulator(SimProfile(seed=2)) as sim:
        block = model_block(
            "m", provider="openai", base_url=sim.base_url, model="x",
            price_output=1.0, max_tokens=64, max_concurrency=1,
        )  # fmt: skip
        # 64 tokens at $1 a million: at most $0.000064 a request
        config = load_config(write_config(tmp_path, [block], n_prompts=50))
        result = await execute(
            config,
            RunOptions(store=tmp_path / "s.duckdb", quiet=True, backoff=FAST, max_cost=0.0002),
        )
    assert result.exit_code == EXIT_FAILED
    line = next(x for x in result.lines if x.startswith("stopped: budget"))
    assert "$0.00)" not in line and "$0.00 " not in line
    assert re.search(r"could cost up to \$0\.0000\d\d", line), line
    assert "this and earlier runs" in line


def test_usd_keeps_cents_and_never_rounds_a_positive_amount_to_zero() -> None:
    assert usd(12_345.5) == "$12,345.50"
    assert usd(0.01) == "$0.01"
    assert usd(0.0042) == "$0.0042"
    assert usd(0.000064) == "$0.000064"
    assert usd(0) == "$0"


def test_run_help_says_the_cap_spans_earlier_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "this run and earlier ones" in text and "this run has spent" not in text

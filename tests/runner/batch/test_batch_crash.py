"""A runner killed (`kill -9`) at the worst moments of a batch's life, then run again: no batch
is ever submitted twice (counted at the simulator) and every trial ends with exactly one
response. Each moment is reached deterministically: the simulator holds its reply to the
upload, the create or the result download until the test has killed the runner."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import duckdb
import pytest

from ibias.runner.batch.limits import BatchLimits
from ibias.runner.batch.run import BatchOptions
from ibias.runner.config import load_config
from ibias.runner.execution.run import EXIT_OK, RunOptions, execute
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config
from tests.runner.batch.batching import no_sleep

N_PROMPTS = 8


def _config_path(tmp_path: Path, sim: Simulator) -> Path:
    block = model_block(
        "gpt", provider="openai", base_url=sim.base_url, model="sim-gpt", batch=True
    )
    return write_config(tmp_path, [block], n_prompts=N_PROMPTS)


async def _runner(config: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ibias",
        "run",
        str(config),
        "--batch",
        "--quiet",
        *args,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def _kill_when_held(proc: asyncio.subprocess.Process, sim: Simulator) -> None:
    """Wait until the simulator holds a reply for the runner, then kill it (-9)."""
    held = asyncio.ensure_future(sim.batches.holding.wait())
    ended = asyncio.ensure_future(proc.wait())
    done, _ = await asyncio.wait({held, ended}, timeout=120, return_when=asyncio.FIRST_COMPLETED)
    if held not in done:
        held.cancel()
        proc.kill()
        await proc.wait()
        pytest.fail(f"the runner never reached the held reply (exit {proc.returncode})")
    os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()
    ended.cancel()


async def _resume(config: Path, store: Path) -> None:
    """Run again in this process (polling without sleeping) until everything is in."""
    options = BatchOptions(forced=True, limits=BatchLimits(), sleep=no_sleep)
    result = await execute(
        load_config(config), RunOptions(store=store, quiet=True, batch=options), environ={}
    )
    assert result.exit_code == EXIT_OK, result.lines


def _one_response_each(store: Path) -> None:
    con = duckdb.connect(str(store), read_only=True)
    try:
        assert con.execute(
            "SELECT count(*), count(DISTINCT trial_key) FROM responses"
        ).fetchall() == [(N_PROMPTS, N_PROMPTS)]
        assert con.execute(
            "SELECT count(*) FROM trials WHERE trial_key NOT IN (SELECT trial_key FROM responses)"
        ).fetchall() == [(0,)]
    finally:
        con.close()


@pytest.mark.parametrize("moment", ["hold_upload", "hold_create"])
async def test_killed_between_upload_or_create_and_its_record(tmp_path, moment):
    async with Simulator(SimProfile(seed=5, default=ModelProfile())) as sim:
        config = _config_path(tmp_path, sim)
        release = asyncio.Event()
        setattr(sim.batches, moment, release)
        await _kill_when_held(await _runner(config), sim)
        # The provider now has the upload (and, held at create, the batch) the store never
        # recorded; only the intent is stored.
        setattr(sim.batches, moment, None)
        release.set()
        await asyncio.sleep(0)
        made = sim.batches.created
        assert made == (1 if moment == "hold_create" else 0)
        await _resume(config, tmp_path / "store.duckdb")
        assert sim.batches.created == 1  # adopted by its metadata, or made once after all
        assert sim.stats().requests == 0
    _one_response_each(tmp_path / "store.duckdb")
    con = duckdb.connect(str(tmp_path / "store.duckdb"), read_only=True)
    try:
        events = con.execute(
            "SELECT state, detail FROM batches WHERE state IN ('submitted', 'abandoned') "
            "ORDER BY recorded_at"
        ).fetchall()
    finally:
        con.close()
    if moment == "hold_create":  # the killed run's batch, found by its metadata
        assert events == [("submitted", "adopted after a crash (found at the provider)")]
    else:  # the provider never made a batch: the intent is abandoned, its trials sent once
        assert events == [
            ("abandoned", "the provider has no batch for this intent"),
            ("submitted", None),
        ]


async def test_killed_after_submission_and_before_ingestion(tmp_path):
    async with Simulator(SimProfile(seed=5, default=ModelProfile())) as sim:
        config = _config_path(tmp_path, sim)
        first = await _runner(config, "--no-wait")
        assert await asyncio.wait_for(first.wait(), 120) == 0
        assert sim.batches.created == 1
        sim.batches.finish_all()
        release = asyncio.Event()
        sim.batches.hold_download = release
        await _kill_when_held(await _runner(config), sim)
        sim.batches.hold_download = None
        release.set()
        await _resume(config, tmp_path / "store.duckdb")
        assert sim.batches.created == 1
    _one_response_each(tmp_path / "store.duckdb")

"""Gemini batch generation end to end against the simulator on loopback: inline below the
documented size and a file above it, responses matched by key (the simulator shuffles them),
errored and expired requests retried, and a runner killed between the create and its record
reconciled by the batch's display name (never submitting twice)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from ibias.runner.batch import gemini as gemini_batch
from ibias.runner.batch.run import BatchOptions
from ibias.runner.config import load_config
from ibias.runner.execution.run import EXIT_OK, RunOptions, RunResult, execute
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config
from tests.runner.batch.batching import no_sleep, query

N_PROMPTS = 10
KEY_ENV = "IBIAS_TEST_GEMINI_KEY"
ENV = {KEY_ENV: "gm-test"}


def _config_path(tmp_path: Path, sim: Simulator) -> Path:
    block = model_block(
        "gem",
        provider="gemini",
        base_url=sim.base_url.removesuffix("/v1") + "/v1beta",
        model="gemini-sim",
        api_key_env=KEY_ENV,
        batch=True,
        price_input=1.0,
        price_output=4.0,
    )
    return write_config(tmp_path, [block], n_prompts=N_PROMPTS)


async def _run(config: Path, store: Path) -> RunResult:
    options = BatchOptions(forced=True, sleep=no_sleep)
    return await execute(
        load_config(config), RunOptions(store=store, quiet=True, batch=options), environ=ENV
    )


@pytest.mark.parametrize("as_file", [False, True])
async def test_inline_or_file_results_by_key_and_the_failed_retried(tmp_path, monkeypatch, as_file):
    if as_file:  # every batch above the inline size: a JSONL file through the Files API
        monkeypatch.setattr(gemini_batch, "GEMINI_INLINE_BYTES", 10)
    store = tmp_path / "store.duckdb"
    async with Simulator(SimProfile(seed=6, default=ModelProfile())) as sim:
        sim.gemini_batches.error_every = 4  # requests 4 and 8 error
        sim.gemini_batches.expire_after = 9  # the 10th expires
        result = await _run(_config_path(tmp_path, sim), store)
        assert result.exit_code == EXIT_OK, result.lines
        assert sim.gemini_batches.created == 2  # 10: 7 answered, 2 errored, 1 expired; then 3
        assert bool(sim.gemini_batches.files) is as_file
        assert sim.stats().requests == 0
    assert query(store, "SELECT count(*), count(DISTINCT trial_key) FROM responses") == [
        (N_PROMPTS, N_PROMPTS)
    ]
    kinds = query(
        store,
        "SELECT error_kind, count(*) FROM attempts WHERE outcome = 'retry' GROUP BY 1 ORDER BY 1",
    )
    assert kinds == [("batch_expired", 1), ("batch_internal", 2)]
    for prompt, completion, cost in query(
        store, "SELECT prompt_tokens, completion_tokens, cost_usd FROM responses"
    ):
        assert cost == pytest.approx((prompt * 0.5 + completion * 2.0) / 1e6, abs=1e-15)


async def test_killed_between_create_and_record_is_adopted_by_display_name(tmp_path):
    store = tmp_path / "store.duckdb"
    async with Simulator(SimProfile(seed=6, default=ModelProfile())) as sim:
        config = _config_path(tmp_path, sim)
        release = asyncio.Event()
        sim.gemini_batches.hold_create = release
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "ibias",
            "run",
            str(config),
            "--batch",
            "--quiet",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            env={**os.environ, **ENV},
        )
        await asyncio.wait_for(sim.gemini_batches.holding.wait(), 120)
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
        sim.gemini_batches.hold_create = None
        release.set()
        result = await _run(config, store)
        assert result.exit_code == EXIT_OK, result.lines
        assert sim.gemini_batches.created == 1
    assert query(store, "SELECT count(*) FROM batches WHERE detail LIKE 'adopted%'") == [(1,)]
    assert query(store, "SELECT count(*), count(DISTINCT trial_key) FROM responses") == [
        (N_PROMPTS, N_PROMPTS)
    ]

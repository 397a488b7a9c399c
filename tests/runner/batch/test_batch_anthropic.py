"""Anthropic Message Batches end to end against the simulator on loopback: results (shuffled,
with errored and expired requests) matched by custom id and retried; a runner killed between
the create and its record is reconciled by listing the batches created after the intent with
its request count (never submitting twice); an adopted batch whose custom ids are not the
intent's is never stored as its trials'."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from ibias.runner.batch.limits import BatchLimits
from ibias.runner.batch.run import BatchOptions
from ibias.runner.config import Config, load_config
from ibias.runner.execution.run import EXIT_OK, RunOptions, RunResult, execute
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config
from tests.runner.batch.batching import no_sleep, query

N_PROMPTS = 10
KEY_ENV = "IBIAS_TEST_ANTHROPIC_KEY"
ENV = {KEY_ENV: "sk-ant-test"}


def _config_path(tmp_path: Path, sim: Simulator) -> Path:
    block = model_block(
        "claude",
        provider="anthropic",
        base_url=sim.base_url,
        model="claude-sim",
        api_key_env=KEY_ENV,
        batch=True,
        price_input=3.0,
        price_output=15.0,
    )
    return write_config(tmp_path, [block], n_prompts=N_PROMPTS)


async def _run(config: Config, store: Path, *, per_batch: int | None = None) -> RunResult:
    limits = None if per_batch is None else BatchLimits(max_requests=per_batch)
    options = BatchOptions(forced=True, limits=limits, sleep=no_sleep)
    return await execute(config, RunOptions(store=store, quiet=True, batch=options), environ=ENV)


async def test_mixed_results_are_matched_by_custom_id_and_the_failed_retried(tmp_path):
    store = tmp_path / "store.duckdb"
    async with Simulator(SimProfile(seed=4, default=ModelProfile())) as sim:
        sim.message_batches.error_every = 3  # requests 3, 6, 9 of a batch error
        sim.message_batches.expire_after = 8  # requests 9 and 10 expire
        result = await _run(load_config(_config_path(tmp_path, sim)), store)
        assert result.exit_code == EXIT_OK, result.lines
        # 10: 6 succeed, 2 error, 2 expire; then 4: 1 errors; then 1.
        assert sim.message_batches.created == 3
        assert sim.stats().requests == 0
    assert query(store, "SELECT count(*), count(DISTINCT trial_key) FROM responses") == [
        (N_PROMPTS, N_PROMPTS)
    ]
    kinds = query(
        store,
        "SELECT error_kind, count(*) FROM attempts WHERE outcome = 'retry' GROUP BY 1 ORDER BY 1",
    )
    assert kinds == [("batch_api_error", 3), ("batch_expired", 2)]
    assert query(store, "SELECT provider, detail FROM batch_state ORDER BY intended_at") == [
        ("anthropic", "batch ended expired"),
        ("anthropic", "batch ended completed"),
        ("anthropic", "batch ended completed"),
    ]
    # At the batch price: half of $3 / $15 per million tokens.
    for prompt, completion, cost in query(
        store, "SELECT prompt_tokens, completion_tokens, cost_usd FROM responses"
    ):
        assert cost == pytest.approx((prompt * 1.5 + completion * 7.5) / 1e6, abs=1e-15)


async def test_killed_between_create_and_record_is_adopted_by_listing(tmp_path):
    store = tmp_path / "store.duckdb"
    async with Simulator(SimProfile(seed=4, default=ModelProfile())) as sim:
        config = _config_path(tmp_path, sim)
        # Someone else's batch of another size, made just before: never adopted.
        other = await _other_batch(sim, 3)
        release = asyncio.Event()
        sim.message_batches.hold_create = release
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
        await asyncio.wait_for(sim.message_batches.holding.wait(), 120)
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
        sim.message_batches.hold_create = None
        release.set()
        assert sim.message_batches.created == 2
        result = await _run(load_config(config), store)
        assert result.exit_code == EXIT_OK, result.lines
        assert sim.message_batches.created == 2  # adopted, not submitted again
    adopted = query(store, "SELECT batch_id FROM batches WHERE detail LIKE 'adopted%'")
    assert len(adopted) == 1 and adopted[0][0] != other
    assert query(store, "SELECT count(*), count(DISTINCT trial_key) FROM responses") == [
        (N_PROMPTS, N_PROMPTS)
    ]


async def _other_batch(sim: Simulator, n: int) -> str:
    import aiohttp

    requests = [
        {
            "custom_id": f"other-{i}",
            "params": {
                "model": "claude-sim",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": f"hello {i}"}],
            },
        }
        for i in range(n)
    ]
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            sim.base_url + "/messages/batches",
            json={"requests": requests},
            headers={"anthropic-version": "2023-06-01"},
        ) as resp,
    ):
        assert resp.status == 200
        return str((await resp.json())["id"])

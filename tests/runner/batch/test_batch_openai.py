"""OpenAI batch mode end to end against the simulator's Batch API on loopback: trials go out
as batches split below the per-batch limit, results are matched by custom id (the simulator
shuffles them), errored and expired lines are resubmitted, a batch that expires half done
keeps its finished half, and a trial sent in a batch is the same request as online."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from ibias.runner.batch.limits import BatchLimits
from ibias.runner.batch.run import BatchOptions
from ibias.runner.config import Config, load_config
from ibias.runner.execution.run import EXIT_OK, RunOptions, RunResult, execute
from ibias.runner.providers.retries import Backoff
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config
from tests.runner.batch.batching import no_sleep, query

N_PROMPTS = 12
FAST = Backoff(base_s=0.001, cap_s=0.01, max_attempts=4)


def _config(tmp_path: Path, sim: Simulator, **extra: Any) -> Config:
    block = model_block(
        "gpt",
        provider="openai",
        base_url=sim.base_url,
        model="sim-gpt",
        batch=True,
        price_input=2.0,
        price_output=8.0,
        **extra,
    )
    return load_config(write_config(tmp_path, [block], n_prompts=N_PROMPTS))


async def _run(config: Config, store: Path, *, per_batch: int = 5, wait: bool = True) -> RunResult:
    options = BatchOptions(
        forced=True,
        wait=wait,
        limits=BatchLimits(max_requests=per_batch, max_attempts=FAST.max_attempts),
        sleep=no_sleep,
    )
    return await execute(
        config, RunOptions(store=store, quiet=True, backoff=FAST, batch=options), environ={}
    )


async def test_a_run_in_batch_mode_stores_one_reply_per_trial_at_the_batch_price(tmp_path):
    store = tmp_path / "s.duckdb"
    async with Simulator(SimProfile(seed=3, default=ModelProfile())) as sim:
        result = await _run(_config(tmp_path, sim), store)
        assert result.exit_code == EXIT_OK, result.lines
        assert sim.batches.created == 3  # 12 trials, at most 5 a batch
        assert sim.stats().requests == 0  # nothing went online
    assert query(store, "SELECT count(*), count(DISTINCT trial_key) FROM responses") == [(12, 12)]
    assert query(store, "SELECT count(*) FROM batch_state WHERE state = 'ingested'") == [(3,)]
    # Cost at half the online price (no batch prices given): OpenAI's documented discount.
    rows = query(store, "SELECT prompt_tokens, completion_tokens, cost_usd FROM responses")
    for prompt, completion, cost in rows:
        assert abs(cost - (prompt * 1.0 + completion * 4.0) / 1e6) < 1e-12
    # Each reply is the one its trial's prompt gets online: matched by custom id, not order.
    raw = query(store, "SELECT r.raw, t.messages FROM responses r JOIN trials t USING (trial_key)")
    async with Simulator(SimProfile(seed=3, default=ModelProfile())) as online:
        for line, messages in raw:
            body = orjson.dumps({"model": "sim-gpt", "messages": orjson.loads(messages)})
            _, expected = online.answer_openai(body)
            got = orjson.loads(line)["response"]["body"]["choices"][0]["message"]["content"]
            assert got == orjson.loads(expected)["choices"][0]["message"]["content"]
    # A second run finds everything done and submits nothing.
    async with Simulator(SimProfile(seed=3, default=ModelProfile())) as sim2:
        again = await _run(_config(tmp_path, sim2), store)
        assert again.exit_code == EXIT_OK
        assert sim2.batches.created == 0


async def test_errored_and_expired_lines_are_resubmitted_and_finished_ones_kept(tmp_path):
    store = tmp_path / "s.duckdb"
    async with Simulator(SimProfile(seed=3, default=ModelProfile())) as sim:
        sim.batches.error_every = 4  # lines 4 and 8 of each batch answer a 500
        sim.batches.expire_after = 9  # a batch expires after answering its first 9 lines
        result = await _run(_config(tmp_path, sim), store, per_batch=12)
        assert result.exit_code == EXIT_OK, result.lines
        # 12 lines: 7 stored, 2 errored (lines 4, 8), 3 expired; then the 5 again: line 4
        # errors; then that one alone.
        assert sim.batches.created == 3
    assert query(store, "SELECT count(*), count(DISTINCT trial_key) FROM responses") == [(12, 12)]
    failed = query(
        store,
        "SELECT error_kind, count(*) FROM attempts WHERE outcome = 'retry' GROUP BY 1 ORDER BY 1",
    )
    assert failed == [("batch_expired", 3), ("batch_http_500", 3)]
    states = query(store, "SELECT detail, completed, failed FROM batch_state ORDER BY intended_at")
    assert states == [
        ("batch ended expired", 7, 5),
        ("batch ended completed", 4, 1),
        ("batch ended completed", 1, 0),
    ]


async def test_no_wait_submits_and_a_later_run_collects(tmp_path):
    store = tmp_path / "s.duckdb"
    async with Simulator(SimProfile(seed=3, default=ModelProfile())) as sim:
        config = _config(tmp_path, sim)
        first = await _run(config, store, wait=False)
        assert first.exit_code == EXIT_OK, first.lines
        assert any("batches running: batch_" in line for line in first.lines)
        assert query(store, "SELECT count(*) FROM responses") == [(0,)]
        second = await _run(config, store)
        assert second.exit_code == EXIT_OK, second.lines
        assert sim.batches.created == 3  # the second run submitted nothing new
    assert query(store, "SELECT count(*) FROM responses") == [(12,)]

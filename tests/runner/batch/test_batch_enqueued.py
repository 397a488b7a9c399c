"""OpenAI's enqueued-token limit per model: a model's batches are cut below its
`batch_enqueued_tokens` and the next one waits until the live ones have ended, so the
simulator (which fails a batch past its limit as OpenAI does, `token_limit_exceeded`) never
fails one; a batch the provider fails on the limit anyway is stored as its trials' failed
attempts, with OpenAI's code and message."""

from __future__ import annotations

from pathlib import Path

from ibias.runner.batch.limits import BatchLimits
from ibias.runner.batch.run import BatchOptions
from ibias.runner.config import Config, load_config
from ibias.runner.execution.run import EXIT_FAILED, EXIT_OK, RunOptions, RunResult, execute
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config
from tests.runner.batch.batching import no_sleep, query


def _config(tmp_path: Path, sim: Simulator, enqueued: int) -> Config:
    block = model_block(
        "gpt",
        provider="openai",
        base_url=sim.base_url,
        model="sim-gpt",
        batch=True,
        batch_enqueued_tokens=enqueued,
    )
    return load_config(write_config(tmp_path, [block], n_prompts=12))


async def _run(config: Config, store: Path, lines: list[str], attempts: int = 8) -> RunResult:
    options = BatchOptions(forced=True, limits=BatchLimits(max_attempts=attempts), sleep=no_sleep)
    return await execute(
        config, RunOptions(store=store, quiet=True, batch=options), environ={}, say=lines.append
    )


async def test_batches_stay_below_the_enqueued_limit_and_wait_for_the_live_ones(tmp_path):
    store = tmp_path / "s.duckdb"
    lines: list[str] = []
    async with Simulator(SimProfile(seed=3, default=ModelProfile())) as sim:
        # Each prompt is ~9 tokens by plan's estimate (~7 by the simulator's count): 40
        # admits 4 trials a batch, and one such batch live at a time.
        sim.batches.enqueued_token_limit = 40
        result = await _run(_config(tmp_path, sim, 40), store, lines)
        assert result.exit_code == EXIT_OK, result.lines
        assert sim.batches.created == 3
        assert sim.batches.peak_live == 1  # each waited for the one before to end
        assert sim.batches.token_limit_failures == 0
    assert query(store, "SELECT count(*), count(DISTINCT trial_key) FROM responses") == [(12, 12)]
    assert [r for (r,) in query(store, "SELECT requests FROM batch_state")] == [4, 4, 4]
    said = [line for line in lines if "waits for live batches" in line]
    assert len(said) == 1 and "limit 40" in said[0] and "batch_enqueued_tokens" in said[0]


async def test_the_default_limit_leaves_a_small_run_in_one_batch(tmp_path):
    store = tmp_path / "s.duckdb"
    async with Simulator(SimProfile(seed=3, default=ModelProfile())) as sim:
        block = model_block(
            "gpt", provider="openai", base_url=sim.base_url, model="sim-gpt", batch=True
        )
        config = load_config(write_config(tmp_path, [block], n_prompts=12))
        result = await _run(config, store, [])
        assert result.exit_code == EXIT_OK, result.lines
        assert sim.batches.created == 1


async def test_a_batch_failed_on_the_limit_is_stored_as_failed_attempts(tmp_path):
    store = tmp_path / "s.duckdb"
    async with Simulator(SimProfile(seed=3, default=ModelProfile())) as sim:
        # The account's limit is lower than the config says (another tool's batches, a
        # lower tier): the provider fails each batch at validation.
        sim.batches.enqueued_token_limit = 20
        result = await _run(_config(tmp_path, sim, 1000), store, [], attempts=2)
        assert result.exit_code == EXIT_FAILED
        assert sim.batches.created == 2 and sim.batches.token_limit_failures == 2
        (batch, _) = sim.batches.batches.values()
        assert batch["status"] == "failed"
        assert batch["errors"]["object"] == "list"
        (error,) = batch["errors"]["data"]
        assert error["code"] == "token_limit_exceeded" and error["line"] is None
        assert error["message"].startswith("Enqueued token limit reached for sim-gpt")
    assert query(store, "SELECT count(*) FROM responses") == [(0,)]
    kinds = query(
        store, "SELECT error_kind, outcome, count(*) FROM attempts GROUP BY 1, 2 ORDER BY 2"
    )
    assert kinds == [("token_limit_exceeded", "gave_up", 12), ("token_limit_exceeded", "retry", 12)]
    details = [d for (d,) in query(store, "SELECT detail FROM batch_state")]
    assert details == ["batch ended failed (token_limit_exceeded)"] * 2

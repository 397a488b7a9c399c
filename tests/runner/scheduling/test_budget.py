"""`--max-cost` end to end against the simulator: the cap counts everything the store has spent
on this config's trials, across resumed runs and providers; it is crossed by no more than the
requests in flight; a resume at the same cap stops before any request, a higher cap finishes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from ibias.runner.config import Config, load_config
from ibias.runner.execution.run import EXIT_FAILED, EXIT_OK, RunOptions, RunResult, execute
from ibias.runner.providers.retries import Backoff
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config

FAST = Backoff(base_s=0.001, cap_s=0.01, max_attempts=10)
N_PROMPTS = 60
MAX_TOKENS = 64
PRICE_OUT = 10_000.0  # USD per million output tokens: a cent a token, ~$0.3 an answer
CONCURRENCY = 4
ENV = {"IBIAS_TEST_ANTHROPIC_KEY": "sk-ant-test"}
#: The most one request can cost: the whole completion budget, no input price.
MAX_REQUEST_COST = MAX_TOKENS * PRICE_OUT / 1e6


def _config(tmp_path: Path, sim: Simulator) -> Config:
    root = sim.base_url.removesuffix("/v1")
    common: dict[str, Any] = {
        "model": "budget",
        "price_output": PRICE_OUT,
        "max_concurrency": CONCURRENCY,
        "max_tokens": MAX_TOKENS,
    }
    blocks = [
        model_block("via-openai", provider="openai", base_url=root + "/v1", **common),
        model_block(
            "via-anthropic",
            provider="anthropic",
            base_url=root + "/v1",
            api_key_env="IBIAS_TEST_ANTHROPIC_KEY",
            **common,
        ),
    ]
    return load_config(write_config(tmp_path, blocks, n_prompts=N_PROMPTS))


async def _run(config: Config, store: Path, cap: float | None) -> RunResult:
    return await execute(
        config,
        RunOptions(store=store, quiet=True, backoff=FAST, max_cost=cap),
        environ=ENV,
    )


def _spent(store: Path) -> dict[str, float]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        rows = con.execute(
            "SELECT model_id, sum(cost_usd) FROM responses GROUP BY 1 ORDER BY 1"
        ).fetchall()
    finally:
        con.close()
    return {m: float(c) for m, c in rows}


async def test_the_cap_spans_resumed_runs_and_providers_and_a_higher_cap_finishes(tmp_path):
    store = tmp_path / "store.duckdb"
    cap = 10.0
    profile = SimProfile(seed=7, default=ModelProfile(latency_ms=5.0))
    async with Simulator(profile) as sim:
        config = _config(tmp_path, sim)

        first = await _run(config, store, cap)
        assert first.exit_code == EXIT_FAILED
        assert any(line.startswith("stopped: budget of $10.00 reached") for line in first.lines)
        spent = _spent(store)
        total = sum(spent.values())
        in_flight = 2 * CONCURRENCY
        # Crossed by no more than the requests in flight could cost...
        assert total <= cap + in_flight * MAX_REQUEST_COST
        # ...and here not at all: a request starts only while its estimate (the whole
        # completion budget) fits, and no answer costs more than that.
        assert total <= cap
        # It stopped only when the next request could not fit: less than one is left.
        assert total > cap - MAX_REQUEST_COST - 0.5
        # Both providers spent, and neither alone reached the cap: only their sum did.
        assert set(spent) == {"via-anthropic", "via-openai"}
        assert all(0 < v < cap for v in spent.values())

        requests_before = sim.stats().requests
        again = await _run(config, store, cap)
        assert again.exit_code == EXIT_FAILED
        assert sim.stats().requests == requests_before  # stopped before any request
        assert any(line.startswith("stopped: budget of $10.00 reached") for line in again.lines)
        assert _spent(store) == spent

        done = await _run(config, store, 1_000.0)
        assert done.exit_code == EXIT_OK, done.lines
        stats = sim.stats()
    # Each trial answered once over the three runs (both models ask the simulator's "budget"
    # model the same prompts: twice per prompt, once per provider).
    assert stats.served == stats.requests == 2 * N_PROMPTS
    assert set(stats.served_by_prompt.values()) == {2}
    assert sum(_spent(store).values()) > cap


async def test_without_a_cap_nothing_is_summed_and_a_fresh_store_spends_from_zero(tmp_path):
    profile = SimProfile(seed=7, default=ModelProfile())
    async with Simulator(profile) as sim:
        config = _config(tmp_path, sim)
        result = await _run(config, tmp_path / "store.duckdb", None)
    assert result.exit_code == EXIT_OK, result.lines
    assert len(_spent(tmp_path / "store.duckdb")) == 2


async def test_a_reply_of_unknown_cost_counts_at_its_upper_bound_when_resumed(tmp_path):
    """A stored response whose cost is unknown (NULL: the provider sent no usable usage)
    counts in a resumed run's budget at its request's upper bound (the prompt estimate at the
    input price plus the whole `max_tokens` at the output price), never as free."""
    from ibias.runner.execution.run import spent_on_plan
    from ibias.store.plans import find_plan

    profile = SimProfile(seed=7, default=ModelProfile())
    store = tmp_path / "store.duckdb"
    async with Simulator(profile) as sim:
        config = _config(tmp_path, sim)
        assert (await _run(config, store, None)).exit_code == EXIT_OK
    con = duckdb.connect(str(store))
    try:
        unknown = [
            k
            for (k,) in con.execute(
                "SELECT trial_key FROM responses WHERE model_id = 'via-openai' "
                "ORDER BY trial_key LIMIT 5"
            ).fetchall()
        ]
        con.execute(
            "UPDATE responses SET cost_usd = NULL WHERE list_contains(?, trial_key)", [unknown]
        )
        known = con.execute("SELECT sum(cost_usd) FROM responses").fetchall()[0][0]
        (plan_hash,) = con.execute("SELECT plan_hash FROM runs").fetchall()[0]
        plan = find_plan(con, plan_hash)
        assert plan is not None
        # No input price: each unknown reply counts its whole completion budget.
        expected = known + 5 * MAX_REQUEST_COST
        assert abs(spent_on_plan(con, plan, config.models) - expected) < 1e-9
        # Without the models' configs only what is known is summed.
        assert abs(spent_on_plan(con, plan) - known) < 1e-9
    finally:
        con.close()

"""`ibias plan --batch` says which models would run as provider batches and which online
(and why), and prices the batch models at their batch price; the budget stops submitting
batches at the bound."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from ibias.runner.batch.limits import BatchLimits
from ibias.runner.batch.run import BatchOptions
from ibias.runner.cli import main
from ibias.runner.config import load_config
from ibias.runner.execution.run import EXIT_FAILED, RunOptions, execute
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config
from tests.runner.batch.batching import no_sleep


def _cfg(tmp_path: Path, url: str) -> Path:
    prices = {"price_input": 2.0, "price_output": 8.0, "max_tokens": 100}
    return write_config(
        tmp_path,
        [
            model_block("official", provider="openai", **prices),
            model_block(
                "priced",
                provider="openai",
                base_url=url,
                batch=True,
                batch_price_input=0.2,
                batch_price_output=0.8,
                **prices,
            ),
            model_block("elsewhere", provider="openai", base_url=url, **prices),
            model_block("claude", provider="anthropic", model="claude-x", **prices),
            model_block("gem", provider="gemini", model="gemini-x", **prices),
            model_block("local", provider="simulator", **prices),
        ],
        n_prompts=10,
    )


def test_plan_says_which_models_run_as_batches_and_prices_them(tmp_path, capsys):
    cfg = _cfg(tmp_path, "http://127.0.0.1:9/v1")
    assert main(["plan", str(cfg), "--json"]) == 0
    online = json.loads(capsys.readouterr().out)
    assert main(["plan", str(cfg), "--json", "--batch"]) == 0
    batch = json.loads(capsys.readouterr().out)
    modes = {m["model_id"]: m["mode"] for m in batch["models"]}
    assert modes == {
        "official": "batch",
        "priced": "batch",
        "elsewhere": "online",
        "claude": "batch",
        "gem": "batch",
        "local": "online",
    }
    assert {m["model_id"]: m["mode"] for m in online["models"]} == dict.fromkeys(modes, "online")
    cost = {m["model_id"]: m["estimated_cost_usd"] for m in batch["models"]}
    was = {m["model_id"]: m["estimated_cost_usd"] for m in online["models"]}
    assert abs(cost["official"] - was["official"] / 2) < 1e-3  # the documented discount
    assert abs(cost["priced"] - was["priced"] / 10) < 1e-3  # its own batch prices
    assert abs(cost["claude"] - was["claude"] / 2) < 1e-3
    assert abs(cost["gem"] - was["gem"] / 2) < 1e-3
    assert cost["elsewhere"] == was["elsewhere"] and cost["local"] == was["local"]
    assert batch["online_cost_usd"] == online["estimated_cost_usd"]
    assert "model elsewhere runs online: host 127.0.0.1 is not api.openai.com" in " ".join(
        batch["batch_lines"]
    )
    # The table says it too.
    assert main(["plan", str(cfg), "--batch"]) == 0
    text = capsys.readouterr().out
    assert "model local runs online: provider 'simulator' has no batch mode" in text
    assert "model gem runs in batch mode (Gemini batch generation" in text
    assert "model official runs in batch mode (OpenAI Batch API" in text
    assert "model claude runs in batch mode (Anthropic Message Batches" in text


async def test_the_budget_stops_submitting_batches_at_the_bound(tmp_path):
    async with Simulator(SimProfile(seed=2, default=ModelProfile())) as sim:
        block = model_block(
            "gpt",
            provider="openai",
            base_url=sim.base_url,
            model="sim-gpt",
            batch=True,
            price_input=1000.0,
            price_output=1000.0,
            max_tokens=100,
        )
        config = load_config(write_config(tmp_path, [block], n_prompts=12))
        # A batch of 4 costs at most 4 x (prompt ~10 + 100 tokens) x $500/M ~ $0.22 at the
        # batch price: a $0.50 budget admits two batches, not the third.
        options = BatchOptions(forced=True, limits=BatchLimits(max_requests=4), sleep=no_sleep)
        lines: list[str] = []
        result = await execute(
            config,
            RunOptions(store=tmp_path / "s.duckdb", quiet=True, max_cost=0.5, batch=options),
            environ={},
            say=lines.append,
        )
        assert sim.batches.created == 2
    assert any(line.startswith("batch submission stopped: the next batch") for line in lines)
    con = duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM responses").fetchall() == [(8,)]
    finally:
        con.close()
    assert result.exit_code == EXIT_FAILED


async def test_the_budget_counts_live_batches_of_an_earlier_run(tmp_path):
    """A batch an earlier `--no-wait` run left running counts at its upper bound: the next
    run's budget admits nothing it would pass, and says so in one line."""
    async with Simulator(SimProfile(seed=2, default=ModelProfile())) as sim:
        sim.batches.steps = 1000  # the first run's batch stays in progress
        block = model_block(
            "gpt",
            provider="openai",
            base_url=sim.base_url,
            model="sim-gpt",
            batch=True,
            price_input=1000.0,
            price_output=1000.0,
            max_tokens=100,
        )
        config = load_config(write_config(tmp_path, [block], n_prompts=12))
        store = tmp_path / "s.duckdb"

        def options(cap: float, wait: bool) -> RunOptions:
            batch = BatchOptions(
                forced=True, wait=wait, limits=BatchLimits(max_requests=4), sleep=no_sleep
            )
            return RunOptions(store=store, quiet=True, max_cost=cap, batch=batch)

        # A batch of 4 costs at most ~$0.22: $0.30 admits one, which stays running.
        await execute(config, options(0.3, wait=False), environ={})
        assert sim.batches.created == 1
        # $0.40 would admit one more batch on its own, not beside the live one.
        lines: list[str] = []
        result = await execute(config, options(0.4, wait=False), environ={}, say=lines.append)
        assert sim.batches.created == 1
    said = [line for line in lines if line.startswith("batch submission stopped")]
    assert len(said) == 1 and "live batches" in said[0] and "earlier runs'" in said[0]
    assert result.exit_code == EXIT_FAILED

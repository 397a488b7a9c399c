"""`ibias status` lists each batch (state, counts, age) from the store, and `ibias batches
cancel CONFIG` cancels the config's live batches at the provider; the next `ibias run --batch`
retries the trials the cancelled batch never ran."""

from __future__ import annotations

import asyncio
import json

import duckdb

from ibias.runner.batch.run import BatchOptions
from ibias.runner.cli import main
from ibias.runner.config import load_config
from ibias.runner.execution.run import EXIT_OK, RunOptions, execute
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config
from tests.runner.batch.batching import no_sleep


async def test_status_lists_batches_and_cancel_cancels_them(tmp_path, capsys):
    async with Simulator(SimProfile(seed=8, default=ModelProfile())) as sim:
        sim.batches.steps = 1000  # the batch stays in progress until cancelled
        path = write_config(
            tmp_path,
            [model_block("gpt", provider="openai", base_url=sim.base_url, batch=True)],
            n_prompts=5,
        )
        store = tmp_path / "store.duckdb"
        first = await execute(
            load_config(path),
            RunOptions(store=store, quiet=True, batch=BatchOptions(forced=True, wait=False)),
            environ={},
        )
        assert first.exit_code == EXIT_OK, first.lines
        capsys.readouterr()
        assert await asyncio.to_thread(main, ["status", "--store", str(store), "--json"]) == 0
        (batch,) = json.loads(capsys.readouterr().out)["batches"]
        assert batch["provider"] == "openai" and batch["model_id"] == "gpt"
        assert batch["state"] == "submitted" and batch["requests"] == 5
        assert batch["batch_id"].startswith("batch_") and batch["age_s"] >= 0
        assert await asyncio.to_thread(main, ["status", "--store", str(store)]) == 0
        assert f"batch {batch['batch_id']} (openai, model gpt): submitted, 5 requests" in (
            capsys.readouterr().out
        )
        assert await asyncio.to_thread(main, ["batches", "cancel", str(path)]) == 0
        assert "1 batches cancelled" in capsys.readouterr().err
        assert sim.batches.batches[batch["batch_id"]]["status"] == "cancelling"
        sim.batches.steps = 1
        again = await execute(
            load_config(path),
            RunOptions(store=store, quiet=True, batch=BatchOptions(forced=True, sleep=no_sleep)),
            environ={},
        )
        assert again.exit_code == EXIT_OK, again.lines
        assert sim.batches.created == 2  # the cancelled batch's trials, sent again
        assert await asyncio.to_thread(main, ["status", "--store", str(store), "--json"]) == 0
        states = [b["detail"] for b in json.loads(capsys.readouterr().out)["batches"]]
        assert states == ["batch ended cancelled", "batch ended completed"]


async def test_status_refresh_asks_the_provider_and_records_it(tmp_path, capsys, monkeypatch):
    async with Simulator(SimProfile(seed=8, default=ModelProfile())) as sim:
        sim.batches.steps = 1  # each read of a batch moves it one state on
        block = model_block(
            "gpt", provider="openai", base_url=sim.base_url, batch=True, api_key_env="SIM_K"
        )
        path = write_config(tmp_path, [block], n_prompts=5)
        store = tmp_path / "store.duckdb"
        first = await execute(
            load_config(path),
            RunOptions(store=store, quiet=True, batch=BatchOptions(forced=True, wait=False)),
            environ={"SIM_K": "sk-test"},
        )
        assert first.exit_code == EXIT_OK, first.lines
        (batch_id,) = sim.batches.batches
        capsys.readouterr()

        def status(*extra: str) -> tuple[int, str, str]:
            code = main(["status", str(path), *extra])
            out, err = capsys.readouterr()
            return code, out, err

        # Without --refresh: the store's view; the provider is not asked.
        code, out, _ = await asyncio.to_thread(status, "--json")
        assert code == 0 and json.loads(out)["batches"][0]["state"] == "submitted"
        assert sim.batches.batches[batch_id]["status"] == "validating"
        # The key is missing: one line, exit 2, nothing asked.
        monkeypatch.delenv("SIM_K", raising=False)
        code, out, err = await asyncio.to_thread(status, "--refresh")
        assert code == 2 and out == ""
        assert len(err.strip().splitlines()) == 1 and "SIM_K" in err
        assert sim.batches.batches[batch_id]["status"] == "validating"
        # --refresh reads the batch at the provider (it moves on), records and shows it.
        monkeypatch.setenv("SIM_K", "sk-test")
        code, out, err = await asyncio.to_thread(status, "--refresh", "--json")
        assert code == 0, err
        assert sim.batches.batches[batch_id]["status"] == "in_progress"
        (shown,) = json.loads(out)["batches"]
        assert shown["state"] == "in_progress" and shown["batch_id"] == batch_id
        assert f"batch {batch_id} in_progress" in err
        code, out, _ = await asyncio.to_thread(status)
        assert code == 0 and f"batch {batch_id} (openai, model gpt): in_progress" in out
        # A refresh never downloads: the batch ends at the provider, its results wait for
        # the next run.
        sim.batches.finish_all()
        code, out, _ = await asyncio.to_thread(status, "--refresh", "--json")
        assert json.loads(out)["batches"][0]["state"] == "completed"
        # Without a CONFIG there is no provider to ask: one line, exit 2.
        code = await asyncio.to_thread(main, ["status", "--store", str(store), "--refresh"])
        assert code == 2
        assert "give the CONFIG" in capsys.readouterr().err
        con = duckdb.connect(str(store), read_only=True)
        try:
            assert con.execute("SELECT count(*) FROM responses").fetchall() == [(0,)]
        finally:
            con.close()
        # The next run stores the results of the batch the refresh saw end.
        again = await execute(
            load_config(path),
            RunOptions(store=store, quiet=True, batch=BatchOptions(forced=True, sleep=no_sleep)),
            environ={"SIM_K": "sk-test"},
        )
        assert again.exit_code == EXIT_OK, again.lines
        assert sim.batches.created == 1
    con = duckdb.connect(str(store), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM responses").fetchall() == [(5,)]
    finally:
        con.close()

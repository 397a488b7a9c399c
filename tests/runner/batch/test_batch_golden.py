"""The same trial sent online and in a batch is the same trial: the same key (the batch
options are how a trial is sent, never part of its key) and the same request body (built by
the same provider code), compared on what the simulator received both ways: OpenAI's batch
input file, Anthropic's Message Batches `params` and Gemini's inline batch requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest

from ibias.runner import simulator
from ibias.runner.batch.limits import BatchLimits
from ibias.runner.batch.run import BatchOptions
from ibias.runner.config import load_config
from ibias.runner.execution.run import EXIT_OK, RunOptions, execute
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config
from tests.runner.batch.batching import no_sleep


def _keys(store: Path) -> set[str]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return {r[0] for r in con.execute("SELECT trial_key FROM trials").fetchall()}
    finally:
        con.close()


async def test_a_trial_is_the_same_request_online_and_in_a_batch(tmp_path, monkeypatch):
    received: list[dict[str, Any]] = []
    read = simulator.OPENAI.read

    def recording(request: Any, raw: bytes) -> Any:
        received.append(orjson.loads(raw))
        return read(request, raw)

    monkeypatch.setattr(simulator.OPENAI, "read", recording)
    common = {"model": "sim-gpt", "temperature": 0.5, "max_tokens": 77, "sampling_seed": 9}
    async with Simulator(SimProfile(seed=1, default=ModelProfile())) as sim:
        online_dir, batch_dir = tmp_path / "online", tmp_path / "batch"
        online_dir.mkdir()
        batch_dir.mkdir()
        online = load_config(
            write_config(
                online_dir,
                [model_block("m", provider="openai", base_url=sim.base_url, **common)],
                n_prompts=6,
            )
        )
        batched = load_config(
            write_config(
                batch_dir,
                [
                    model_block(
                        "m",
                        provider="openai",
                        base_url=sim.base_url,
                        batch=True,
                        mode="batch",
                        batch_price_input=0.5,
                        batch_price_output=1.5,
                        batch_enqueued_tokens=500_000,
                        **common,
                    )
                ],
                n_prompts=6,
            )
        )
        result = await execute(online, RunOptions(store=online_dir / "s.duckdb", quiet=True), {})
        assert result.exit_code == EXIT_OK
        online_bodies = list(received)
        received.clear()
        result = await execute(
            batched,
            RunOptions(
                store=batch_dir / "s.duckdb",
                quiet=True,
                batch=BatchOptions(limits=BatchLimits(), sleep=no_sleep),  # `mode` asks
            ),
            {},
        )
        assert result.exit_code == EXIT_OK, result.lines
        assert sim.batches.created == 1
        (input_file,) = [f for f, m in sim.batches.files.items() if m.get("purpose") == "batch"]
        lines = [orjson.loads(x) for x in sim.batches.contents[input_file].splitlines()]
    assert _keys(online_dir / "s.duckdb") == _keys(batch_dir / "s.duckdb")
    assert {x["custom_id"] for x in lines} == _keys(online_dir / "s.duckdb")
    by_prompt = {orjson.dumps(b["messages"]): b for b in online_bodies}
    assert len(by_prompt) == 6
    for line in lines:
        assert line["method"] == "POST" and line["url"] == "/v1/chat/completions"
        body = line["body"]
        assert body == by_prompt[orjson.dumps(body["messages"])]
        assert orjson.dumps(body) == orjson.dumps(by_prompt[orjson.dumps(body["messages"])])
    # The batch's replies are priced at the batch prices the model declares.
    con = duckdb.connect(str(batch_dir / "s.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT prompt_tokens, completion_tokens, cost_usd FROM responses")
        for prompt, completion, cost in rows.fetchall():
            assert cost == pytest.approx((prompt * 0.5 + completion * 1.5) / 1e6, abs=1e-15)
    finally:
        con.close()


def _anthropic_lines(sim: Simulator) -> list[tuple[str, dict[str, Any]]]:
    """(custom id, Messages body) of every request the simulator's Message Batches got."""
    service = sim.message_batches
    return [(r["custom_id"], r["params"]) for rs in service._requests.values() for r in rs]


def _gemini_lines(sim: Simulator) -> list[tuple[str, dict[str, Any]]]:
    """(key, GenerateContentRequest) of every request the simulator's batch generation got."""
    service = sim.gemini_batches
    return [(i["key"], i["request"]) for items in service._inputs.values() for i in items]


@pytest.mark.parametrize(
    ("provider", "reader", "prompt_of", "lines_of"),
    [
        ("anthropic", simulator.ANTHROPIC, "messages", _anthropic_lines),
        ("gemini", simulator.GEMINI, "contents", _gemini_lines),
    ],
)
async def test_anthropic_and_gemini_trials_are_the_same_online_and_in_a_batch(
    tmp_path, monkeypatch, provider, reader, prompt_of, lines_of
):
    """As the OpenAI test above: the same keys, and each batch request's body is, byte for
    byte, the body the online request posted for the same prompt."""
    received: list[bytes] = []
    read = reader.read

    def recording(request: Any, raw: bytes) -> Any:
        received.append(raw)
        return read(request, raw)

    monkeypatch.setattr(reader, "read", recording)
    common: dict[str, Any] = {"model": f"{provider}-sim", "temperature": 0.5, "max_tokens": 77}
    if provider == "gemini":
        common["sampling_seed"] = 9
    async with Simulator(SimProfile(seed=1, default=ModelProfile())) as sim:
        url = sim.base_url
        if provider == "gemini":
            url = url.removesuffix("/v1") + "/v1beta"
        online_dir, batch_dir = tmp_path / "online", tmp_path / "batch"
        online_dir.mkdir()
        batch_dir.mkdir()
        online = load_config(
            write_config(
                online_dir,
                [model_block("m", provider=provider, base_url=url, **common)],
                n_prompts=6,
            )
        )
        batched = load_config(
            write_config(
                batch_dir,
                [
                    model_block(
                        "m",
                        provider=provider,
                        base_url=url,
                        batch=True,
                        mode="batch",
                        batch_price_input=0.5,
                        batch_price_output=1.5,
                        **common,
                    )
                ],
                n_prompts=6,
            )
        )
        result = await execute(online, RunOptions(store=online_dir / "s.duckdb", quiet=True), {})
        assert result.exit_code == EXIT_OK, result.lines
        online_bodies = [orjson.loads(raw) for raw in received]
        options = BatchOptions(limits=BatchLimits(), sleep=no_sleep)  # `mode` asks
        result = await execute(
            batched, RunOptions(store=batch_dir / "s.duckdb", quiet=True, batch=options), {}
        )
        assert result.exit_code == EXIT_OK, result.lines
        lines = lines_of(sim)
        assert sim.stats().requests == 6  # the online run's; the batch run sent none online
    keys = _keys(online_dir / "s.duckdb")
    assert keys == _keys(batch_dir / "s.duckdb")
    assert {key for key, _ in lines} == keys and len(lines) == 6
    by_prompt = {orjson.dumps(b[prompt_of]): b for b in online_bodies}
    assert len(by_prompt) == 6
    for _, body in lines:
        assert orjson.dumps(body) == orjson.dumps(by_prompt[orjson.dumps(body[prompt_of])])

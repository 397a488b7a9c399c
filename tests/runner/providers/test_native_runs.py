"""One whole run per native protocol through `execute()`: the `anthropic` and `gemini`
providers, built by a provider factory, against the simulator's Anthropic and Gemini modes on
127.0.0.1, with faults, refusals and an API key the simulator requires.

Every trial must end with exactly one response (the simulator counts what it served per
prompt), the stored tokens, cost, refusals and provider model must be what the protocol said,
and the key must appear nowhere: not in the store, the status file, the result lines or the
one line a fatal error prints.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ibias.prompts.base import Persona
from ibias.runner.config import Config, ModelConfig, load_config
from ibias.runner.execution.run import RunOptions, execute
from ibias.runner.providers.anthropic import AnthropicProvider
from ibias.runner.providers.base import Provider, ProviderContext
from ibias.runner.providers.gemini import GeminiOptions, GeminiProvider
from ibias.runner.providers.retries import Backoff
from ibias.runner.simulator import (
    MODEL_VERSION_SUFFIX,
    Simulator,
    answer_for,
    estimate_tokens,
    gemini_thoughts,
)
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config

KEYS = {
    "anthropic": "sk-ant-api03-RUNSECRETRUNSECRETRUNSECRET",
    "gemini": "AIzaSyRUNSECRETRUNSECRETRUNSECRET0000",
}
ENV = {"anthropic": "IBIAS_TEST_ANTHROPIC_KEY", "gemini": "IBIAS_TEST_GEMINI_KEY"}
N_PROMPTS = 40
PRICE_IN, PRICE_OUT = 3.0, 15.0
#: Short waits, and enough attempts that no trial gives up on the faults below.
FAST = Backoff(base_s=0.001, cap_s=0.01, max_attempts=30)
FAULTS = {"500": 0.05, "503": 0.05, "malformed": 0.05, "truncated": 0.05, "429": 0.02}
REFUSING = Persona(refusal_rate=0.3)
SEED = 7  # the run's seed is the simulator's answer seed below (write_config's default)

PROFILE = SimProfile(
    seed=SEED,
    models={
        "steady": ModelProfile(rpm=6000, tpm=2_000_000, faults=FAULTS),
        "refusing": ModelProfile(persona=REFUSING, faults=FAULTS),
        "locked": ModelProfile(fatal_status=401),
        "exhausted": ModelProfile(insufficient_quota=True),
    },
)


@asynccontextmanager
async def serving(protocol: str) -> AsyncIterator[Simulator]:
    """The simulator on 127.0.0.1, requiring this protocol's key."""
    simulator = Simulator(PROFILE, require_key=KEYS[protocol])
    await simulator.start()
    try:
        yield simulator
    finally:
        await simulator.stop()


def base_url(sim: Simulator, protocol: str) -> str:
    root = sim.base_url.removesuffix("/v1")
    return root + ("/v1" if protocol == "anthropic" else "/v1beta")


class Factory:
    """Builds the native provider of `protocol` for every model of the config (which calls them
    `openai` until the config accepts the native names)."""

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self.built: list[Provider] = []

    def __call__(
        self, model: ModelConfig, api_key: str | None, context: ProviderContext
    ) -> Provider:
        assert model.base_url is not None
        common: dict[str, Any] = {
            "base_url": model.base_url,
            "model": model.model,
            "api_key": api_key,
            "timeout_s": model.timeout_s,
            "max_connections": model.max_concurrency,
        }
        built: Provider
        if self.protocol == "anthropic":
            built = AnthropicProvider(**common)
        else:
            built = GeminiProvider(**common, options=GeminiOptions(thinking_budget=-1))
        self.built.append(built)
        return built


def config(tmp_path: Path, sim: Simulator, protocol: str, models: list[str]) -> Config:
    blocks = [
        model_block(
            f"{protocol}-{name}",
            provider="openai",
            base_url=base_url(sim, protocol),
            model=name,
            api_key_env=ENV[protocol],
            price_input=PRICE_IN,
            price_output=PRICE_OUT,
            max_concurrency=8,
        )
        for name in models
    ]
    return load_config(write_config(tmp_path, blocks, n_prompts=N_PROMPTS, seed=SEED))


def rows(store: Path, sql: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def everything_stored(store: Path) -> str:
    """Every row of every table, as text."""
    con = duckdb.connect(str(store), read_only=True)
    try:
        tables = [
            t
            for (t,) in con.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'main' AND table_type = 'BASE TABLE'"
            ).fetchall()
        ]
        return "\n".join(repr(con.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables)
    finally:
        con.close()


def assert_key_nowhere(key: str, store: Path, lines: list[str]) -> None:
    assert key not in everything_stored(store)
    assert key.encode() not in store.read_bytes()
    status = store.with_name(store.name + ".status.json")
    if status.exists():
        assert key not in status.read_text()
    assert not any(key in line for line in lines)


@pytest.mark.parametrize("protocol", ["anthropic", "gemini"])
async def test_a_run_in_each_protocol_answers_every_trial_once(
    tmp_path: Path, protocol: str
) -> None:
    store = tmp_path / "store.duckdb"
    lines: list[str] = []
    factory = Factory(protocol)
    async with serving(protocol) as sim:
        cfg = config(tmp_path, sim, protocol, ["steady", "refusing"])
        result = await execute(
            cfg,
            RunOptions(store=store, quiet=True, backoff=FAST),
            environ={ENV[protocol]: KEYS[protocol]},
            say=lines.append,
            provider_factory=factory,
        )
    assert result.exit_code == 0, (result.lines, lines)
    assert len(factory.built) == 2

    trials = rows(store, "SELECT trial_key, model_id, messages FROM trials")
    assert len(trials) == 2 * N_PROMPTS
    answered = rows(
        store,
        "SELECT trial_key, count(*), any_value(content), any_value(refusal), "
        "any_value(finish_reason), any_value(prompt_tokens), any_value(completion_tokens), "
        "any_value(cost_usd), any_value(provider_model) FROM responses GROUP BY trial_key",
    )
    by_key = {r[0]: r[1:] for r in answered}
    assert set(by_key) == {t[0] for t in trials}

    refused = 0
    for trial_key, model_id, messages_json in trials:
        name = model_id.removeprefix(f"{protocol}-")
        messages = json.loads(messages_json)
        # exactly one response stored, and exactly one answer served for this prompt
        count, content, refusal, finish, prompt, completion, cost, provider_model = by_key[
            trial_key
        ]
        assert count == 1
        assert sim.served_count(name, messages) == 1
        persona = PROFILE.models[name].persona
        text, sim_finish = answer_for(SEED, name, tuple(messages), persona)
        assert provider_model == name + MODEL_VERSION_SUFFIX
        expected_prompt = estimate_tokens(sum(len(m["content"]) for m in messages))
        assert prompt == expected_prompt
        if sim_finish == "content_filter":  # the protocol's withheld answer: a refusal
            refused += 1
            assert content is None and refusal and finish == "content_filter"
            expected_completion = 0
        else:
            assert content == text and refusal is None and finish == "stop"
            expected_completion = estimate_tokens(len(text))
            if protocol == "gemini":  # dynamic thinking: thoughts are billed as output
                expected_completion += gemini_thoughts(-1, expected_prompt)
        assert completion == expected_completion
        assert cost == pytest.approx((prompt * PRICE_IN + completion * PRICE_OUT) / 1e6)
    assert refused > 0

    stats = sim.stats()
    assert stats.served == 2 * N_PROMPTS
    assert stats.fault_total > 0  # the run went through faults and retried them
    retried = rows(store, "SELECT count(*) FROM attempts WHERE outcome = 'retry'")[0][0]
    assert retried == stats.fault_total + stats.rate_limited  # each refused answer, retried
    assert_key_nowhere(KEYS[protocol], store, [*lines, *result.lines])


@pytest.mark.parametrize("protocol", ["anthropic", "gemini"])
async def test_fatal_errors_stop_only_their_model_with_one_line(
    tmp_path: Path, protocol: str
) -> None:
    store = tmp_path / "store.duckdb"
    lines: list[str] = []
    async with serving(protocol) as sim:
        cfg = config(tmp_path, sim, protocol, ["steady", "locked", "exhausted"])
        result = await execute(
            cfg,
            RunOptions(store=store, quiet=True, backoff=FAST),
            environ={ENV[protocol]: KEYS[protocol]},
            say=lines.append,
            provider_factory=Factory(protocol),
        )
    assert result.exit_code == 1
    stopped = sorted(line for line in lines if " stopped: " in line)
    assert len(stopped) == 2
    exhausted, locked = stopped
    assert locked.startswith(f"model {protocol}-locked stopped: HTTP ")
    if protocol == "anthropic":
        assert "HTTP 401: invalid x-api-key" in locked
        assert "credit balance is too low" in exhausted
    else:
        assert "HTTP 400: API key not valid" in locked
        assert exhausted.startswith(f"model {protocol}-exhausted stopped: HTTP 429: daily quota ")
        assert "resets at midnight Pacific time" in exhausted
        assert "run again after that to continue" in exhausted
    kinds = dict(
        rows(
            store,
            "SELECT model_id, any_value(error_kind) FROM attempts WHERE outcome = 'fatal' "
            "GROUP BY model_id",
        )
    )
    assert kinds == {
        f"{protocol}-locked": "auth",
        f"{protocol}-exhausted": "billing" if protocol == "anthropic" else "daily_quota",
    }
    done = dict(rows(store, "SELECT model_id, count(*) FROM responses GROUP BY model_id"))
    assert done == {f"{protocol}-steady": N_PROMPTS}
    assert_key_nowhere(KEYS[protocol], store, [*lines, *result.lines])


async def test_a_resume_after_the_daily_reset_continues(tmp_path: Path) -> None:
    """A daily quota stops the model for this run only: nothing of it is stored as a verdict,
    so the next run (after the reset, here a simulator whose quota is fresh) finishes it."""
    store = tmp_path / "store.duckdb"
    environ = {ENV["gemini"]: KEYS["gemini"]}
    async with serving("gemini") as sim:
        cfg = config(tmp_path, sim, "gemini", ["exhausted"])
        first = await execute(
            cfg,
            RunOptions(store=store, quiet=True, backoff=FAST),
            environ=environ,
            say=lambda line: None,
            provider_factory=Factory("gemini"),
        )
    assert first.exit_code == 1
    assert rows(store, "SELECT count(*) FROM responses") == [(0,)]

    fresh = SimProfile(seed=SEED, models={"exhausted": ModelProfile()})
    after_reset = Simulator(fresh, require_key=KEYS["gemini"])
    await after_reset.start()
    try:
        cfg = config(tmp_path, after_reset, "gemini", ["exhausted"])
        second = await execute(
            cfg,
            RunOptions(store=store, quiet=True, backoff=FAST),
            environ=environ,
            say=lambda line: None,
            provider_factory=Factory("gemini"),
        )
    finally:
        await after_reset.stop()
    assert second.exit_code == 0, second.lines
    assert rows(store, "SELECT count(*), count(DISTINCT trial_key) FROM responses") == [
        (N_PROMPTS, N_PROMPTS)
    ]
    assert after_reset.stats().served == N_PROMPTS

"""`ibias models CONFIG` against the simulator on 127.0.0.1, in each protocol: a good model is
usable and its announced limits are shown, a wrong model name and a wrong key fail it, a
missing key variable fails it, and the exit code says whether every model is usable."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ibias.runner.cli import main
from ibias.runner.config import load_config
from ibias.runner.execution.models_check import MAX_TOKENS, check_models
from ibias.runner.simulator import MODEL_VERSION_SUFFIX, Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config

KEY = "sk-models-check-SECRET-0123456789"
PROFILE = SimProfile(
    seed=1,
    models={
        "good": ModelProfile(rpm=600, tpm=100_000),
        "gone": ModelProfile(fatal_status=404),
    },
)
PROTOCOLS = {"openai": "/v1", "anthropic": "/v1", "gemini": "/v1beta"}


def _blocks(root: str, protocol: str, env: str = "IBIAS_TEST_MODELS_KEY") -> list[str]:
    return [
        model_block(
            f"{protocol}-{name}",
            provider=protocol,
            base_url=root + PROTOCOLS[protocol],
            model=name,
            api_key_env=env,
        )
        for name in ("good", "gone")
    ]


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
async def test_each_protocol_finds_a_wrong_name_and_reads_the_limits(tmp_path, protocol):
    async with Simulator(PROFILE, require_key=KEY) as sim:
        root = sim.base_url.removesuffix("/v1")
        config = load_config(write_config(tmp_path, _blocks(root, protocol)))
        good, gone = await check_models(config, {"IBIAS_TEST_MODELS_KEY": KEY})
        wrong_key = await check_models(config, {"IBIAS_TEST_MODELS_KEY": "sk-wrong"})
        served = sim.stats().served
    assert good.ok and good.status == 200 and good.message == "ok"
    assert good.reported_model == "good" + MODEL_VERSION_SUFFIX
    if protocol == "gemini":  # Gemini announces no limits in headers
        assert (good.rpm, good.tpm) == (None, None)
    else:
        assert good.rpm == 600 and good.tpm is not None
    assert not gone.ok and gone.status == 404 and "gone" in gone.message
    assert not any(c.ok for c in wrong_key)
    assert served == 1  # one request per model; failed ones served nothing
    assert KEY not in repr([good, gone])


async def test_a_missing_key_variable_fails_that_model_only(tmp_path):
    async with Simulator(PROFILE) as sim:
        root = sim.base_url.removesuffix("/v1")
        blocks = [*_blocks(root, "openai")[:1], *_blocks(root, "openai", "IBIAS_TEST_UNSET")[1:]]
        config = load_config(write_config(tmp_path, blocks))
        good, unset = await check_models(config, {"IBIAS_TEST_MODELS_KEY": KEY})
    assert good.ok
    assert (unset.ok, unset.message) == (False, "environment variable IBIAS_TEST_UNSET is not set")


def test_the_command_exit_codes_and_json(tmp_path):
    """Through the CLI: 0 when every (simulated) model answers, 1 when one fails, 2 for a bad
    config. Runs in a subprocess because the CLI runs its own event loop."""
    ok = write_config(tmp_path, [model_block("s", provider="simulator", max_tokens=400)])
    code = "import sys; from ibias.runner.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, "models", str(ok), "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "IBIAS_DEBUG": ""},
    )
    assert done.returncode == 0, done.stderr
    (check,) = json.loads(done.stdout)
    assert check["ok"] and check["model_id"] == "s" and check["status"] == 200
    failing = tmp_path / "failing"
    failing.mkdir()
    bad = write_config(
        failing,
        [model_block("s", provider="simulator", sim={"fatal_status": 404})],
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "models", str(bad)], capture_output=True, text=True
    )
    assert done.returncode == 1 and "0 of 1 models usable; 1 failed" in done.stdout
    assert main(["models", str(tmp_path / "absent.toml")]) == 2
    assert MAX_TOKENS <= 16


async def test_an_endpoint_refusing_logprobs_fails_the_check(tmp_path):
    profile = SimProfile(seed=1, models={"nolp": ModelProfile(refuse_logprobs=True)})
    async with Simulator(profile) as sim:
        blocks = [
            model_block(name, provider="openai", base_url=sim.base_url, model=name, logprobs=True)
            for name in ("good", "nolp")
        ]
        good, nolp = await check_models(load_config(write_config(tmp_path, blocks)), {})
    assert good.ok
    assert not nolp.ok and nolp.status == 400
    assert "refuses logprobs" in nolp.message and "remove logprobs = true" in nolp.message


async def test_an_anthropic_model_with_a_thinking_budget_is_asked_past_its_budget(tmp_path):
    """Anthropic refuses budget_tokens that are not below max_tokens: the check's short request
    must not be that 400."""
    from ibias.runner.providers.registry import create_provider

    sent = []

    def factory(cfg, key, context):
        provider = create_provider(cfg, key, context)
        complete = provider.complete

        async def recording(messages, sampling):
            sent.append(sampling.max_tokens)
            return await complete(messages, sampling)

        provider.complete = recording
        return provider

    async with Simulator(PROFILE, require_key=KEY) as sim:
        root = sim.base_url.removesuffix("/v1")
        block = model_block("t", provider="anthropic", base_url=root + "/v1", model="good",
                            api_key_env="IBIAS_TEST_MODELS_KEY", max_tokens=4096,
                            temperature=1, thinking_budget=2048)  # fmt: skip
        config = load_config(write_config(tmp_path, [block]))
        (check,) = await check_models(
            config, {"IBIAS_TEST_MODELS_KEY": KEY}, provider_factory=factory
        )
    assert check.ok
    assert sent == [2048 + MAX_TOKENS]

"""The provider registry and the values every provider shares (Limits, Sampling)."""

from __future__ import annotations

import pytest

from ibias.runner.config import ModelConfig, implemented_providers, load_config
from ibias.runner.providers import registry
from ibias.runner.providers.anthropic import AnthropicProvider
from ibias.runner.providers.base import Limits, Provider, ProviderContext, Reply, Sampling
from ibias.runner.providers.gemini import GeminiProvider
from ibias.runner.providers.openai import OpenAIProvider, openai_limits, openai_sampling
from ibias.runner.providers.registry import (
    UnknownProviderError,
    create_provider,
    provider,
    provider_class,
    registered_providers,
)
from ibias.runner.simulator.provider import LoopbackSimulator, SimulatorProvider
from tests.helpers import model_block, write_config


def _models(tmp_path) -> tuple[ModelConfig, ...]:
    blocks = [
        model_block(
            "o",
            provider="openai",
            base_url="https://api.example.com/v1/",
            model="gpt-x",
            max_concurrency=5,
            timeout_s=7,
        ),
        model_block("s", provider="simulator", model="sim-1"),
    ]
    return load_config(write_config(tmp_path, blocks, n_prompts=1)).models


def test_builtin_providers_are_registered_and_cover_the_config():
    assert {"anthropic", "gemini", "openai", "simulator"} <= set(registered_providers())
    # every provider name the config accepts can be built (config.py keeps its own list)
    assert set(implemented_providers()) == set(registered_providers())
    assert provider_class("openai") is OpenAIProvider and OpenAIProvider.name == "openai"
    assert provider_class("simulator") is SimulatorProvider
    assert provider_class("anthropic") is AnthropicProvider
    assert provider_class("gemini") is GeminiProvider


def test_unknown_name_is_a_clear_error():
    with pytest.raises(UnknownProviderError) as err:
        provider_class("llamacpp2")
    known = ", ".join(registered_providers())
    assert str(err.value) == f"no provider registered as 'llamacpp2' (registered: {known})"


class _Dummy(Provider):
    @classmethod
    def from_config(cls, model, api_key, context):
        return cls()

    async def complete(self, messages, sampling):
        return Reply(None, None, None, None, None, None, None, {})


def test_registration_rules():
    try:
        assert provider("test-dummy")(_Dummy) is _Dummy
        assert provider_class("test-dummy") is _Dummy and _Dummy.name == "test-dummy"
        assert provider("test-dummy")(_Dummy) is _Dummy  # re-registering the same class is fine
        with pytest.raises(ValueError, match="already registered"):
            provider("openai")(_Dummy)
    finally:
        registry._REGISTRY.pop("test-dummy", None)

    class NoFactory(Provider):
        async def complete(self, messages, sampling):
            raise NotImplementedError

    with pytest.raises(TypeError, match="from_config"):
        provider("test-nofactory")(NoFactory)
    with pytest.raises(TypeError, match="Provider subclass"):
        provider("test-notaprovider")(int)  # type: ignore[type-var]
    with pytest.raises(ValueError):
        provider("two words")
    assert "test-nofactory" not in registered_providers()


def test_default_factory_builds_the_registered_class(tmp_path):
    openai_model, sim_model = _models(tmp_path)
    sim = LoopbackSimulator.for_models(1, [sim_model])
    context = ProviderContext(simulator=sim)
    built = create_provider(openai_model, "sk-k", context)
    assert isinstance(built, OpenAIProvider)
    assert built.url == "https://api.example.com/v1/chat/completions"
    assert "sk-k" not in repr(built)
    assert isinstance(create_provider(sim_model, None, context), SimulatorProvider)
    assert not sim.started  # building a provider starts nothing
    with pytest.raises(ValueError, match="simulator"):
        create_provider(sim_model, None, ProviderContext())


async def test_simulator_provider_starts_the_shared_simulator_once(tmp_path):
    _, sim_model = _models(tmp_path)
    sim = LoopbackSimulator.for_models(1, [sim_model])
    context = ProviderContext(simulator=sim)
    first, second = (create_provider(sim_model, None, context) for _ in range(2))
    try:
        await first.start()
        await second.start()
        assert sim.started
        assert isinstance(first, SimulatorProvider) and isinstance(second, SimulatorProvider)
        assert first.url == second.url and first.url.startswith("http://127.0.0.1:")
        reply = await first.complete(
            [{"role": "user", "content": "hello"}], Sampling(temperature=0, max_tokens=32)
        )
        assert reply.content
    finally:
        await first.close()
        await second.close()
        await sim.stop()
    assert not sim.started


def test_sampling_is_the_neutral_trial_params(tmp_path):
    openai_model, sim_model = _models(tmp_path)
    for m in (openai_model, sim_model):
        s = Sampling.from_params(m.params())
        assert (s.temperature, s.max_tokens, s.seed) == (0.0, 512, None)
    seeded = Sampling.from_params({"temperature": 0.7, "max_tokens": 256, "seed": 42})
    assert seeded == Sampling(0.7, 256, 42)
    with pytest.raises(ValueError, match="top_p"):
        Sampling.from_params({"temperature": 0, "max_tokens": 1, "top_p": 0.9})


def test_openai_maps_sampling_to_its_fields_in_the_old_order():
    assert list(openai_sampling(Sampling(0.7, 256, 42)).items()) == [
        ("temperature", 0.7),
        ("max_tokens", 256),
        ("seed", 42),
    ]
    assert openai_sampling(Sampling(0.0, 512)) == {"temperature": 0.0, "max_tokens": 512}


@pytest.mark.parametrize(
    ("headers", "limits"),
    [
        (
            {"x-ratelimit-limit-requests": "500", "x-ratelimit-limit-tokens": "200000"},
            Limits(500, 200_000),
        ),
        ({"X-RateLimit-Limit-Requests": " 30 "}, Limits(rpm=30)),
        ({"x-ratelimit-limit-tokens": "6000"}, Limits(tpm=6000)),
        ({"x-ratelimit-limit-requests": "lots"}, None),
        ({"x-ratelimit-limit-requests": "0"}, None),
        ({"retry-after": "3"}, None),
        ({}, None),
    ],
)
def test_openai_limits_from_headers(headers, limits):
    assert openai_limits(headers) == limits
    p = OpenAIProvider(
        base_url="http://h/v1", model="m", api_key=None, timeout_s=1, max_connections=1
    )
    assert p.limits_from_headers(headers) == limits


def test_limits_are_positive_or_absent():
    assert Limits().empty and not Limits(rpm=1).empty
    for bad in (0, -5, True, 1.5):
        with pytest.raises(ValueError):
            Limits(rpm=bad)  # type: ignore[arg-type]


def test_providers_load_lazily(tmp_path):
    """Checking a config and planning load no provider module and no aiohttp; looking a name
    up imports only that provider's module (issue 12: `--help`, `status`, `plan` start fast)."""
    import subprocess
    import sys

    config = write_config(tmp_path, [model_block("o", provider="openai", base_url="http://x/v1")])
    code = f"""
import sys
from ibias.runner.config import load_config
import ibias.runner.cli
load_config({str(config)!r})
assert not [m for m in sys.modules if m.startswith("aiohttp")], "aiohttp imported"
loaded = sorted(m for m in sys.modules if m.startswith("ibias.runner.providers."))
allowed = (
    "ibias.runner.providers.names",
    "ibias.runner.providers.params",
    "ibias.runner.providers.traits",
)
assert all(m in allowed for m in loaded), loaded
from ibias.runner.providers.registry import provider_class
assert provider_class("openai").__name__ == "OpenAIProvider"
assert "ibias.runner.providers.gemini" not in sys.modules
assert "aiohttp.web" not in sys.modules, "the simulator's server was imported"
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_entry_point_providers_are_found_by_name(monkeypatch):
    """A third-party provider announced under `ibias.providers` is loaded when named."""
    from importlib import metadata

    class Entry:
        name = "test-entry"

        def load(self) -> type[Provider]:
            return _Dummy

    def fake_entry_points(*, group: str, name: str | None = None) -> list[Entry]:
        assert group == registry.ENTRY_POINT_GROUP
        return [Entry()] if name in (None, "test-entry") else []

    monkeypatch.setattr(metadata, "entry_points", fake_entry_points)
    monkeypatch.delenv("IBIAS_PLUGINS", raising=False)
    try:
        assert provider_class("test-entry") is _Dummy
        assert "test-entry" in registry.known_providers()
        with pytest.raises(UnknownProviderError):
            provider_class("test-absent")
    finally:
        registry._REGISTRY.pop("test-entry", None)

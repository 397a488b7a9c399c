"""Where a rehearsal sends a model's requests is what its provider declares
(`Provider.rehearsal_path`), so no module outside the providers names one: the built-ins'
protocols land on the simulator's paths for them (Gemini's at the API version its base URL
names), a provider built on a built-in inherits its path, and one the simulator does not speak
is refused in one line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import ibias
from ibias.runner.config import ConfigFileError, ModelConfig
from ibias.runner.execution.rehearsal import Rehearsal, redirect
from ibias.runner.providers.anthropic import AnthropicProvider
from ibias.runner.providers.base import ProviderContext
from ibias.runner.providers.gemini import GeminiProvider
from ibias.runner.providers.openai import OpenAIProvider

SIM = "http://127.0.0.1:4321/v1"


def model(provider: str, base_url: str | None, name: str = "m-1") -> ModelConfig:
    return ModelConfig(
        id="m",
        provider=provider,
        base_url=base_url,
        model=name,
        api_key_env=None,
        rpm=None,
        tpm=None,
        max_concurrency=1,
        timeout_s=5.0,
        temperature=0.0,
        max_tokens=16,
        sampling_seed=None,
        price_input=0.0,
        price_output=0.0,
    )


def moved(cls: Any, m: ModelConfig) -> str:
    provider = cls.from_config(m, "key", ProviderContext())
    return str(redirect(provider, m, SIM).url)


@pytest.mark.parametrize(
    ("base", "url"),
    [
        (None, "http://127.0.0.1:4321/v1beta/models/gem:generateContent"),
        ("https://generativelanguage.googleapis.com/v1", SIM + "/models/gem:generateContent"),
    ],
)
def test_gemini_is_rehearsed_at_the_version_its_base_url_names(base: str | None, url: str) -> None:
    m = model("gemini", base, "gem")
    assert moved(GeminiProvider, m) == url
    assert Rehearsal().batch_base(SIM)(m) == url.split("/models/")[0]


def test_openai_anthropic_and_a_gateway_built_on_openai_are_rehearsed_under_v1() -> None:
    class Gateway(OpenAIProvider):
        """A plugin's provider built on the OpenAI one: it inherits the simulator's path."""

    gateway = model("gateway", "https://gw.example/openai/v1")
    assert moved(OpenAIProvider, model("openai", None)) == SIM + "/chat/completions"
    assert moved(AnthropicProvider, model("anthropic", None)) == SIM + "/messages"
    assert moved(Gateway, gateway) == SIM + "/chat/completions"


class Echo(ibias.Provider):
    """A provider of another protocol: it keeps the default `rehearsal_path` (None)."""

    async def complete(
        self, messages: Sequence[ibias.Message], sampling: ibias.Sampling
    ) -> ibias.Reply:
        raise NotImplementedError


def test_a_provider_the_simulator_does_not_speak_is_refused_in_one_line() -> None:
    m = model("echo", None)
    assert Echo.rehearsal_path(m) is None
    with pytest.raises(ConfigFileError) as caught:
        redirect(Echo(), m, SIM)
    assert str(caught.value).splitlines() == [
        "model 'm': provider 'echo' cannot be rehearsed (the simulator speaks OpenAI's, "
        "Anthropic's and Gemini's protocols); leave it out with --model"
    ]

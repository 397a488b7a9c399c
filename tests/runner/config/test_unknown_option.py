"""A key a model's table does not take is named with what it could have been: the core keys
and the model's provider's own options (a built-in provider's or a plugin's), with the nearest
suggested."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import msgspec
import pytest

import ibias
from ibias.runner.config import ConfigFileError, load_config
from ibias.runner.providers import registry
from tests.helpers import model_block, write_config

CORE = (
    "id, provider, base_url, model, api_key_env, rpm, tpm, max_concurrency, timeout_s, "
    "outage_limit_s, max_body_bytes, temperature, max_tokens, sampling_seed, price_input, "
    "price_output, price_cache_read, price_cache_write, sim, logprobs, top_logprobs, reasoning, "
    "send_temperature"
)


def _error(tmp_path: Path, block: str) -> str:
    with pytest.raises(ConfigFileError) as caught:
        load_config(write_config(tmp_path, [block], n_prompts=1))
    return str(caught.value).split(": ", 1)[1]


def test_a_built_in_providers_options_are_listed_and_suggested(tmp_path: Path) -> None:
    block = model_block(
        "m", provider="openai", base_url="http://127.0.0.1:9/v1", reasoning_efort="low"
    )
    assert _error(tmp_path, block) == (
        f"models[0].reasoning_efort: unknown key (expected one of {CORE}; provider = 'openai' "
        "also takes mode, batch, batch_price_input, batch_price_output, reasoning_effort, "
        "batch_enqueued_tokens); did you mean `reasoning_effort`?"
    )


def test_a_provider_without_options_lists_the_core_keys(tmp_path: Path) -> None:
    block = model_block("m", provider="simulator", colour=1)
    assert _error(tmp_path, block) == f"models[0].colour: unknown key (expected one of {CORE})"


class TintOptions(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    tint: Literal["warm", "cold"] | None = None
    shade: int | None = None


class Tinted(ibias.FakeProvider):
    """A plugin's provider with options of its own."""

    options_schema = TintOptions


@pytest.fixture
def tinted() -> Iterator[None]:
    ibias.provider("tinted")(Tinted)
    try:
        yield
    finally:
        registry._REGISTRY.pop("tinted", None)


@pytest.mark.usefixtures("tinted")
def test_a_plugin_providers_options_are_listed_and_suggested(tmp_path: Path) -> None:
    assert _error(tmp_path, model_block("m", provider="tinted", tnt="warm")) == (
        f"models[0].tnt: unknown key (expected one of {CORE}; provider = 'tinted' also takes "
        "tint, shade); did you mean `tint`?"
    )
    # Its options themselves are accepted.
    config = load_config(write_config(tmp_path, [model_block("m", provider="tinted", tint="warm")]))
    assert config.models[0].options == {"tint": "warm"}

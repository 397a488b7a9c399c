"""Every thinking level the three APIs document is accepted, sent as the API names it, and in
the trial key only when set; a value outside the documented set is refused in one line naming
the key. The documented sets are also checked against the official SDKs' own request types
(test-only dependencies: the product never imports them).

Sources (cited in the providers' code): Gemini's thinking guide (thinkingBudget -1 dynamic, 0
off, up to 32,768; thinkingLevel minimal/low/medium/high) and google-genai's `ThinkingLevel`
(adds xhigh); Anthropic's extended-thinking, adaptive-thinking and effort pages (budget_tokens
at least 1,024 and below max_tokens; thinking type adaptive or disabled; effort low, medium,
high, xhigh, max); OpenAI's chat completions reference (reasoning_effort none, minimal, low,
medium, high, xhigh, max)."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest

from ibias.runner.config import ConfigFileError, parse_config
from ibias.runner.providers.anthropic import (
    EFFORTS,
    THINKING_TYPES,
    AnthropicProvider,
    AnthropicThinking,
    anthropic_request,
)
from ibias.runner.providers.base import ProviderContext, Sampling
from ibias.runner.providers.gemini import THINKING_LEVELS, GeminiOptions, gemini_request
from ibias.runner.providers.openai import REASONING_EFFORTS, OpenAIProvider

CHAT = [{"role": "user", "content": "hi"}]


def _config(tmp_path: Path, **keys: Any) -> Any:
    lines = ["[[models]]", 'id = "m"']
    for key, value in keys.items():
        lines.append(f"{key} = {value!r}" if not isinstance(value, bool) else f"{key} = true")
    text = (
        '[run]\nstore = "s.duckdb"\n'
        + "\n".join(lines).replace("'", '"')
        + '\n\n[experiments.prompts]\nfile = "p.jsonl"\n'
    )
    (tmp_path / "p.jsonl").write_text(
        '{"id": 1, "messages": [{"role": "user", "content": "hi"}]}\n'
    )
    return parse_config(text, tmp_path / "c.toml")


def _error(tmp_path: Path, **keys: Any) -> str:
    with pytest.raises(ConfigFileError) as err:
        _config(tmp_path, **keys)
    message = str(err.value)
    assert "\n" not in message
    return message


ANTHROPIC = {"provider": "anthropic", "model": "claude-sonnet-4-5", "api_key_env": "K"}
OPENAI = {"provider": "openai", "model": "gpt-5.1", "api_key_env": "K", "temperature": 1}
GEMINI = {"provider": "gemini", "model": "gemini-3-flash", "api_key_env": "K"}


# --------------------------------------------------------------------------- accepted, sent


@pytest.mark.parametrize("effort", REASONING_EFFORTS)
def test_openai_every_documented_reasoning_effort(tmp_path: Path, effort: str) -> None:
    model = _config(tmp_path, **OPENAI, reasoning_effort=effort).models[0]
    assert model.params()["reasoning_effort"] == effort
    provider = OpenAIProvider.from_config(model, "k", ProviderContext())
    assert provider._wire_params(Sampling(0.0, 64))["reasoning_effort"] == effort


@pytest.mark.parametrize("level", THINKING_LEVELS)
def test_gemini_every_documented_thinking_level(tmp_path: Path, level: str) -> None:
    model = _config(tmp_path, **GEMINI, thinking_level=level).models[0]
    assert model.params()["thinking_level"] == level
    body = gemini_request(CHAT, Sampling(0.0, 64), GeminiOptions.from_model(model))
    assert body["generationConfig"]["thinkingConfig"]["thinkingLevel"] == level


@pytest.mark.parametrize("budget", [-1, 0, 128, 24_576, 32_768])
def test_gemini_thinking_budgets_dynamic_off_and_counts(tmp_path: Path, budget: int) -> None:
    model = _config(tmp_path, **GEMINI, thinking_budget=budget).models[0]
    think = gemini_request(CHAT, Sampling(0.0, 64), GeminiOptions.from_model(model))[
        "generationConfig"
    ]["thinkingConfig"]
    assert think["thinkingBudget"] == budget
    assert ("includeThoughts" in think) is (budget != 0)  # no summaries with thinking off


@pytest.mark.parametrize(
    ("keys", "sent"),
    [
        ({"thinking_budget": 1024}, {"thinking": {"type": "enabled", "budget_tokens": 1024}}),
        ({"thinking": "adaptive"}, {"thinking": {"type": "adaptive"}}),
        ({"thinking": "disabled"}, {"thinking": {"type": "disabled"}}),
        *(({"effort": e}, {"output_config": {"effort": e}}) for e in EFFORTS),
        (
            {"thinking": "adaptive", "effort": "max"},
            {"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}},
        ),
    ],
)
def test_anthropic_every_documented_thinking_setting(
    tmp_path: Path, keys: dict[str, Any], sent: dict[str, Any]
) -> None:
    thinks = "thinking_budget" in keys or keys.get("thinking") == "adaptive"
    temperature = 1.0 if thinks else 0.0
    model = _config(tmp_path, **ANTHROPIC, max_tokens=4096, temperature=temperature, **keys).models[
        0
    ]
    params = model.params()
    assert {k: params[k] for k in keys} == keys
    provider = AnthropicProvider.from_config(model, "k", ProviderContext())
    body = anthropic_request(
        model.model, CHAT, Sampling(temperature, 4096), provider.rule, provider.thinking
    )
    assert {k: body[k] for k in sent} == sent
    assert body["temperature"] == temperature


def test_a_thinking_claude_that_takes_no_temperature_needs_none(tmp_path: Path) -> None:
    """Claude Opus 4.7 takes no temperature (the rule table): thinking needs no temperature = 1."""
    model = _config(
        tmp_path,
        provider="anthropic",
        model="claude-opus-4-7",
        api_key_env="K",
        max_tokens=4096,
        thinking="adaptive",
        effort="xhigh",
    ).models[0]
    provider = AnthropicProvider.from_config(model, "k", ProviderContext())
    body = anthropic_request(
        model.model, CHAT, Sampling(0.0, 4096), provider.rule, provider.thinking
    )
    assert "temperature" not in body and body["thinking"] == {"type": "adaptive"}


def test_unset_thinking_adds_nothing_to_the_key(tmp_path: Path) -> None:
    for keys in (ANTHROPIC, OPENAI, GEMINI):
        assert set(_config(tmp_path, **keys).models[0].params()) == {"temperature", "max_tokens"}


# --------------------------------------------------------------------------- refused in one line


@pytest.mark.parametrize(
    ("keys", "key"),
    [
        ({**OPENAI, "reasoning_effort": "extreme"}, "models[0].reasoning_effort"),
        ({**OPENAI, "reasoning_effort": "High"}, "models[0].reasoning_effort"),
        ({**GEMINI, "thinking_level": "max"}, "models[0].thinking_level"),
        ({**GEMINI, "thinking_budget": -2}, "models[0].thinking_budget"),
        ({**GEMINI, "thinking_budget": 32_769}, "models[0].thinking_budget"),
        ({**ANTHROPIC, "thinking_budget": 1023, "temperature": 1}, "models[0].thinking_budget"),
        ({**ANTHROPIC, "thinking": "enabled"}, "models[0].thinking"),
        ({**ANTHROPIC, "effort": "minimal"}, "models[0].effort"),
        (
            {**ANTHROPIC, "thinking": "adaptive", "thinking_budget": 2048, "max_tokens": 4096},
            "models[0].thinking",
        ),
        # budget_tokens must be below max_tokens
        ({**ANTHROPIC, "thinking_budget": 4096, "max_tokens": 4096}, "models[0].thinking_budget"),
        # a thinking model takes temperature 1 only
        ({**ANTHROPIC, "thinking": "adaptive", "temperature": 0.5}, "models[0].temperature"),
        # xAI's grok-4 refuses reasoning_effort (the rule table)
        (
            {
                "provider": "openai",
                "base_url": "https://api.x.ai/v1",
                "model": "grok-4",
                "api_key_env": "K",
                "reasoning_effort": "low",
            },
            "models[0].reasoning_effort",
        ),
        # options are the provider's own: not for another provider's models
        ({**GEMINI, "reasoning_effort": "low"}, "models[0].reasoning_effort"),
        ({"provider": "simulator", "reasoning_effort": "low"}, "models[0].reasoning_effort"),
        ({**OPENAI, "thinking_budget": 1024}, "models[0].thinking_budget"),
    ],
)
def test_a_value_outside_the_documented_set_is_one_line_naming_the_key(
    tmp_path: Path, keys: dict[str, Any], key: str
) -> None:
    assert f"{key}:" in _error(tmp_path, **keys) or f"{key} " in _error(tmp_path, **keys)


# --------------------------------------------------------------------------- the SDKs agree


def _literals(tp: Any) -> set[str]:
    out: set[str] = set()
    for arg in typing.get_args(tp):
        if typing.get_origin(arg) is typing.Literal:
            out |= set(typing.get_args(arg))
        elif isinstance(arg, str):
            out.add(arg)
        else:
            out |= _literals(arg)
    return out


def test_the_sets_are_the_official_sdks() -> None:
    openai_shared = pytest.importorskip("openai.types.shared")
    anthropic_types = pytest.importorskip("anthropic.types")
    genai_types = pytest.importorskip("google.genai.types")
    assert _literals(openai_shared.ReasoningEffort) == set(REASONING_EFFORTS)
    effort = typing.get_type_hints(anthropic_types.OutputConfigParam)["effort"]
    assert _literals(effort) == set(EFFORTS)
    types = {
        typing.get_args(typing.get_type_hints(t)["type"])[0]
        for t in typing.get_args(anthropic_types.ThinkingConfigParam)
    }
    # "enabled" is thinking_budget; "between_tools" applies to tool use only (no text chat)
    assert types == {*THINKING_TYPES, "enabled", "between_tools"}
    budget = typing.get_type_hints(anthropic_types.ThinkingConfigEnabledParam, include_extras=True)
    assert "budget_tokens" in budget
    levels = {m.value.lower() for m in genai_types.ThinkingLevel} - {"thinking_level_unspecified"}
    assert levels == set(THINKING_LEVELS)
    assert AnthropicThinking(thinking_budget=1024).thinks


def test_a_key_of_two_providers_names_both(tmp_path: Path) -> None:
    message = _error(tmp_path, **OPENAI, thinking_budget=1024)
    assert message.endswith(
        "models[0].thinking_budget: unknown key (it is for provider = 'anthropic' or "
        "provider = 'gemini')"
    )

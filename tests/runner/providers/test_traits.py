"""Each provider's traits decide what its `[[models]]` table may hold: a built-in provider
declares them once (`BUILTIN_TRAITS`, read without importing it), a provider registered in a
test declares them on its class, and the config loader validates both with the same code and
names no provider itself."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Self

import msgspec
import pytest

from ibias.prompts.base import Message, SettingsError
from ibias.runner.config import ConfigFileError, ModelConfig, load_config
from ibias.runner.providers import registry
from ibias.runner.providers.base import Provider, ProviderContext, Reply, Sampling
from ibias.runner.providers.names import BUILTIN
from ibias.runner.providers.registry import provider, provider_class, traits_of
from ibias.runner.providers.traits import BUILTIN_TRAITS, ModelRequest, ProviderTraits
from tests.helpers import model_block, write_config

ROOT = Path(__file__).parents[3]


def _tune_key(name: str) -> str:
    """The name the trial key records; names starting with "bad" are refused."""
    if name.startswith("bad"):
        raise SettingsError("model", f"Tune has no model {name!r}")
    return f"tune/{name}"


class TuneOptions(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The test provider's own key."""

    tuning: Literal["flat", "sharp"] | None = None


class Tune(Provider):
    """A provider with traits of its own: no base URL, logprobs, no seed, temperature <= 1.5,
    and a model key of its own."""

    options_schema = TuneOptions
    traits = ProviderTraits(
        api="Tune's API",
        needs_base_url=False,
        logprobs=True,
        sampling_seed=False,
        max_temperature=1.5,
        model_key=_tune_key,
    )

    @classmethod
    def from_config(cls, model: ModelConfig, api_key: str | None, context: ProviderContext) -> Self:
        return cls()

    async def complete(self, messages: Sequence[Message], sampling: Sampling) -> Reply:
        raise NotImplementedError


class Bare(Provider):
    """A provider that declares no traits: the permissive defaults (a base URL needed)."""

    @classmethod
    def from_config(cls, model: ModelConfig, api_key: str | None, context: ProviderContext) -> Self:
        return cls()

    async def complete(self, messages: Sequence[Message], sampling: Sampling) -> Reply:
        raise NotImplementedError


def _no_long_answers(request: ModelRequest) -> None:
    """A request check of its own: at most 100 tokens for a model its rule sends them to."""
    if request.max_tokens > 100 and "max_tokens" not in request.rule.rejects:
        raise SettingsError("max_tokens", f"Gate takes at most 100, got {request.max_tokens}")


class Gate(Bare):
    """A gateway to OpenAI-compatible models: OpenAI's request rules and a check of its own."""

    traits = ProviderTraits(
        api="Gate", reasoning=True, request_rules="openai", check_request=_no_long_answers
    )


@pytest.fixture
def registered() -> Iterator[None]:
    """`tune`, `bare` and `gate` registered for one test, then removed again."""
    provider("tune")(Tune)
    provider("bare")(Bare)
    provider("gate")(Gate)
    try:
        yield
    finally:
        for name in ("tune", "bare", "gate"):
            registry._REGISTRY.pop(name, None)


def _refusal(tmp_path: Path, **keys: Any) -> str:
    config = write_config(tmp_path, [model_block("m", **keys)])
    with pytest.raises(ConfigFileError) as caught:
        load_config(config)
    (line,) = str(caught.value).splitlines()
    return line


@pytest.mark.usefixtures("registered")
def test_a_registered_provider_is_validated_through_its_own_traits(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        [model_block("m", provider="tune", model="t1", logprobs=True, tuning="sharp")],
    )
    (model,) = load_config(config).models
    assert model.options == {"tuning": "sharp"}
    assert model.top_logprobs == 20
    assert model.model == "tune/t1"
    assert model.base_url is None

    line = _refusal(tmp_path, provider="tune", tuning="round")
    assert "models[0].tuning: expected one of" in line and "'round'" in line
    line = _refusal(tmp_path, provider="tune", colour="red")
    assert "models[0].colour: unknown key" in line
    line = _refusal(tmp_path, provider="tune", sampling_seed=3)
    assert line.endswith(
        "models[0].sampling_seed: Tune's API has no seed, so none would be sent; remove "
        "sampling_seed (the trial key must not promise one)"
    )
    line = _refusal(tmp_path, provider="tune", temperature=1.8)
    assert line.endswith("models[0].temperature: Tune's API takes temperature 0 to 1.5, got 1.8")
    line = _refusal(tmp_path, provider="tune", reasoning=True)
    assert line.endswith("models[0].reasoning: unknown key (it is for provider = 'openai' models)")
    # Every provider's model takes a [models.sim] table (for rehearsals), checked as the
    # simulator's own.
    sim = write_config(
        tmp_path, [model_block("m", provider="tune", model="t1", sim={"word_bias": 0.5})]
    )
    assert load_config(sim).models[0].id == "m"
    line = _refusal(tmp_path, provider="tune", sim={"word_bias": 2})
    assert "models[0].sim" in line and "word_bias" in line


@pytest.mark.usefixtures("registered")
def test_a_provider_without_traits_gets_the_permissive_defaults(tmp_path: Path) -> None:
    assert traits_of(Bare) is Provider.traits
    line = _refusal(tmp_path, provider="bare")
    assert line.endswith(
        "models[0].base_url: missing (expected an http(s) URL such as 'https://api.openai.com/v1')"
    )
    config = write_config(
        tmp_path,
        [model_block("m", provider="bare", base_url="http://x/v1", sampling_seed=3)],
    )
    (model,) = load_config(config).models
    assert model.sampling_seed == 3
    line = _refusal(tmp_path, provider="bare", base_url="http://x/v1", logprobs=True)
    assert "models[0].logprobs: provider 'bare' cannot return token logprobs" in line


@pytest.mark.usefixtures("registered")
def test_request_rules_and_checks_come_from_the_traits(tmp_path: Path) -> None:
    url = "http://gate.example/v1"
    config = write_config(
        tmp_path, [model_block("m", provider="gate", base_url=url, model="o3", temperature=1)]
    )
    (model,) = load_config(config).models
    # no rules applied to it before (not in `LEGACY_RULES`): the rule's dropped temperature is new
    assert model.not_sent == ("temperature",)
    line = _refusal(tmp_path, provider="gate", base_url=url, model="o3", temperature=0.5)
    assert "models[0].temperature: OpenAI reasoning models accept only temperature = 1" in line
    line = _refusal(tmp_path, provider="gate", base_url=url, model="m1", max_tokens=500)
    assert line.endswith("models[0].max_tokens: Gate takes at most 100, got 500")
    config = write_config(
        tmp_path,
        [
            model_block(
                "m", provider="gate", base_url=url, model="m1", reasoning=True, temperature=1
            )
        ],
    )
    (model,) = load_config(config).models
    assert model.reasoning is True


def test_needs_base_url_is_declared_in_the_traits_only() -> None:
    # A class with no traits of its own needs a base URL; there is no second spelling.
    assert not hasattr(Provider, "needs_base_url")
    assert traits_of(Bare) == ProviderTraits() and traits_of(Bare).needs_base_url is True


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_each_builtin_provider_declares_its_traits_once(name: str) -> None:
    cls = provider_class(name)
    assert cls.traits is BUILTIN_TRAITS[name]
    schema = cls.options_schema
    fields = frozenset(schema.__struct_fields__) if schema is not None else frozenset()
    assert fields == BUILTIN_TRAITS[name].options
    assert BUILTIN_TRAITS[name].sending <= fields


@pytest.mark.usefixtures("registered")
def test_the_model_key_hook_refuses_in_one_line_naming_model(tmp_path: Path) -> None:
    line = _refusal(tmp_path, provider="tune", model="bad-1")
    assert line.endswith("models[0].model: Tune has no model 'bad-1'")


def _string_literals(tree: ast.AST) -> Iterator[str]:
    """Every string constant of the module that is not a docstring."""
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in docstrings:
            continue
        if isinstance(node.value, str):
            yield node.value


@pytest.mark.parametrize(
    "module", ["config/__init__.py", "config/model_table.py", "config/model_config.py"]
)
def test_the_config_loader_names_no_provider(module: str) -> None:
    tree = ast.parse((ROOT / "runner" / module).read_text())
    for text in _string_literals(tree):
        for name in BUILTIN:
            assert text != name, f"runner/{module} names the provider {name!r}"
            assert f"'{name}'" not in text and f'"{name}"' not in text, text
            assert f"provider = {name}" not in text, text

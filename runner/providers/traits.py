"""What each provider accepts and needs in its `[[models]]` table, as one frozen value.

Why a value and not checks in the config loader: the loader must not know any provider by
name, so that a provider from another package is validated by the same code as the built-in
ones. A provider declares its `ProviderTraits` (a built-in one here, in `BUILTIN_TRAITS`, so a
config is checked without importing the provider's module and aiohttp; any other one as its
class's `traits`), and runner/config/__init__.py reads only the traits.

This module imports nothing heavy: the hooks that need more (the GGUF digest, the request
rules) import it when they run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ibias.prompts.base import SettingsError
from ibias.prompts.schema import show

if TYPE_CHECKING:
    from ibias.runner.providers.params import ParamRule

__all__ = [
    "BUILTIN_TRAITS",
    "LEGACY_RULES",
    "SIM_TABLE",
    "BatchSupport",
    "ModelRequest",
    "ProviderTraits",
]


@dataclass(frozen=True, kw_only=True)
class BatchSupport:
    """A provider's batch API, declared in its traits: what `ibias run --batch` needs to send
    its models' trials as provider batches (runner/batch/).

    Why declared rather than known: the batch run, the plan and the status read this value
    and name no provider, so a provider from another package offers batches exactly as the
    built-in ones do. `adapter` is a "module:Class" reference (imported only when a batch
    runs, ibias/plugins.py `resolve`) to a subclass of `ibias.runner.batch.api.BatchAPI`,
    built per model by its `for_model`."""

    #: The batch API as `plan` names it ("OpenAI Batch API").
    api: str
    #: "module:Class" of the provider's `BatchAPI` subclass.
    adapter: str
    #: The host of the provider's own API: a model at another host runs in batch mode only
    #: with its option `batch = true` (the host may not have the batch API). None: any host.
    host: str | None = None


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    """What a provider's `check_request` hook sees of one model: the keys a request carries,
    its own options as given, and the request rule its name matched (runner/providers/
    params.py `ParamRule`)."""

    temperature: float
    max_tokens: int
    options: Mapping[str, Any]
    rule: ParamRule


@dataclass(frozen=True, kw_only=True)
class ProviderTraits:
    """What a provider accepts and needs, read by the config loader.

    The defaults are a third-party provider's before it says more: a `base_url` is needed,
    every core key is accepted, and only token logprobs are refused (a provider that cannot
    return them would store trials whose key promises them)."""

    #: The API as named in error lines ("Anthropic's Messages API").
    api: str = "this provider's API"
    #: The documented URL used when a model gives no `base_url`; also the example in errors.
    default_base_url: str | None = None
    #: Whether a model must give `base_url` (no default URL, not an in-process provider).
    needs_base_url: bool = True
    #: Why `base_url` is refused (the provider starts its own server), or None: accepted.
    base_url_refused: str | None = None
    #: Whether its replies can carry token logprobs (`logprobs = true`).
    logprobs: bool = False
    #: Whether its API takes a sampling seed; without one `sampling_seed` is refused, since
    #: the trial key would promise a seed that is never sent.
    sampling_seed: bool = True
    #: Whether the model key `reasoning` applies (OpenAI's reasoning rule for unknown names).
    reasoning: bool = False
    #: The highest temperature the API takes (the core schema's bound is 2).
    max_temperature: float = 2.0
    #: The table of request rules by model name (runner/providers/params.py `rule_for`'s
    #: `provider`: "openai" or "anthropic"), or None: no per-model rule applies.
    request_rules: str | None = None
    #: A built-in provider's option keys (its class's `options_schema` fields, a test checks
    #: they agree), listed here so a key of another provider's is refused naming that provider
    #: without loading it. The options themselves are validated by the class's
    #: `options_schema` and `check_options`; another provider need not list them.
    options: frozenset[str] = frozenset()
    #: Those of its options that say how its trials are sent (online or in batches, where its
    #: server starts), never what: left out of the trial key (`names.SENDING_OPTIONS`).
    sending: frozenset[str] = frozenset()
    #: The configured model name -> the name the trial key records (llamacpp: the weights'
    #: digest); None: the name as configured. Raises SettingsError("model", ...).
    model_key: Callable[[str], str] | None = None
    #: Checks across the request's keys and options that need the request rule; raises
    #: SettingsError(key, message) with a key of the model's table. None: none.
    check_request: Callable[[ModelRequest], None] | None = None
    #: Its batch API (`--batch`, `mode = "batch"`), or None: its models always run online.
    batch: BatchSupport | None = None


def _gguf_key(name: str) -> str:
    """`NAME@sha256:HEX` for a llamacpp model (imported here: hashing is for such models)."""
    from ibias.runner.providers.gguf import keyed_name

    return keyed_name(name)


def _anthropic_request(request: ModelRequest) -> None:
    """Anthropic's thinking: `budget_tokens` must be below `max_tokens`, and a model that
    thinks takes no temperature but 1 (platform.claude.com/docs/en/build-with-claude/
    extended-thinking: thinking is not compatible with temperature changes)."""
    budget = request.options.get("thinking_budget")
    if budget is not None and budget >= request.max_tokens:
        raise SettingsError(
            "thinking_budget",
            f"Anthropic's thinking budget must be below max_tokens ({request.max_tokens}), "
            f"got {budget}",
        )
    thinks = budget is not None or request.options.get("thinking") == "adaptive"
    if thinks and "temperature" not in request.rule.rejects and request.temperature != 1:
        raise SettingsError(
            "temperature",
            "an Anthropic model that thinks takes temperature 1 only, got "
            f"{show(request.temperature)}; set temperature = 1 or send_temperature = false",
        )


def _openai_request(request: ModelRequest) -> None:
    """A model whose rule refuses `reasoning_effort` (xAI's grok-4) is not sent one."""
    rule = request.rule
    if request.options.get("reasoning_effort") is not None and "reasoning_effort" in rule.rejects:
        raise SettingsError(
            "reasoning_effort",
            f"{rule.label}s refuse reasoning_effort (see {rule.source}); remove it for this model",
        )


#: How each built-in provider's trials are sent (online or in batches: runner/providers/
#: sending.py), among its options.
_SENDING = frozenset({"mode", "batch", "batch_price_input", "batch_price_output"})

#: The built-in providers' traits: the one place each declares them (its class's `traits` is
#: the same value, a test checks it). Readable without importing any provider module.
BUILTIN_TRAITS: Mapping[str, ProviderTraits] = MappingProxyType(
    {
        "anthropic": ProviderTraits(
            api="Anthropic's Messages API",
            default_base_url="https://api.anthropic.com/v1",
            needs_base_url=False,
            sampling_seed=False,
            max_temperature=1.0,
            request_rules="anthropic",
            options=_SENDING | {"thinking_budget", "thinking", "effort", "anthropic_version"},
            sending=_SENDING,
            check_request=_anthropic_request,
            batch=BatchSupport(
                api="Anthropic Message Batches",
                adapter="ibias.runner.batch.anthropic:AnthropicBatches",
                host="api.anthropic.com",
            ),
        ),
        "gemini": ProviderTraits(
            api="Gemini's generateContent API",
            default_base_url="https://generativelanguage.googleapis.com/v1beta",
            needs_base_url=False,
            options=_SENDING | {"safety_settings", "thinking_budget", "thinking_level"},
            sending=_SENDING,
            batch=BatchSupport(
                api="Gemini batch generation",
                adapter="ibias.runner.batch.gemini:GeminiBatches",
                host="generativelanguage.googleapis.com",
            ),
        ),
        "llamacpp": ProviderTraits(
            api="llama-cpp-python's server",
            needs_base_url=False,
            base_url_refused=(
                "ibias starts its server; for a server you start, use provider = 'openai' "
                "with its base_url"
            ),
            options=frozenset({"n_ctx", "n_threads", "port", "start_timeout_s"}),
            # where and how patiently its server is started (the file is in the model name)
            sending=frozenset({"port", "start_timeout_s"}),
            model_key=_gguf_key,
        ),
        "openai": ProviderTraits(
            api="OpenAI's chat completions API",
            default_base_url="https://api.openai.com/v1",
            logprobs=True,
            reasoning=True,
            request_rules="openai",
            options=_SENDING | {"reasoning_effort", "batch_enqueued_tokens"},
            sending=_SENDING | {"batch_enqueued_tokens"},
            check_request=_openai_request,
            batch=BatchSupport(
                api="OpenAI Batch API",
                adapter="ibias.runner.batch.openai:OpenAIBatches",
                host="api.openai.com",
            ),
        ),
        "simulator": ProviderTraits(
            api="ibias's simulator",
            needs_base_url=False,
            logprobs=True,
        ),
    }
)

#: The built-in providers that had request rules before per-model ones (runner/providers/
#: params.py `legacy_rule_for`), so only the parameters their rule newly drops are recorded as
#: `not_sent`. Any other provider's dropped parameters are all new: a rule of the built-ins'
#: history, not something a provider declares.
LEGACY_RULES: frozenset[str] = frozenset({"openai"})
#: The built-in provider whose real runs use a model's `[models.sim]` table (the in-process
#: simulator); every other provider's model keeps it for rehearsals only.
SIM_TABLE: frozenset[str] = frozenset({"simulator"})

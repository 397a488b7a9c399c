"""What the real provider APIs refuse, and what they add for reasoning models: the simulator's
own table, so that a rehearsal against the simulator fails where the real API would.

Why its own table, written from the providers' documents and never imported from the runner's
(runner/providers/params.py): the runner decides what to send from its table; if the simulator
judged requests by the same table, a model name the runner's table misses would be missed by
both and the rehearsal would pass what the real API refuses. Two tables written separately
from the documents make a gap in either one show up as a refusal by the other.

Every rule below names the document it was written from (the providers' API references,
guides and migration notes, and where the documents say nothing of a message's wording, the
public issue threads quoting the API's answer). Each protocol module words a refusal as its
provider does (`OpenAIRefusal` for OpenAI; a message for Anthropic's and Gemini's error body).

Model names are matched the way the real APIs and their gateways spell them, case-insensitive,
with dotted or dashed versions (`claude-opus-4.7` is `claude-opus-4-7`), after a gateway's
prefix (`openai/o3`, `us.anthropic.claude-...`, `models/gemini-...`) and before a dated or
`@` suffix; families by their version numbers so that future names (`gpt-6`, `o9`,
`claude-sonnet-5`, `gemini-4-pro`) are judged like their elders.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ANTHROPIC_FIELDS",
    "GEMINI_FIELDS",
    "GEMINI_GENERATION_FIELDS",
    "OPENAI_FIELDS",
    "OpenAIRefusal",
    "anthropic_refusal",
    "anthropic_thinking",
    "bare_name",
    "claude_without_sampling",
    "gemini_refusal",
    "gemini_thinks_by_default",
    "openai_reasoning_model",
    "openai_refusal",
    "openai_thinking",
]

# -- names ------------------------------------------------------------------------------------

#: A gateway's prefix before the provider's own name: OpenRouter's `openai/o3`, Vertex's and the
#: REST API's `models/gemini-...`, Bedrock's `anthropic.claude-...` with its cross-region
#: `us.` / `eu.` / `apac.` / `global.` / `jp.` / `au.` (AWS Bedrock model IDs).
_GATEWAY = re.compile(
    r"\A(?:(?:us|eu|apac|global|jp|au)\.)?(?:anthropic|openai|google|xai)\.", re.IGNORECASE
)
_SEPARATORS = re.compile(r"[-.@:_\s]+")


def bare_name(model: str) -> str:
    """`model` lower-cased, without a gateway's path or provider prefix (`openai/O3-mini` ->
    `o3-mini`, `us.anthropic.claude-opus-4-7-v1:0` -> `claude-opus-4-7-v1:0`)."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    return _GATEWAY.sub("", name)


def _words(model: str) -> list[str]:
    """The bare name cut at every separator a version may be written with (`-`, `.`, `@`, `:`,
    `_`): `claude-opus-4.7` and `claude-opus-4-7` read the same."""
    return [w for w in _SEPARATORS.split(bare_name(model)) if w]


def _small(word: str) -> int | None:
    """A word as a version number (one or two digits; a date such as `20250514` is not)."""
    return int(word) if word.isdigit() and len(word) <= 2 else None


# -- OpenAI -----------------------------------------------------------------------------------

#: The chat-completions request fields the API takes (platform.openai.com/docs/api-reference/
#: chat/create; the same set as the official SDK's `CompletionCreateParams`, openai 3.63,
#: openai/types/chat/completion_create_params.py, plus `stream`). Anything else is answered
#: "Unrecognized request argument supplied: <name>" (the API's wording, quoted in e.g.
#: github.com/davidmigloz/langchain_dart/issues/712 and xlinx/sd-webui-decadetw-auto-prompt-llm
#: issues/29).
OPENAI_FIELDS = frozenset(
    {
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "messages",
        "metadata",
        "modalities",
        "model",
        "moderation",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning_effort",
        "response_format",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    }
)


@dataclass(frozen=True)
class OpenAIRefusal:
    """An OpenAI error answer: status, message, and the `param` and `code` it names."""

    status: int
    message: str
    param: str | None
    code: str | None


def openai_reasoning_model(model: str) -> bool:
    """Whether OpenAI serves `model` as a reasoning model: the o-series (o1 to o9 and on, any
    variant: `o3-mini`, `O3-mini`, `o4-mini-deep-research`), gpt-5 and every later major
    (`gpt-5-mini`, `gpt-5.1`, `gpt-6`) except the `-chat` variants (`gpt-5-chat-latest` is a
    chat model), and the codex models (`codex-mini-latest`, `gpt-5-codex`).

    Source: platform.openai.com/docs/guides/reasoning ("Reasoning models": the o-series and
    GPT-5; gpt-5-chat-latest is the non-reasoning model used in ChatGPT,
    platform.openai.com/docs/models/gpt-5-chat-latest); codex-mini-latest is a fine-tuned o4-mini
    (platform.openai.com/docs/models/codex-mini-latest)."""
    words = _words(model)
    if not words:
        return False
    head = words[0]
    if re.fullmatch(r"o[1-9]\d*", head):
        return True
    if head == "codex" or "codex" in words:
        return True
    if head == "gpt" and len(words) > 1:
        major = _small(words[1])
        return major is not None and major >= 5 and "chat" not in words
    return False


def _openai_chat_model(model: str) -> bool:
    """An OpenAI chat model that is no reasoning model (`gpt-4o`, `gpt-4.1`, `gpt-5-chat-latest`,
    `chatgpt-4o-latest`): these refuse `reasoning_effort` as an unknown argument."""
    words = _words(model)
    return bool(words) and words[0] in ("gpt", "chatgpt") and not openai_reasoning_model(model)


def _effort_none_allowed(model: str, body: Mapping[str, Any]) -> bool:
    """GPT-5.1 and later take temperature, top_p and logprobs when `reasoning_effort` is
    "none" (github.com/vercel/ai/issues/10932 citing OpenAI's GPT-5.1 guide; "none" exists from
    gpt-5.1 on). Only an explicit "none" is honoured here: the simulator errs towards refusing."""
    if body.get("reasoning_effort") != "none":
        return False
    words = _words(model)
    if len(words) < 2 or words[0] != "gpt":
        return False
    major = _small(words[1])
    minor = _small(words[2]) if len(words) > 2 else None
    return major is not None and (major > 5 or (major == 5 and minor is not None and minor >= 1))


def _number_text(value: Any) -> str:
    """A JSON number as the API echoes it in a message (`0`, `0.7`)."""
    return str(value) if isinstance(value, int) else repr(value)


def _unsupported_parameter(name: str, hint: str = "") -> OpenAIRefusal:
    message = f"Unsupported parameter: '{name}' is not supported with this model.{hint}"
    return OpenAIRefusal(400, message, name, "unsupported_parameter")


def openai_refusal(model: str, body: Mapping[str, Any]) -> OpenAIRefusal | None:
    """How the chat-completions API answers `body` when it refuses it, or None.

    In the API's order: unknown fields, then the reasoning models' limits
    (platform.openai.com/docs/guides/reasoning, "Limitations" / parameter support), worded as
    the API words them (the messages quoted in github.com/griptape-ai/ComfyUI-Griptape/
    issues/312 for `max_tokens`, gabrii/Cursor-Azure-GPT-5/issues/33 for `temperature`,
    confident-ai/deepeval/pull/2184 for logprobs, answered with a 403), then the ranges every
    model has (api-reference/chat/create: temperature 0 to 2)."""
    unknown = [key for key in body if key not in OPENAI_FIELDS]
    if unknown:
        noun = "argument" if len(unknown) == 1 else "arguments"
        return OpenAIRefusal(
            400, f"Unrecognized request {noun} supplied: {', '.join(unknown)}", None, None
        )
    if openai_reasoning_model(model):
        if "max_tokens" in body:
            return _unsupported_parameter("max_tokens", " Use 'max_completion_tokens' instead.")
        relaxed = _effort_none_allowed(model, body)
        for name in ("temperature", "top_p"):
            value = body.get(name)
            if value is not None and value != 1 and not relaxed:
                return OpenAIRefusal(
                    400,
                    f"Unsupported value: '{name}' does not support {_number_text(value)} with "
                    "this model. Only the default (1) value is supported.",
                    name,
                    "unsupported_value",
                )
        for name in ("presence_penalty", "frequency_penalty", "logit_bias"):
            if body.get(name) is not None:
                return _unsupported_parameter(name)
        if (body.get("logprobs") or body.get("top_logprobs") is not None) and not relaxed:
            return OpenAIRefusal(
                403, "You are not allowed to request logprobs from this model", None, None
            )
    elif body.get("reasoning_effort") is not None and _openai_chat_model(model):
        return OpenAIRefusal(
            400, "Unrecognized request argument supplied: reasoning_effort", None, None
        )
    temperature = body.get("temperature")
    if isinstance(temperature, int | float) and not isinstance(temperature, bool):
        if temperature > 2:
            return OpenAIRefusal(
                400,
                "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but "
                f"got {_number_text(temperature)} instead.",
                "temperature",
                "decimal_above_max_value",
            )
        if temperature < 0:
            return OpenAIRefusal(
                400,
                "Invalid 'temperature': decimal below minimum value. Expected a value >= 0, but "
                f"got {_number_text(temperature)} instead.",
                "temperature",
                "decimal_below_min_value",
            )
    return None


def openai_thinking(model: str, body: Mapping[str, Any]) -> int | None:
    """The reasoning a chat-completions request gets (as `Ask.thinking`: None none, -1 as much
    as the model likes): every reasoning model reasons unless `reasoning_effort` is "none"
    (platform.openai.com/docs/guides/reasoning: reasoning tokens are reported in
    `usage.completion_tokens_details.reasoning_tokens` and billed as output)."""
    if not openai_reasoning_model(model) or body.get("reasoning_effort") == "none":
        return None
    return -1


# -- Anthropic --------------------------------------------------------------------------------

#: The Messages request fields the API takes (docs.claude.com/en/api/messages; the official
#: SDK's `MessageCreateParams`, anthropic 2.17, anthropic/types/message_create_params.py, with
#: `stream`; `temperature`, `top_p` and `top_k`, which that SDK no longer lists since the newest
#: models refuse them, are still taken by the models before Claude Opus 4.7). Anything else is
#: "<name>: Extra inputs are not permitted".
ANTHROPIC_FIELDS = frozenset(
    {
        "cache_control",
        "container",
        "context_management",
        "diagnostics",
        "inference_geo",
        "max_tokens",
        "mcp_servers",
        "messages",
        "metadata",
        "model",
        "output_config",
        "service_tier",
        "speed",
        "stop_sequences",
        "stream",
        "system",
        "temperature",
        "thinking",
        "tool_choice",
        "tools",
        "top_k",
        "top_p",
        "user_profile_id",
        "workspace_id",
    }
)
_CLAUDE_FAMILIES = frozenset({"opus", "sonnet", "haiku", "fable", "mythos"})
_THINKING_DOC = (
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
    "#important-considerations-when-using-extended-thinking"
)
_MAX_TOKENS_DOC = (
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
    "#max-tokens-and-context-window-size"
)
#: The least `budget_tokens` of manual extended thinking (docs.claude.com/en/docs/
#: build-with-claude/extended-thinking: "minimum budget is 1,024 tokens").
THINKING_BUDGET_MIN = 1024


def _claude_version(model: str) -> tuple[str, tuple[int, ...]] | None:
    """(family, version) of a Claude model name: `claude-opus-4-7-20260416` and
    `claude-opus-4.7` -> ("opus", (4, 7)); the older order `claude-3-7-sonnet-20250219` ->
    ("sonnet", (3, 7)); None when it is no Claude name or names no version."""
    words = _words(model)
    if not words or words[0] != "claude":
        return None
    family = next((w for w in words if w in _CLAUDE_FAMILIES), None)
    if family is None:
        return None
    at = words.index(family)
    after = [_small(w) for w in words[at + 1 : at + 3]]
    before = [_small(w) for w in words[1:at]]
    for run in (after, before):
        version: list[int] = []
        for number in run:
            if number is None:
                break
            version.append(number)
        if version:
            return family, tuple(version)
    return None


def claude_without_sampling(model: str) -> bool:
    """Whether `model` refuses `temperature`, `top_p` and `top_k` and manual thinking budgets:
    Claude Opus 4.7 and later, and every Claude model of major version 5 and later
    (platform.claude.com/docs/en/about-claude/models/migration-guide, "Migrating to Claude
    Opus 4.7": sampling parameters removed, adaptive thinking only; the later models
    follow it, github.com/danielmiessler/Fabric/releases/tag/v1.4.526). The answer's
    wording: "`temperature` is deprecated for this model." (quoted in
    github.com/Comfy-Org/ComfyUI/issues/13923)."""
    found = _claude_version(model)
    if found is None:
        return False
    family, version = found
    return version[0] >= 5 or (family == "opus" and version >= (4, 7))


def anthropic_refusal(model: str, body: Mapping[str, Any], max_tokens: int) -> str | None:
    """The message of the 400 `invalid_request_error` the Messages API answers `body` with, or
    None. Checked after the fields and `max_tokens` (protocol_anthropic.py)."""
    if claude_without_sampling(model):
        for name in ("temperature", "top_p", "top_k"):
            if name in body:
                return f"`{name}` is deprecated for this model."
    thinking = body.get("thinking")
    if thinking is None:
        return None
    if not isinstance(thinking, Mapping):
        return "thinking: Input should be a valid dictionary or object"
    kind = thinking.get("type")
    if kind not in ("enabled", "adaptive", "disabled"):
        return (
            "thinking: Input tag '"
            f"{kind}' found using 'type' does not match any of the expected tags: "
            "'adaptive', 'disabled', 'enabled'"
        )
    display = thinking.get("display")
    if display is not None and display not in ("summarized", "omitted"):
        return f"thinking.{kind}.display: Input should be 'summarized' or 'omitted'"
    if kind == "enabled":
        refused = _budget_refusal(model, thinking, max_tokens)
        if refused is not None:
            return refused
    if kind != "disabled":
        # "Thinking isn't compatible with temperature or top_k modifications"
        # (docs.claude.com/en/docs/build-with-claude/extended-thinking); the answer's wording
        # is quoted in github.com/MartialBE/one-hub/issues/529 and
        # dotCipher/opencode-claude-bridge/pull/1.
        temperature = body.get("temperature")
        if temperature is not None and temperature != 1:
            return (
                "`temperature` may only be set to 1 when thinking is enabled or in adaptive "
                f"mode. Please consult our documentation at {_THINKING_DOC}"
            )
        if body.get("top_k") is not None:
            return (
                "`top_k` is not supported when thinking is enabled. Please consult our "
                f"documentation at {_THINKING_DOC}"
            )
    return None


def _budget_refusal(model: str, thinking: Mapping[str, Any], max_tokens: int) -> str | None:
    """The refusal of a manual thinking budget (`thinking.type = "enabled"`), or None."""
    # Manual budgets: docs.claude.com/en/docs/build-with-claude/extended-thinking
    # ("budget_tokens" at least 1,024 and below max_tokens); refused from Opus 4.7 on
    # (github.com/NousResearch/hermes-agent/issues/11137 quotes the answer).
    if claude_without_sampling(model):
        return (
            '"thinking.type.enabled" is not supported for this model. Use '
            '"thinking.type.adaptive" and "output_config.effort" to control thinking '
            "behavior."
        )
    budget = thinking.get("budget_tokens")
    if budget is None:
        return "thinking.enabled.budget_tokens: Field required"
    if isinstance(budget, bool) or not isinstance(budget, int):
        return "thinking.enabled.budget_tokens: Input should be a valid integer"
    if budget < THINKING_BUDGET_MIN:
        return (
            "thinking.enabled.budget_tokens: Input should be greater than or equal to "
            f"{THINKING_BUDGET_MIN}"
        )
    if budget >= max_tokens:
        return (
            "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult "
            f"our documentation at {_MAX_TOKENS_DOC}"
        )
    return None


def anthropic_thinking(model: str, body: Mapping[str, Any]) -> tuple[int | None, bool]:
    """(thinking, shown) of an accepted Messages request: `Ask.thinking` (None none, -1
    adaptive, else the budget) and whether the thinking block carries its summary (`display`;
    "omitted" is the default from Claude Opus 4.7 on: platform.claude.com/docs/en/
    build-with-claude/extended-thinking, "Controlling thinking display")."""
    thinking = body.get("thinking")
    if not isinstance(thinking, Mapping) or thinking.get("type") not in ("enabled", "adaptive"):
        return None, False
    default = "omitted" if claude_without_sampling(model) else "summarized"
    shown = thinking.get("display", default) != "omitted"
    if thinking.get("type") == "adaptive":
        return -1, shown
    budget = thinking.get("budget_tokens")
    return (budget if isinstance(budget, int) else -1), shown


# -- Gemini -----------------------------------------------------------------------------------

#: The generateContent request fields (ai.google.dev/api/generate-content#request-body), as
#: their JSON (camelCase) names; the simulator reads snake_case names as these too. Anything
#: else: 'Invalid JSON payload received. Unknown name "<name>": Cannot find field.'
GEMINI_FIELDS = frozenset(
    {
        "contents",
        "systemInstruction",
        "generationConfig",
        "safetySettings",
        "tools",
        "toolConfig",
        "cachedContent",
    }
)
#: `GenerationConfig`'s fields (ai.google.dev/api/generate-content#generationconfig).
GEMINI_GENERATION_FIELDS = frozenset(
    {
        "stopSequences",
        "responseMimeType",
        "responseSchema",
        "responseJsonSchema",
        "responseModalities",
        "candidateCount",
        "maxOutputTokens",
        "temperature",
        "topP",
        "topK",
        "seed",
        "presencePenalty",
        "frequencyPenalty",
        "responseLogprobs",
        "logprobs",
        "enableEnhancedCivicAnswers",
        "speechConfig",
        "thinkingConfig",
        "imageConfig",
        "mediaResolution",
    }
)


def _gemini_version(model: str) -> tuple[int, int] | None:
    """(major, minor) of a Gemini model name (`gemini-2.5-flash` -> (2, 5), `gemini-3-pro` ->
    (3, 0)), None for other names."""
    words = _words(model)
    if len(words) < 2 or words[0] != "gemini":
        return None
    major = _small(words[1])
    if major is None:
        return None
    minor = _small(words[2]) if len(words) > 2 else None
    return major, minor or 0


def gemini_thinks_by_default(model: str) -> bool:
    """Whether `model` thinks when the request does not say (dynamic thinking): the 2.5 models
    but Flash-Lite, and every model from Gemini 3 on (ai.google.dev/gemini-api/docs/thinking:
    "thinking is on by default" for the 2.5 series and Gemini 3; 2.5 Flash-Lite does not think
    unless asked)."""
    version = _gemini_version(model)
    if version is None or version < (2, 5):
        return False
    return not (version < (3, 0) and "lite" in _words(model))


def _range_message(name: str, value: Any, top: str) -> str:
    return (
        f"Unable to submit request because it has a {name} value of {_number_text(value)} but "
        f"the supported range is from 0 (inclusive) to {top} (exclusive). Update the value and "
        "try again."
    )


def gemini_refusal(model: str, config: Mapping[str, Any]) -> str | None:
    """The message of the 400 INVALID_ARGUMENT the generateContent API answers a request's
    `generationConfig` (camelCase keys) with, or None. Checked after the fields are known.

    Ranges: ai.google.dev/api/generate-content#generationconfig (temperature 0 to 2, topP 0 to
    1); the wording is the API's (as Vertex words it, quoted in the Gemini issues). Thinking:
    ai.google.dev/gemini-api/docs/thinking (thinking cannot be turned off for 2.5 Pro;
    `thinkingLevel` on a model before Gemini 3 is an error)."""
    for name, top, limit in (("temperature", "2.0001", 2), ("topP", "1.0001", 1)):
        value = config.get(name)
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and not 0 <= value <= limit
        ):
            return _range_message(name, value, top)
    think = config.get("thinkingConfig")
    if not isinstance(think, Mapping):
        return None
    version = _gemini_version(model)
    if version is None:
        return None
    if "thinkingLevel" in think and version < (3, 0):
        return "Thinking level is not supported for this model."
    if think.get("thinkingBudget") == 0 and version[:2] == (2, 5) and "pro" in _words(model):
        return "Budget 0 is invalid. This model only works in thinking mode."
    return None

"""Anthropic's native Messages API (POST {base_url}/messages, base_url like
"https://api.anthropic.com/v1").

Why native rather than Anthropic's OpenAI-compatibility layer: that layer is partial (no
`stop_reason: refusal`, no rate-limit headers), and a bias audit must tell a refusal from an
answer and pace itself by the limits the provider announces.

The dialect, as this class speaks it:

* request: headers `anthropic-version` (the model's `anthropic_version`, default
  `ANTHROPIC_VERSION`) and the key in the header that version takes (`auth_headers`:
  `x-api-key`, or `Authorization: Bearer` from `BEARER_SINCE`; only in the session's default
  headers, never in a repr or a message); body `model`, `system` (every system message of the chat,
  joined by a blank line, as the top-level field the API wants), `messages` (user and assistant
  turns), `max_tokens` (required by the API; the trial's neutral `max_tokens`) and
  `temperature`, except for the models that refuse it (runner/providers/params.py's
  `ANTHROPIC_RULES`, or `send_temperature = false` in the config). The neutral `seed` has no
  Anthropic counterpart: a config giving an anthropic model a `sampling_seed` is refused
  (runner/config/__init__.py), so no trial key promises one. The model's own options
  (`AnthropicThinking`): `thinking_budget` -> `thinking: {type: enabled, budget_tokens}`,
  `thinking = "adaptive"` / `"disabled"` -> `thinking: {type: ...}`, `effort` ->
  `output_config: {effort}`.
* reply: the text blocks of `content` joined (`thinking` blocks kept apart as `Reply.reasoning`;
  their tokens are inside `output_tokens`); `stop_reason` stored in the vocabulary the analysis
  reads (`end_turn`/`stop_sequence` -> `stop`, `max_tokens` -> `length`, `refusal` ->
  `content_filter`; anything else as sent), the original stays in `raw`. `stop_reason: refusal`
  (the safety classifiers stopped the answer) is a refusal, a `Reply` and not an error: its
  content is None (any partial text stays in `raw`) and `refusal` holds the API's explanation.
  Tokens: `usage.input_tokens` (plus any cache creation and cache read tokens) as prompt tokens,
  `usage.output_tokens` as completion tokens. `model` is the provider model.
* errors: runner/providers/retries.py's policy, plus Anthropic's error types:
  `authentication_error`, `permission_error`, `not_found_error` and billing errors (`billing_error`,
  or a 4xx saying the credit balance is too low) stop the model; 429 `rate_limit_error` and 529
  `overloaded_error` are retried, waiting at least `retry-after` (or an
  `anthropic-ratelimit-*-reset` whose budget is used up).
* limits: `anthropic-ratelimit-requests-limit` is the RPM; `anthropic-ratelimit-tokens-limit`
  (input plus output tokens per minute, the most restrictive limit in effect) the TPM, else the
  sum of the `-input-tokens-limit` and `-output-tokens-limit` headers (also kept apart); each
  `-remaining` with its `-reset` time is a `Window`, so a used-up one holds new requests.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Annotated, Any, ClassVar, Self

import msgspec
from msgspec import Meta

from ibias.prompts.base import Message, SettingsError
from ibias.runner.config import ModelConfig
from ibias.runner.providers.base import (
    MINUTE_S,
    AttemptError,
    Limits,
    ProviderContext,
    Reply,
    Sampling,
    Window,
)
from ibias.runner.providers.http import HTTPProvider
from ibias.runner.providers.http import max_body_bytes_of as _max_body_bytes
from ibias.runner.providers.params import ParamRule, rule_for
from ibias.runner.providers.registry import provider
from ibias.runner.providers.retries import (
    Classification,
    MalformedResponse,
    Verdict,
    classify_exception,
    classify_http,
    describe_error,
    error_body,
    json_object,
    parse_rfc3339,
)
from ibias.runner.providers.sending import SendingOptions
from ibias.runner.providers.traits import BUILTIN_TRAITS
from ibias.runner.providers.usage import token_count, token_sum

__all__ = [
    "ANTHROPIC_VERSION",
    "BEARER_SINCE",
    "DEFAULT_BASE_URL",
    "EFFORTS",
    "THINKING_BUDGET_MIN",
    "THINKING_TYPES",
    "AnthropicConfigOptions",
    "AnthropicProvider",
    "AnthropicThinking",
    "anthropic_limits",
    "anthropic_request",
    "auth_headers",
    "classify_anthropic",
    "parse_message",
]

#: The Messages API version a model's requests name unless its config says another
#: (`anthropic_version`): the one ibias has always sent, so a model that names none, or names
#: this one, keeps the trial keys of the stores made before the option existed.
ANTHROPIC_VERSION = "2023-06-01"
#: The first version whose requests carry the key as `Authorization: Bearer KEY` rather than
#: `x-api-key: KEY` (issue 33: what the official SDK sends with `anthropic-version: 2026-10-21`;
#: the SDK copy read, anthropic-sdk-python 0.121.0 of 2026-08-07, still sends 2023-06-01 from
#: `_client.py`'s default headers, with `X-Api-Key` for an API key and `Authorization: Bearer`
#: for an auth token). Versions are dates, so a later one takes the newer header too.
BEARER_SINCE = "2026-10-21"
_VERSION = re.compile(r"\d{4}-\d{2}-\d{2}")


def auth_headers(version: str, api_key: str | None) -> dict[str, str]:
    """`anthropic-version` and the key in the header that version takes (none without a key):
    `x-api-key` before `BEARER_SINCE`, `Authorization: Bearer` from it. The same headers go
    with online requests and Message Batches calls (runner/batch/anthropic.py)."""
    headers = {"anthropic-version": version}
    if api_key:
        if version >= BEARER_SINCE:
            headers["Authorization"] = f"Bearer {api_key}"
        else:
            headers["x-api-key"] = api_key
    return headers


def check_version(version: str) -> None:
    """A version is a real date (YYYY-MM-DD), not before the first API version (2023-01-01):
    refused in one line naming the key, rather than by every request's 400."""
    try:
        valid = bool(_VERSION.fullmatch(version)) and date.fromisoformat(version) >= _FIRST
    except ValueError:
        valid = False
    if not valid:
        raise SettingsError(
            "anthropic_version",
            f"expected an Anthropic API version, a date such as {ANTHROPIC_VERSION!r} or "
            f"{BEARER_SINCE!r}, got {version!r}",
        )


_FIRST = date(2023, 1, 1)
DEFAULT_BASE_URL = "https://api.anthropic.com/v1"

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "refusal": "content_filter",
}
#: Error types that no retry can fix, with the kind stored in `attempts.error_kind`.
_FATAL_TYPES = {
    "authentication_error": "auth",
    "permission_error": "forbidden",
    "not_found_error": "not_found",
    "billing_error": "billing",
}
_LOW_CREDIT = re.compile(r"(?i)credit balance is too low|purchase credits|billing")

# Thinking as the Messages API documents it (platform.claude.com/docs/en/build-with-claude/
# extended-thinking, .../adaptive-thinking and .../effort; the same sets in the official SDK's
# request types, anthropic 2.15: ThinkingConfigParam, OutputConfigParam):
#: `thinking.type` a config may name: "adaptive" (Claude decides when and how much to think;
#: the recommended mode from Claude Opus 4.6) or "disabled". "enabled" is `thinking_budget`.
THINKING_TYPES = ("adaptive", "disabled")
#: `budget_tokens` of manual extended thinking: at least 1,024 and less than `max_tokens`
#: (deprecated from Claude Opus 4.6; Claude 4.7 and later refuse it with a 400).
THINKING_BUDGET_MIN = 1024
#: `output_config.effort`: "high" is the default; "xhigh" and "max" only on some models (the
#: API answers 400 for the others).
EFFORTS = ("low", "medium", "high", "xhigh", "max")


@dataclass(frozen=True)
class AnthropicThinking:
    """An Anthropic model's thinking options (config keys `thinking_budget`, `thinking`,
    `effort`; at most one of the first two). None: not sent (the model's default)."""

    thinking_budget: int | None = None
    thinking: str | None = None
    effort: str | None = None

    def __post_init__(self) -> None:
        budget = self.thinking_budget
        if budget is not None and (
            isinstance(budget, bool) or not isinstance(budget, int) or budget < THINKING_BUDGET_MIN
        ):
            raise SettingsError(
                "thinking_budget",
                f"expected an integer of at least {THINKING_BUDGET_MIN} (and below max_tokens), "
                f"got {budget!r}",
            )
        if self.thinking is not None and self.thinking not in THINKING_TYPES:
            raise SettingsError(
                "thinking",
                f"expected one of {list(THINKING_TYPES)} (or thinking_budget for a fixed "
                f"budget), got {self.thinking!r}",
            )
        if budget is not None and self.thinking is not None:
            raise SettingsError("thinking", "give either thinking or thinking_budget, not both")
        if self.effort is not None and self.effort not in EFFORTS:
            raise SettingsError("effort", f"expected one of {list(EFFORTS)}, got {self.effort!r}")

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any]) -> AnthropicThinking:
        return cls(
            thinking_budget=table.get("thinking_budget"),
            thinking=table.get("thinking"),
            effort=table.get("effort"),
        )

    @property
    def thinks(self) -> bool:
        """Whether thinking is on (a budget, or adaptive): the API then takes no temperature
        other than 1."""
        return self.thinking_budget is not None or self.thinking == "adaptive"

    def body_extras(self) -> dict[str, Any]:
        """The `thinking` and `output_config` fields of the request, when set."""
        out: dict[str, Any] = {}
        if self.thinking_budget is not None:
            out["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        elif self.thinking is not None:
            out["thinking"] = {"type": self.thinking}
        if self.effort is not None:
            out["output_config"] = {"effort": self.effort}
        return out


class AnthropicConfigOptions(SendingOptions, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The Anthropic provider's own keys in a `[[models]]` table (`Provider.options_schema`):
    types here, the sets and the checks across keys in `AnthropicThinking`."""

    thinking_budget: Annotated[int, Meta(ge=1, le=2**31 - 1)] | None = None
    thinking: (
        Annotated[str, Meta(pattern=r"\S", extra={"expected": "a non-empty string"})] | None
    ) = None
    effort: Annotated[str, Meta(pattern=r"\S", extra={"expected": "a non-empty string"})] | None = (
        None
    )
    #: The `anthropic-version` its requests send. Its default is the one sent before the key
    #: existed, and the config loader leaves an option given at its schema's default out of
    #: the model's options (runner/config/__init__.py), so naming it changes no trial key; any other
    #: version enters the trial's params (the reply may differ).
    anthropic_version: str = ANTHROPIC_VERSION


def anthropic_request(
    model: str,
    messages: Sequence[Message],
    sampling: Sampling,
    rule: ParamRule | None = None,
    thinking: AnthropicThinking | None = None,
) -> dict[str, Any]:
    """The Messages request body for a chat and the trial's neutral sampling parameters;
    `rule` (default: the table's, by model name) says which of them the model refuses;
    `thinking` adds the model's thinking options."""
    if rule is None:
        rule = rule_for(None, model, provider="anthropic")
    system = [m["content"] for m in messages if m["role"] == "system"]
    turns = [
        {"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"
    ]
    body: dict[str, Any] = {"model": model}
    if system:
        body["system"] = "\n\n".join(system)
    body["messages"] = turns
    body["max_tokens"] = sampling.max_tokens
    if "temperature" not in rule.rejects:
        body["temperature"] = sampling.temperature
    if thinking is not None:
        body.update(thinking.body_extras())
    return body


def classify_anthropic(
    status: int, headers: Mapping[str, str], body: bytes, now: float | None = None
) -> Classification:
    """runner/providers/retries.py's policy with Anthropic's error types on top (see the module
    doc)."""
    if 200 <= status < 300:
        return classify_http(status, headers, body, now)
    info = error_body(body)
    if 400 <= status < 500 and (
        info.type == "billing_error"
        or (info.type == "invalid_request_error" and _LOW_CREDIT.search(info.message))
    ):
        return Classification(Verdict.FATAL, "billing", describe_error(status, info))
    kind = _FATAL_TYPES.get(info.type)
    if kind is not None:
        return Classification(Verdict.FATAL, kind, describe_error(status, info))
    return classify_http(status, headers, body, now)


_ANTHROPIC_WINDOWS = (
    ("requests", "requests"),
    ("tokens", "tokens"),
    ("input-tokens", "input_tokens"),
    ("output-tokens", "output_tokens"),
)


def anthropic_limits(headers: Mapping[str, str], now: float | None = None) -> Limits | None:
    """The `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,
    reset}` headers (all per minute; resets are RFC 3339 times, read against `now`, the
    wall-clock epoch, default `time.time()`), or None if there are none.

    RPM is the requests limit; TPM the tokens limit (the most restrictive in effect), else the
    sum of the input and output token limits, which are also kept apart.
    """
    lower = {str(k).lower(): str(v) for k, v in headers.items()}

    def number(name: str) -> int | None:
        return _positive_int(lower.get(f"anthropic-ratelimit-{name}-limit"))

    windows: list[Window] = []
    for name, what in _ANTHROPIC_WINDOWS:
        remaining = _count(lower.get(f"anthropic-ratelimit-{name}-remaining"))
        if remaining is None:
            continue
        if now is None:
            now = time.time()
        reset = _seconds_until(lower.get(f"anthropic-ratelimit-{name}-reset"), now)
        windows.append(Window(what, remaining, reset, number(name), MINUTE_S))
    rpm = number("requests")
    tpm = number("tokens")
    input_tpm, output_tpm = number("input-tokens"), number("output-tokens")
    if tpm is None and input_tpm is not None and output_tpm is not None:
        tpm = input_tpm + output_tpm
    if rpm is None and tpm is None and input_tpm is None and output_tpm is None and not windows:
        return None
    return Limits(
        rpm=rpm, tpm=tpm, input_tpm=input_tpm, output_tpm=output_tpm, windows=tuple(windows)
    )


def _count(value: str | None) -> int | None:
    """A remaining count (0 included), or None when absent or unreadable."""
    if value is None:
        return None
    try:
        return max(int(value.strip()), 0)
    except ValueError:
        return None


def _seconds_until(value: str | None, now: float) -> float | None:
    """Seconds from `now` to an RFC 3339 time (never negative), or None."""
    seconds = None if value is None else parse_rfc3339(value, now)
    return None if seconds is None else max(0.0, seconds)


def parse_message(body: bytes, status: int, headers: Mapping[str, str]) -> Reply:
    """Read the fields ibias stores from a Messages response body."""
    data = json_object(body, status, "message")
    blocks = data.get("content")
    if not isinstance(blocks, list):
        raise MalformedResponse("message has no content list")
    texts = [
        b["text"]
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    thinking = [
        b["thinking"]
        for b in blocks
        if isinstance(b, dict)
        and b.get("type") == "thinking"
        and isinstance(b.get("thinking"), str)
    ]
    stop_reason = _opt_str(data.get("stop_reason"))
    content: str | None = "".join(texts) if texts else None
    refusal: str | None = None
    if stop_reason == "refusal":
        details = data.get("stop_details")
        explanation = details.get("explanation") if isinstance(details, dict) else None
        refusal = explanation if isinstance(explanation, str) and explanation else "refused"
        content = None  # a partial answer cut by the classifiers is not an answer; raw keeps it
    usage = data.get("usage")
    prompt_tokens = completion_tokens = cache_read = cache_write = None
    if isinstance(usage, dict):
        cache_read = token_count(usage.get("cache_read_input_tokens"))
        cache_write = token_count(usage.get("cache_creation_input_tokens"))
        # Checked counts (runner/providers/usage.py): the cache counts are absent when no
        # cache was used (0), but one that is present and not a count makes the total unknown.
        prompt_tokens = token_count(usage.get("input_tokens"))
        for k in ("cache_creation_input_tokens", "cache_read_input_tokens"):
            if prompt_tokens is not None and usage.get(k) is not None:
                prompt_tokens = token_sum(prompt_tokens, token_count(usage.get(k)))
        completion_tokens = token_count(usage.get("output_tokens"))
    return Reply(
        content=content,
        finish_reason=None if stop_reason is None else _STOP_REASONS.get(stop_reason, stop_reason),
        refusal=refusal,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        provider_model=_opt_str(data.get("model")),
        system_fingerprint=None,
        raw=data,
        status=status,
        headers=headers,
        reasoning="\n\n".join(thinking) if thinking else None,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


@provider("anthropic")
class AnthropicProvider(HTTPProvider):
    """`Provider` for POST {base_url}/messages."""

    #: Its thinking options, and how its trials are sent (online or as Message Batches).
    options_schema: ClassVar[type[msgspec.Struct] | None] = AnthropicConfigOptions
    #: What its models accept and need: declared once, in `BUILTIN_TRAITS`.
    traits = BUILTIN_TRAITS["anthropic"]

    @classmethod
    def rehearsal_path(cls, model: ModelConfig) -> str | None:
        """The simulator speaks Anthropic's Messages (and Message Batches) under /v1."""
        del model
        return "/v1"

    @classmethod
    def check_options(cls, options: Any) -> None:
        assert isinstance(options, AnthropicConfigOptions)
        AnthropicThinking.from_mapping(msgspec.structs.asdict(options))
        check_version(options.anthropic_version)

    @classmethod
    def reserved_tokens(cls, options: Mapping[str, Any]) -> int:
        """A thinking budget: Anthropic refuses one that is not below `max_tokens` (a 400)."""
        budget = options.get("thinking_budget")
        return int(budget) if budget is not None else 0

    def __init__(
        self,
        *,
        base_url: str = DEFAULT_BASE_URL,
        model: str,
        api_key: str | None,
        timeout_s: float,
        max_connections: int,
        max_body_bytes: int | None = None,
        version: str = ANTHROPIC_VERSION,
        rule: ParamRule | None = None,
        thinking: AnthropicThinking | None = None,
    ) -> None:
        super().__init__(
            url=base_url.rstrip("/") + "/messages",
            model=model,
            api_key=api_key,
            timeout_s=timeout_s,
            max_connections=max_connections,
            max_body_bytes=max_body_bytes,
        )
        self.version = version
        #: Which neutral parameters this model refuses (decided once, from its name).
        self.rule: ParamRule = (
            rule if rule is not None else rule_for(None, model, provider="anthropic")
        )
        self.thinking = thinking

    @classmethod
    def from_config(cls, model: ModelConfig, api_key: str | None, context: ProviderContext) -> Self:
        return cls(
            base_url=model.base_url or DEFAULT_BASE_URL,
            model=model.model,
            api_key=api_key,
            timeout_s=model.timeout_s,
            max_connections=model.max_concurrency,
            max_body_bytes=_max_body_bytes(model),
            rule=rule_for(
                model.base_url,
                model.model,
                provider="anthropic",
                send_temperature=model.send_temperature,
            ),
            thinking=AnthropicThinking.from_mapping(model.options) if model.options else None,
            version=str(model.options.get("anthropic_version") or ANTHROPIC_VERSION),
        )

    def session_headers(self, api_key: str | None) -> dict[str, str]:
        return auth_headers(self.version, api_key)

    def request_body(self, messages: Sequence[Message], sampling: Sampling) -> dict[str, Any]:
        """The Messages body of one trial: what `complete` posts, and what a Message Batches
        request carries as its `params` (runner/batch/anthropic.py)."""
        return anthropic_request(self.model, messages, sampling, self.rule, self.thinking)

    async def complete(self, messages: Sequence[Message], sampling: Sampling) -> Reply:
        status, headers, body = await self.post(self.request_body(messages, sampling))
        verdict = classify_anthropic(status, headers, body, now=time.time())
        if verdict.verdict is not Verdict.OK:
            raise AttemptError(verdict, status=status, headers=headers)
        try:
            return parse_message(body, status, headers)
        except MalformedResponse as exc:
            raise AttemptError(
                self.classify_exception(exc), status=status, headers=headers
            ) from None

    def classify_exception(self, exc: BaseException) -> Classification:
        return classify_exception(exc)

    def limits_from_headers(self, headers: Mapping[str, str]) -> Limits | None:
        return anthropic_limits(headers)


def _positive_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        return None
    return number if number > 0 else None


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None

"""Google's native Gemini API: POST {base_url}/models/{model}:generateContent, base_url like
"https://generativelanguage.googleapis.com/v1beta".

The dialect, as this class speaks it:

* request: the key in the `x-goog-api-key` header (never in the URL, where it would end up in
  exception texts); body `contents` (user turns as `user`, assistant turns as `model`),
  `systemInstruction` (every system message, joined by a blank line), `generationConfig` with
  the neutral sampling mapped (`temperature`, `maxOutputTokens`, `seed`) and the model's
  `thinkingConfig`, and the model's `safetySettings` (see `GeminiOptions`).
* reply: the text of the first candidate's parts (thought-summary parts left out of the reply
  and kept as `Reply.reasoning`).
  `finishReason` SAFETY, PROHIBITED_CONTENT, BLOCKLIST, SPII and IMAGE_SAFETY, and a 200 with
  no candidates whose `promptFeedback.blockReason` says the prompt was blocked, are refusals: a
  `Reply` with content None, finish_reason `content_filter` and `refusal` naming the reason.
  Other finish reasons are stored in the vocabulary the analysis reads (STOP -> `stop`,
  MAX_TOKENS -> `length`, anything else lower-cased); the original stays in `raw`.
  Tokens from `usageMetadata`: `promptTokenCount` as prompt tokens, `candidatesTokenCount` plus
  `thoughtsTokenCount` as completion tokens (thoughts are billed as output, so they count in
  the cost and the budget; `thoughtsTokenCount` is also kept as `Reply.reasoning_tokens`).
  `modelVersion` is the provider model.
* errors: runner/providers/retries.py's policy (429 RESOURCE_EXHAUSTED waits for
  `RetryInfo.retryDelay`; 400 API_KEY_INVALID, 403, 404 stop the model), plus: a 429 naming a quota
  whose id contains `PerDay` stops the model for this run with one line saying when the quota resets
  (midnight Pacific time), so a resume after that continues; a 429 naming a quota whose value is 0
  (the model is not available to this project or tier) stops it too.
* limits: Gemini sends no rate-limit headers. A 429 names the quota it hit and its value
  (`QuotaFailure.violations[].quotaValue`): the provider remembers per-minute request and token
  quotas from those and announces them through `limits_from_headers`, so a model without
  `rpm`/`tpm` in the config is paced from its first 429 on.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from types import MappingProxyType
from typing import Annotated, Any, Literal, Self
from urllib.parse import quote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
from msgspec import Meta

from ibias.prompts.base import Message, SettingsError
from ibias.runner.config import ModelConfig
from ibias.runner.providers.base import (
    AttemptError,
    Limits,
    ProviderContext,
    Reply,
    Sampling,
)
from ibias.runner.providers.http import HTTPProvider
from ibias.runner.providers.http import max_body_bytes_of as _max_body_bytes
from ibias.runner.providers.names import SENDING_OPTIONS
from ibias.runner.providers.registry import provider
from ibias.runner.providers.retries import (
    Classification,
    MalformedResponse,
    QuotaViolation,
    Verdict,
    classify_exception,
    classify_http,
    describe_error,
    error_body,
    json_object,
    quota_violations,
    redact,
)
from ibias.runner.providers.traits import BUILTIN_TRAITS
from ibias.runner.providers.usage import token_count, token_sum

__all__ = [
    "DEFAULT_BASE_URL",
    "GEMINI_PARAM_KEYS",
    "GeminiOptions",
    "GeminiProvider",
    "classify_gemini",
    "gemini_request",
    "limits_from_quotas",
    "next_quota_reset",
    "parse_generate_content",
]

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"

#: Finish reasons that mean a filter withheld the answer (stored as refusals).
BLOCKING_FINISH_REASONS = frozenset(
    {"SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "IMAGE_SAFETY"}
)
_FINISH_REASONS = {"STOP": "stop", "MAX_TOKENS": "length"}

#: `HarmBlockThreshold` values the API accepts.
SAFETY_THRESHOLDS = frozenset(
    {
        "HARM_BLOCK_THRESHOLD_UNSPECIFIED",
        "BLOCK_LOW_AND_ABOVE",
        "BLOCK_MEDIUM_AND_ABOVE",
        "BLOCK_ONLY_HIGH",
        "BLOCK_NONE",
        "OFF",
    }
)
#: Categories are checked by form, not by a list: Google adds categories over time.
_CATEGORY = re.compile(r"HARM_CATEGORY_[A-Z_]+")
#: `thinkingConfig.thinkingLevel` (Gemini 3 and later; ai.google.dev/gemini-api/docs/thinking:
#: minimal, low, medium, high, each model taking some of them, e.g. Gemini 3 Pro only low and
#: high; the official SDK's `ThinkingLevel`, google-genai 3.6, adds xhigh). A level a model
#: does not take is the API's 400, not the config's.
THINKING_LEVELS = ("minimal", "low", "medium", "high", "xhigh")
#: `thinkingConfig.thinkingBudget` (Gemini 2.5; same page): -1 asks for dynamic thinking, 0
#: turns it off (Flash and Flash-Lite; 2.5 Pro cannot turn it off), else a token budget; the
#: largest any model accepts is 32,768 (2.5 Pro: 128-32,768; Flash: 0-24,576; Flash-Lite:
#: 512-24,576; each model checks its own range).
THINKING_BUDGET_MIN = -1
THINKING_BUDGET_MAX = 32_768
#: Where daily quotas reset: midnight in this zone.
QUOTA_ZONE = "America/Los_Angeles"


@dataclass(frozen=True)
class GeminiOptions:
    """Per-model request settings that the neutral sampling parameters do not cover.

    * `safety_settings`: harm category -> block threshold, sent as `safetySettings` (empty: the
      API's defaults). Categories are `HARM_CATEGORY_*` names, thresholds one of
      `SAFETY_THRESHOLDS`.
    * `thinking_budget`: `generationConfig.thinkingConfig.thinkingBudget` (Gemini 2.5): -1
      dynamic, 0 off, else tokens up to 32,768. None: not sent (the model's default).
    * `thinking_level`: `thinkingConfig.thinkingLevel` (Gemini 3): minimal, low, medium, high
      or xhigh. The API refuses both in one request, so at most one may be set.

    Note that Gemini counts thinking tokens against `maxOutputTokens`: a small `max_tokens`
    with dynamic thinking can end in MAX_TOKENS before any answer text.
    """

    safety_settings: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    thinking_budget: int | None = None
    thinking_level: str | None = None

    def __post_init__(self) -> None:
        for category, threshold in self.safety_settings.items():
            if not isinstance(category, str) or not _CATEGORY.fullmatch(category):
                raise SettingsError(
                    f"safety_settings.{category}",
                    "unknown harm category; expected a name like HARM_CATEGORY_HATE_SPEECH",
                )
            if threshold not in SAFETY_THRESHOLDS:
                raise SettingsError(
                    f"safety_settings.{category}",
                    f"expected one of {sorted(SAFETY_THRESHOLDS)}, got {threshold!r}",
                )
        budget = self.thinking_budget
        if budget is not None and (
            isinstance(budget, bool)
            or not isinstance(budget, int)
            or not THINKING_BUDGET_MIN <= budget <= THINKING_BUDGET_MAX
        ):
            raise SettingsError(
                "thinking_budget",
                f"expected an integer from {THINKING_BUDGET_MIN} (dynamic) to "
                f"{THINKING_BUDGET_MAX}, got {budget!r}",
            )
        if self.thinking_level is not None and self.thinking_level not in THINKING_LEVELS:
            raise SettingsError(
                "thinking_level",
                f"expected one of {list(THINKING_LEVELS)}, got {self.thinking_level!r}",
            )
        if budget is not None and self.thinking_level is not None:
            raise SettingsError(
                "thinking_level", "give either thinking_budget or thinking_level, not both"
            )
        object.__setattr__(self, "safety_settings", MappingProxyType(dict(self.safety_settings)))

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any]) -> GeminiOptions:
        """Options from config keys (`safety_settings`, `thinking_budget`, `thinking_level`);
        any other key, or a bad value, raises SettingsError naming the key."""
        known = {"safety_settings", "thinking_budget", "thinking_level"}
        for key in table:
            if key not in known:
                raise SettingsError(str(key), f"unknown key; expected one of {sorted(known)}")
        settings = table.get("safety_settings") or {}
        if not isinstance(settings, Mapping):
            raise SettingsError("safety_settings", "expected a table of category = threshold")
        return cls(
            safety_settings=dict(settings),
            thinking_budget=table.get("thinking_budget"),
            thinking_level=table.get("thinking_level"),
        )

    @classmethod
    def from_model(cls, model: ModelConfig) -> GeminiOptions:
        """The options a model config carries (`ModelConfig.options`, validated by
        `GeminiConfigOptions` when the config was read)."""
        return cls.from_mapping(
            {k: v for k, v in model.options.items() if v is not None and k not in SENDING_OPTIONS}
        )

    def generation_extras(self) -> dict[str, Any]:
        """The `thinkingConfig` entry of `generationConfig`, if any."""
        if self.thinking_budget is not None:
            think: dict[str, Any] = {"thinkingBudget": self.thinking_budget}
            if self.thinking_budget != 0:  # thought summaries, stored as the reasoning
                think["includeThoughts"] = True
            return {"thinkingConfig": think}
        if self.thinking_level is not None:
            return {
                "thinkingConfig": {"thinkingLevel": self.thinking_level, "includeThoughts": True}
            }
        return {}


def gemini_request(
    messages: Sequence[Message], sampling: Sampling, options: GeminiOptions | None = None
) -> dict[str, Any]:
    """The generateContent body for a chat, the trial's neutral sampling and the options."""
    options = options or GeminiOptions()
    system = [m["content"] for m in messages if m["role"] == "system"]
    contents = [
        {"role": "model" if m["role"] == "assistant" else "user", "parts": [{"text": m["content"]}]}
        for m in messages
        if m["role"] != "system"
    ]
    generation: dict[str, Any] = {
        "temperature": sampling.temperature,
        "maxOutputTokens": sampling.max_tokens,
    }
    if sampling.seed is not None:
        generation["seed"] = sampling.seed
    generation.update(options.generation_extras())
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
    body["generationConfig"] = generation
    if options.safety_settings:
        body["safetySettings"] = [
            {"category": c, "threshold": t} for c, t in options.safety_settings.items()
        ]
    return body


def next_quota_reset(now: float) -> datetime:
    """The next midnight Pacific time after `now` (epoch seconds), in UTC: when Gemini's daily
    quotas reset. Without a time-zone database, Pacific Standard Time (UTC-8) is assumed."""
    zone: tzinfo
    try:
        zone = ZoneInfo(QUOTA_ZONE)
    except ZoneInfoNotFoundError:  # pragma: no cover - Debian and the tzdata wheel ship it
        zone = timezone(timedelta(hours=-8))
    local = datetime.fromtimestamp(now, zone)
    tomorrow = (local + timedelta(days=1)).date()
    midnight = datetime(tomorrow.year, tomorrow.month, tomorrow.day, tzinfo=zone)
    return midnight.astimezone(UTC)


def _daily_message(violation: QuotaViolation | None, now: float) -> str:
    reset = next_quota_reset(now)
    name = (violation.quota_id or violation.metric) if violation else ""
    what = f"daily quota {name}" if name else "a daily quota"
    if violation is not None and violation.value is not None:
        what += f" ({violation.value:,} per day)"
    return redact(
        f"HTTP 429: {what} is used up; it resets at midnight Pacific time "
        f"({reset:%Y-%m-%d %H:%M} UTC): run again after that to continue"
    )


#: What a Gemini model's config changes when the API refuses a parameter by name
#: (runner/providers/retries.py `param_refusal`): its own thinking options, and a temperature
#: (Gemini's provider sends the configured one always: `send_temperature` is not read here).
GEMINI_PARAM_KEYS: Mapping[str, str] = MappingProxyType(
    {
        "thinking": "remove thinking_budget or thinking_level for this model",
        "temperature": "change temperature for this model",
    }
)


def classify_gemini(
    status: int, headers: Mapping[str, str], body: bytes, now: float | None = None
) -> Classification:
    """runner/providers/retries.py's policy with Gemini's quota rules on top (see the module
    doc)."""
    if now is None:
        now = time.time()
    base = classify_http(status, headers, body, now, param_keys=GEMINI_PARAM_KEYS)
    if status != 429:
        return base
    info = error_body(body)
    violations = quota_violations(info)
    daily = [v for v in violations if v.per_day]
    if daily or base.kind == "daily_quota":
        return Classification(
            Verdict.FATAL, "daily_quota", _daily_message(daily[0] if daily else None, now)
        )
    zero = [v for v in violations if v.value == 0]
    if zero:
        name = zero[0].quota_id or zero[0].metric
        return Classification(
            Verdict.FATAL,
            "quota_zero",
            redact(
                f"HTTP 429: quota {name} is 0 for this model: it is not available to this "
                f"project or tier ({describe_error(status, info)})"
            ),
        )
    return base


def limits_from_quotas(violations: Sequence[QuotaViolation]) -> Limits | None:
    """Per-minute request and token quotas named in a 429, as limits (None if none)."""
    rpm = tpm = None
    for v in violations:
        if not v.per_minute or not v.value:
            continue
        if v.counts_tokens:
            tpm = v.value if tpm is None else min(tpm, v.value)
        else:
            rpm = v.value if rpm is None else min(rpm, v.value)
    if rpm is None and tpm is None:
        return None
    return Limits(rpm=rpm, tpm=tpm)


def parse_generate_content(body: bytes, status: int, headers: Mapping[str, str]) -> Reply:
    """Read the fields ibias stores from a generateContent response body: the first
    candidate's answer, or, with no candidate, the reason the prompt was blocked."""
    data = json_object(body, status, "generateContent")
    usage = data.get("usageMetadata")
    prompt_tokens, completion_tokens, thoughts = _usage_counts(usage)
    candidates = data.get("candidates")
    content: str | None = None
    reasoning: str | None = None
    refusal: str | None = None
    finish: str | None = None
    if isinstance(candidates, list) and candidates:
        content, reasoning, refusal, finish = _candidate_answer(candidates[0])
    elif candidates is None or candidates == []:
        refusal, finish = _prompt_blocked(data), "content_filter"
    else:
        raise MalformedResponse("generateContent candidates is not a list")
    return Reply(
        content=content,
        finish_reason=finish,
        refusal=refusal,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        provider_model=_opt_str(data.get("modelVersion")),
        system_fingerprint=None,
        raw=data,
        status=status,
        headers=headers,
        reasoning=reasoning,
        reasoning_tokens=thoughts,
        cache_read_tokens=(
            token_count(usage.get("cachedContentTokenCount")) if isinstance(usage, dict) else None
        ),
    )


def _usage_counts(usage: Any) -> tuple[int | None, int | None, int | None]:
    """Prompt, completion and thoughts tokens of `usageMetadata`, checked
    (runner/providers/usage.py); all unknown without it. Gemini's JSON leaves out a count that
    is zero (proto3), so an absent candidates or thoughts count is 0; one present but not a
    count is unknown, and so is the completion count it is part of (thoughts are output)."""
    if not isinstance(usage, dict):
        return None, None, None
    thoughts = token_count(usage.get("thoughtsTokenCount"))
    completion_tokens = token_sum(
        token_count(usage["candidatesTokenCount"]) if "candidatesTokenCount" in usage else 0,
        thoughts if "thoughtsTokenCount" in usage else 0,
    )
    return token_count(usage.get("promptTokenCount")), completion_tokens, thoughts


def _candidate_answer(candidate: Any) -> tuple[str | None, str | None, str | None, str | None]:
    """A candidate's content, reasoning (thought summaries), refusal and finish reason (in
    OpenAI's words): a blocked candidate is a `content_filter` refusal with no content."""
    if not isinstance(candidate, dict):
        raise MalformedResponse("generateContent candidate is not an object")
    native = _opt_str(candidate.get("finishReason"))
    content = _candidate_text(candidate)
    reasoning = _candidate_text(candidate, thought=True)
    if native in BLOCKING_FINISH_REASONS:
        return None, reasoning, f"response blocked: {native}", "content_filter"
    finish = None if native is None else _FINISH_REASONS.get(native, native.lower())
    return content, reasoning, None, finish


def _prompt_blocked(data: Mapping[str, Any]) -> str:
    """The refusal of a response without candidates: the prompt's block reason (and its
    message); with no block reason either, the body is malformed."""
    feedback = data.get("promptFeedback")
    reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
    if not isinstance(reason, str) or not reason:
        raise MalformedResponse("generateContent has no candidates and no block reason")
    assert isinstance(feedback, dict)
    refusal = f"prompt blocked: {reason}"
    message = feedback.get("blockReasonMessage")
    if isinstance(message, str) and message:
        refusal += f" ({message})"
    return refusal


def _candidate_text(candidate: Mapping[str, Any], *, thought: bool = False) -> str | None:
    """The answer parts' text, or with `thought` the thought-summary parts' text."""
    body = candidate.get("content")
    parts = body.get("parts") if isinstance(body, dict) else None
    if not isinstance(parts, list):
        return None
    texts = [
        p["text"]
        for p in parts
        if isinstance(p, dict)
        and isinstance(p.get("text"), str)
        and bool(p.get("thought")) is thought
    ]
    return "".join(texts) if texts else None


class GeminiConfigOptions(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The Gemini provider's own keys in a `[[models]]` table (`Provider.options_schema`):
    types and bounds here, the checks across keys in `GeminiOptions`."""

    safety_settings: dict[str, str] | None = None
    thinking_budget: Annotated[int, Meta(ge=-1, le=32768)] | None = None
    #: How its trials are sent (online or as batches): runner/providers/sending.py.
    mode: Literal["online", "batch"] | None = None
    batch: bool | None = None
    batch_price_input: Annotated[float, Meta(ge=0, le=100_000)] | None = None
    batch_price_output: Annotated[float, Meta(ge=0, le=100_000)] | None = None
    thinking_level: (
        Annotated[str, Meta(pattern=r"\S", extra={"expected": "a non-empty string"})] | None
    ) = None


@provider("gemini")
class GeminiProvider(HTTPProvider):
    """`Provider` for POST {base_url}/models/{model}:generateContent."""

    options_schema = GeminiConfigOptions
    #: What its models accept and need: declared once, in `BUILTIN_TRAITS`.
    traits = BUILTIN_TRAITS["gemini"]

    @classmethod
    def rehearsal_path(cls, model: ModelConfig) -> str | None:
        """The simulator serves Gemini under both API versions: the one the model's base URL
        names (`v1` or `v1beta`), `v1beta` for any other base."""
        base = (model.base_url or cls.traits.default_base_url or "").rstrip("/")
        version = base.rpartition("/")[2]
        return "/" + (version if version in ("v1", "v1beta") else "v1beta")

    @classmethod
    def check_options(cls, options: Any) -> None:
        assert isinstance(options, GeminiConfigOptions)
        GeminiOptions.from_mapping(
            {
                k: v
                for k, v in msgspec.structs.asdict(options).items()
                if v is not None and k not in SENDING_OPTIONS
            }
        )

    def __init__(
        self,
        *,
        base_url: str = DEFAULT_BASE_URL,
        model: str,
        api_key: str | None,
        timeout_s: float,
        max_connections: int,
        max_body_bytes: int | None = None,
        options: GeminiOptions | None = None,
    ) -> None:
        name = model.removeprefix("models/")
        super().__init__(
            url=f"{base_url.rstrip('/')}/models/{quote(name, safe='')}:generateContent",
            model=model,
            api_key=api_key,
            timeout_s=timeout_s,
            max_connections=max_connections,
            max_body_bytes=max_body_bytes,
        )
        self.options = options or GeminiOptions()
        self._announced: Limits | None = None

    @classmethod
    def from_config(cls, model: ModelConfig, api_key: str | None, context: ProviderContext) -> Self:
        return cls(
            base_url=model.base_url or DEFAULT_BASE_URL,
            model=model.model,
            api_key=api_key,
            timeout_s=model.timeout_s,
            max_connections=model.max_concurrency,
            max_body_bytes=_max_body_bytes(model),
            options=GeminiOptions.from_model(model),
        )

    def session_headers(self, api_key: str | None) -> dict[str, str]:
        return {"x-goog-api-key": api_key} if api_key else {}

    def request_body(self, messages: Sequence[Message], sampling: Sampling) -> dict[str, Any]:
        """The generateContent body of one trial: what `complete` posts, and what a batch
        request carries (runner/batch/gemini.py)."""
        return gemini_request(messages, sampling, self.options)

    async def complete(self, messages: Sequence[Message], sampling: Sampling) -> Reply:
        status, headers, body = await self.post(self.request_body(messages, sampling))
        verdict = classify_gemini(status, headers, body, now=time.time())
        if verdict.verdict is not Verdict.OK:
            if status == 429:
                self._remember_quotas(body)
            raise AttemptError(verdict, status=status, headers=headers)
        try:
            return parse_generate_content(body, status, headers)
        except MalformedResponse as exc:
            raise AttemptError(
                self.classify_exception(exc), status=status, headers=headers
            ) from None

    def _remember_quotas(self, body: bytes) -> None:
        learnt = limits_from_quotas(quota_violations(error_body(body)))
        if learnt is None:
            return
        known = self._announced or Limits()
        self._announced = Limits(
            rpm=_smaller(known.rpm, learnt.rpm), tpm=_smaller(known.tpm, learnt.tpm)
        )

    def classify_exception(self, exc: BaseException) -> Classification:
        return classify_exception(exc)

    def limits_from_headers(self, headers: Mapping[str, str]) -> Limits | None:
        """Gemini announces no limits in headers: what the last 429s' quotas named, if any."""
        return self._announced


def _smaller(a: int | None, b: int | None) -> int | None:
    if a is None or b is None:
        return a if b is None else b
    return min(a, b)


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None

"""Gemini's generateContent protocol (POST /v1beta/models/{model}:generateContent, and /v1,
google-genai's default) as the simulator speaks it.

How a request is read (snake_case or camelCase fields, `generationConfig`, `thinkingConfig`,
`safetySettings`, `systemInstruction`) and how answers and errors are worded: INVALID_ARGUMENT,
a 400 API_KEY_INVALID for a bad key, FAILED_PRECONDITION (billing), PERMISSION_DENIED and
NOT_FOUND for a profile's `fatal_status`; a 429 naming a used-up `PerDay` quota for
`insufficient_quota`; no rate-limit headers, but RESOURCE_EXHAUSTED naming the per-minute
quota with a `RetryInfo`; the 503 fault as UNAVAILABLE; a `content_filter` answer as a blocked
candidate or a blocked prompt (`gemini_block`); thought tokens when thinking is asked for or
is the model's default (`gemini_thoughts`), and thought-summary parts (`"thought": true`) before
the answer when `includeThoughts` asks for them. Refused where the real API refuses a request
(rules.py: unknown fields, `temperature` outside 0 to 2, thinking a model cannot do).
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from ibias.prompts.base import Message, stable_hash
from ibias.runner.simulator.answer import normalize_messages, thought_text, thought_tokens
from ibias.runner.simulator.protocol import Ask, Dialect, Refusal
from ibias.runner.simulator.rules import (
    GEMINI_FIELDS,
    GEMINI_GENERATION_FIELDS,
    gemini_refusal,
    gemini_thinks_by_default,
)

if TYPE_CHECKING:
    from ibias.runner.simulator.answer import Reply
    from ibias.runner.simulator.faults import Bucket, ModelState
    from ibias.runner.simulator.server import Simulator


def _google_error(code: int, status: str, message: str, *details: Mapping[str, Any]) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = list(details)
    return orjson.dumps({"error": error})


_GOOGLE_HELP = {
    "@type": "type.googleapis.com/google.rpc.Help",
    "links": [
        {
            "description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
        }
    ],
}
_GEMINI_BAD_KEY = _google_error(
    400,
    "INVALID_ARGUMENT",
    "API key not valid. Please pass a valid API key.",
    {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "API_KEY_INVALID",
        "domain": "googleapis.com",
        "metadata": {"service": "generativelanguage.googleapis.com"},
    },
)
_GEMINI_THRESHOLDS = frozenset(
    {
        "HARM_BLOCK_THRESHOLD_UNSPECIFIED",
        "BLOCK_LOW_AND_ABOVE",
        "BLOCK_MEDIUM_AND_ABOVE",
        "BLOCK_ONLY_HIGH",
        "BLOCK_NONE",
        "OFF",
    }
)
_GEMINI_FINISH = {"stop": "STOP", "length": "MAX_TOKENS"}
_GEMINI_BLOCK_REASONS = ("SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST")
#: The daily quota a Gemini-mode `insufficient_quota` model has used up.
GEMINI_DAILY_QUOTA_ID = "GenerateRequestsPerDayPerProjectPerModel-FreeTier"
GEMINI_DAILY_QUOTA_VALUE = 250
_GEMINI_QUOTAS = {
    "requests": (
        "GenerateRequestsPerMinutePerProjectPerModel",
        "generativelanguage.googleapis.com/generate_content_paid_tier_requests",
    ),
    "tokens": (
        "GenerateContentInputTokensPerModelPerMinute",
        "generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count",
    ),
}


def gemini_block(seed: int, model: str, messages: Sequence[Mapping[str, str]]) -> tuple[str, str]:
    """How Gemini mode withholds a `content_filter` answer, deterministically per prompt:
    ("candidate", finishReason) or ("prompt", promptFeedback.blockReason)."""
    h = int(stable_hash(["gemini-block", seed, model, list(normalize_messages(messages))])[:8], 16)
    where = "prompt" if h % 2 else "candidate"
    return where, _GEMINI_BLOCK_REASONS[(h // 2) % len(_GEMINI_BLOCK_REASONS)]


def gemini_thoughts(thinking: int | None, prompt_tokens: int) -> int:
    """Thought tokens Gemini mode reports: none unless thinking was asked for (or is the
    model's default); then half the prompt plus 8, within a positive budget."""
    return thought_tokens(thinking, prompt_tokens)


def _gemini_parts(content: Any, where: str) -> str:
    if not isinstance(content, Mapping):
        raise ValueError(f"{where}: expected an object with parts")
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts:
        raise ValueError(f"{where}.parts: must not be empty")
    texts = []
    for part in parts:
        if not isinstance(part, Mapping) or not isinstance(part.get("text"), str):
            raise ValueError(f"{where}.parts: only text parts are simulated")
        texts.append(part["text"])
    return "".join(texts)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _camel_keys(value: Any) -> Any:
    """`value` with every object key in camelCase (`generation_config` -> `generationConfig`);
    values (e.g. `HARM_CATEGORY_*` names) are left as they are."""
    if isinstance(value, dict):
        return {(_camel(k) if "_" in k else k): _camel_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_camel_keys(v) for v in value]
    return value


def _bad(message: str) -> Refusal:
    return 400, _google_error(400, "INVALID_ARGUMENT", message)


def _gemini_generation(model: str, body: dict[str, Any]) -> tuple[int | None, int | None, bool]:
    """The request's `maxOutputTokens`, thinking (see `Ask.thinking`) and whether thought
    summaries are asked for (`includeThoughts`), its top-level and generation fields checked
    as the service checks them, in its order (rules.py). Raises ValueError with the service's
    message."""
    for key in body:
        if key not in GEMINI_FIELDS:
            raise ValueError(
                f'Invalid JSON payload received. Unknown name "{key}": Cannot find field.'
            )
    config = body.get("generationConfig", {})
    if not isinstance(config, dict):
        raise ValueError("generationConfig: expected an object")
    for key in config:
        if key not in GEMINI_GENERATION_FIELDS:
            raise ValueError(
                f'Invalid JSON payload received. Unknown name "{key}" at '
                "'generation_config': Cannot find field."
            )
    max_tokens = config.get("maxOutputTokens")
    if max_tokens is not None and (
        not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
    ):
        raise ValueError("generation_config.max_output_tokens: must be a positive integer")
    refused = gemini_refusal(model, config)  # what the real API refuses
    if refused is not None:
        raise ValueError(refused)
    think = config.get("thinkingConfig")
    thinking = _gemini_thinking(think, gemini_thinks_by_default(model))
    shown = isinstance(think, dict) and think.get("includeThoughts") is True
    return max_tokens, thinking, shown and thinking is not None


def _gemini_thinking(think: Any, by_default: bool) -> int | None:
    """A `thinkingConfig` read as `Ask.thinking`: None (no thinking), -1 (dynamic, or a
    `thinkingLevel`, or a model that thinks by default when the request does not say) or a
    token budget. Raises ValueError with the service's message."""
    if think is None:
        return -1 if by_default else None
    if not isinstance(think, dict) or set(think) - {
        "thinkingBudget",
        "thinkingLevel",
        "includeThoughts",
    }:
        raise ValueError("generation_config.thinking_config: unknown field")
    if "thinkingBudget" in think and "thinkingLevel" in think:
        raise ValueError("thinking_budget and thinking_level are not supported together.")
    budget = think.get("thinkingBudget")
    if budget is not None:
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < -1:
            raise ValueError("generation_config.thinking_config.thinking_budget: invalid")
        return budget or None
    if "thinkingLevel" in think:
        return -1
    return -1 if by_default else None


def _gemini_safety(body: dict[str, Any]) -> None:
    """Check the request's `safetySettings` (the simulator obeys none of them). Raises
    ValueError with the service's message."""
    safety = body.get("safetySettings", [])
    if not isinstance(safety, list):
        raise ValueError("safety_settings: expected a list")
    for setting in safety:
        if (
            not isinstance(setting, dict)
            or not str(setting.get("category", "")).startswith("HARM_CATEGORY_")
            or setting.get("threshold") not in _GEMINI_THRESHOLDS
        ):
            raise ValueError(f"safety_settings: invalid setting {setting!r}")


def _gemini_messages(body: dict[str, Any]) -> tuple[Message, ...]:
    """The chat a request holds (its `systemInstruction` first, as a system message; role
    `model` read as `assistant`). Raises ValueError with the service's message."""
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise ValueError("* GenerateContentRequest.contents: contents is not specified")
    messages: list[Message] = []
    if "systemInstruction" in body:
        system = _gemini_parts(body["systemInstruction"], "system_instruction")
        messages.append({"role": "system", "content": system})
    for i, c in enumerate(contents):
        role = c.get("role", "user") if isinstance(c, Mapping) else None
        if role not in ("user", "model"):
            raise ValueError("Please use a valid role: user, model.")
        text = _gemini_parts(c, f"contents[{i}]")
        messages.append({"role": "assistant" if role == "model" else "user", "content": text})
    return tuple(messages)


class GeminiProtocol(Dialect):
    """POST /v1beta/models/{model}:generateContent (and /v1, google-genai's default),
    Google's native Gemini protocol."""

    def authorized(self, request: web.Request, key: str) -> bool:
        given = request.headers.get("x-goog-api-key") or request.query.get("key", "")
        return hmac.compare_digest(given.encode(), key.encode())

    def unauthorized(self) -> Refusal:
        return 400, _GEMINI_BAD_KEY

    def read(self, request: web.Request, raw: bytes) -> Ask | Refusal:
        model = request.match_info.get("model", "")
        if not model:
            return _bad("model is required")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return _bad("Invalid JSON payload received.")
        if not isinstance(body, dict):
            return _bad("Invalid JSON payload received. Expected an object.")
        # The REST API takes each field by its proto name (snake_case, what google-genai and
        # the docs' curl examples may send) or its JSON name (camelCase): read both.
        body = _camel_keys(body)
        try:
            max_tokens, thinking, shown = _gemini_generation(model, body)
            _gemini_safety(body)
            messages = _gemini_messages(body)
        except ValueError as exc:
            return _bad(str(exc))
        return Ask(model, messages, max_tokens, thinking, show_thoughts=shown)

    def fatal(self, status: int, model: str) -> Refusal:
        if status == 401:  # Gemini says "bad key" with a 400 and a reason
            return 400, _GEMINI_BAD_KEY
        if status == 402:
            return 400, _google_error(
                400,
                "FAILED_PRECONDITION",
                "Gemini API free tier is not available in your country. Please enable billing "
                "on your project in Google AI Studio.",
            )
        if status == 403:
            return 403, _google_error(
                403, "PERMISSION_DENIED", "The caller does not have permission"
            )
        if status == 404:
            return 404, _google_error(
                404,
                "NOT_FOUND",
                f"models/{model} is not found for API version v1beta, or is not supported for "
                "generateContent. Call ListModels to see the list of available models and their "
                "supported methods.",
            )
        return 400, _google_error(400, "INVALID_ARGUMENT", "Request contains an invalid argument.")

    def quota(self, state: ModelState) -> Refusal:
        metric = "generativelanguage.googleapis.com/generate_content_free_tier_requests"
        return 429, _google_error(
            429,
            "RESOURCE_EXHAUSTED",
            "You exceeded your current quota, please check your plan and billing details. For "
            "more information on this error, head to: "
            "https://ai.google.dev/gemini-api/docs/rate-limits.\n"
            f"* Quota exceeded for metric: {metric}, limit: {GEMINI_DAILY_QUOTA_VALUE}, "
            f"model: {state.name}\nPlease retry in 23.5s.",
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": metric,
                        "quotaId": GEMINI_DAILY_QUOTA_ID,
                        "quotaDimensions": {"location": "global", "model": state.name},
                        "quotaValue": str(GEMINI_DAILY_QUOTA_VALUE),
                    }
                ],
            },
            _GOOGLE_HELP,
            # Google sends a short retry hint even for a daily quota: a client must not obey it.
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "23s"},
        )

    def rate_limited(
        self,
        state: ModelState,
        kind: str,
        bucket: Bucket,
        wait: float,
        requested: float,
        headers: dict[str, str],
    ) -> bytes:
        quota_id, metric = _GEMINI_QUOTAS[kind]
        return _google_error(
            429,
            "RESOURCE_EXHAUSTED",
            "You exceeded your current quota, please check your plan and billing details. For "
            "more information on this error, head to: "
            "https://ai.google.dev/gemini-api/docs/rate-limits.\n"
            f"* Quota exceeded for metric: {metric}, limit: {bucket.limit}, "
            f"model: {state.name}\nPlease retry in {wait:.6f}s.",
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": metric,
                        "quotaId": quota_id,
                        "quotaDimensions": {"location": "global", "model": state.name},
                        "quotaValue": str(bucket.limit),
                    }
                ],
            },
            _GOOGLE_HELP,
            {
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": f"{max(1, math.ceil(wait))}s",
            },
        )

    def burst(self, state: ModelState, wait: float, headers: dict[str, str]) -> bytes:
        return _google_error(
            429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."
        )

    def overloaded(self, headers: dict[str, str]) -> Refusal:
        return 503, _google_error(
            503, "UNAVAILABLE", "The model is overloaded. Please try again later."
        )

    def server_error(self) -> bytes:
        return _google_error(
            500,
            "INTERNAL",
            "An internal error has occurred. Please retry or report in "
            "https://developers.generativeai.google/guide/troubleshooting",
        )

    def thoughts(self, ask: Ask, prompt_tokens: int) -> int:
        return gemini_thoughts(ask.thinking, prompt_tokens)

    def success(
        self,
        sim: Simulator,
        state: ModelState,
        ask: Ask,
        reply: Reply,
        latency: float,
        headers: dict[str, str],
    ) -> bytes:
        content, finish = reply.content, reply.finish
        prompt_tokens, completion_tokens, thoughts = (
            reply.prompt_tokens,
            reply.completion_tokens,
            reply.thoughts,
        )
        metadata: dict[str, Any] = {"promptTokenCount": prompt_tokens}
        body: dict[str, Any] = {}
        if finish == "content_filter":
            where, reason = gemini_block(sim.profile.seed, ask.model, ask.messages)
            ratings = [
                {"category": "HARM_CATEGORY_HATE_SPEECH", "probability": "HIGH", "blocked": True}
            ]
            if where == "prompt":
                body["promptFeedback"] = {"blockReason": reason, "safetyRatings": ratings}
            else:
                body["candidates"] = [
                    {"finishReason": reason, "index": 0, "safetyRatings": ratings}
                ]
        else:
            parts: list[dict[str, Any]] = []
            if ask.show_thoughts and thoughts:
                # Thought summaries come first, marked `thought: true`, when `includeThoughts`
                # asks for them (ai.google.dev/gemini-api/docs/thinking#summaries).
                parts.append({"text": thought_text(ask.messages), "thought": True})
            parts.append({"text": content})
            body["candidates"] = [
                {
                    "content": {"parts": parts, "role": "model"},
                    "finishReason": _GEMINI_FINISH.get(finish, finish.upper()),
                    "index": 0,
                }
            ]
            metadata["candidatesTokenCount"] = completion_tokens
        metadata["totalTokenCount"] = prompt_tokens + metadata.get("candidatesTokenCount", 0)
        if thoughts:
            metadata["thoughtsTokenCount"] = thoughts
            metadata["totalTokenCount"] += thoughts
        metadata["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": prompt_tokens}]
        body["usageMetadata"] = metadata
        body["modelVersion"] = state.reported
        body["responseId"] = sim.response_id()
        return orjson.dumps(body)


#: The one Gemini protocol object (the batch services and tests use it too).
GEMINI = GeminiProtocol()

"""The fields of a provider's error body that the retry policy reads, from the OpenAI,
Anthropic and Gemini shapes.

Its own module because reading an error body (which shape, which fields, which quota it names)
is a different job from deciding what to do about it: the policy (runner/providers/retries.py), the
wait hints (runner/providers/wait_hints.py) and the provider classes that add their own rules on top
of the policy (Anthropic's error types, Gemini's quota violations) all read the same `ErrorBody`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ibias.runner.providers.json_body import loads_json
from ibias.runner.redact import redact

__all__ = [
    "ErrorBody",
    "QuotaViolation",
    "describe_error",
    "detail_type",
    "error_body",
    "is_daily_quota",
    "is_invalid_key",
    "quota_violations",
]


@dataclass(frozen=True)
class ErrorBody:
    """The parts of a provider's error body that the policy looks at (all lower-cased)."""

    message: str
    type: str
    code: str
    status: str
    details: tuple[Mapping[str, Any], ...]
    #: The parameter the error names (OpenAI's `error.param`, vLLM's top-level `param`), as
    #: sent (not lower-cased); "" when none.
    param: str = ""


def error_body(body: bytes) -> ErrorBody:
    """Pull message/type/code/details out of the OpenAI, Anthropic and Gemini error shapes.

    OpenAI/Groq: ``{"error": {"message", "type", "code"}}``; Anthropic: ``{"type": "error",
    "error": {"type", "message"}}``; Gemini: ``{"error": {"code": 429, "message", "status",
    "details": [...]}}``, sometimes wrapped in a one-element list. Anything else gives empty
    fields (and the first bytes of the body as message, so a proxy's HTML error is visible).
    """
    try:
        data: Any = loads_json(body) if body else None
    except orjson.JSONDecodeError:
        text = body[:200].decode("utf-8", "replace")
        return ErrorBody(text, "", "", "", ())
    if isinstance(data, list) and data:
        # Gemini's OpenAI endpoint (and Vertex) wrap errors in a list; take the first element
        # that is an error object, else the first element as before.
        data = next((d for d in data if isinstance(d, dict) and "error" in d), data[0])
    if not isinstance(data, dict):
        return ErrorBody("", "", "", "", ())
    err = data.get("error", data)
    if isinstance(err, str):  # {"error": "model not found"} (Ollama, some proxies)
        return ErrorBody(err, "", "", "", ())
    if not isinstance(err, dict):
        return ErrorBody("", "", "", "", ())
    details = err.get("details")
    detail_items = (
        tuple(d for d in details if isinstance(d, dict)) if isinstance(details, list) else ()
    )

    def field(key: str) -> str:
        value = err.get(key)
        return "" if value is None else str(value)

    param = err.get("param")
    return ErrorBody(
        message=field("message") or field("detail"),
        type=field("type").lower(),
        code=field("code").lower(),
        status=field("status").lower(),
        details=detail_items,
        param=param if isinstance(param, str) else "",
    )


def describe_error(status: int, info: ErrorBody) -> str:
    """The one redacted line stored for an error: ``HTTP 429: <provider message>``."""
    detail = info.message or info.type or info.status
    return redact(f"HTTP {status}: {detail}" if detail else f"HTTP {status}")


@dataclass(frozen=True)
class QuotaViolation:
    """One ``violations`` entry of a Google ``QuotaFailure`` detail.

    ``value`` is the quota's limit when the provider names it (Gemini's ``quotaValue``, a decimal
    string in the body), else ``None``.
    """

    quota_id: str
    metric: str
    value: int | None

    @property
    def per_day(self) -> bool:
        text = f"{self.quota_id} {self.metric}".lower()
        return "perday" in text or "per_day" in text

    @property
    def per_minute(self) -> bool:
        text = f"{self.quota_id} {self.metric}".lower()
        return "perminute" in text or "per_minute" in text

    @property
    def counts_tokens(self) -> bool:
        return "token" in f"{self.quota_id} {self.metric}".lower()


def quota_violations(info: ErrorBody) -> tuple[QuotaViolation, ...]:
    """Every quota violation a ``google.rpc.QuotaFailure`` detail names, in body order."""
    out: list[QuotaViolation] = []
    for detail in info.details:
        if not detail_type(detail).endswith("google.rpc.QuotaFailure"):
            continue
        violations = detail.get("violations")
        if not isinstance(violations, list):
            continue
        for v in violations:
            if not isinstance(v, dict):
                continue
            raw = v.get("quotaValue")
            value: int | None = None
            if isinstance(raw, int) and not isinstance(raw, bool):
                value = raw
            elif isinstance(raw, str) and raw.strip().isdigit():
                value = int(raw.strip())
            out.append(
                QuotaViolation(
                    quota_id=str(v.get("quotaId", "") or ""),
                    metric=str(v.get("quotaMetric", "") or ""),
                    value=value,
                )
            )
    return tuple(out)


def detail_type(detail: Mapping[str, Any]) -> str:
    """A Google error detail's ``@type`` (``type.googleapis.com/google.rpc.RetryInfo``)."""
    return str(detail.get("@type", ""))


def is_daily_quota(info: ErrorBody) -> bool:
    """True when the exhausted limit is per day, so retrying within the run is pointless."""
    for detail in info.details:
        if detail_type(detail).endswith("google.rpc.QuotaFailure"):
            violations = detail.get("violations")
            if isinstance(violations, list):
                for v in violations:
                    if isinstance(v, dict):
                        ids = f"{v.get('quotaId', '')} {v.get('quotaMetric', '')}".lower()
                        if "perday" in ids or "per_day" in ids:
                            return True
    return bool(re.search(r"(?i)\b(?:requests|tokens) per day\b|\b(?:rpd|tpd)\b", info.message))


def is_invalid_key(info: ErrorBody) -> bool:
    """Gemini answers a bad key with 400 INVALID_ARGUMENT and reason API_KEY_INVALID."""
    return any(str(d.get("reason", "")).upper() == "API_KEY_INVALID" for d in info.details)

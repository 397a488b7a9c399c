"""Decide whether a failed HTTP attempt is retried, given up on, or fine, and how long to wait.

Pure functions, no I/O: the scheduler feeds in a status, headers and body (or an exception) and
gets back a :class:`Classification` that it stores in ``attempts.error_kind`` /
``attempts.error_message`` and acts on.  Keeping this apart from the HTTP code means every
provider quirk (OpenAI's ``insufficient_quota``, Anthropic's 529, Gemini's ``RetryInfo`` and
``QuotaFailure``, Groq's per-day limits) is handled in one table-testable place.

Policy (DESIGN.md, "Retries"):

* retried with full-jitter exponential backoff: 408, 409, 425, 429, every 5xx (including
  Anthropic's 529 ``overloaded_error``), timeouts, connection errors, malformed bodies;
* fatal for the model: 400, 401, 402, 403, 404, any other 4xx (a client error does not go away
  by asking again), a 429 whose body says ``insufficient_quota``, and a 429 for a daily quota
  (Gemini ``QuotaFailure`` with a ``PerDay`` quota id, OpenAI-style "requests per day (RPD)");
  also a 3xx (``redirect``: redirects are never followed, runner/providers/http.py);
* given up for that trial alone (``Verdict.GIVE_UP``, the model goes on): a body above the
  size cap (``too_large``, runner/providers/http.py), which asking again would only repeat;
* a timeout or connection error while the run's own event loop was starved is not the
  provider's: the scheduler records it as ``local_stall`` and retries it without counting it
  (runner/loop_lag.py, runner/scheduler.py);
* provider wait hints are honoured: ``Retry-After`` (seconds or HTTP-date), ``retry-after-ms``,
  ``x-ratelimit-reset-requests`` / ``x-ratelimit-reset-tokens`` (Go-style durations),
  ``anthropic-ratelimit-*-reset`` (RFC 3339), Gemini ``RetryInfo.retryDelay`` and the
  "Please try again in 1.5s" sentence OpenAI and Groq put in their messages; a hint longer
  than the model's ``outage_limit_s`` stops the model instead (runner/scheduler.py).

Messages are one line, truncated, and scrubbed of the run's keys and of anything that looks like
an API key, because some providers echo a key, a partly masked one or a ``?key=`` URL back in
their errors (``redact``, runner/redact.py).
"""

from __future__ import annotations

import email.utils
import json
import math
import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from fractions import Fraction
from typing import Any

import aiohttp
import orjson

from ibias.runner.redact import MAX_MESSAGE_CHARS as MAX_MESSAGE_CHARS
from ibias.runner.redact import redact

__all__ = [
    "Backoff",
    "Classification",
    "ErrorBody",
    "MalformedResponse",
    "QuotaViolation",
    "Verdict",
    "classify_exception",
    "classify_http",
    "describe_error",
    "error_body",
    "json_object",
    "loads_json",
    "param_refusal",
    "parse_duration",
    "parse_rfc3339",
    "quota_violations",
    "redact",
    "retry_delay_hint",
]

#: Hints longer than this (a year) are treated as nonsense and ignored. Up to it a hint is
#: what the provider asked: the scheduler never sleeps past the model's `outage_limit_s` (a
#: week at most) but stops the model with one line saying until when, so a long hint is said,
#: not slept through. (It was a day: a Retry-After of two days was ignored, and every trial of
#: the model then failed after its retries, one backoff at a time.)
MAX_HINT_S = 366 * 86_400.0


class Verdict(StrEnum):
    """What the scheduler should do with an attempt's outcome."""

    OK = "ok"
    RETRY = "retry"
    FATAL = "fatal"
    GIVE_UP = "give_up"
    """This trial fails for good (asking again would get the same answer, e.g. a body above
    the size cap), alone: the model and its other trials go on."""


@dataclass(frozen=True)
class Classification:
    """The outcome of one HTTP attempt, in the terms the scheduler and the store use.

    ``kind`` is a short machine name (``http_429``, ``timeout``, ``insufficient_quota`` ...)
    stored in ``attempts.error_kind``; ``message`` is one human line that never contains request
    headers or keys; ``delay_hint_s`` is what the provider asked us to wait (retries only);
    ``is_rate_limit`` marks 429-style throttling, on which the scheduler pauses the endpoint.
    """

    verdict: Verdict
    kind: str
    message: str
    delay_hint_s: float | None = None
    is_rate_limit: bool = False


class MalformedResponse(Exception):
    """A provider answered 2xx but the body could not be understood (bad JSON, missing fields,
    truncated stream). Raised by provider adapters; classified as a retryable ``malformed``."""


#: Integers JSON may hold that orjson reads and writes as integers: -2^63 to 2^64 - 1.
_MIN_INT = -(2**63)
_MAX_INT = 2**64 - 1
#: A run of 19 or more digits: a number that may lie outside orjson's integers (which it would
#: read as a float, losing digits, or refuse past about 1e308).
_LONG_DIGITS = re.compile(rb"\d{19}")


def _json_int(text: str) -> int | orjson.Fragment:
    """An integer literal as an int when orjson can write it back, else as its digits kept
    verbatim (`orjson.Fragment`): stored as sent, and never a count (a count is an int)."""
    if len(text) <= 20:
        value = int(text)
        if _MIN_INT <= value <= _MAX_INT:
            return value
    return orjson.Fragment(text)


def _json_float(text: str) -> float | orjson.Fragment:
    """A number literal as a float when finite, else its text kept verbatim (1e400)."""
    value = float(text)
    return value if math.isfinite(value) else orjson.Fragment(text)


def _no_constant(name: str) -> Any:
    """NaN and Infinity are not JSON (orjson refuses them too)."""
    raise ValueError(f"{name} is not JSON")


def loads_json(body: bytes | str) -> Any:
    """A JSON body as Python values, whatever the size of its numbers.

    Why not plain `orjson.loads`: a provider's JSON may hold an integer outside 64 bits (a
    token count of 2^70, a 400-digit id), valid JSON that orjson reads as a float (its digits
    lost) or, past about 1e308, refuses: the whole body was then "not JSON" and the reply was
    retried eight times and lost. A body holding a run of 19 or more digits is read by the
    standard library instead, each such number kept as its own digits (`orjson.Fragment`, which
    orjson writes back verbatim, so the stored raw body is what was sent and DuckDB's JSON
    functions read it); a count expected there is then no int, so unknown (NULL,
    runner/providers/usage.py). Every other body (all but a few) takes orjson's fast path.
    Raises ValueError (`orjson.JSONDecodeError` is one) when the text is not JSON."""
    raw = body.encode() if isinstance(body, str) else body
    if _LONG_DIGITS.search(raw) is None:
        return orjson.loads(raw)
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise orjson.JSONDecodeError(str(exc), "", 0) from None
    try:
        data = json.loads(
            text, parse_int=_json_int, parse_float=_json_float, parse_constant=_no_constant
        )
        orjson.dumps(data)  # what orjson refuses (a lone surrogate) is not JSON here either
    except (ValueError, RecursionError, orjson.JSONEncodeError) as exc:
        raise orjson.JSONDecodeError(str(exc), text[:100], 0) from None
    return data


def json_object(body: bytes, status: int, what: str) -> dict[str, Any]:
    """A 2xx body as the JSON object every protocol answers with; ``MalformedResponse`` (named
    after ``what``, e.g. "completion") when it is not JSON or not an object. Numbers of any
    size are read (`loads_json`)."""
    try:
        data = loads_json(body)
    except orjson.JSONDecodeError:
        raise MalformedResponse(f"HTTP {status} body is not JSON ({len(body)} bytes)") from None
    if not isinstance(data, dict):
        raise MalformedResponse(f"{what} body is not a JSON object")
    return data


# --------------------------------------------------------------------------- redaction
# One place for it: runner/redact.py (re-exported here for the provider adapters).


# --------------------------------------------------------------------------- durations


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|μs|ns|h|m|s)")
_BARE_NUMBER = re.compile(r"\d+(?:\.\d*)?|\.\d+")
_UNIT_SECONDS: dict[str, Fraction] = {
    "h": Fraction(3600),
    "m": Fraction(60),
    "s": Fraction(1),
    "ms": Fraction(1, 1000),
    "us": Fraction(1, 1_000_000),
    "µs": Fraction(1, 1_000_000),
    "μs": Fraction(1, 1_000_000),
    "ns": Fraction(1, 1_000_000_000),
}


def parse_duration(text: str) -> float | None:
    """Parse a Go/protobuf style duration into seconds, or ``None`` if it is not one.

    Accepts what rate-limit headers carry: ``6m0s``, ``1s``, ``12ms``, ``1m30.5s``, ``2h``,
    ``0.5s``, ``2m59.56s``, ``1.000340s`` and a bare number of seconds (``0.5``). Negative values,
    empty strings and anything with leftover characters give ``None``. Arithmetic is exact
    (fractions) so ``1m30.5s`` is exactly ``90.5``.
    """
    s = text.strip()
    if not s:
        return None
    if _BARE_NUMBER.fullmatch(s):
        return float(Fraction(s))
    total = Fraction(0)
    pos = 0
    for match in _DURATION_PART.finditer(s):
        if match.start() != pos:
            return None
        total += Fraction(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(s) or pos == 0:
        return None
    return float(total)


# --------------------------------------------------------------------------- headers and bodies


def _lower_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Case-insensitive view; works for plain dicts and aiohttp's CIMultiDictProxy alike."""
    return {str(k).lower(): str(v) for k, v in headers.items()}


def _sane(seconds: float | None) -> float | None:
    if seconds is None or math.isnan(seconds) or seconds < 0 or seconds > MAX_HINT_S:
        return None
    return seconds


def _parse_retry_after(value: str, now: float) -> float | None:
    """``Retry-After`` is delta-seconds or an HTTP-date (RFC 9110 §10.2.3)."""
    value = value.strip()
    if _BARE_NUMBER.fullmatch(value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" means UTC per RFC 5322
        when = when.replace(tzinfo=UTC)
    return when.timestamp() - now


def parse_rfc3339(value: str, now: float) -> float | None:
    """Seconds from `now` (epoch) to an RFC 3339 time (Anthropic's resets), negative if past;
    None if it is not one. A time without an offset is UTC."""
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp() - now


def _to_float(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value.strip())
    except ValueError:
        return None


def _exhausted(h: Mapping[str, str], remaining_key: str) -> bool:
    """A reset header matters only when its budget is used up (or we are not told).

    Why: Groq's ``x-ratelimit-reset-requests`` is about requests *per day* and can say
    ``2m59s`` while thousands of requests remain; waiting that long on a token-limit 429 would
    stall the endpoint for nothing.
    """
    remaining = _to_float(h.get(remaining_key))
    return remaining is None or remaining <= 0


_TRY_AGAIN = re.compile(r"(?i)try again in\s+([0-9][0-9hmsµμnu.]*)")


@dataclass(frozen=True)
class _ErrorInfo:
    """The parts of a provider's error body that the policy looks at (all lower-cased)."""

    message: str
    type: str
    code: str
    status: str
    details: tuple[Mapping[str, Any], ...]
    #: The parameter the error names (OpenAI's `error.param`, vLLM's top-level `param`), as
    #: sent (not lower-cased); "" when none.
    param: str = ""


def _error_info(body: bytes) -> _ErrorInfo:
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
        return _ErrorInfo(text, "", "", "", ())
    if isinstance(data, list) and data:
        # Gemini's OpenAI endpoint (and Vertex) wrap errors in a list; take the first element
        # that is an error object, else the first element as before.
        data = next((d for d in data if isinstance(d, dict) and "error" in d), data[0])
    if not isinstance(data, dict):
        return _ErrorInfo("", "", "", "", ())
    err = data.get("error", data)
    if isinstance(err, str):  # {"error": "model not found"} (Ollama, some proxies)
        return _ErrorInfo(err, "", "", "", ())
    if not isinstance(err, dict):
        return _ErrorInfo("", "", "", "", ())
    details = err.get("details")
    detail_items = (
        tuple(d for d in details if isinstance(d, dict)) if isinstance(details, list) else ()
    )

    def field(key: str) -> str:
        value = err.get(key)
        return "" if value is None else str(value)

    param = err.get("param")
    return _ErrorInfo(
        message=field("message") or field("detail"),
        type=field("type").lower(),
        code=field("code").lower(),
        status=field("status").lower(),
        details=detail_items,
        param=param if isinstance(param, str) else "",
    )


#: The public name of the parsed error body, for provider classes that add their own rules on
#: top of :func:`classify_http` (Anthropic's error types, Gemini's quota violations).
ErrorBody = _ErrorInfo


def error_body(body: bytes) -> ErrorBody:
    """The fields of an error body that the policy reads (see ``_error_info`` for the shapes)."""
    return _error_info(body)


def describe_error(status: int, info: ErrorBody) -> str:
    """The one redacted line stored for an error: ``HTTP 429: <provider message>``."""
    return _describe(status, info)


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
        if not _detail_type(detail).endswith("google.rpc.QuotaFailure"):
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


def _detail_type(detail: Mapping[str, Any]) -> str:
    return str(detail.get("@type", ""))


def _is_daily_quota(info: _ErrorInfo) -> bool:
    """True when the exhausted limit is per day, so retrying within the run is pointless."""
    for detail in info.details:
        if _detail_type(detail).endswith("google.rpc.QuotaFailure"):
            violations = detail.get("violations")
            if isinstance(violations, list):
                for v in violations:
                    if isinstance(v, dict):
                        ids = f"{v.get('quotaId', '')} {v.get('quotaMetric', '')}".lower()
                        if "perday" in ids or "per_day" in ids:
                            return True
    return bool(re.search(r"(?i)\b(?:requests|tokens) per day\b|\b(?:rpd|tpd)\b", info.message))


def _retry_info_delay(info: _ErrorInfo) -> float | None:
    for detail in info.details:
        if _detail_type(detail).endswith("google.rpc.RetryInfo"):
            delay = detail.get("retryDelay")
            if isinstance(delay, str):
                return parse_duration(delay)
            if isinstance(delay, dict):  # proto3 JSON in its object form, seen from some proxies
                seconds = float(delay.get("seconds", 0) or 0)
                nanos = float(delay.get("nanos", 0) or 0)
                return seconds + nanos / 1e9
    return None


def retry_delay_hint(
    headers: Mapping[str, str], body: bytes, now: float | None = None
) -> float | None:
    """The longest wait the provider asked for, in seconds, or ``None`` if it asked nothing.

    Looks at ``retry-after-ms``, ``Retry-After`` (seconds or HTTP-date relative to ``now``, the
    wall-clock epoch, default ``time.time()``), ``x-ratelimit-reset-{requests,tokens}`` and
    ``anthropic-ratelimit-*-reset`` (only for a budget that is used up), Gemini's ``RetryInfo``
    and a "try again in 1.5s" sentence in the error message. Negative values and values above
    a year are ignored (`MAX_HINT_S`); a long hint is for the scheduler to act on.
    """
    if now is None:
        now = time.time()
    h = _lower_headers(headers)
    candidates: list[float | None] = []

    ms = _to_float(h.get("retry-after-ms"))
    candidates.append(None if ms is None else ms / 1000.0)
    if "retry-after" in h:
        candidates.append(_parse_retry_after(h["retry-after"], now))
    for which in ("requests", "tokens"):
        reset = h.get(f"x-ratelimit-reset-{which}")
        if reset is not None and _exhausted(h, f"x-ratelimit-remaining-{which}"):
            candidates.append(parse_duration(reset))
    for which in ("requests", "tokens", "input-tokens", "output-tokens"):
        reset = h.get(f"anthropic-ratelimit-{which}-reset")
        if reset is not None and _exhausted(h, f"anthropic-ratelimit-{which}-remaining"):
            candidates.append(parse_rfc3339(reset, now))

    info = _error_info(body)
    candidates.append(_retry_info_delay(info))
    match = _TRY_AGAIN.search(info.message)
    if match:
        candidates.append(parse_duration(match.group(1).rstrip(".")))

    sane = [c for c in (_sane(c) for c in candidates) if c is not None]
    return max(sane) if sane else None


# --------------------------------------------------------------------------- classification


_FATAL_KINDS: dict[int, str] = {
    400: "bad_request",
    401: "auth",
    402: "payment_required",
    403: "forbidden",
    404: "not_found",
}
_RETRY_4XX = frozenset({408, 409, 425, 429})


def _describe(status: int, info: _ErrorInfo) -> str:
    detail = info.message or info.type or info.status
    return redact(f"HTTP {status}: {detail}" if detail else f"HTTP {status}")


def _is_invalid_key(info: _ErrorInfo) -> bool:
    """Gemini answers a bad key with 400 INVALID_ARGUMENT and reason API_KEY_INVALID."""
    return any(str(d.get("reason", "")).upper() == "API_KEY_INVALID" for d in info.details)


# --------------------------------------------------------------------------- refused parameters

#: A refused parameter's names as hosts spell them in errors (the wire name first), and what
#: to do with the model key of ibias's config that changes what is sent. Longer names first, so
#: `max_completion_tokens` is not read as `max_tokens`, nor `top_logprobs` as `logprobs`.
#: Parameters ibias never sends (top_p, top_k, penalties) are left out: no key changes them.
PARAM_KEYS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("max_completion_tokens", ("max_completion_tokens",), "set reasoning = false for this model"),
    (
        "max_tokens",
        ("max_tokens",),
        "set reasoning = true for this model (OpenAI reasoning models take max_completion_tokens)",
    ),
    ("temperature", ("temperature",), "set send_temperature = false for this model"),
    ("top_logprobs", ("top_logprobs",), "set logprobs = false for this model"),
    ("logprobs", ("logprobs",), "set logprobs = false for this model"),
    ("seed", ("seed",), "remove sampling_seed for this model"),
    ("reasoning_effort", ("reasoning_effort",), "remove reasoning_effort for this model"),
    (
        "thinking",
        (
            "thinking.budget_tokens",
            "budget_tokens",
            "thinking_config",
            "thinkingconfig",
            "thinkingbudget",
            "thinkinglevel",
            "thinking_budget",
            "thinking_level",
            "thinking",
        ),
        "remove thinking_budget, thinking or thinking_level for this model",
    ),
)

#: Words with which the hosts refuse a parameter (OpenAI: "Unsupported parameter: 'max_tokens'
#: is not supported with this model. Use 'max_completion_tokens' instead.", "Unsupported
#: value: 'temperature' does not support 0 with this model. Only the default (1) value is
#: supported."; Anthropic: "`temperature` is deprecated for this model."; Gemini: 'Invalid
#: JSON payload received. Unknown name "thinkingConfig"', "thinking_config is not
#: supported."; vLLM and pydantic proxies: "Extra inputs are not permitted").
_REFUSING = re.compile(
    r"(?i)unsupported|not supported|deprecated|unknown (?:name|parameter|field|argument)"
    r"|unrecognized|not allowed|not permitted|only the default|does not support"
    r"|no longer supported|cannot be (?:used|set|specified)|is not available|may only be set"
)


def _named_param(info: _ErrorInfo) -> tuple[str, str] | None:
    """(parameter, config key) of the error's refused parameter, or None: the `param` field
    when it names one of `PARAM_KEYS`, else the spelling the message names first (as a word)
    when it refuses something ("Unsupported parameter: 'max_tokens' ... Use
    'max_completion_tokens' instead" refuses the first)."""
    given = info.param.lower()
    for name, spellings, key in PARAM_KEYS:
        if given and given in spellings:
            return name, key
    if not _REFUSING.search(info.message):
        return None
    text = info.message.lower()
    first: tuple[int, str, str] | None = None
    for name, spellings, key in PARAM_KEYS:
        for spelling in spellings:
            found = re.search(rf"(?<![\w.]){re.escape(spelling)}(?!\w)", text)
            if found is not None and (first is None or found.start() < first[0]):
                first = (found.start(), name, key)
    return None if first is None else (first[1], first[2])


def param_refusal(
    status: int, info: ErrorBody, keys: Mapping[str, str] | None = None
) -> Classification | None:
    """A 400 or 422 that refuses a parameter by name, as a fatal `param_refused` whose line
    names the parameter and the model key that changes it; None for any other answer.

    Why apart from `bad_request`: the model would refuse every request the same way, and the
    fix is one key of its table, so the line says which (the hint first, so truncating a long
    provider message never cuts it). `keys` replaces a parameter's key where a protocol knows
    better (OpenAI-compatible models: `temperature` also goes with `reasoning = true`)."""
    if status not in (400, 422):
        return None
    named = _named_param(info)
    if named is None:
        return None
    param, key = named
    if keys is not None:
        key = keys.get(param, key)
    detail = info.message or info.type or info.status
    return Classification(
        Verdict.FATAL,
        "param_refused",
        redact(
            f"HTTP {status}: the model refuses `{param}`: {key}"
            + (f" ({detail})" if detail else "")
        ),
    )


def classify_http(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    now: float | None = None,
    *,
    param_keys: Mapping[str, str] | None = None,
) -> Classification:
    """Classify an HTTP response by status, headers and (error) body.

    ``headers`` are matched case-insensitively; ``now`` is wall-clock epoch seconds, used only
    to turn an HTTP-date ``Retry-After`` into a delay. A 2xx is ``OK`` whatever the body: a 2xx
    body that cannot be parsed is the provider adapter's business (it raises
    :class:`MalformedResponse`, see :func:`classify_exception`). A 400 or 422 refusing a
    parameter by name is ``param_refused`` (`param_refusal`, with `param_keys`).
    """
    if 200 <= status < 300:
        return Classification(Verdict.OK, "ok", f"HTTP {status}")
    info = _error_info(body)
    message = _describe(status, info)
    refused = param_refusal(status, info, param_keys)
    if refused is not None:
        return refused

    if 400 <= status < 500 and "insufficient_quota" in (info.code, info.type):
        return Classification(Verdict.FATAL, "insufficient_quota", message)
    if status == 429 and _is_daily_quota(info):
        return Classification(Verdict.FATAL, "daily_quota", message)
    if status in _RETRY_4XX or 500 <= status < 600:
        hint = retry_delay_hint(headers, body, now)
        return Classification(
            Verdict.RETRY, f"http_{status}", message, hint, is_rate_limit=status == 429
        )
    if status == 400 and _is_invalid_key(info):
        return Classification(Verdict.FATAL, "auth", message)
    if status in _FATAL_KINDS:
        return Classification(Verdict.FATAL, _FATAL_KINDS[status], message)
    # Any other 4xx (405, 413, 422 ...) is a client error that asking again will not fix; 1xx
    # and 3xx here mean a proxy or redirect we do not follow. Both are deterministic.
    return Classification(Verdict.FATAL, f"http_{status}", message)


def _exception_message(exc: BaseException) -> str:
    text = str(exc)
    return redact(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def classify_exception(exc: BaseException) -> Classification:
    """Classify an exception raised while making a request or reading its answer.

    * timeouts (``TimeoutError``, which ``asyncio.TimeoutError`` and aiohttp's
      ``ServerTimeoutError`` are) -> retry ``timeout``;
    * ``MalformedResponse``, ``ValueError`` (``orjson.JSONDecodeError``, ``UnicodeDecodeError``)
      and aiohttp's ``ContentTypeError`` -> retry ``malformed``;
    * ``aiohttp.ClientResponseError`` (from ``raise_for_status``) -> same as :func:`classify_http`
      on its status and headers;
    * aiohttp connection and payload errors, ``ConnectionError``/``OSError`` -> retry
      ``connection``; ``aiohttp.InvalidURL`` -> fatal ``bad_request`` (a config error);
    * any other ``aiohttp.ClientError`` -> retry ``client_error``.

    Decision for everything else: a non-``Exception`` (``CancelledError``, ``KeyboardInterrupt``,
    ``SystemExit``) is re-raised, because cancellation must never be turned into a retry. Any
    other ``Exception`` is a bug in our code (e.g. a ``KeyError`` in an adapter); it is
    classified FATAL ``internal`` with its type in the message, so one broken adapter stops its
    own model with a visible line instead of killing a multi-hour run for every model, and is
    not retried eight times.
    """
    if not isinstance(exc, Exception):
        raise exc
    message = _exception_message(exc)
    if isinstance(exc, MalformedResponse | aiohttp.ContentTypeError):
        return Classification(Verdict.RETRY, "malformed", message)
    if isinstance(exc, TimeoutError):  # asyncio.TimeoutError is TimeoutError since 3.11
        return Classification(Verdict.RETRY, "timeout", message)
    if isinstance(exc, aiohttp.InvalidURL):
        return Classification(Verdict.FATAL, "bad_request", message)
    if isinstance(exc, aiohttp.ClientResponseError):
        headers: Mapping[str, str] = exc.headers if exc.headers is not None else {}
        result = classify_http(exc.status, headers, b"")
        return Classification(
            result.verdict, result.kind, message, result.delay_hint_s, result.is_rate_limit
        )
    if isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError | OSError):
        return Classification(Verdict.RETRY, "connection", message)
    if isinstance(exc, aiohttp.ClientError):
        return Classification(Verdict.RETRY, "client_error", message)
    if isinstance(exc, ValueError):
        return Classification(Verdict.RETRY, "malformed", message)
    return Classification(Verdict.FATAL, "internal", message)


# --------------------------------------------------------------------------- backoff


@dataclass(frozen=True)
class Backoff:
    """Full-jitter exponential backoff (AWS architecture blog, "Exponential Backoff And
    Jitter"): spreading retries uniformly over [0, window] de-synchronises a herd of workers
    that all failed together, which fixed or equal-jitter backoff does not.

    ``max_attempts`` counts every attempt of a trial, the first included.
    ``hint_jitter`` is the fraction of a provider hint added as random extra wait, so that all
    the requests told "retry after 20 s" do not return in the same millisecond.
    """

    base_s: float = 1.0
    cap_s: float = 60.0
    max_attempts: int = 8
    hint_jitter: float = 0.1

    def __post_init__(self) -> None:
        if not (self.base_s > 0 and self.cap_s >= self.base_s):
            raise ValueError("Backoff needs 0 < base_s <= cap_s")
        if self.max_attempts < 1:
            raise ValueError("Backoff.max_attempts must be at least 1")
        if not 0 <= self.hint_jitter <= 1:
            raise ValueError("Backoff.hint_jitter must be in [0, 1]")

    def window(self, attempt: int) -> float:
        """Upper bound of the jitter for the wait after failed attempt number ``attempt``."""
        if attempt < 1:
            raise ValueError("attempt numbers start at 1")
        exponent = min(attempt - 1, 64)  # 2**64 * base is far beyond any cap; avoids overflow
        return float(min(self.cap_s, self.base_s * 2.0**exponent))

    def delay(self, attempt: int, hint_s: float | None, rng: random.Random) -> float:
        """Seconds to wait after attempt number ``attempt`` (1-based) failed.

        Without a hint: ``uniform(0, min(cap, base * 2**(attempt-1)))``. With a hint: at least
        the hint plus up to ``hint_jitter * max(hint, base)`` of random extra, and never less
        than the ordinary backoff draw (a tiny hint must not defeat the exponential growth).
        The hint may exceed ``cap_s``: the provider knows its limits better than our cap.
        """
        draw = rng.uniform(0.0, self.window(attempt))
        if hint_s is None or math.isnan(hint_s) or hint_s < 0:
            return draw
        extra = rng.uniform(0.0, self.hint_jitter * max(hint_s, self.base_s))
        return max(hint_s + extra, draw)

    def exhausted(self, attempts_made: int) -> bool:
        """True when a trial that has made ``attempts_made`` attempts must not try again."""
        return attempts_made >= self.max_attempts

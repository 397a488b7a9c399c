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
  (runner/scheduling/loop_lag.py, runner/scheduling/scheduler.py);
* provider wait hints are honoured: ``Retry-After`` (seconds or HTTP-date), ``retry-after-ms``,
  ``x-ratelimit-reset-requests`` / ``x-ratelimit-reset-tokens`` (Go-style durations),
  ``anthropic-ratelimit-*-reset`` (RFC 3339), Gemini ``RetryInfo.retryDelay`` and the
  "Please try again in 1.5s" sentence OpenAI and Groq put in their messages; a hint longer
  than the model's ``outage_limit_s`` stops the model instead (runner/scheduling/scheduler.py).

Messages are one line, truncated, and scrubbed of the run's keys and of anything that looks like
an API key, because some providers echo a key, a partly masked one or a ``?key=`` URL back in
their errors (``redact``, runner/redact.py).

This module holds the decision (`classify_http`, `classify_exception`, `param_refusal`); the
parts it reads are modules of their own, each re-exported here so the adapters import one place:
the JSON body (runner/providers/json_body.py), the error body's fields
(runner/providers/error_body.py), the wait hints (runner/providers/wait_hints.py) and the backoff
schedule (runner/providers/backoff.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

import aiohttp

from ibias.runner.providers.backoff import Backoff
from ibias.runner.providers.error_body import (
    ErrorBody,
    QuotaViolation,
    describe_error,
    error_body,
    is_daily_quota,
    is_invalid_key,
    quota_violations,
)
from ibias.runner.providers.json_body import MalformedResponse, json_object, loads_json
from ibias.runner.providers.wait_hints import MAX_HINT_S as MAX_HINT_S
from ibias.runner.providers.wait_hints import parse_duration, parse_rfc3339, retry_delay_hint
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


_FATAL_KINDS: dict[int, str] = {
    400: "bad_request",
    401: "auth",
    402: "payment_required",
    403: "forbidden",
    404: "not_found",
}
_RETRY_4XX = frozenset({408, 409, 425, 429})


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


def _named_param(info: ErrorBody) -> tuple[str, str] | None:
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
    info = error_body(body)
    message = describe_error(status, info)
    refused = param_refusal(status, info, param_keys)
    if refused is not None:
        return refused

    if 400 <= status < 500 and "insufficient_quota" in (info.code, info.type):
        return Classification(Verdict.FATAL, "insufficient_quota", message)
    if status == 429 and is_daily_quota(info):
        return Classification(Verdict.FATAL, "daily_quota", message)
    if status in _RETRY_4XX or 500 <= status < 600:
        hint = retry_delay_hint(headers, body, now)
        return Classification(
            Verdict.RETRY, f"http_{status}", message, hint, is_rate_limit=status == 429
        )
    if status == 400 and is_invalid_key(info):
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

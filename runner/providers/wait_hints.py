"""How long a provider asked us to wait before asking again: its headers, its error body's
`RetryInfo` and its "try again in" sentences, read as seconds.

Its own module because reading a wait hint (Go-style durations, HTTP-dates, RFC 3339 resets,
which reset matters when) is a job of its own, apart from deciding whether to retry at all
(runner/providers/retries.py) and from how long our own backoff waits (runner/providers/backoff.py).
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from fractions import Fraction

from ibias.runner.providers.error_body import ErrorBody, detail_type, error_body

__all__ = ["MAX_HINT_S", "parse_duration", "parse_rfc3339", "retry_delay_hint"]

#: Hints longer than this (a year) are treated as nonsense and ignored. Up to it a hint is
#: what the provider asked: the scheduler never sleeps past the model's `outage_limit_s` (a
#: week at most) but stops the model with one line saying until when, so a long hint is said,
#: not slept through: ignoring a long hint would retry into a closed door, one backoff at a
#: time, until every trial of the model had failed.
MAX_HINT_S = 366 * 86_400.0


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


def _retry_info_delay(info: ErrorBody) -> float | None:
    for detail in info.details:
        if detail_type(detail).endswith("google.rpc.RetryInfo"):
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

    info = error_body(body)
    candidates.append(_retry_info_delay(info))
    match = _TRY_AGAIN.search(info.message)
    if match:
        candidates.append(parse_duration(match.group(1).rstrip(".")))

    sane = [c for c in (_sane(c) for c in candidates) if c is not None]
    return max(sane) if sane else None

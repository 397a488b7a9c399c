"""A provider's JSON body read as Python values, whatever the size of its numbers.

Its own module because every reader of a provider's answer needs it (the online adapters, the
batch result files, the error bodies the retry policy reads) and none of them needs the retry
policy to read JSON: the policy (runner/providers/retries.py) imports this, not the other way round.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson

__all__ = ["MalformedResponse", "json_object", "loads_json"]


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

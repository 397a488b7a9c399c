"""The typed JSON form of a small result's rows, as the live server sends them (store/live.py).

A reader of a running store that wants Python rows (`ibias status`, a short `ibias sql`) would
otherwise receive Arrow and load pyarrow and NumPy to read it: a few hundred milliseconds of a
command that takes a few hundred in all. Rows the run fetched with DuckDB's `fetchall()` are
sent instead as JSON (orjson), and `decode` gives back exactly the values `fetchall()` gives:
the same types, the same time zones, NaN and infinities, 128-bit integers, nested values.

JSON's own values carry what they can exactly: NULL, booleans, strings, integers that fit 64
bits, finite floats, lists. Everything else is a one-key object naming its type (`TAGS`): every
object in the payload is such a tag, so a struct or map (a Python dict) is a tag too. A value of
a type not listed in `_ENCODERS` raises `Unencodable`, and the server sends that result as Arrow.
"""

from __future__ import annotations

import datetime as dt
import uuid
import zoneinfo
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

#: The integers JSON (orjson) carries as numbers; the rest travel as text.
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1


class Unencodable(TypeError):
    """A value of a type the row form does not carry (the result goes as Arrow instead)."""


def encode_rows(rows: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """`rows` (DuckDB's `fetchall()`) as values orjson writes and `decode_rows` reads back."""
    return [[_encode(v) for v in row] for row in rows]


def decode_rows(rows: list[list[Any]]) -> list[tuple[Any, ...]]:
    """The rows `encode_rows` encoded, as the tuples `fetchall()` gave."""
    return [tuple(_decode(v) for v in row) for row in rows]


def _encode(v: Any) -> Any:
    kind = type(v)
    if v is None or kind is str or kind is bool:
        return v
    if kind is int:
        return v if _INT_MIN <= v <= _INT_MAX else {"i": str(v)}
    if kind is float:
        return v if v - v == 0.0 else {"f": repr(v)}  # NaN and the infinities: not JSON
    if kind is list:
        return [_encode(x) for x in v]
    encoder = _ENCODERS.get(kind)
    if encoder is None:
        raise Unencodable(f"no row form for {kind.__name__}")
    return {encoder[0]: encoder[1](v)}


def _zone(tz: dt.tzinfo | None) -> Any:
    """A time zone as DuckDB gives it: none, a named zone, or a fixed offset."""
    if tz is None:
        return None
    if type(tz) is zoneinfo.ZoneInfo:
        return tz.key
    if type(tz) is dt.timezone:
        offset = tz.utcoffset(None)
        return [offset.days, offset.seconds, offset.microseconds]
    raise Unencodable(f"no row form for time zone {type(tz).__name__}")


def _unzone(tz: Any) -> dt.tzinfo | None:
    if tz is None:
        return None
    if isinstance(tz, str):
        return zoneinfo.ZoneInfo(tz)
    return dt.timezone(dt.timedelta(days=tz[0], seconds=tz[1], microseconds=tz[2]))


def _datetime(v: dt.datetime) -> list[Any]:
    return [v.replace(tzinfo=None).isoformat(), _zone(v.tzinfo), v.fold]


def _time(v: dt.time) -> list[Any]:
    return [v.replace(tzinfo=None).isoformat(), _zone(v.tzinfo), v.fold]


def _pairs(v: dict[Any, Any]) -> list[list[Any]]:
    return [[_encode(k), _encode(x)] for k, x in v.items()]


#: Type -> (tag, encoder) for the values JSON does not carry as they are.
_ENCODERS: dict[type, tuple[str, Callable[[Any], Any]]] = {
    Decimal: ("n", str),
    dt.datetime: ("t", _datetime),
    dt.date: ("d", dt.date.isoformat),
    dt.time: ("h", _time),
    dt.timedelta: ("r", lambda v: [v.days, v.seconds, v.microseconds]),
    uuid.UUID: ("u", str),
    bytes: ("b", bytes.hex),
    tuple: ("p", lambda v: [_encode(x) for x in v]),
    dict: ("m", _pairs),
}


def _decode(v: Any) -> Any:
    if type(v) is list:
        return [_decode(x) for x in v]
    if type(v) is not dict:
        return v
    ((tag, body),) = v.items()
    return _DECODERS[tag](body)


def _moment(body: list[Any]) -> dt.datetime:
    return dt.datetime.fromisoformat(body[0]).replace(tzinfo=_unzone(body[1]), fold=body[2])


def _clock(body: list[Any]) -> dt.time:
    return dt.time.fromisoformat(body[0]).replace(tzinfo=_unzone(body[1]), fold=body[2])


#: Tag -> decoder, the inverse of `_ENCODERS` (and of the float tag `f`).
_DECODERS: dict[str, Callable[[Any], Any]] = {
    "i": int,
    "f": float,
    "n": Decimal,
    "t": _moment,
    "d": dt.date.fromisoformat,
    "h": _clock,
    "r": lambda b: dt.timedelta(days=b[0], seconds=b[1], microseconds=b[2]),
    "u": uuid.UUID,
    "b": bytes.fromhex,
    "p": lambda b: tuple(_decode(x) for x in b),
    "m": lambda b: {_decode(k): _decode(x) for k, x in b},
}

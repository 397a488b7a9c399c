"""One validation mechanism for every config table: declarative msgspec schemas.

Each table (`[run]`, each `[[models]]` entry and its `sim` table, each `[experiments.NAME]`, a
simulator profile's model tables) is a `msgspec.Struct` with `forbid_unknown_fields=True`, whose
field types carry their bounds as `msgspec.Meta` constraints. `validate` converts a parsed TOML
table into its schema in strict mode (a boolean is not an integer, a string is not a number,
nothing is coerced) and turns msgspec's error into ibias's one-line `SettingsError(key path,
what is wrong)`, the message derived from the schema itself:

    models[2].sim.allocation_cis.gynecology: expected a number from 0 to 1, got 1.5
    run.speed: unknown key (expected one of name, seed, store)
    models[0].id: missing (expected a model id: 1 to 100 characters, no spaces)

How a field is described: the generated phrase ("an integer from 1 to 10,000", "one of 'en',
'es'", "true or false", "a table") unless `Meta(extra={"expected": ...})` gives one, then each
`Meta(description=...)` in brackets (a unit, an example). `Meta(extra={"unit": True})` makes a
value one unit: an error anywhere inside it is reported on the value as a whole.

Every integer field must be bounded within +-2**53 (`MAX_INT`, the integers a double holds
exactly; DuckDB, JSON and the store see no larger) and every float field bounded above, so
infinity and NaN never pass; `tests/test_schema.py` checks each schema for this. Checks that
need data (a category slug that must exist, a file that must exist, pairs a roster can give)
stay as code after `validate` and raise `SettingsError` with their key path the same way.
"""

from __future__ import annotations

import datetime
import json
import re
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import msgspec

from ibias.prompts.base import SettingsError

__all__ = [
    "MAX_INT",
    "KeyPath",
    "describe",
    "did_you_mean",
    "explain",
    "join_key",
    "one_line",
    "render_path",
    "show",
    "validate",
]

T = TypeVar("T")

#: The largest magnitude of any integer in a config (2**53: exact in a double, safe in JSON).
MAX_INT = 2**53

KeyPath = tuple[str | int, ...]

_AT = re.compile(r" - at `([^`]*)`(?: in `([^`]*)`)?\Z")
_TOKEN = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[(\.\.\.)\]")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SHOW_LIMIT = 60


def validate(data: Any, schema: type[T], key: str = "") -> T:
    """`data` (a parsed TOML table) as `schema`, or SettingsError naming the key path.

    `key` prefixes the path in the error (e.g. "models.sim-a" for a profile's model table).
    """
    try:
        return msgspec.convert(data, schema, strict=True)
    except msgspec.ValidationError as exc:
        path, message = explain(exc, data, schema)
        raise SettingsError(join_key(key, render_path(path)), message) from None


def explain(error: msgspec.ValidationError, data: Any, schema: Any) -> tuple[KeyPath, str]:
    """The key path and one-line message for msgspec's `error` converting `data` to `schema`.

    msgspec names the path (`$.models[0].rpm`) but not the value, and writes `[...]` for a
    table's entries; both are recovered here from the data and the schema.
    """
    text = str(error)
    found = _AT.search(text)
    what = text[: found.start()] if found else text
    key_error = bool(found and found.group(2) is not None)
    location = (found.group(2) if key_error else found.group(1)) if found else "$"
    tokens: list[str | int] = []
    for name, index, entry in _TOKEN.findall(location):
        tokens.append(int(index) if index else (entry or name))
    return _explain(what, key_error, tokens, data, schema)


def _explain(
    what: str, key_error: bool, tokens: Sequence[str | int], value: Any, tp: Any
) -> tuple[KeyPath, str]:
    path: list[str | int] = []
    for token in tokens:
        if _is_unit(tp):
            return tuple(path), _expected_got(tp, value)
        if token == "...":
            return _explain_entry(path, value, tp)
        if isinstance(token, int) and isinstance(value, list) and token < len(value):
            tp = _item_type(_container(tp, list), token)
            value = value[token]
        elif isinstance(token, str) and isinstance(value, Mapping) and token in value:
            tp = _field_type(_container(tp, dict), token)
            value = value[token]
        else:  # the error does not match the data: report where we are
            break
        path.append(token)
    if _is_unit(tp):
        return tuple(path), _expected_got(tp, value)
    if key_error and isinstance(value, Mapping):
        key_type = _dict_args(_container(tp, dict))[0]
        for k in value:
            if not _fits(k, key_type):
                return (*path, k), _unknown(key_type)
    if what.startswith("Object contains unknown field") and isinstance(value, Mapping):
        struct = _container(tp, dict)
        known = _field_names(struct)
        unknown = next((k for k in value if k not in known), None)
        if unknown is not None:
            listed = "unknown key (expected one of " + ", ".join(known) + ")"
            return (*path, unknown), listed + did_you_mean(unknown, known)
    if what.startswith("Object missing required field") and isinstance(value, Mapping):
        struct = _container(tp, dict)
        for f in msgspec.structs.fields(struct):
            if f.required and f.encode_name not in value:
                return (*path, f.encode_name), f"missing (expected {describe(f.type)})"
    return tuple(path), _expected_got(tp, value)


def did_you_mean(key: Any, known: Sequence[str]) -> str:
    """`; did you mean `store`?` naming the known key nearest to a misspelt `key` (difflib's
    ratio, case ignored, at least 0.6), or "" when none is near: a list of twenty valid keys
    does not say which one was meant (issue 34)."""
    import difflib

    lowered = {k.lower(): k for k in known}
    near = difflib.get_close_matches(str(key).lower(), list(lowered), n=1, cutoff=0.6)
    return f"; did you mean `{lowered[near[0]]}`?" if near else ""


def _explain_entry(path: list[str | int], value: Any, tp: Any) -> tuple[KeyPath, str]:
    """msgspec says `[...]` for a table entry: find the entry that fails, and why."""
    key_type, value_type = _dict_args(_container(tp, dict))
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not _fits(k, key_type):
                return (*path, k), _unknown(key_type)
            try:
                msgspec.convert(v, value_type, strict=True)
            except msgspec.ValidationError as inner:
                sub, message = explain(inner, v, value_type)
                return (*path, k, *sub), message
    return tuple(path), _expected_got(tp, value)


def _fits(value: Any, tp: Any) -> bool:
    try:
        msgspec.convert(value, tp, strict=True)
    except msgspec.ValidationError:
        return False
    return True


def _unknown(key_type: Any) -> str:
    base, _ = _unwrap(key_type)
    if get_origin(base) is Literal:
        return "unknown key (expected one of " + ", ".join(str(v) for v in get_args(base)) + ")"
    return f"bad key (expected {describe(key_type)})"


def _expected_got(tp: Any, value: Any) -> str:
    return f"expected {describe(tp)}, got {show(value)}"


# --- walking the schema ------------------------------------------------------------------------


def _unwrap(tp: Any) -> tuple[Any, list[msgspec.Meta]]:
    """`tp` without its Annotated layers, and the Meta constraints they carried."""
    metas: list[msgspec.Meta] = []
    while get_origin(tp) is Annotated:
        args = get_args(tp)
        tp = args[0]
        metas.extend(m for m in args[1:] if isinstance(m, msgspec.Meta))
    return tp, metas


def _extra(meta: msgspec.Meta, name: str) -> bool:
    return isinstance(meta.extra, dict) and bool(meta.extra.get(name))


def _is_unit(tp: Any) -> bool:
    return any(_extra(m, "unit") for m in _unwrap(tp)[1])


def _members(tp: Any, *, whole: bool = False) -> list[Any]:
    """The alternatives of a union (absent values, None and UNSET, left out).

    `whole`: keep an annotated union as one alternative (it has its own description).
    """
    base, metas = _unwrap(tp)
    if get_origin(base) in (Union, types.UnionType) and not (whole and metas):
        out: list[Any] = []
        for m in get_args(base):
            out.extend(_members(m, whole=whole))
        return out
    if base is type(None) or base is msgspec.UnsetType:
        return []
    return [tp]


def _container(tp: Any, kind: type) -> Any:
    """The member of `tp` that holds a table (kind=dict) or an array (kind=list)."""
    for member in _members(tp):
        base, _ = _unwrap(member)
        origin = get_origin(base) or base
        if kind is dict and (origin is dict or _is_struct(base)):
            return base
        if kind is list and origin in (list, tuple):
            return base
    return Any


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def _field_names(struct: Any) -> list[str]:
    return [f.encode_name for f in msgspec.structs.fields(struct)] if _is_struct(struct) else []


def _field_type(container: Any, name: str) -> Any:
    if _is_struct(container):
        for f in msgspec.structs.fields(container):
            if f.encode_name == name:
                return f.type
        return Any
    return _dict_args(container)[1]


def _dict_args(container: Any) -> tuple[Any, Any]:
    args = get_args(container) if get_origin(container) is dict else ()
    return (args[0], args[1]) if len(args) == 2 else (Any, Any)


def _item_type(container: Any, index: int) -> Any:
    args = get_args(container)
    if get_origin(container) is tuple and args and args[-1] is not Ellipsis:
        return args[index] if index < len(args) else Any
    return args[0] if args else Any


# --- describing types and values ---------------------------------------------------------------


def describe(tp: Any) -> str:
    """What a value of schema type `tp` must be, in words ("an integer from 1 to 10,000")."""
    base, metas = _unwrap(tp)
    given = [m.extra["expected"] for m in metas if m.extra and _extra(m, "expected")]
    phrase = str(given[0]) if given else _phrase(base, metas)
    notes = "".join(f" ({m.description})" for m in metas if m.description)
    return phrase + notes


def _constraint(metas: Iterable[msgspec.Meta], name: str) -> Any:
    for m in metas:
        value = getattr(m, name)
        if value is not None:
            return value
    return None


def _phrase(base: Any, metas: list[msgspec.Meta]) -> str:
    members = _members(base, whole=True) if get_origin(base) in (Union, types.UnionType) else [base]
    if len(members) != 1 or members[0] is not base:
        return " or ".join(describe(m) for m in members) or "nothing"
    origin = get_origin(base)
    if origin is Literal:
        values = [show(v) for v in get_args(base)]
        return values[0] if len(values) == 1 else "one of " + ", ".join(values)
    if base is bool:
        return "true or false"
    if base is int:
        return "an integer" + _range(metas)
    if base is float:
        return "a number" + _range(metas)
    if base is str:
        return "a non-empty string" if _constraint(metas, "min_length") else "a string"
    if origin is tuple:
        args = get_args(base)
        if args and args[-1] is not Ellipsis:
            return f"a list of {len(args)} values"
        return "a list"
    if origin is list:
        low = _constraint(metas, "min_length")
        high = _constraint(metas, "max_length")
        if high is not None:
            return f"a list of {low or 0} to {high} values"
        return "a non-empty list" if low else "a list"
    if origin is dict or _is_struct(base):
        return "a table"
    return "a value"


def _range(metas: list[msgspec.Meta]) -> str:
    ge, gt = _constraint(metas, "ge"), _constraint(metas, "gt")
    le, lt = _constraint(metas, "le"), _constraint(metas, "lt")
    low = f">= {_number(ge)}" if ge is not None else f"> {_number(gt)}" if gt is not None else ""
    high = f"<= {_number(le)}" if le is not None else f"< {_number(lt)}" if lt is not None else ""
    if ge is not None and le is not None:
        return f" from {_number(ge)} to {_number(le)}"
    if low and high:
        return f" {low} and {high}"
    return f" {low or high}" if low or high else ""


def _number(value: float) -> str:
    if abs(value) == MAX_INT:
        return "2^53" if value > 0 else "-2^53"
    if float(value).is_integer():
        return f"{int(value):,}"
    return repr(float(value))


def show(value: Any) -> str:
    """`value` as the user wrote it, roughly in TOML, cut to one short line."""
    text = _show(value, _SHOW_LIMIT + 1)
    return text if len(text) <= _SHOW_LIMIT else text[: _SHOW_LIMIT - 3] + "..."


def _show(value: Any, budget: int) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if value.bit_length() > 160:  # far too long to print, and str() refuses > 4300 digits
            return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return repr(value[:budget])
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, Mapping):
        return "{" + _join(((f"{_key(k)} = ", v) for k, v in value.items()), budget) + "}"
    if isinstance(value, list | tuple):
        return "[" + _join((("", v) for v in value), budget) + "]"
    return type(value).__name__


def _join(items: Iterable[tuple[str, Any]], budget: int) -> str:
    """`prefix value` parts joined by commas, stopping once `budget` characters are used."""
    parts: list[str] = []
    used = 0
    for prefix, v in items:
        if used > budget:
            parts.append("...")
            break
        part = prefix + _show(v, budget - used)
        parts.append(part)
        used += len(part) + 2
    return ", ".join(parts)


def _key(key: Any) -> str:
    text = str(key)
    return text if _BARE_KEY.fullmatch(text) else json.dumps(text, ensure_ascii=False)


def render_path(path: Iterable[str | int]) -> str:
    """("models", 2, "sim", "allocation_cis", "gynecology") -> models[2].sim.allocation_cis..."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + _key(part)
    return out


def join_key(prefix: str, key: str) -> str:
    """Two key paths joined: ("models.x", "rpm") -> "models.x.rpm"; ("a", "[1]") -> "a[1]"."""
    if not prefix or not key:
        return prefix or key
    return prefix + key if key.startswith("[") else f"{prefix}.{key}"


def one_line(text: str) -> str:
    """Any message on one line (a data-file error may quote several)."""
    return " ".join(line.strip() for line in text.splitlines())

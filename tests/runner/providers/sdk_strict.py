"""Typed checks from the official SDKs' own types, in pydantic's strict mode with extra keys
forbidden (test-only: the product never imports the SDKs or pydantic).

Why not the SDKs' types as they are: their request types are TypedDicts, which check nothing
at run time (any key, any value passes), and their response models allow extra keys and are
built without validation by the clients (`construct`). So:

* requests: `strict_model(TypedDict)` derives a pydantic model from an SDK request TypedDict,
  field by field and recursively (nested TypedDicts become models too), with `extra='forbid'`
  and `strict=True`; `Iterable[X]`/`Sequence[X]` become `list[X]` (pydantic validates an
  Iterable lazily, and a string is an iterable of strings, so a chat's `content` would pass
  unchecked). Required keys are required, optional ones may be absent. Gemini's request types
  are already pydantic models (google-genai's `Content`, `GenerationConfig`, `SafetySetting`,
  `extra='forbid'`): the REST body is assembled from them.
* replies: `check_reply(Model, raw)` validates the raw bytes with the SDK's response model in
  strict mode and then walks the result: a key the model does not declare (kept by the SDKs'
  `extra='allow'`) fails the check.
"""

from __future__ import annotations

import enum
import types
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Union, get_args, get_origin

import pydantic
import typing_extensions
from pydantic import BaseModel, ConfigDict, create_model
from typing_extensions import get_type_hints

STRICT = ConfigDict(extra="forbid", strict=True)


def _convert(tp: Any, building: dict[type, type[BaseModel] | None]) -> Any:
    if typing_extensions.is_typeddict(tp):  # the SDKs use typing_extensions' TypedDict
        return strict_model(tp, _building=building)
    origin = get_origin(tp)
    args = get_args(tp)
    if origin is Literal or tp is Any or tp is object:
        return tp
    if origin is typing_extensions.Annotated:
        return _convert(args[0], building)
    if origin in (Union, types.UnionType):
        return Union[tuple(_convert(a, building) for a in args)]  # noqa: UP007
    if origin in (list, tuple, set, frozenset, Iterable, Sequence) or (
        origin is not None and getattr(origin, "__name__", "") in ("Iterable", "Sequence")
    ):
        inner = args[0] if args else Any
        return list[_convert(inner, building)]  # type: ignore[misc]
    if origin in (dict, Mapping):
        key, value = args if args else (str, Any)
        return dict[_convert(key, building), _convert(value, building)]  # type: ignore[misc]
    if tp in _JSON or (isinstance(tp, type) and issubclass(tp, BaseModel | enum.Enum)):
        return tp
    # Not a JSON value (a file, bytes, a path: parameters the SDK turns into something else
    # before sending): nothing in a JSON body may match it, so it never widens a union.
    return Literal[f"<not JSON: {tp!r}>"]


_JSON = frozenset({str, int, float, bool, type(None), None})


def strict_model(
    typed_dict: type,
    extra_fields: Mapping[str, Any] | None = None,
    *,
    _building: dict[type, type[BaseModel] | None] | None = None,
) -> type[BaseModel]:
    """A pydantic model with the TypedDict's keys (plus `extra_fields`, each optional), strict
    and closed. A TypedDict met again while it is being built (a recursive type) is checked
    as a JSON object only at that depth."""
    building = {} if _building is None else _building
    if typed_dict in building:
        made = building[typed_dict]
        return made if made is not None else dict[str, Any]  # type: ignore[return-value]
    building[typed_dict] = None
    # Required / NotRequired read from the hints themselves: the SDKs' modules use
    # `from __future__ import annotations`, and with string annotations `__required_keys__`
    # cannot see them.
    hints = get_type_hints(typed_dict, include_extras=True)
    total = getattr(typed_dict, "__total__", True)
    fields: dict[str, Any] = {}
    for name, tp in hints.items():
        required = total
        while get_origin(tp) in (typing_extensions.Required, typing_extensions.NotRequired):
            required = get_origin(tp) is typing_extensions.Required
            tp = get_args(tp)[0]
        converted = _convert(tp, building)
        fields[name] = (converted, ...) if required else (converted, None)
    for name, tp in (extra_fields or {}).items():
        fields[name] = (tp, None)
    with warnings.catch_warnings():  # a field named like a BaseModel attribute ("schema")
        warnings.simplefilter("ignore", UserWarning)
        model = create_model(f"Strict{typed_dict.__name__}", __config__=STRICT, **fields)
    building[typed_dict] = model
    return model


def check_request(model: type[BaseModel], raw: bytes) -> BaseModel:
    """The request body as sent (raw JSON) validated by a strict model."""
    return model.model_validate_json(raw, strict=True)


def undeclared(value: Any, path: str = "$") -> list[str]:
    """Paths of keys a response model kept without declaring them (`extra='allow'`)."""
    found: list[str] = []
    if isinstance(value, BaseModel):
        for key in value.__pydantic_extra__ or {}:
            found.append(f"{path}.{key}")
        for name in type(value).model_fields:
            found += undeclared(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found += undeclared(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            found += undeclared(item, f"{path}.{key}")
    return found


def check_reply(model: type[BaseModel], raw: bytes) -> BaseModel:
    """A reply (or error) body validated by the SDK's response model in strict mode, with no
    key the model does not declare."""
    parsed = model.model_validate_json(raw, strict=True)
    extra = undeclared(parsed)
    if extra:
        raise AssertionError(f"{model.__name__}: keys the SDK does not declare: {extra}")
    return parsed


def closed(name: str, **fields: Any) -> type[BaseModel]:
    """A strict, closed model over SDK types (e.g. an error envelope or Gemini's REST body)."""
    return create_model(name, __config__=STRICT, **fields)


__all__ = [
    "STRICT",
    "check_reply",
    "check_request",
    "closed",
    "pydantic",
    "strict_model",
    "undeclared",
]

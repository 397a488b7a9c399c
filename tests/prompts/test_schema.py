"""The one validation mechanism: msgspec schemas, and msgspec's errors turned into one line
that names the full key path, the expectation (from the schema) and the value."""

from __future__ import annotations

import math
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec
import pytest
from msgspec import UNSET, Meta, UnsetType

from ibias.prompts.adhoc import AdhocTable
from ibias.prompts.allocation.settings import AllocationTable, PairingRule
from ibias.prompts.base import SettingsError
from ibias.prompts.schema import MAX_INT, describe, render_path, show, validate
from ibias.prompts.word_association.settings import LabelPair, WordAssociationTable
from ibias.runner.config import ConfigFile, ModelTable, RunTable
from ibias.runner.simulator.profile import ProfileFile, SimModelTable

SCHEMAS = [
    ConfigFile,
    RunTable,
    ModelTable,
    SimModelTable,
    ProfileFile,
    AdhocTable,
    WordAssociationTable,
    LabelPair,
    AllocationTable,
    PairingRule,
]


def _leaves(tp: Any, metas: tuple[Meta, ...] = ()) -> list[tuple[Any, tuple[Meta, ...]]]:
    """Every scalar type in a schema type, with the Meta constraints that apply to it."""
    origin = get_origin(tp)
    if origin is Annotated:
        args = get_args(tp)
        return _leaves(args[0], metas + tuple(m for m in args[1:] if isinstance(m, Meta)))
    if origin in (Union, types.UnionType, list, tuple, dict):
        out = []
        for arg in get_args(tp):
            if arg is not Ellipsis:
                # a container's own Meta (min_length...) does not bound its items
                out.extend(_leaves(arg, metas if origin in (Union, types.UnionType) else ()))
        return out
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return [leaf for f in msgspec.structs.fields(tp) for leaf in _leaves(f.type)]
    return [(tp, metas)]


def _bound(metas: tuple[Meta, ...], *names: str) -> float | None:
    values = [getattr(m, n) for m in metas for n in names if getattr(m, n) is not None]
    return values[0] if values else None


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.__name__)
def test_every_integer_is_bounded_within_2_53_and_every_float_from_above(schema: type) -> None:
    for tp, metas in _leaves(schema):
        if tp is int:
            low, high = _bound(metas, "ge", "gt"), _bound(metas, "le", "lt")
            assert low is not None and high is not None, (schema, metas)
            assert -MAX_INT <= low <= high <= MAX_INT
        if tp is float:  # an upper bound keeps out infinity; any bound keeps out NaN
            assert _bound(metas, "le", "lt") is not None, (schema, metas)
            assert _bound(metas, "ge", "gt") is not None, (schema, metas)


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.__name__)
def test_every_table_rejects_unknown_keys(schema: type) -> None:
    assert schema.__struct_config__.forbid_unknown_fields


class Inner(msgspec.Struct, forbid_unknown_fields=True):
    rate: Annotated[float, Meta(ge=0, le=1)] = 0.0


class Outer(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: Annotated[str, Meta(min_length=1)]
    count: Annotated[int, Meta(ge=1, le=10_000, description="per minute")] = 1
    items: list[Inner] = []
    shares: dict[str, Annotated[float, Meta(ge=0, le=1)]] = {}
    kinds: dict[Literal["a", "b"], int] = {}
    pair: Annotated[tuple[int, int], Meta(extra={"unit": True, "expected": "a pair"})] = (0, 0)
    choice: Annotated[
        Literal["all"] | Annotated[list[str], Meta(min_length=1)],
        Meta(extra={"expected": '"all" or a list'}),
    ] = "all"
    maybe: Annotated[int, Meta(ge=0, le=5)] | UnsetType = UNSET


def _error(data: Any, key: str = "") -> SettingsError:
    with pytest.raises(SettingsError) as info:
        validate(data, Outer, key)
    assert "\n" not in str(info.value)
    return info.value


@pytest.mark.parametrize(
    ("data", "key", "message"),
    [
        ({}, "name", "missing (expected a non-empty string)"),
        ({"name": "x", "colour": 1}, "colour", "unknown key (expected one of name, count,"),
        ({"name": "x", "count": 0}, "count", "expected an integer from 1 to 10,000 (per minute)"),
        ({"name": "x", "count": True}, "count", "got true"),
        ({"name": "x", "count": 10**23}, "count", "got 100000000000000000000000"),
        ({"name": "x", "count": 2.0}, "count", "got 2.0"),
        ({"name": "x", "items": [{}, {"rate": 2}]}, "items[1].rate", "from 0 to 1, got 2"),
        ({"name": "x", "items": [{"rat": 2}]}, "items[0].rat", "unknown key"),
        ({"name": "x", "shares": {"a": 0.5, "b c": 1.5}}, 'shares."b c"', "got 1.5"),
        ({"name": "x", "shares": {"a": "x"}}, "shares.a", "expected a number from 0 to 1"),
        ({"name": "x", "kinds": {"a": 1, "c": 2}}, "kinds.c", "unknown key (expected one of a, b)"),
        ({"name": "x", "pair": [1, "2"]}, "pair", "expected a pair, got [1, '2']"),
        ({"name": "x", "choice": "some"}, "choice", "expected \"all\" or a list, got 'some'"),
        ({"name": "x", "choice": ["a", 3]}, "choice[1]", "expected a string, got 3"),
        ({"name": "x", "maybe": 6}, "maybe", "expected an integer from 0 to 5, got 6"),
        ({"name": "x", "count": math.nan}, "count", "got nan"),
        ([], "", "expected a table, got []"),
    ],
)
def test_errors_name_the_key_path_the_expectation_and_the_value(data, key, message):
    err = _error(data)
    assert err.key == key
    assert message in err.message


def test_a_prefix_is_joined_to_the_path():
    assert (
        _error({"name": "x", "items": [{"rate": -1}]}, "models.x").key == "models.x.items[0].rate"
    )
    assert _error([], "models.x").key == "models.x"


def test_values_are_shown_short_and_on_one_line():
    assert show("a\nb") == "'a\\nb'"
    assert show(True) == "true"
    assert show({"a": [1, 2], "b c": {}}) == '{a = [1, 2], "b c" = {}}'
    assert len(show("x" * 500)) == 60 and show("x" * 500).endswith("...")
    assert len(show(list(range(1000)))) <= 60
    assert show(10**5000) == "an integer of about 5001 digits"


def test_paths_quote_keys_that_toml_would_quote():
    assert render_path(["models", 2, "sim", "allocation_cis", "gynecology"]) == (
        "models[2].sim.allocation_cis.gynecology"
    )
    assert render_path(["a", "b.c", "", 'q"']) == 'a."b.c"."".' + '"q\\""'


def test_descriptions_come_from_the_schema():
    assert (
        describe(Annotated[int, Meta(ge=-MAX_INT, le=MAX_INT)]) == "an integer from -2^53 to 2^53"
    )
    assert describe(Annotated[float, Meta(gt=0, le=3600)]) == "a number > 0 and <= 3,600"
    assert describe(Annotated[float, Meta(ge=0.5)]) == "a number >= 0.5"
    assert describe(Literal["en", "es"] | None) == "one of 'en', 'es'"
    assert describe(bool) == "true or false"

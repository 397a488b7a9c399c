"""The ad-hoc prompts file: the typed fast reading of a line accepts and refuses exactly what
the definition (`_check_line`) does, with the same result or the same message."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ibias.prompts.adhoc import _check_line, _parse_line

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=5)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["id", "messages", "role", "content", "x"]), inner, max_size=4
        )
    ),
    max_leaves=12,
)
_MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "system", "assistant", "bot"]),
        "content": st.one_of(st.text(max_size=5), st.integers(0, 3), st.none()),
    },
    optional={"x": st.integers(0, 3)},
)
_LINES = st.one_of(
    _VALUES,
    st.fixed_dictionaries(
        {"id": _VALUES, "messages": st.one_of(_VALUES, st.lists(_MESSAGE, max_size=3))},
        optional={"z": _VALUES},
    ),
)


def _outcome(read: Any, raw: bytes) -> tuple[str, object]:
    try:
        return "ok", read(raw)
    except ValueError as exc:
        return "error", str(exc)


@settings(max_examples=1500, deadline=None)
@given(_LINES)
def test_fast_reading_agrees_with_the_definition(obj: object) -> None:
    raw = orjson.dumps(obj)
    assert _outcome(_parse_line, raw) == _outcome(_check_line, raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"id": 99999999999999999999, "messages": [{"role": "user", "content": "x"}]}',
        b'{"id": -9223372036854775809, "messages": [{"role": "user", "content": "x"}]}',
        b"not json",
        b'{"id": 1, "id": "a", "messages": [{"role": "user", "content": "x"}]}',
        b'{"id": 1, "messages": [{"role": "user", "content": "x", "role": "system"}]}',
        b'{"id": 1, "messages": [{"role": "user", "content": "caf\\u00e9"}]}\n',
        b'{"id": "a", "messages": []}',
        b"[]",
    ],
)
def test_edge_lines_agree(raw: bytes) -> None:
    assert _outcome(_parse_line, raw) == _outcome(_check_line, raw)


def test_an_id_beyond_64_bits_is_refused_as_before() -> None:
    kind, message = _outcome(
        _parse_line, b'{"id": 99999999999999999999, "messages": [{"role": "user", "content": "x"}]}'
    )
    assert (kind, message) == ("error", "'id' must be a string or integer")

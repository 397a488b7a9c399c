"""The pre-request character count is one number whether Python (the feeder, per spec) or
DuckDB (`ibias plan`'s totals) counts it."""

from __future__ import annotations

import duckdb
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from ibias.store.plans import PROMPT_CHARS_SQL, prompt_chars

_MESSAGES = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["system", "user", "assistant"]),
            "content": st.text(max_size=40),  # any code point: accents, emoji, CJK, NUL
        }
    ),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(_MESSAGES)
def test_python_and_sql_count_the_same_characters(messages: list[dict[str, str]]) -> None:
    con = duckdb.connect()
    sql = f"SELECT coalesce({PROMPT_CHARS_SQL}, 0) FROM (SELECT ?::JSON AS messages) s"
    (counted,) = con.execute(sql, [orjson.dumps(messages).decode()]).fetchone() or (None,)
    assert counted == prompt_chars(messages)

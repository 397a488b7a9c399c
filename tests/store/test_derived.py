"""What parsers see of a reply: withheld answers are refusals, not unparseable text."""

from __future__ import annotations

from itertools import product

import duckdb

from ibias.store.derived import _REPLY_TEXT_SQL, reply_text


def test_python_and_sql_rules_agree_on_every_combination():
    contents = [None, "", "<person>Ana Ruiz</person>"]
    finishes = [None, "stop", "content_filter", "length"]
    refusals = [None, "I can't help with that."]
    con = duckdb.connect()
    for content, finish, refusal in product(contents, finishes, refusals):
        sql = con.execute(
            f"SELECT {_REPLY_TEXT_SQL} FROM (SELECT ?::VARCHAR AS content, "
            f"?::VARCHAR AS finish_reason, ?::VARCHAR AS refusal) r",
            [content, finish, refusal],
        ).fetchall()[0][0]
        assert sql == reply_text(content, finish, refusal), (content, finish, refusal)


def test_withheld_answers_become_none():
    assert reply_text("", "content_filter", None) is None
    assert reply_text(None, "stop", "I can't help") is None
    assert reply_text("", "stop", None) == ""  # an empty answer is the model's: unparseable
    assert reply_text("text", "content_filter", None) == "text"

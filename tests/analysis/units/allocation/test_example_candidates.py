"""The explanation examples read from the loader's candidates (`load.EXAMPLE_CANDIDATES`, so the
view is read without its texts) are the examples the whole view gives: checked over generated
decisions whose texts may be empty, blank in ASCII or Unicode whitespace, punctuation only or
words, across designs, arms, models, languages and explained or not, for one to three models
per language; and on a simulated store through `ibias analyze`'s own reads."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from ibias.analysis.load import load_store
from ibias.analysis.units.allocation.identity_swap import design_original
from ibias.analysis.units.allocation.load import EXAMPLE_CANDIDATES, example_candidates_sql
from ibias.analysis.units.allocation.shares import explanation_examples
from tests.analysis.conftest import query

SCHEMA = {
    "trial_key": pl.String,
    "model_id": pl.String,
    "language": pl.String,
    "design": pl.String,
    "service": pl.String,
    "explanation": pl.Boolean,
    "symptoms": pl.String,
    "identity_swap": pl.Boolean,
    "chosen": pl.String,
    "explanation_text": pl.String,
}
TEXTS = st.sampled_from(
    [None, "", " ", "\t\n", "\u00a0\u2003", "\u3000", "...", "¡!", "ok", "Sí, ella", " 42 ", "é"]
)
# Few values per partition key, so that a model's replies in one service, choice and language
# often come several at a time, blank ones ahead of others.
ROW = st.tuples(
    st.sampled_from(["m1", "m2"]),
    st.sampled_from(["en", "es"]),
    st.sampled_from(["controlled", "controlled", "paper"]),
    st.sampled_from(["hiv", "hiv", "hiv", "gynecology"]),
    st.none() | st.booleans(),
    st.sampled_from([None, None, None, True]),
    st.sampled_from(["cis", "trans", "none"]),
    TEXTS,
)


def _decisions(rows: list[tuple[object, ...]]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            (
                f"{i * 7919 % 1000:04d}",
                model,
                lang,
                design,
                service,
                expl,
                "none",
                swap,
                chosen,
                text,
            )
            for i, (model, lang, design, service, expl, swap, chosen, text) in enumerate(rows)
        ],
        schema=SCHEMA,
        orient="row",
    )


def _candidates(decisions: pl.DataFrame, per_language: int) -> pl.DataFrame:
    con = duckdb.connect()
    try:
        con.register("allocation_decisions", decisions.to_arrow())
        return con.sql(example_candidates_sql(per_language)).pl()
    finally:
        con.close()


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(ROW, max_size=120), per_language=st.integers(1, 3))
def test_the_candidates_give_the_examples_of_the_whole_view(
    rows: list[tuple[object, ...]], per_language: int
) -> None:
    decisions = _decisions(rows)
    candidates = _candidates(decisions, per_language)
    assert candidates.height <= decisions.height
    for design in ("controlled", "paper"):
        expected = explanation_examples(design_original(decisions, design), per_language)
        got = explanation_examples(design_original(candidates, design), per_language)
        assert_frame_equal(got, expected)


def test_a_store_quotes_the_same_examples_without_reading_the_texts(sim_store: Path) -> None:
    data = load_store(sim_store)
    assert "explanation_text" not in data.views["allocation"].columns
    full = pl.DataFrame(
        query(sim_store, f"SELECT {', '.join(SCHEMA)} FROM allocation_decisions"),
        schema=SCHEMA,
        orient="row",
    )
    candidates = data.extras[EXAMPLE_CANDIDATES]
    assert 0 < candidates.height < full.height
    expected = explanation_examples(design_original(full, "controlled"))
    assert not expected.is_empty()
    got = explanation_examples(design_original(candidates, "controlled"))
    assert_frame_equal(got, expected)

"""`number_cells` against the definition it replaced: the keys' distinct rows sorted (nulls
first), numbered, and joined back to the frame (a row with a null key gets no cell). Every table
joins its intervals by these numbers and draws its resamples in their order, so they must be
the same numbers, for keys of every type the tables use (strings, booleans, integers, enums
and categoricals). And `coded_pairs`: the pair ids coded once, in their sorted order, for every
table of an experiment and the extras they join."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from ibias.analysis.cells import CELL, coded_pairs, keyed_like, number_cells, pair_codes, texts

EFFECTS = pl.Enum(["all", "explanation", "symptoms_high"])


def joined_cells(frame: pl.DataFrame, keys: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The definition: sorted distinct keys, numbered, joined back on the keys."""
    cells = frame.select(keys).unique().sort(keys).with_row_index(CELL)
    cells = cells.with_columns(pl.col(CELL).cast(pl.Int64))
    return frame.join(cells, on=keys, how="left", maintain_order="left"), cells


TEXT = st.sampled_from(["en", "es", "é", "Z", "a b", "ä", "", "zz", "sim-b", "sim-a"])
ROWS = st.lists(
    st.tuples(
        st.none() | TEXT,
        st.none() | st.booleans(),
        st.none() | st.integers(-3, 3),
        st.none() | st.sampled_from(["all", "explanation", "symptoms_high"]),
        st.none() | st.sampled_from(["b", "a", "c"]),
        st.floats(allow_nan=False, allow_infinity=False),
    ),
    max_size=60,
)


def _frame(rows: list[tuple[object, ...]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={
            "text": pl.String,
            "flag": pl.Boolean,
            "number": pl.Int64,
            "effect": EFFECTS,
            "group": pl.Categorical,
            "value": pl.Float64,
        },
        orient="row",
    )


@settings(max_examples=200, deadline=None)
@given(
    rows=ROWS,
    keys=st.lists(
        st.sampled_from(["text", "flag", "number", "effect", "group"]),
        min_size=1,
        max_size=4,
        unique=True,
    ),
)
def test_the_cells_are_those_of_the_sorted_distinct_keys_joined_back(
    rows: list[tuple[object, ...]], keys: list[str]
) -> None:
    frame = _frame(rows)
    numbered, cells = number_cells(frame, keys)
    expected_numbered, expected_cells = joined_cells(frame, keys)
    assert_frame_equal(cells, expected_cells)
    assert_frame_equal(numbered, expected_numbered)


def test_a_row_with_a_null_key_has_no_cell_but_its_combination_is_listed() -> None:
    frame = _frame([("en", True, 1, "all", "a", 0.5), (None, True, 1, "all", "a", 1.0)])
    numbered, cells = number_cells(frame, ["text", "flag"])
    assert numbered[CELL].to_list() == [1, None]
    assert cells.rows() == [(0, None, True), (1, "en", True)]


def test_keys_too_many_for_one_integer_are_joined() -> None:
    """Eight keys of 300 values each do not fit one 62-bit code: the cells come from the
    join, numbered the same way."""
    n = 300
    frame = pl.DataFrame(
        {f"k{i}": [f"{(j * (i + 7)) % n:03d}" for j in range(n)] for i in range(8)}
    )
    keys = list(frame.columns)
    numbered, cells = number_cells(frame, keys)
    expected_numbered, expected_cells = joined_cells(frame, keys)
    assert_frame_equal(cells, expected_cells)
    assert_frame_equal(numbered, expected_numbered)


# -- coded_pairs: the cluster ids coded once for all of an experiment's tables ---------------


@settings(max_examples=100, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=40), st.lists(TEXT, max_size=10))
def test_pair_codes_follow_the_ids_sorted_order_and_extras_are_coded_alike(
    ids: list[str], other: list[str]
) -> None:
    trials = pl.DataFrame({"pair_id": ids, "x": range(len(ids))})
    people = pl.DataFrame({"pair_id": other, "person": range(len(other))})
    coded, extras = coded_pairs(trials, {"people": people, "plain": pl.DataFrame({"y": [1]})})
    order = sorted(set(ids))  # Python's order of code points: UTF-8's byte order
    assert coded["pair_id"].to_list() == [order.index(i) + 1 for i in ids]
    assert coded["x"].to_list() == list(range(len(ids)))
    # An extra's ids take the same codes; ids the trials lack have none.
    want = [order.index(i) + 1 if i in order else None for i in other]
    assert extras["people"]["pair_id"].to_list() == want
    assert extras["people"]["person"].to_list() == list(range(len(other)))
    assert_frame_equal(extras["plain"], pl.DataFrame({"y": [1]}))
    # The tables' own coding keeps them: the same numbers as from the strings.
    assert_frame_equal(pair_codes(coded, ["pair_id"]), pair_codes(trials, ["pair_id"]))


@settings(max_examples=100, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=40), st.lists(TEXT, max_size=10))
def test_ids_read_as_categoricals_take_the_codes_of_their_texts(
    ids: list[str], other: list[str]
) -> None:
    """The allocation view reads its pair ids as categoricals (`categorical_columns`): the
    codes are those of the texts, for its extras' ids as texts or as categoricals."""
    trials = pl.DataFrame({"pair_id": ids})
    people = pl.DataFrame({"pair_id": other}, schema={"pair_id": pl.String})
    want, want_extras = coded_pairs(trials, {"people": people})
    as_labels = trials.with_columns(pl.col("pair_id").cast(pl.Categorical))
    for extra in (people, people.with_columns(pl.col("pair_id").cast(pl.Categorical))):
        coded, extras = coded_pairs(as_labels, {"people": extra})
        assert_frame_equal(coded, want)
        assert_frame_equal(extras["people"], want_extras["people"])


def test_a_table_gives_its_labels_as_texts_and_a_small_frame_joins_the_labels() -> None:
    labels = pl.DataFrame({"model_id": ["b", "a", None], "n": [1, 2, 3]}).with_columns(
        pl.col("model_id").cast(pl.Categorical)
    )
    plain = texts(labels)
    assert plain.schema["model_id"] == pl.String
    assert plain["model_id"].to_list() == ["b", "a", None]
    assert texts(plain) is plain  # nothing to cast: the frame itself
    small = pl.DataFrame({"model_id": ["a", "c"], "w": [10, 20]})
    joined = labels.join(keyed_like(small, labels), on="model_id", how="left")
    assert joined.sort("n")["w"].to_list() == [None, 10, None]
    assert keyed_like(small, small) is small


def test_ids_with_a_null_stay_strings() -> None:
    trials = pl.DataFrame({"pair_id": ["b", None, "a"]})
    people = pl.DataFrame({"pair_id": ["a"]})
    coded, extras = coded_pairs(trials, {"people": people})
    assert_frame_equal(coded, trials)
    assert_frame_equal(extras["people"], people)

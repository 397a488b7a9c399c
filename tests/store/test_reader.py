"""`StoreReader.frame`: a result of many DuckDB batches comes out as one chunk (converted
batch by batch, such a frame held far more memory than its data: the reader's docstring), with
the same values, read from the file or from a running store; the columns asked for as
categoricals come out so, with the values, nulls and order of their texts."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from polars.testing import assert_frame_equal

from ibias.store.reader import open_reader
from tests.store.conftest import Served

# Far more rows than one of DuckDB's batches, with strings short (inline) and long.
MANY = (
    "SELECT i, 'm' || (i % 7) AS short, repeat('x', 20) || i AS long, i % 3 = 0 AS flag, "
    "CASE WHEN i % 5 = 0 THEN NULL WHEN i % 13 = 0 THEN 'it''s' ELSE 'é' || (i % 11) END "
    "AS label, CAST(NULL AS VARCHAR) AS nothing "
    "FROM range(300000) t(i) ORDER BY i"
)


def _check(store: Path) -> None:
    with open_reader(store) as reader:
        table = reader.table(MANY)
        frame = reader.frame(MANY)
    assert table.column(0).num_chunks > 1  # the case this is about
    assert frame.n_chunks("all") == [1] * frame.width
    assert_frame_equal(frame, pl.DataFrame(pl.from_arrow(table)))


def _check_categorical(store: Path) -> None:
    with open_reader(store) as reader:
        texts = reader.frame(MANY)
        frame = reader.frame(MANY, categorical={"short", "label", "i", "nothing", "absent"})
    assert frame.n_chunks("all") == [1] * frame.width
    assert frame.schema["short"] == pl.Categorical and frame.schema["label"] == pl.Categorical
    assert frame.schema["long"] == pl.String  # only the columns asked for
    # Only text: a number stays a number (a column of nulls is a categorical of nulls).
    assert frame.schema["i"] == pl.Int64 and frame["nothing"].null_count() == frame.height
    assert frame["label"].null_count() == texts["label"].null_count() > 0
    # The same values, and the texts' order wherever the analysis sorts or ranks them.
    assert "it's" in frame["label"].to_list()
    as_texts = frame.with_columns(pl.col("short", "label", "nothing").cast(pl.String))
    assert_frame_equal(as_texts, texts)
    for name in ("short", "label"):
        assert frame[name].sort().cast(pl.String).to_list() == texts[name].sort().to_list()
        assert frame[name].rank("dense").to_list() == texts[name].rank("dense").to_list()


def test_a_many_batch_result_is_one_chunk_with_the_same_values(source: Path) -> None:
    _check(source)
    _check_categorical(source)


def test_so_is_a_running_stores(served: Served) -> None:
    _check(served.store)
    _check_categorical(served.store)

"""The tag-only reading summed in the store (`load.TAG_TALLIES`), which the authors' view and
the parsers' agreement tables read instead of a per-trial join: its counts against a recount
made here from the per-trial rows, per design and arm, and relabelled as the views are by
`--by-reported-model`; and the per-trial rows of the tag-only reading are no longer read."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from ibias.analysis.load import load_store
from ibias.analysis.units.allocation import authors
from ibias.analysis.units.allocation.load import TAG_TALLIES
from ibias.prompts.allocation.parse_tag_only import TAG_ONLY_TABLE
from tests.analysis.conftest import ALLOCATION, MODELS, build_store, query

READINGS = list(authors.READINGS)
VIEW_COLUMNS = [
    "trial_key", "model_id", "language", "design", "service", "explanation", "symptoms",
    "identity_swap", "chosen", "none_reason",
]  # fmt: skip


TAG_COLUMNS = ["trial_key", "tag_parser_version", "tag_chosen", "tag_none_reason", "tag_same_name"]


@pytest.fixture(scope="module")
def swap_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two simulated models, en + es, two services, with the identity-swap arm."""
    return build_store(
        tmp_path_factory.mktemp("tallies"), MODELS + ALLOCATION + "identity_swap = true\n"
    )


def _recount(store: Path) -> pl.DataFrame:
    """The tallies from the per-trial rows, counted here: each decision of the view beside
    the newest tag-only row of its trial, grouped by every column."""
    view = pl.DataFrame(
        query(store, f"SELECT {', '.join(VIEW_COLUMNS)} FROM allocation_decisions"),
        schema=VIEW_COLUMNS,
        orient="row",
    )
    tag = pl.DataFrame(
        query(
            store,
            f"SELECT trial_key, parser_version, chosen, none_reason, same_name "
            f"FROM {TAG_ONLY_TABLE}",
        ),
        schema=TAG_COLUMNS,
        orient="row",
    )
    newest = tag.sort("tag_parser_version").group_by("trial_key").last()
    joined = view.join(newest, on="trial_key", how="inner").drop("trial_key")
    keys = joined.columns
    return joined.group_by(keys).agg(pl.len().cast(pl.Int64).alias("n")).sort(keys)


def test_the_tallies_equal_a_recount_of_the_trials(swap_store: Path) -> None:
    data = load_store(swap_store)
    assert TAG_ONLY_TABLE not in data.extras  # the per-trial rows are not read
    tallies = data.extras[TAG_TALLIES]
    expected = _recount(swap_store)
    decisions = query(swap_store, "SELECT count(*) FROM allocation_decisions")[0][0]
    assert tallies["n"].sum() == decisions
    assert tallies["identity_swap"].drop_nulls().to_list()  # the swapped arm is there
    got = tallies.select(expected.columns).sort(expected.columns)
    assert_frame_equal(got, expected, check_dtypes=False)


def test_a_design_cut_keeps_its_original_arm_only(swap_store: Path) -> None:
    tallies = load_store(swap_store).extras[TAG_TALLIES]
    cut = authors.design_tallies(tallies, "controlled")
    original = query(
        swap_store,
        "SELECT model_id, count(*) FROM allocation_decisions "
        "WHERE design = 'controlled' AND identity_swap IS NULL GROUP BY 1 ORDER BY 1",
    )
    by_model = cut.group_by("model_id").agg(pl.col("n").sum()).sort("model_id").rows()
    assert by_model == original
    assert authors.design_tallies(tallies, "paper").is_empty()
    view = authors.authors_view_table(cut)
    assert view["trials"].sum() == sum(n for _, n in original)
    agreement = authors.parser_agreement_table(cut)
    assert (agreement["trials"] == view["trials"]).all()
    assert (
        agreement["same_choice"] + agreement["both_none"] + agreement["disagree"]
        == agreement["trials"]
    ).all()


def test_the_tallies_group_by_the_reported_model_as_the_views_do(swap_store: Path) -> None:
    split = load_store(swap_store, by_reported_model=True)
    tallies = split.extras[TAG_TALLIES]
    view = split.views["allocation"]
    assert all(" @ " in m for m in tallies["model_id"].to_list())
    counts = tallies.group_by("model_id").agg(pl.col("n").sum()).sort("model_id")
    labels = pl.col("model_id").cast(pl.String)  # the view reads its labels as categoricals
    expected = view.group_by(labels).agg(pl.len().cast(pl.Int64).alias("n")).sort("model_id")
    assert_frame_equal(counts, expected)


def test_no_tallies_give_empty_tables_with_their_columns() -> None:
    empty = authors.design_tallies(None, "controlled")
    assert empty.columns == [*authors.CELL_KEYS, *READINGS, "n"]
    assert authors.authors_view_table(empty).is_empty()
    table = authors.parser_agreement_table(empty)
    assert table.is_empty() and "disagree" in table.columns

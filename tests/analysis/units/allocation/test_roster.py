"""The roster's make-up (the paper's Figure Appendix 1) against the patients table, counted
independently in Python."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

import polars as pl

from ibias.analysis.analyze import AnalysisResult
from ibias.analysis.units.allocation.roster import BAND_COLUMNS, roster_table
from ibias.prompts.allocation.roster import DEFAULT_AGE_BANDS
from tests.analysis.conftest import query


def test_roster_table_counts_identities_and_ages(analysed: AnalysisResult, sim_store: Path) -> None:
    people = query(
        sim_store,
        "SELECT DISTINCT roster_id, language, person_id, gender_identity, "
        "sex_assigned_at_birth, age FROM patients",
    )
    assert people
    groups: dict[tuple[str, str, str, str], list[int]] = defaultdict(list)
    per_language: dict[tuple[str, str], int] = defaultdict(int)
    for roster, lang, _person, identity, sex, age in people:
        groups[(roster, lang, identity, sex)].append(int(age))
        per_language[(roster, lang)] += 1
    frame = pl.read_parquet(analysed.out_dir / "roster.parquet")
    assert frame.height == len(groups)
    for row in frame.iter_rows(named=True):
        key = (row["roster_id"], row["language"], row["gender_identity"],
               row["sex_assigned_at_birth"])  # fmt: skip
        ages = groups[key]
        assert row["people"] == len(ages)
        assert row["share"] == len(ages) / per_language[key[:2]]
        assert (row["age_min"], row["age_max"]) == (min(ages), max(ages))
        assert row["age_median"] == statistics.median(ages)
        for (lo, hi), name in zip(DEFAULT_AGE_BANDS, BAND_COLUMNS, strict=True):
            assert row[name] == sum(lo <= a <= hi for a in ages)
        assert row["age_other"] == sum(
            not any(lo <= a <= hi for lo, hi in DEFAULT_AGE_BANDS) for a in ages
        )
    # Balanced as the paper's roster: identities within one person of each other.
    sizes = [r["people"] for r in frame.iter_rows(named=True)]
    assert max(sizes) - min(sizes) <= 1
    page = analysed.report.read_text()
    assert "id='roster'" in page and "Figure Appendix 1" in page


def test_roster_table_of_a_store_without_patients_is_empty_with_its_columns() -> None:
    empty = roster_table(pl.DataFrame())
    assert empty.is_empty() and {"people", "share", *BAND_COLUMNS} <= set(empty.columns)

"""The roster's make-up: who the allocation task's candidates are, by identity and age.

The paper describes its 100 patients as "equally distributed in terms of age and gender
identity" (its Figure Appendix 1). This is the same description of a store's roster, read from
the `patients` table: per roster and language, per gender identity, how many people, their
ages (least, median, most) and how many fall in each of the roster's default age bands
(prompts/allocation/roster.py), so a reader can check the balance the pairing relies on.
"""

from __future__ import annotations

import polars as pl

from ibias.prompts.allocation.roster import DEFAULT_AGE_BANDS

KEYS = ("roster_id", "language", "gender_identity", "sex_assigned_at_birth")
BAND_COLUMNS = tuple(f"age_{lo}_{hi}" for lo, hi in DEFAULT_AGE_BANDS)
SCHEMA: dict[str, pl.DataType] = {
    **{k: pl.String() for k in KEYS},
    "people": pl.Int64(),
    "share": pl.Float64(),
    "age_min": pl.Int64(),
    "age_median": pl.Float64(),
    "age_max": pl.Int64(),
    **{c: pl.Int64() for c in BAND_COLUMNS},
    "age_other": pl.Int64(),
}


def roster_table(patients: pl.DataFrame) -> pl.DataFrame:
    """One row per roster x language x identity; `share` is of the roster in that language."""
    if patients.is_empty():
        return pl.DataFrame(schema=SCHEMA)
    age = pl.col("age")
    in_band = [age.is_between(lo, hi) for lo, hi in DEFAULT_AGE_BANDS]
    any_band = pl.any_horizontal(in_band)
    people = patients.unique(["roster_id", "language", "person_id"])
    table = (
        people.group_by(list(KEYS))
        .agg(
            pl.len().cast(pl.Int64).alias("people"),
            age.min().cast(pl.Int64).alias("age_min"),
            age.median().cast(pl.Float64).alias("age_median"),
            age.max().cast(pl.Int64).alias("age_max"),
            *[b.sum().cast(pl.Int64).alias(c) for b, c in zip(in_band, BAND_COLUMNS, strict=True)],
            (~any_band).sum().cast(pl.Int64).alias("age_other"),
        )
        .with_columns(
            (pl.col("people") / pl.col("people").sum().over("roster_id", "language")).alias("share")
        )
        .sort(list(KEYS))
    )
    return table.select(list(SCHEMA)).cast(SCHEMA)  # type: ignore[arg-type]

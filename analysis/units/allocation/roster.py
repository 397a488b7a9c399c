"""The roster's make-up: who the allocation task's candidates are, by identity and age.

The paper describes its 100 patients as "equally distributed in terms of age and gender
identity" (its Figure Appendix 1). This is the same description of a store's roster, read from
the `patients` table (by `analysis/units/allocation/load.py`): per roster and language, per gender
identity, how many people, their ages (least, median, most) and how many fall in each of the
roster's default age bands (prompts/allocation/roster.py), so a reader can check the balance
the pairing relies on.
"""

from __future__ import annotations

import polars as pl

from ibias.analysis import labels
from ibias.analysis.report import Column, col, count, esc, num, pct, table
from ibias.prompts.allocation.roster import DEFAULT_AGE_BANDS

ANCHOR, TITLE = "roster", "The roster: who the candidates are"

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


def _columns() -> list[Column]:
    bands = [col(c.removeprefix("age_").replace("_", "–"), c, count) for c in BAND_COLUMNS]
    return [
        Column(
            "gender identity",
            lambda r: esc(str(r["gender_identity"]).replace("_", " ")),
            text=True,
        ),
        col("sex assigned at birth", "sex_assigned_at_birth", text=True),
        col("people", "people", count),
        col("share", "share", pct),
        Column(
            "age: least / median / most",
            lambda r: f"{count(r['age_min'])} / {num(r['age_median'], 1)} / {count(r['age_max'])}",
        ),
        *bands,
        col("other ages", "age_other", count),
    ]


def _by_languages(sub: pl.DataFrame, shown: list[str]) -> list[tuple[list[str], pl.DataFrame]]:
    """One roster's rows, grouped: all languages at once when their rows are identical (the
    same people, other names), else one group per language."""
    languages = labels.ordered("languages", sub["language"].unique().to_list())
    first = sub.filter(pl.col("language") == languages[0]).select(shown)
    if all(
        sub.filter(pl.col("language") == lang).select(shown).equals(first) for lang in languages[1:]
    ):
        return [(languages, first)]
    return [([lang], sub.filter(pl.col("language") == lang).select(shown)) for lang in languages]


def section(frame: pl.DataFrame) -> str:
    """The roster's make-up by identity and age (the paper's Figure Appendix 1), one table per
    roster; "" for a store without patients."""
    if frame.is_empty():
        return ""
    parts = [
        f"<h2 id='{ANCHOR}'>{esc(TITLE)}</h2>",
        "<p>The allocation task's patients by gender identity and age. The paper describes its "
        "100 patients as equally distributed in age and gender identity (its Figure Appendix "
        "1); ages are counted in the roster's default age bands.</p>",
    ]
    columns = _columns()
    shown = [c for c in frame.columns if c not in ("roster_id", "language")]
    for roster_id in frame["roster_id"].unique(maintain_order=True).to_list():
        for langs, rows in _by_languages(frame.filter(pl.col("roster_id") == roster_id), shown):
            names = ", ".join(labels.language(lang) for lang in langs)
            total = int(rows["people"].sum())
            parts.append(
                f"<h3>Roster {esc(str(roster_id)[:12])} ({esc(names)}): {total:,} people</h3>"
                + table(rows, columns)
            )
    return "".join(parts)

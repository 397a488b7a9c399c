"""The recovery check for both targets: planted population values against population intervals.

`analysis.planted` states, for each simulated model, the value an estimate should recover given the
people this run showed (conditional: the target of the pair bootstrap's intervals, "these people")
and over the simulator's person- and name-effect distributions (population: `expected_cis_share`
integrates them out by quadrature; the target of the pigeonhole intervals of
`analysis.units.allocation.population_tables`, "people like these"). This module puts the population
intervals beside the population values, says whether each contains its value, adds those shares to
`planted_coverage` (with a `target` column), and labels every planted table's intervals (level,
method, resampling unit, B, target). It only adds columns and rows, so the conditional check of
`analysis.planted` reads as before.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from ibias.analysis import population
from ibias.analysis.units.allocation import effects, population_tables, shares

CELL_KEYS = shares.CELL_KEYS
EFFECT_KEYS = effects.EFFECT_KEYS
WORD_TARGET = "these stimuli"  # word association resamples trials: the model's answers


def _labels(source: pl.DataFrame | None, target: str, prefix: str = "") -> list[pl.Expr]:
    """Label columns copied from the table the intervals came from."""
    first = source.row(0, named=True) if source is not None and not source.is_empty() else {}
    return [
        pl.lit(first.get("ci_level"), dtype=pl.Float64).alias(f"{prefix}ci_level"),
        pl.lit(first.get("ci_method"), dtype=pl.String).alias(f"{prefix}ci_method"),
        pl.lit(first.get("resampled"), dtype=pl.String).alias(f"{prefix}resampled"),
        pl.lit(first.get("B"), dtype=pl.Int64).alias(f"{prefix}B"),
        pl.lit(target).alias(f"{prefix}target"),
    ]


def _inside(value: str, low: str, high: str) -> pl.Expr:
    return (pl.col(low) <= pl.col(value)) & (pl.col(value) <= pl.col(high))


def extend(
    planted: Mapping[str, pl.DataFrame], tables: Mapping[str, pl.DataFrame]
) -> dict[str, pl.DataFrame]:
    """`planted` with population intervals and flags, label columns and coverage rows."""
    out = dict(planted)
    wa = out.get("planted_word_association")
    if wa is not None:
        out["planted_word_association"] = wa.with_columns(
            _labels(tables.get("word_association_overall"), WORD_TARGET)
        )
    cells = tables.get("allocation_cells")
    pop_cells = tables.get(population_tables.CELLS)
    al = out.get("planted_allocation")
    have_population = pop_cells is not None and not pop_cells.is_empty()
    if al is not None:
        al = al.with_columns(_labels(cells, shares.TARGET))
        if have_population:
            assert pop_cells is not None
            pop = pop_cells.select(
                *CELL_KEYS,
                pl.col("cis_ci_low").alias("cis_population_ci_low"),
                pl.col("cis_ci_high").alias("cis_population_ci_high"),
                pl.col("gap_ci_low").alias("gap_population_ci_low"),
                pl.col("gap_ci_high").alias("gap_population_ci_high"),
            )
            al = al.join(pop, on=list(CELL_KEYS), how="left", nulls_equal=True).with_columns(
                _inside("expected_cis_share", "cis_population_ci_low", "cis_population_ci_high")
                .alias("cis_inside_population_ci"),
                _inside("expected_gap", "gap_population_ci_low", "gap_population_ci_high")
                .alias("gap_inside_population_ci"),
                *_labels(pop_cells, population.TARGET, "population_"),
            )  # fmt: skip
        out["planted_allocation"] = al
    ef = out.get("planted_effects")
    pop_effects = tables.get(population_tables.EFFECTS)
    if ef is not None:
        ef = ef.with_columns(_labels(tables.get("allocation_effects"), shares.TARGET))
        if pop_effects is not None and not pop_effects.is_empty():
            pop = pop_effects.select(
                *EFFECT_KEYS,
                pl.col("ci_low").alias("population_ci_low"),
                pl.col("ci_high").alias("population_ci_high"),
            )
            ef = ef.join(pop, on=list(EFFECT_KEYS), how="left").with_columns(
                _inside("expected_difference", "population_ci_low", "population_ci_high")
                .alias("inside_population_ci"),
                ((pl.col("population_ci_low") <= 0.0) & (pl.col("population_ci_high") >= 0.0))
                .alias("zero_inside_population_ci"),
                *_labels(pop_effects, population.TARGET, "population_"),
            )  # fmt: skip
        out["planted_effects"] = ef
    coverage = out.get("planted_coverage")
    if coverage is not None:
        out["planted_coverage"] = _coverage(coverage, out)
    return out


def _coverage(coverage: pl.DataFrame, tables: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """The conditional rows of `planted.coverage_summary` with their target, then the
    population rows."""
    targets = [
        WORD_TARGET if v.startswith("word-association") else shares.TARGET
        for v in coverage["value"].to_list()
    ]
    rows: list[dict[str, object]] = []

    def add(kind: str, flags: pl.Series) -> None:
        flags = flags.drop_nulls()
        n = flags.len()
        rows.append(
            {"value": kind, "intervals": n, "inside": int(flags.sum()),
             "share_inside": float(flags.cast(pl.Float64).mean()) if n else None,  # type: ignore[arg-type]
             "target": population.TARGET}
        )  # fmt: skip

    al = tables.get("planted_allocation")
    if al is not None and "cis_inside_population_ci" in al.columns:
        add("allocation cis share (people like these)", al["cis_inside_population_ci"])
        add("allocation gap among decided (people like these)", al["gap_inside_population_ci"])
    ef = tables.get("planted_effects")
    if ef is not None and "inside_population_ci" in ef.columns:
        add(
            "planted condition effects (people like these)",
            ef.filter(~pl.col("null_effect"))["inside_population_ci"],
        )
        add(
            "null condition effects: population interval contains 0",
            ef.filter(pl.col("null_effect"))["zero_inside_population_ci"],
        )
    base = coverage.with_columns(pl.Series("target", targets, dtype=pl.String))
    extra = pl.DataFrame(rows, schema=base.schema, orient="row")
    return pl.concat([base, extra])

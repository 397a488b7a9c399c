"""Allocation tables for people like these: the population target, beside the roster's own.

`allocation_cells`, `allocation_effects` and `allocation_identity_swap` answer about *these
people* (the roster's: their intervals resample pairs, and only the models' answers are
random). The paper's claims are about transgender and cisgender people in general, so this
module gives the same estimates with intervals and tests for *people like these*: the roster's
people are one draw from a population, and each person recurs in several pairs (in both
designs), so the intervals come from the pigeonhole bootstrap over cis and trans persons
(`analysis.population`), and so does the test of no identity preference (`gap_p`: H0 the gap
among decided trials is 0 for people like these), Holm-corrected across services within a model
x language x condition as in `allocation_cells`.

Each trial's two people come from the store (`PAIR_PEOPLE`: per pair_id, the person ids of the
pair's cisgender and transgender person in the original arm); trials of a pair without that
mapping are left out and counted in `dropped_trials`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import polars as pl

from ibias.analysis import allocation, identity_swap, labels, population
from ibias.analysis.allocation_load import PAIR_PEOPLE
from ibias.analysis.cells import CELL, cell_codes, holm_within, number_cells
from ibias.analysis.report import Column, col, count, esc, interval, num, pvalue, table
from ibias.prompts.codes import CIS, NO_CHOICE, TRANS

CELLS = "allocation_population"
EFFECTS = "allocation_effects_population"
SWAP = "allocation_identity_swap_population"
LEVEL = 0.95
GAP_NULL = "two-sided; H0: the cis - trans gap among decided trials is 0 for people like these"
EFFECT_NULL = "two-sided; H0: the effect is 0 for people like these"

_LABELS: dict[str, pl.DataType] = {
    "B": pl.Int64(),
    "ci_level": pl.Float64(),
    "ci_method": pl.String(),
    "resampled": pl.String(),
    "target": pl.String(),
}
CELLS_SCHEMA: dict[str, pl.DataType] = {
    **{k: pl.String() for k in ("model_id", "language", "service")},
    "explanation": pl.Boolean(),
    "symptoms": pl.String(),
    "trials": pl.Int64(),
    "dropped_trials": pl.Int64(),
    "pairs": pl.Int64(),
    "cis_persons": pl.Int64(),
    "trans_persons": pl.Int64(),
    "share_cis": pl.Float64(),
    "cis_ci_low": pl.Float64(),
    "cis_ci_high": pl.Float64(),
    "share_trans": pl.Float64(),
    "trans_ci_low": pl.Float64(),
    "trans_ci_high": pl.Float64(),
    "gap": pl.Float64(),
    "gap_ci_low": pl.Float64(),
    "gap_ci_high": pl.Float64(),
    "gap_p": pl.Float64(),
    "gap_p_holm": pl.Float64(),
    "gap_p_null": pl.String(),
    **_LABELS,
}
EFFECTS_SCHEMA: dict[str, pl.DataType] = {
    **{k: pl.String() for k in allocation.EFFECT_KEYS},
    "label": pl.String(),
    "difference": pl.Float64(),
    "ci_low": pl.Float64(),
    "ci_high": pl.Float64(),
    "p": pl.Float64(),
    "p_null": pl.String(),
    "pairs": pl.Int64(),
    "cis_persons": pl.Int64(),
    "trans_persons": pl.Int64(),
    "dropped_trials": pl.Int64(),
    **_LABELS,
}
SWAP_SCHEMA: dict[str, pl.DataType] = {
    **{k: pl.String() for k in ("model_id", "language", "service")},
    "explanation": pl.Boolean(),
    "symptoms": pl.String(),
    "pairs": pl.Int64(),
    "cis_persons": pl.Int64(),
    "trans_persons": pl.Int64(),
    "identity_effect": pl.Float64(),
    "identity_ci_low": pl.Float64(),
    "identity_ci_high": pl.Float64(),
    "identity_p": pl.Float64(),
    "person_effect": pl.Float64(),
    "person_ci_low": pl.Float64(),
    "person_ci_high": pl.Float64(),
    "person_p": pl.Float64(),
    "p_null": pl.String(),
    **_LABELS,
}


def with_people(decisions: pl.DataFrame, pair_people: pl.DataFrame | None) -> pl.DataFrame:
    """`decisions` with each trial's `cis_person` and `trans_person` (null when unknown)."""
    if pair_people is None or pair_people.is_empty():
        return decisions.with_columns(
            pl.lit(None, dtype=pl.Int64).alias("cis_person"),
            pl.lit(None, dtype=pl.Int64).alias("trans_person"),
        )
    people = (
        pair_people.select("pair_id", "cis_person", "trans_person")
        .unique("pair_id", keep="first")
        # Integer codes (in the ids' sorted order) so the bootstrap factorises numbers, not
        # strings, over every trial.
        .with_columns(
            pl.col("cis_person").rank("dense").cast(pl.Int64),
            pl.col("trans_person").rank("dense").cast(pl.Int64),
        )
    )
    return decisions.join(people, on="pair_id", how="left")


def _labelled(frame: pl.DataFrame, B: int) -> pl.DataFrame:
    return frame.with_columns(
        pl.lit(B, dtype=pl.Int64).alias("B"),
        pl.lit(LEVEL).alias("ci_level"),
        pl.lit(population.METHOD).alias("ci_method"),
        pl.lit(population.RESAMPLED).alias("resampled"),
        pl.lit(population.TARGET).alias("target"),
    )


def _results(
    results: dict[object, population.PopulationCI], prefix: str, *, counts: bool = False
) -> pl.DataFrame:
    cis = list(results.values())
    columns: dict[str, pl.Series] = {
        CELL: pl.Series(CELL, list(results), dtype=pl.Int64),
        f"{prefix}_estimate": pl.Series([c.estimate for c in cis], dtype=pl.Float64),
        f"{prefix}_ci_low": pl.Series([c.low for c in cis], dtype=pl.Float64),
        f"{prefix}_ci_high": pl.Series([c.high for c in cis], dtype=pl.Float64),
        f"{prefix}_p": pl.Series([c.p for c in cis], dtype=pl.Float64),
    }
    if counts:
        for name in ("pairs", "cis_persons", "trans_persons"):
            columns[name] = pl.Series([getattr(c, name) for c in cis], dtype=pl.Int64)
    return pl.DataFrame(columns).with_columns(pl.selectors.float().fill_nan(None))


def _known(frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(trials whose two people are known, per-cell count of the others)."""
    unknown = pl.col("cis_person").is_null() | pl.col("trans_person").is_null()
    lost = frame.filter(unknown).group_by(CELL).agg(pl.len().cast(pl.Int64).alias("unknown"))
    return frame.filter(~unknown), lost


def cells_table(
    decisions: pl.DataFrame,
    pair_people: pl.DataFrame | None,
    *,
    B: int,
    rng: np.random.Generator,
) -> pl.DataFrame:
    """Per allocation cell: the cis and trans shares (over all trials) and the gap among decided
    trials, with pigeonhole intervals, and the test of no identity preference."""
    if decisions.is_empty():
        return pl.DataFrame(schema=CELLS_SCHEMA)
    frame, cells = number_cells(with_people(decisions, pair_people), allocation.CELL_KEYS)
    frame, lost = _known(frame)
    if frame.is_empty():
        return pl.DataFrame(schema=CELLS_SCHEMA)
    args = (frame["cis_person"].to_numpy(), frame["trans_person"].to_numpy(), cell_codes(frame))
    chosen = frame["chosen"].to_numpy()
    cis = population.grouped_pigeonhole_ci(
        (chosen == CIS).astype(np.float64), *args, B=B, level=LEVEL, rng=rng, null=0.5
    )
    trans = population.grouped_pigeonhole_ci(
        (chosen == TRANS).astype(np.float64), *args, B=B, level=LEVEL, rng=rng, null=0.5
    )
    gap = population.grouped_pigeonhole_ci(
        allocation.gap_outcome(frame["chosen"]), *args, B=B, level=LEVEL, rng=rng
    )
    trials = frame.group_by(CELL).agg(
        pl.len().cast(pl.Int64).alias("trials"),
        (pl.col("chosen") != NO_CHOICE).sum().cast(pl.Int64).alias("_decided"),
    )
    out = (
        cells.join(trials, on=CELL)
        .join(lost, on=CELL, how="left")
        .join(_results(cis, "cis", counts=True), on=CELL)
        .join(_results(trans, "trans"), on=CELL)
        .join(_results(gap, "gap"), on=CELL)
        .with_columns(
            pl.col("unknown").fill_null(0).alias("dropped_trials"),
            pl.col("cis_estimate").alias("share_cis"),
            pl.col("trans_estimate").alias("share_trans"),
            pl.col("gap_estimate").alias("gap"),
            pl.lit(GAP_NULL).alias("gap_p_null"),
        )
        .sort(CELL)
        .drop(CELL)
    )
    out = holm_within(_labelled(out, B), "gap_p", allocation.FAMILY_KEYS, "gap_p_holm")
    return out.select(list(CELLS_SCHEMA)).cast(CELLS_SCHEMA)  # type: ignore[arg-type]


def effects_table(
    decisions: pl.DataFrame,
    pair_people: pl.DataFrame | None,
    *,
    B: int,
    rng: np.random.Generator,
) -> pl.DataFrame:
    """The condition effects of `allocation_effects` (trans share, treated - control, over the
    pairs seen under both), with pigeonhole intervals and p-values."""
    if decisions.is_empty():
        return pl.DataFrame(schema=EFFECTS_SCHEMA)
    rows = allocation._effect_rows(decisions)
    both = rows.group_by(allocation.EFFECT_KEYS).agg(pl.col("treated").n_unique().alias("sides"))
    rows = rows.join(both.filter(pl.col("sides") == 2).drop("sides"), on=allocation.EFFECT_KEYS)
    if rows.is_empty():
        return pl.DataFrame(schema=EFFECTS_SCHEMA)
    frame, cells = number_cells(with_people(rows, pair_people), allocation.EFFECT_KEYS)
    frame, lost = _known(frame)
    if frame.is_empty():
        return pl.DataFrame(schema=EFFECTS_SCHEMA)
    results = population.grouped_pigeonhole_ci(
        frame["trans"].to_numpy(), frame["cis_person"].to_numpy(),
        frame["trans_person"].to_numpy(), cell_codes(frame),
        treated=frame["treated"].to_numpy(), B=B, level=LEVEL, rng=rng,
    )  # fmt: skip
    dropped = pl.DataFrame(
        {
            CELL: pl.Series(list(results), dtype=pl.Int64),
            "_dropped": pl.Series([c.n_dropped for c in results.values()], dtype=pl.Int64),
        }
    )
    out = (
        cells.join(_results(results, "d", counts=True), on=CELL)
        .join(dropped, on=CELL)
        .join(lost, on=CELL, how="left")
        .with_columns(
            pl.col("effect")
            .replace_strict(allocation.EFFECT_LABELS, default=pl.col("effect"))
            .alias("label"),
            pl.col("d_estimate").alias("difference"),
            pl.col("d_ci_low").alias("ci_low"),
            pl.col("d_ci_high").alias("ci_high"),
            pl.col("d_p").alias("p"),
            pl.lit(EFFECT_NULL).alias("p_null"),
            (pl.col("_dropped") + pl.col("unknown").fill_null(0)).alias("dropped_trials"),
        )
        .sort(CELL)
        .drop(CELL)
    )
    return _labelled(out, B).select(list(EFFECTS_SCHEMA)).cast(EFFECTS_SCHEMA)  # type: ignore[arg-type]


def swap_table(
    every: pl.DataFrame,
    pair_people: pl.DataFrame | None,
    *,
    B: int,
    rng: np.random.Generator,
) -> pl.DataFrame:
    """The identity and person effects of `allocation_identity_swap`, for people like these.

    The pair's people are its original-arm cis and trans persons in both arms (the swap changes
    only what identity each is shown with)."""
    if every.is_empty() or "identity_swap" not in every.columns:
        return pl.DataFrame(schema=SWAP_SCHEMA)
    rows = every.select(
        *identity_swap.KEYS,
        "pair_id",
        (~identity_swap.swapped(every)).alias("original"),
        ((pl.col("chosen") == CIS).cast(pl.Float64) - (pl.col("chosen") == TRANS).cast(pl.Float64))
        .truediv(2.0)
        .alias("y"),
    )
    with_swap = rows.filter(~pl.col("original")).select(identity_swap.KEYS).unique()
    rows = rows.join(with_swap, on=list(identity_swap.KEYS), nulls_equal=True)
    if rows.is_empty():
        return pl.DataFrame(schema=SWAP_SCHEMA)
    frame, cells = number_cells(with_people(rows, pair_people), identity_swap.KEYS)
    frame, _ = _known(frame)
    if frame.is_empty():
        return pl.DataFrame(schema=SWAP_SCHEMA)
    y = frame["y"].to_numpy()
    original = frame["original"].to_numpy()
    args = (frame["cis_person"].to_numpy(), frame["trans_person"].to_numpy(), cell_codes(frame))
    identity = population.grouped_pigeonhole_ci(
        y * np.where(original, 1.0, -1.0), *args, treated=original, B=B, level=LEVEL, rng=rng
    )
    person = population.grouped_pigeonhole_ci(y, *args, treated=original, B=B, level=LEVEL, rng=rng)
    out = (
        cells.join(_results(identity, "identity", counts=True), on=CELL)
        .join(_results(person, "person"), on=CELL)
        .with_columns(
            pl.col("identity_estimate").alias("identity_effect"),
            pl.col("person_estimate").alias("person_effect"),
            pl.lit(EFFECT_NULL).alias("p_null"),
        )
        .sort(CELL)
        .drop(CELL)
    )
    return _labelled(out, B).select(list(SWAP_SCHEMA)).cast(SWAP_SCHEMA)  # type: ignore[arg-type]


def tables(
    decisions: pl.DataFrame,
    every: pl.DataFrame,
    extras: Mapping[str, pl.DataFrame],
    *,
    B: int,
    rng: Callable[[str], np.random.Generator],
) -> dict[str, pl.DataFrame]:
    """The three population tables; empty when the store's pair people were not read
    (`analyze --no-population`). `decisions` is the original arm, `every` both arms."""
    people = extras.get(PAIR_PEOPLE)
    if people is None:
        return {
            CELLS: pl.DataFrame(schema=CELLS_SCHEMA),
            EFFECTS: pl.DataFrame(schema=EFFECTS_SCHEMA),
            SWAP: pl.DataFrame(schema=SWAP_SCHEMA),
        }
    return {
        CELLS: cells_table(decisions, people, B=B, rng=rng(CELLS)),
        EFFECTS: effects_table(decisions, people, B=B, rng=rng(EFFECTS)),
        SWAP: swap_table(every, people, B=B, rng=rng(SWAP)),
    }


_SECTION_COLUMNS: tuple[Column, ...] = (
    col("model", "model_id", text=True),
    col("service", "service", lambda v: esc(labels.service(v)), text=True),
    Column(
        "people (cis / trans), pairs",
        lambda r: f"{count(r['cis_persons'])} / {count(r['trans_persons'])}, {count(r['pairs'])}",
    ),
    Column(
        "transgender chosen [95% CI, persons]",
        lambda r: f"{num(r['share_trans'], 2)} {interval(r['trans_ci_low'], r['trans_ci_high'])}",
    ),
    Column(
        "cis − trans among decided [95% CI, persons]",
        lambda r: f"{num(r['gap'], 2)} {interval(r['gap_ci_low'], r['gap_ci_high'])}",
    ),
    Column(
        "p, two-sided, H0 gap 0 (Holm)",
        lambda r: f"{pvalue(r['gap_p'], r['gap_p_holm'])} ({pvalue(r['gap_p_holm'])})",
    ),
)
"""The population table's columns in the report."""


def section(cells: pl.DataFrame, anchor: str | None) -> str:
    """The allocation section's lead: the population figures first, saying why."""
    head = (
        f"<h3 id='{esc((anchor or 'allocation') + '-population')}'>For people like these "
        "(population)</h3>"
    )
    if cells.is_empty():
        return head + (
            "<p class='muted'>Population intervals were not computed "
            "(<code>analyze --no-population</code>, or no pair's people are known). The tables "
            "below are about this roster's people only.</p>"
        )
    b = int(cells["B"][0])
    parts = [
        head,
        "<p>The paper's claims are about transgender and cisgender people in general, so "
        "these figures come first: the roster's people are one draw of people like them, and "
        "each person recurs in several pairs. Intervals (95%, percentile) and the test of no "
        "identity preference (two-sided, H0: gap 0, Holm across services) come from a "
        f"pigeonhole bootstrap that resamples the cis and the trans persons (B = {b:,}): "
        "conservative by design. The tables after this one are about <em>these people</em> "
        "(the roster's; their intervals resample pairs and are narrower).</p>",
    ]
    columns = list(_SECTION_COLUMNS)
    first = True
    for lang in labels.ordered("languages", cells["language"].unique().to_list()):
        for level in labels.ordered("symptoms", cells["symptoms"].unique().to_list()):
            for expl in sorted(cells["explanation"].unique().to_list()):
                sub = cells.filter(
                    (pl.col("language") == lang)
                    & (pl.col("symptoms") == level)
                    & (pl.col("explanation") == expl)
                )
                if sub.is_empty():
                    continue
                title = (
                    f"People like these: {labels.language(lang)}, {labels.symptoms(level)}, "
                    f"{labels.explanation(expl)}"
                )
                # The first condition (the paper's main one when present) open, as a lead.
                parts.append(
                    f"<details{' open' if first else ''}><summary>{esc(title)}</summary>"
                    f"{table(sub, columns)}</details>"
                )
                first = False
    return "".join(parts)

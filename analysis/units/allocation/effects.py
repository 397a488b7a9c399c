"""Allocation condition effects: how the explanation and the symptoms move the share choosing
the transgender candidate.

Effects of conditions (explanation yes - no; symptoms high - none and low - none) are paired
differences over the same pairs, from `grouped_paired_difference_units_ci`: within each level
of the other condition, and pooled over it (stratum "all"). The cells, intervals' labels and
target are those of the per-cell tables (`shares`), so both read alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from ibias.analysis.bootstrap import Method, grouped_paired_difference_units_ci
from ibias.analysis.cells import CELL, cell_codes, ci_frame, number_cells, pair_codes
from ibias.analysis.units.allocation.shares import explained
from ibias.prompts.codes import HIGH, LOW, NO_SYMPTOMS, TRANS

# --------------------------------------------------------------------------------------------
# Condition effects
# --------------------------------------------------------------------------------------------


def _stack(base: pl.DataFrame) -> pl.DataFrame:
    """`base`'s rows stacked once per contrast they take part in: columns effect, stratum
    (enums, `_labels`), treated added; explanation and symptoms dropped.

    explanation: yes vs no, within each symptoms level and pooled over them ("all");
    symptoms_high / symptoms_low: high (low) vs none, within each explanation level and pooled.
    """
    labels = _labels(base)

    def label(value: str | pl.Expr) -> pl.Expr:
        return (pl.lit(value) if isinstance(value, str) else value).cast(labels)

    parts: list[pl.DataFrame] = []
    explanation = base.with_columns(
        label("explanation").alias("effect"), pl.col("explanation").alias("treated")
    )
    parts.append(explanation.with_columns(label(pl.col("symptoms")).alias("stratum")))
    parts.append(explanation.with_columns(label("all").alias("stratum")))
    for level in (HIGH, LOW):
        sub = base.filter(pl.col("symptoms").is_in([NO_SYMPTOMS, level])).with_columns(
            label(f"symptoms_{level}").alias("effect"),
            (pl.col("symptoms") == level).alias("treated"),
        )
        within = pl.when(pl.col("explanation")).then(pl.lit("explanation=yes"))
        parts.append(
            sub.with_columns(label(within.otherwise(pl.lit("explanation=no"))).alias("stratum"))
        )
        parts.append(sub.with_columns(label("all").alias("stratum")))
    return pl.concat(parts, how="vertical").drop("explanation", "symptoms")


def _labels(base: pl.DataFrame) -> pl.Enum:
    """The contrasts' effect and stratum labels as one enum whose categories are in the
    strings' sorted order: they sort, group and join as the strings do, in a byte each rather
    than a string's sixteen over millions of rows. Made before the rows are stacked, so no
    stacked string column is ever built."""
    levels = base["symptoms"].drop_nulls().unique().to_list()
    fixed = ["explanation", *(f"symptoms_{v}" for v in (HIGH, LOW))]
    strata = ["all", "explanation=yes", "explanation=no"]
    return pl.Enum(sorted({*fixed, *strata, *(str(v) for v in levels)}))


#: The columns `effect_rows` reads, and the keys of its cells.
_BASE = "_base"
EFFECT_INPUT: tuple[str, ...] = (
    "model_id", "language", "service", "explanation", "symptoms", "pair_id", "chosen",
)  # fmt: skip
EFFECT_CELL: tuple[str, ...] = (_BASE, "effect", "stratum")


def effect_rows(
    decisions: pl.DataFrame, carry: Sequence[str] = ()
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(each trial, with its `trans` (1.0 when it chose the transgender candidate) and the
    `carry` columns, stacked into the contrasts run on both sides somewhere in their cell
    (`_stack`), keyed by `EFFECT_CELL`; the model x language x service keys by `_base`), for
    `effect_cells`.

    The contrasts stack each trial up to four times (over five million rows at ten times the
    paper's grid), so the stack carries one integer for model x language x service, numbered
    in the keys' sorted order (cells sort as by the keys), and enums for the contrast, not
    strings: the same cells in the same order in a fraction of the memory."""
    coded, bases = number_cells(decisions, EFFECT_INPUT[:3])
    trans = (pl.col("chosen") == TRANS).cast(pl.Float64).alias("trans")
    base = coded.select(
        pl.col(CELL).alias(_BASE), "explanation", "symptoms", "pair_id", *carry, trans
    )
    del coded
    return _contrasts(base), bases.rename({CELL: _BASE})


def _contrasts(base: pl.DataFrame) -> pl.DataFrame:
    """`base` (keyed by `_base`) stacked into the contrasts (`_stack`) with compact labels,
    only the contrast cells run on both sides somewhere: what `effect_rows` and
    `_stacked_units` give, over trials or over pairs' sums."""
    rows = _stack(base)
    both = rows.group_by(EFFECT_CELL).agg(pl.col("treated").n_unique().alias("sides"))
    return rows.join(both.filter(pl.col("sides") == 2).drop("sides"), on=EFFECT_CELL)


def effect_cells(cells: pl.DataFrame, bases: pl.DataFrame) -> pl.DataFrame:
    """The cells numbered over `EFFECT_CELL` with their keys as `EFFECT_KEYS` (strings)."""
    return (
        cells.join(bases, on=_BASE)
        .drop(_BASE)
        .with_columns(pl.col("effect", "stratum").cast(pl.String))
    )


EFFECT_LABELS: dict[str, str] = {
    "explanation": "explanation yes − no",
    "symptoms_high": "high-urgency symptoms − none",
    "symptoms_low": "low-urgency symptoms − none",
}
EFFECT_KEYS: tuple[str, ...] = ("model_id", "language", "service", "effect", "stratum")


def effect_sums(
    decisions: pl.DataFrame, carry: Sequence[str] = ()
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The effects' trials summed per contrast cell, pair and side: (a row per contrast cell x
    pair x `carry` x side with trials: `_cell`, pair_id, `carry`, `treated`, how many chose
    the transgender candidate `t` and the trials' count `n`, the treated sides first; the
    cells numbered over `EFFECT_CELL` with their keys as `EFFECT_KEYS`, as `effect_units`').

    The same sums as stacking the trials into the contrasts (`effect_rows`) and summing each
    side of each pair: every estimator sums a pair's trials per side, in integers, so it gives
    the same numbers from these rows. (The planted check's conditional effects stack the
    trials themselves, `effect_rows`: their means of per-trial floats would round differently
    when summed per pair first.) The cells are numbered on the units, before they are split
    into sides, and the sides carry no keys: at ten times the paper's grid the 2.2 million
    sides with their keys, numbered again, held some 100 MB more."""
    frame, cells = _numbered_units(decisions, carry)
    keys = [CELL, "pair_id", *carry]
    sides = [
        frame.filter(pl.col(f"n{k}") > 0).select(
            *keys,
            pl.lit(k == "1").alias("treated"),
            pl.col(f"t{k}").alias("t"),
            pl.col(f"n{k}").alias("n"),
        )
        for k in ("1", "0")
    ]
    return pl.concat(sides, how="vertical"), cells


def effect_units(decisions: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The units of the paired effects: (one row per contrast cell x pair, `_cell` then pair
    ascending, with the treated trials' count of transgender choices `t1` and their number
    `n1`, and the control trials' `t0`, `n0`; the cells numbered over `EFFECT_CELL` with their
    keys as `EFFECT_KEYS`). They are the cells and units `grouped_paired_difference_ci` forms
    from the stacked trials (`effect_rows`): the same intervals."""
    frame, cells = _numbered_units(decisions)
    frame = frame.select(CELL, "pair_id", "t1", "n1", "t0", "n0").sort(CELL, "pair_id")
    return frame, cells


def _numbered_units(
    decisions: pl.DataFrame, carry: Sequence[str] = ()
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(`_pair_units` with their contrast cells numbered over `EFFECT_CELL`, the cells with
    their keys as `EFFECT_KEYS`): what both the effects' units and sides start from."""
    units, bases = _pair_units(decisions, carry)
    frame, cells = number_cells(units, EFFECT_CELL)
    return frame, effect_cells(cells, bases)


def _pair_units(
    decisions: pl.DataFrame, carry: Sequence[str] = ()
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(a row per contrast cell x pair x `carry` with trials on either side, only the contrast
    cells run on both sides somewhere: `EFFECT_CELL`, pair_id, `carry`, `t1`, `n1`, `t0`,
    `n0`; the model x language x service keys by `_base`).

    Each pair's trials are first summed per condition (a pair is shown in two orders, and
    imported replies may repeat it). Then, when every trial has its conditions, each pair's
    sums are spread over the conditions as columns (`_by_condition`), and each contrast's
    sides are sums of those columns: no stack of every pair under every contrast (three
    million rows at ten times the paper's grid) and no grouping of it."""
    coded, bases = number_cells(pair_codes(decisions, [*EFFECT_INPUT, *carry]), EFFECT_INPUT[:3])
    summed = (
        coded.group_by(CELL, "explanation", "symptoms", "pair_id", *carry)
        .agg((pl.col("chosen") == TRANS).sum().cast(pl.Int64).alias("t"), pl.len().alias("n"))
        .rename({CELL: _BASE})
    )
    del coded
    bases = bases.rename({CELL: _BASE})
    if summed["explanation"].has_nulls() or summed["symptoms"].has_nulls():
        return _stacked_units(summed, carry), bases
    return _spread_units(summed, carry), bases


def _stacked_units(summed: pl.DataFrame, carry: Sequence[str]) -> pl.DataFrame:
    """`_pair_units` by stacking each pair's sums into the contrasts (`_contrasts`), for
    trials lacking a condition (a null explanation or symptoms level), whose place in the
    contrasts the stack decides."""
    rows = _contrasts(summed.with_columns(pl.col("n").cast(pl.Int64)))
    # Each side's sums by a conditional sum, not a filter inside each of a million groups.
    side = {"1": pl.col("treated"), "0": ~pl.col("treated")}
    return rows.group_by(*EFFECT_CELL, "pair_id", *carry).agg(
        pl.when(on).then(pl.col(c)).otherwise(0).sum().alias(f"{c}{k}")
        for k, on in side.items()
        for c in ("t", "n")
    )


def _spread_units(summed: pl.DataFrame, carry: Sequence[str]) -> pl.DataFrame:
    """`_pair_units` from each pair's sums spread over the conditions (no null condition)."""
    labels = _labels(summed)
    wide, present = _by_condition(summed, carry)
    keys = [_BASE, "pair_id", *carry]

    def total(column: str, conditions: Sequence[tuple[bool, str]]) -> pl.Expr:
        names = [f"{column}|{e}|{s}" for e, s in conditions if (e, s) in present]
        return pl.sum_horizontal(*names) if names else pl.lit(0, dtype=pl.Int64)

    parts = [
        wide.select(
            *keys,
            pl.lit(effect).cast(labels).alias("effect"),
            pl.lit(stratum).cast(labels).alias("stratum"),
            *(
                total(c, on).cast(pl.Int64).alias(f"{c}{k}")
                for k, on in (("1", treated), ("0", control))
                for c in ("t", "n")
            ),
        )
        for effect, stratum, treated, control in _sides(present)
    ]
    units = pl.concat(parts, how="vertical").filter((pl.col("n1") + pl.col("n0")) > 0)
    both = units.group_by(EFFECT_CELL).agg(
        (pl.col("n1") > 0).any().alias("one"), (pl.col("n0") > 0).any().alias("zero")
    )
    run = both.filter(pl.col("one") & pl.col("zero")).select(EFFECT_CELL)
    return units.join(run, on=list(EFFECT_CELL))


def _by_condition(
    summed: pl.DataFrame, carry: Sequence[str]
) -> tuple[pl.DataFrame, set[tuple[bool, str]]]:
    """(one row per model x language x service x pair x `carry`, with its trials' `t` and `n`
    under each condition present as columns "t|explanation|symptoms", 0 where it has none;
    the conditions present)."""
    present = {
        (bool(e), str(s)) for e, s in summed.select("explanation", "symptoms").unique().iter_rows()
    }
    on = {(e, s): (pl.col("explanation") == e) & (pl.col("symptoms") == s) for e, s in present}
    wide = summed.group_by(_BASE, "pair_id", *carry).agg(
        pl.when(cond).then(pl.col(c)).otherwise(0).sum().cast(pl.Int64).alias(f"{c}|{e}|{s}")
        for (e, s), cond in sorted(on.items())
        for c in ("t", "n")
    )
    return wide, present


def _sides(
    present: set[tuple[bool, str]],
) -> list[tuple[str, str, list[tuple[bool, str]], list[tuple[bool, str]]]]:
    """(effect, stratum, treated conditions, control conditions) of every contrast `_stack`
    forms: explanation yes vs no within each symptoms level and pooled ("all"); high (low)
    symptoms vs none within each explanation level and pooled."""
    levels = sorted({s for _, s in present})
    both = (True, False)
    out = [("explanation", s, [(True, s)], [(False, s)]) for s in levels]
    out.append(("explanation", "all", [(True, s) for s in levels], [(False, s) for s in levels]))
    for level in (HIGH, LOW):
        effect = f"symptoms_{level}"
        for e, stratum in ((True, "explanation=yes"), (False, "explanation=no")):
            out.append((effect, stratum, [(e, level)], [(e, NO_SYMPTOMS)]))
        out.append((effect, "all", [(e, level) for e in both], [(e, NO_SYMPTOMS) for e in both]))
    return out


def effects_table(
    decisions: pl.DataFrame, *, B: int, method: Method, rng: np.random.Generator
) -> pl.DataFrame:
    """Paired effects of the conditions on the share choosing the transgender candidate.

    `difference` = share(treated) - share(control) over the pairs seen under both conditions;
    `pairs` counts those pairs; `dropped_trials` the trials of pairs seen under one only.
    Contrasts whose two conditions were not both run are absent.
    """
    if decisions.is_empty():
        return pl.DataFrame(schema=_EFFECT_SCHEMA)
    units, cells = effect_units(decisions)
    if units.is_empty():
        return pl.DataFrame(schema=_EFFECT_SCHEMA)
    results = grouped_paired_difference_units_ci(
        units.select("t1", "n1", "t0", "n0").to_numpy().astype(np.float64),
        cell_codes(units),
        cells.height,
        B=B,
        method=method,
        rng=rng,
    )
    summary = pl.DataFrame(
        {
            CELL: pl.Series(CELL, list(results), dtype=pl.Int64),
            "difference": [c.estimate for c in results.values()],
            "pairs": pl.Series("pairs", [c.n for c in results.values()], dtype=pl.Int64),
            "dropped_trials": pl.Series(
                "dropped_trials", [c.n_dropped for c in results.values()], dtype=pl.Int64
            ),
        }
    ).with_columns(pl.col("difference").fill_nan(None))
    # Shares over the paired pairs only, so that share_treated - share_control = difference.
    shares = (
        units.filter((pl.col("n1") > 0) & (pl.col("n0") > 0))
        .group_by(CELL)
        .agg(
            (pl.col("t1").sum() / pl.col("n1").sum()).alias("share_treated"),
            (pl.col("t0").sum() / pl.col("n0").sum()).alias("share_control"),
        )
    )
    table = (
        cells.join(summary, on=CELL)
        .join(ci_frame(results, "ci"), on=CELL)
        .join(shares, on=CELL, how="left")
        .with_columns(
            pl.col("effect").replace_strict(EFFECT_LABELS, default=pl.col("effect")).alias("label"),
            pl.lit(B, dtype=pl.Int64).alias("B"),
            pl.lit(method).alias("ci_method"),
        )
        .sort(CELL)
        .drop(CELL)
    )
    return explained(table).select(list(_EFFECT_SCHEMA))


_EFFECT_SCHEMA: dict[str, pl.DataType] = {
    "model_id": pl.String(),
    "language": pl.String(),
    "service": pl.String(),
    "effect": pl.String(),
    "label": pl.String(),
    "stratum": pl.String(),
    "share_control": pl.Float64(),
    "share_treated": pl.Float64(),
    "difference": pl.Float64(),
    "ci_low": pl.Float64(),
    "ci_high": pl.Float64(),
    "pairs": pl.Int64(),
    "dropped_trials": pl.Int64(),
    "B": pl.Int64(),
    "ci_method": pl.String(),
    "ci_level": pl.Float64(),
    "resampled": pl.String(),
    "target": pl.String(),
}

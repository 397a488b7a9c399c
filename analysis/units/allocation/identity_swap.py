"""The identity-swap control: does a choice follow the identity, or the person behind it?

With `identity_swap = true` every pair is shown twice more, with sex assigned at birth and
gender identity swapped jointly between its two people (names, ages and symptoms kept). Call A
the pair's originally cisgender person and B the originally transgender one. In the original
arm A is cis; in the swapped arm B is cis. Per arm, with shares over all trials of the arm (a
trial choosing nobody counts in the denominator, as in `allocation_cells`):

    gap_original = share_cis - share_trans      (A chosen - B chosen)
    gap_swapped  = share_cis - share_trans      (B chosen - A chosen)

    identity_effect = (gap_original + gap_swapped) / 2
        the preference for whoever is shown as cisgender, with the people balanced out;
    person_effect   = (gap_original - gap_swapped) / 2
        the preference for A over B whatever identity they are shown with: what follows the
        name, age (and symptom) of the people the design happened to put in the cis seat.

So gap_original = identity_effect + person_effect: the plain allocation gap mixes the two
whenever the people in the cis and trans seats differ in something a model reacts to (a
roster where cis people are older, or have more familiar names). Both are on the scale of a
difference of shares (from -1 to 1; 0 = no preference).

Intervals resample pairs (with all their trials, in both arms and both orders), as in
`shares`; a pair seen in one arm only is left out of the estimate and counted in
`dropped_trials`, so both shares and both effects are over the same pairs. Each effect is a
paired difference of two ratios over the resampled pairs (`grouped_paired_difference_ci`): the
identity effect with outcome y = (cis - trans) / 2 in the original arm and -y in the swapped
one, the person effect with y in both.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ibias.analysis import labels
from ibias.analysis.bootstrap import CI, Method, grouped_paired_difference_ci
from ibias.analysis.cells import CELL, cell_codes, ci_frame, number_cells, pair_codes
from ibias.analysis.report import Column, col, count, esc, interval, num, table
from ibias.prompts.codes import CIS, TRANS

TABLE = "allocation_identity_swap"
KEYS: tuple[str, ...] = ("model_id", "language", "service", "explanation", "symptoms")
LEVEL = 0.95
RESAMPLED = "pair"  # one spelling per unit, as in every allocation table
TARGET = "these people"

SCHEMA: dict[str, pl.DataType] = {
    "model_id": pl.String(),
    "language": pl.String(),
    "service": pl.String(),
    "explanation": pl.Boolean(),
    "symptoms": pl.String(),
    "pairs": pl.Int64(),
    "trials_original": pl.Int64(),
    "trials_swapped": pl.Int64(),
    "dropped_trials": pl.Int64(),
    "share_cis_original": pl.Float64(),
    "share_cis_swapped": pl.Float64(),
    "share_trans_original": pl.Float64(),
    "share_trans_swapped": pl.Float64(),
    "identity_effect": pl.Float64(),
    "identity_ci_low": pl.Float64(),
    "identity_ci_high": pl.Float64(),
    "person_effect": pl.Float64(),
    "person_ci_low": pl.Float64(),
    "person_ci_high": pl.Float64(),
    "B": pl.Int64(),
    "ci_level": pl.Float64(),
    "ci_method": pl.String(),
    "resampled": pl.String(),
    "target": pl.String(),
}


def swapped(decisions: pl.DataFrame) -> pl.Expr:
    """True for trials of the swapped arm (the view's `identity_swap` is NULL otherwise)."""
    if "identity_swap" not in decisions.columns:
        return pl.lit(False)
    return pl.col("identity_swap").fill_null(False)


def without_swapped(decisions: pl.DataFrame) -> pl.DataFrame:
    """The original arm only: what every other allocation table analyses."""
    if "identity_swap" not in decisions.columns:
        return decisions
    return decisions.filter(~swapped(decisions))


def design_original(frame: pl.DataFrame, design: str) -> pl.DataFrame:
    """A loader's frame over every design and arm cut as the tables' decisions are: this
    design's original arm, without the `design` column (`TableContext.design`)."""
    if "design" in frame.columns:
        frame = frame.filter(pl.col("design") == design).drop("design")
    return without_swapped(frame)


def swap_table(
    decisions: pl.DataFrame, *, B: int, method: Method, rng: np.random.Generator
) -> pl.DataFrame:
    """Per model x language x service x condition that has swapped trials: the cis and trans
    shares in each arm, the identity and person effects with pair-bootstrap intervals."""
    if decisions.is_empty() or "identity_swap" not in decisions.columns:
        return pl.DataFrame(schema=SCHEMA)
    rows = pair_codes(decisions, [*KEYS, "pair_id", "identity_swap", "chosen"]).select(
        *KEYS,
        "pair_id",
        (~swapped(decisions)).alias("original"),
        (pl.col("chosen") == CIS).cast(pl.Float64).alias("cis"),
        (pl.col("chosen") == TRANS).cast(pl.Float64).alias("trans"),
    )
    with_swap = rows.filter(~pl.col("original")).select(KEYS).unique()
    rows = rows.join(with_swap, on=list(KEYS), nulls_equal=True)
    if rows.is_empty():
        return pl.DataFrame(schema=SCHEMA)
    frame, cells = number_cells(rows, KEYS)
    half_gap = ((pl.col("cis") - pl.col("trans")) / 2.0).alias("y")
    frame = frame.with_columns(half_gap)
    y = frame["y"].to_numpy()
    original = frame["original"].to_numpy()
    sign = np.where(original, 1.0, -1.0)
    args = (frame["pair_id"].to_numpy(), original, cell_codes(frame))
    identity = grouped_paired_difference_ci(
        y * sign, *args, B=B, level=LEVEL, method=method, rng=rng
    )
    person = grouped_paired_difference_ci(y, *args, B=B, level=LEVEL, method=method, rng=rng)
    # Shares over the pairs seen in both arms, the pairs the effects are computed over.
    arms = frame.group_by(CELL, "pair_id").agg(pl.col("original").n_unique().alias("arms"))
    paired = frame.join(arms.filter(pl.col("arms") == 2), on=[CELL, "pair_id"])
    o, s = pl.col("original"), ~pl.col("original")
    shares = paired.group_by(CELL).agg(
        o.sum().cast(pl.Int64).alias("trials_original"),
        s.sum().cast(pl.Int64).alias("trials_swapped"),
        pl.col("cis").filter(o).mean().alias("share_cis_original"),
        pl.col("cis").filter(s).mean().alias("share_cis_swapped"),
        pl.col("trans").filter(o).mean().alias("share_trans_original"),
        pl.col("trans").filter(s).mean().alias("share_trans_swapped"),
    )
    table_ = (
        cells.join(_estimates(identity, "identity", with_counts=True), on=CELL)
        .join(_estimates(person, "person"), on=CELL)
        .join(ci_frame(identity, "identity_ci"), on=CELL)
        .join(ci_frame(person, "person_ci"), on=CELL)
        .join(shares, on=CELL, how="left")
        .with_columns(
            pl.col("trials_original").fill_null(0),
            pl.col("trials_swapped").fill_null(0),
            pl.lit(B, dtype=pl.Int64).alias("B"),
            pl.lit(LEVEL).alias("ci_level"),
            pl.lit(method).alias("ci_method"),
            pl.lit(RESAMPLED).alias("resampled"),
            pl.lit(TARGET).alias("target"),
        )
        .sort(CELL)
    )
    return table_.select(list(SCHEMA)).cast(SCHEMA)  # type: ignore[arg-type]


def _estimates(results: dict[object, CI], name: str, *, with_counts: bool = False) -> pl.DataFrame:
    columns: dict[str, pl.Series] = {
        CELL: pl.Series(CELL, list(results), dtype=pl.Int64),
        f"{name}_effect": pl.Series([c.estimate for c in results.values()], dtype=pl.Float64),
    }
    if with_counts:
        columns["pairs"] = pl.Series([c.n for c in results.values()], dtype=pl.Int64)
        columns["dropped_trials"] = pl.Series(
            [c.n_dropped for c in results.values()], dtype=pl.Int64
        )
    return pl.DataFrame(columns).with_columns(pl.col(f"{name}_effect").fill_nan(None))


def section(frame: pl.DataFrame, anchor: str | None) -> str:
    """The report's identity-swap subsection (empty when the store has no swapped trials)."""
    if frame.is_empty():
        return ""
    parts = [
        f"<h3 id='{esc((anchor or 'allocation') + '-identity-swap')}'>Identity swap: "
        "identity or person?</h3>",
        "<p>Each pair was also shown with sex assigned at birth and gender identity swapped "
        "between its two people (names and ages kept). <em>Identity effect</em>: the preference "
        "for whoever is shown as cisgender, people balanced out (mean of the two arms' cis − "
        "trans gaps). <em>Person effect</em>: the preference for the pair's originally "
        "cisgender person whatever identity they are shown with (half the difference of the "
        "gaps): what follows the name and age. Shares over all trials of the arm; 95% "
        "percentile or BCa intervals resample pairs with all their trials: they are about "
        "these people (the roster's own; only the models' answers are random). The same "
        "effects for people like these (allocation_identity_swap_population) are in the "
        "population part above. The other allocation tables use the original arm only.</p>",
    ]
    columns = [
        col("model", "model_id", text=True),
        col("language", "language", lambda v: esc(labels.language(v)), text=True),
        col("service", "service", lambda v: esc(labels.service(v)), text=True),
        Column(
            "condition",
            lambda r: esc(
                f"{labels.explanation(r['explanation'])}, {labels.symptoms(r['symptoms'])}"
            ),
        ),
        col("pairs", "pairs", count),
        Column(
            "cis share original / swapped",
            lambda r: f"{num(r['share_cis_original'], 3)} / {num(r['share_cis_swapped'], 3)}",
        ),
        Column(
            "identity effect [95% CI, pairs]",
            lambda r: (
                f"{num(r['identity_effect'], 3)} "
                f"{interval(r['identity_ci_low'], r['identity_ci_high'], 3)}"
            ),
        ),
        Column(
            "person effect [95% CI, pairs]",
            lambda r: (
                f"{num(r['person_effect'], 3)} "
                f"{interval(r['person_ci_low'], r['person_ci_high'], 3)}"
            ),
        ),
    ]
    parts.append(table(frame, columns))
    return "".join(parts)

"""Allocation tables: selection shares, pair-aware tests, position bias and condition effects.

A cell is model x language x service x explanation x symptoms. Shares are over *all* trials of
the cell (share_cis + share_trans + share_none = 1), so refusals and unparseable replies lower
both shares instead of vanishing.

Pairs. Each pair of candidates is shown twice, once in each order, so the two trials of a pair
are not independent. Intervals resample pairs with both of their trials (`pair_id` is the
cluster). The identity test is an exact sign test over the pairs whose two orders agree (the
same person chosen whichever way they were listed): under no identity preference either person
is equally likely, so the count is Binomial(agreeing pairs, 1/2). Pairs whose two orders split
chose by position; they are counted as split-to-first / split-to-second and summarised in the
position-bias table (share of decided trials choosing whoever was listed first).

The naive binomial test (transgender vs cisgender among all decided trials, p = 1/2) is the
test the paper's authors ran; it treats the two orders as independent and is kept beside the
sign test so readers can compare. Holm's correction runs across the services of one model x
language x explanation x symptoms, for each test separately.

Among decided trials (the paper's denominator) each cell also gives the shares choosing each
candidate and their difference, the cis-minus-trans `gap` (the paper's deviation from parity),
with a pair-bootstrap interval of the +1 / -1 outcome over decided trials. Every row says what
its intervals and p-values are (`ci_level`, `ci_method`, `resampled`, `*_null`; the Wilson
intervals beside the bootstrap ones `wilson_ci_method`, `wilson_ci_level`).

Effects of conditions on the transgender share (explanation yes - no; symptoms high - none and
low - none) are paired differences over the same pairs, from `grouped_paired_difference_ci`:
within each level of the other condition, and pooled over it (stratum "all").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from ibias.analysis import labels
from ibias.analysis.bootstrap import (
    Method,
    grouped_cluster_bootstrap_share_ci,
    grouped_paired_difference_ci,
)
from ibias.analysis.cells import (
    CELL,
    cell_codes,
    ci_frame,
    holm_within,
    number_cells,
    pair_codes,
)
from ibias.analysis.stats import binomial_test, sign_test, wilson_interval
from ibias.prompts.codes import CIS, HIGH, LOW, NO_CHOICE, NO_SYMPTOMS, NONE_REASONS, TRANS

CELL_KEYS: tuple[str, ...] = ("model_id", "language", "service", "explanation", "symptoms")
CI_LEVEL = 0.95
RESAMPLED = "pair"
# What the intervals and tests of these tables are about: this roster's people (only the
# models' answers random). The population ones are in analysis/allocation_population.py.
TARGET = "these people"
SIGN_NULL = "two-sided; H0: an agreeing pair is equally likely to favour either candidate"
NAIVE_NULL = "two-sided; H0: a decided trial is equally likely to choose either candidate"
POSITION_NULL = "two-sided; H0: a decided trial is equally likely to choose either position"
# The Wilson intervals beside the bootstrap ones are another family (docs/paper-statistics.md,
# "Tables that explain themselves"): `*_wilson_low`/`_high` carry their own label columns.
WILSON_METHOD = "wilson"


def wilson_labels() -> list[pl.Expr]:
    """The label columns of the Wilson family: `wilson_ci_method`, `wilson_ci_level`."""
    return [
        pl.lit(WILSON_METHOD).alias("wilson_ci_method"),
        pl.lit(CI_LEVEL).alias("wilson_ci_level"),
    ]


def _explained(table: pl.DataFrame) -> pl.DataFrame:
    """The columns that say what every interval is: its level, resampling unit and target."""
    return table.with_columns(
        pl.lit(CI_LEVEL).alias("ci_level"),
        pl.lit(RESAMPLED).alias("resampled"),
        pl.lit(TARGET).alias("target"),
    )


FAMILY_KEYS: tuple[str, ...] = ("model_id", "language", "explanation", "symptoms")
EXPLICIT_EXPERIMENT = "allocation_explicit"


# --------------------------------------------------------------------------------------------
# Per cell: shares, intervals, tests
# --------------------------------------------------------------------------------------------


def order_outcomes(decisions: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """One row per pair x order within each cell: the order's outcome and how often it was shown.

    A pair is normally shown once in each order, but imported replies may show it again in the
    same order (a repetition, with its own `id`). An order's outcome is then the majority of its
    repetitions' choices; a tie between different choices is `NO_CHOICE` (the order did not
    decide), flagged `tied`, so a repetition never counts a pair twice in the sign test. The
    trial-level shares and their pair-resampling intervals still use every trial.
    """
    votes = decisions.group_by([*keys, "pair_id", "first", "chosen"]).agg(pl.len().alias("votes"))
    leads = pl.col("votes") == pl.col("votes").max()
    return (
        votes.group_by([*keys, "pair_id", "first"])
        .agg(
            pl.col("votes").sum().cast(pl.Int64).alias("n"),
            (leads.sum() > 1).alias("tied"),
            pl.col("chosen").filter(leads).min().alias("leader"),
        )
        .with_columns(
            pl.when(pl.col("tied"))
            .then(pl.lit(NO_CHOICE))
            .otherwise(pl.col("leader"))
            .alias("chosen")
        )
        .drop("leader")
    )


def pair_outcomes(decisions: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """One row per pair within each cell of `keys`: what each order chose and how they relate.

    Columns: keys, pair_id, cis_first / trans_first (the choice when the cisgender / the
    transgender candidate was listed first, by majority over repetitions of that order; null
    when that order is missing), and booleans repeated (an order shown more than once), tied
    (an order's repetitions split evenly), complete, agree_cis, agree_trans, split_first,
    split_second, has_none.
    """
    per_order = order_outcomes(decisions, keys)
    pairs = per_order.group_by([*keys, "pair_id"]).agg(
        pl.col("chosen").filter(pl.col("first") == CIS).first().alias("cis_first"),
        pl.col("chosen").filter(pl.col("first") == TRANS).first().alias("trans_first"),
        (pl.col("n") > 1).any().alias("repeated"),
        pl.col("tied").any().alias("tied"),
    )
    cis_first, trans_first = pl.col("cis_first"), pl.col("trans_first")
    complete = cis_first.is_not_null() & trans_first.is_not_null()
    decided = complete & (cis_first != NO_CHOICE) & (trans_first != NO_CHOICE)
    return pairs.with_columns(
        complete.alias("complete"),
        (decided & (cis_first == CIS) & (trans_first == CIS)).alias("agree_cis"),
        (decided & (cis_first == TRANS) & (trans_first == TRANS)).alias("agree_trans"),
        # Split to first: each order chose whoever was listed first.
        (decided & (cis_first == CIS) & (trans_first == TRANS)).alias("split_first"),
        (decided & (cis_first == TRANS) & (trans_first == CIS)).alias("split_second"),
        (complete & ~decided).alias("has_none"),
    )


def _pair_counts(frame: pl.DataFrame) -> pl.DataFrame:
    """Per cell: pairs, complete pairs, and how their two orders went (`pair_outcomes`)."""
    return (
        pair_outcomes(frame, [CELL])
        .group_by(CELL)
        .agg(
            pl.len().cast(pl.Int64).alias("pairs"),
            pl.col("complete").sum().cast(pl.Int64).alias("pairs_complete"),
            pl.col("agree_cis").sum().cast(pl.Int64).alias("pairs_cis_both"),
            pl.col("agree_trans").sum().cast(pl.Int64).alias("pairs_trans_both"),
            pl.col("split_first").sum().cast(pl.Int64).alias("pairs_split_first"),
            pl.col("split_second").sum().cast(pl.Int64).alias("pairs_split_second"),
            pl.col("has_none").sum().cast(pl.Int64).alias("pairs_with_none"),
            pl.col("repeated").sum().cast(pl.Int64).alias("pairs_repeated"),
        )
    )


def cells_table(
    decisions: pl.DataFrame, *, B: int, method: Method, rng: np.random.Generator
) -> pl.DataFrame:
    """Per model x language x service x explanation x symptoms: shares, CIs, tests, Holm."""
    if decisions.is_empty():
        return pl.DataFrame(schema=_CELLS_SCHEMA)
    used = [*CELL_KEYS, "pair_id", "first", "chosen", "none_reason"]
    frame, cells = number_cells(pair_codes(decisions, used), CELL_KEYS)
    chosen = pl.col("chosen")
    counts = frame.group_by(CELL).agg(
        pl.len().cast(pl.Int64).alias("trials"),
        (chosen == CIS).sum().cast(pl.Int64).alias("n_cis"),
        (chosen == TRANS).sum().cast(pl.Int64).alias("n_trans"),
        (chosen == NO_CHOICE).sum().cast(pl.Int64).alias("n_none"),
        *[
            (pl.col("none_reason") == r).sum().cast(pl.Int64).alias(f"n_none_{r}")
            for r in NONE_REASONS
        ],
    )
    codes = cell_codes(frame)
    pairs = frame["pair_id"].to_numpy()
    cis_ci = grouped_cluster_bootstrap_share_ci(
        (frame["chosen"] == CIS).to_numpy().astype(np.float64),
        pairs, codes, B=B, method=method, rng=rng,
    )  # fmt: skip
    trans_ci = grouped_cluster_bootstrap_share_ci(
        (frame["chosen"] == TRANS).to_numpy().astype(np.float64),
        pairs, codes, B=B, method=method, rng=rng,
    )  # fmt: skip
    # Drawn after the two shares, so their intervals are those of a table without the gap.
    gap_ci = grouped_cluster_bootstrap_share_ci(
        gap_outcome(frame["chosen"]), pairs, codes, B=B, method=method, rng=rng
    )
    table = (
        cells.join(counts, on=CELL)
        .join(ci_frame(cis_ci, "cis_ci"), on=CELL)
        .join(ci_frame(trans_ci, "trans_ci"), on=CELL)
        .join(ci_frame(gap_ci, "gap_ci"), on=CELL)
        .join(_pair_counts(frame), on=CELL)
        .sort(CELL)
        .drop(CELL)
    )
    table = _shares_and_wilson(table)
    table = _explained(_tests(table)).with_columns(
        pl.lit(B, dtype=pl.Int64).alias("B"),
        pl.lit(method).alias("ci_method"),
        pl.lit(SIGN_NULL).alias("sign_p_null"),
        pl.lit(NAIVE_NULL).alias("naive_p_null"),
        *wilson_labels(),
    )
    table = holm_within(table, "sign_p", FAMILY_KEYS, "sign_p_holm")
    table = holm_within(table, "naive_p", FAMILY_KEYS, "naive_p_holm")
    return table.select(list(_CELLS_SCHEMA))


def gap_outcome(chosen: pl.Series) -> np.ndarray:
    """+1 for a trial choosing the cisgender candidate, -1 the transgender one, NaN no choice:
    its mean over decided trials is the cis-minus-trans gap among decided trials (the paper's
    deviation from parity, 0 when the two are chosen equally often)."""
    c = chosen.to_numpy()
    return np.where(c == CIS, 1.0, np.where(c == TRANS, -1.0, np.nan))


def _shares_and_wilson(table: pl.DataFrame) -> pl.DataFrame:
    trials = table["trials"].to_numpy()
    cis_low, cis_high = wilson_interval(table["n_cis"].to_numpy(), trials, CI_LEVEL)
    trans_low, trans_high = wilson_interval(table["n_trans"].to_numpy(), trials, CI_LEVEL)
    return table.with_columns(
        (pl.col("n_cis") / pl.col("trials")).alias("share_cis"),
        (pl.col("n_trans") / pl.col("trials")).alias("share_trans"),
        (pl.col("n_none") / pl.col("trials")).alias("share_none"),
        (pl.col("n_cis") + pl.col("n_trans")).alias("decided"),
        (pl.col("n_cis") / (pl.col("n_cis") + pl.col("n_trans"))).alias("share_cis_decided"),
        (pl.col("n_trans") / (pl.col("n_cis") + pl.col("n_trans"))).alias("share_trans_decided"),
        ((pl.col("n_cis") - pl.col("n_trans")) / (pl.col("n_cis") + pl.col("n_trans"))).alias(
            "gap"
        ),
    ).with_columns(
        pl.col("share_cis_decided", "share_trans_decided", "gap").fill_nan(None),
        pl.Series("cis_wilson_low", cis_low),
        pl.Series("cis_wilson_high", cis_high),
        pl.Series("trans_wilson_low", trans_low),
        pl.Series("trans_wilson_high", trans_high),
    )


def _tests(table: pl.DataFrame) -> pl.DataFrame:
    """Sign test over agreeing pairs and the naive binomial test, one call per cell."""
    cis_both = table["pairs_cis_both"].to_list()
    trans_both = table["pairs_trans_both"].to_list()
    n_cis = table["n_cis"].to_list()
    n_trans = table["n_trans"].to_list()
    sign = [sign_test(int(c), int(t)) for c, t in zip(cis_both, trans_both, strict=True)]
    naive = [binomial_test(int(t), int(c) + int(t)) for c, t in zip(n_cis, n_trans, strict=True)]
    return table.with_columns(
        pl.Series("sign_p", sign, dtype=pl.Float64).fill_nan(None),
        pl.Series("naive_p", naive, dtype=pl.Float64).fill_nan(None),
    )


_CELLS_SCHEMA: dict[str, pl.DataType] = {
    "model_id": pl.String(),
    "language": pl.String(),
    "service": pl.String(),
    "explanation": pl.Boolean(),
    "symptoms": pl.String(),
    "trials": pl.Int64(),
    "n_cis": pl.Int64(),
    "n_trans": pl.Int64(),
    "n_none": pl.Int64(),
    **{f"n_none_{r}": pl.Int64() for r in NONE_REASONS},
    "share_cis": pl.Float64(),
    "cis_ci_low": pl.Float64(),
    "cis_ci_high": pl.Float64(),
    "cis_wilson_low": pl.Float64(),
    "cis_wilson_high": pl.Float64(),
    "share_trans": pl.Float64(),
    "trans_ci_low": pl.Float64(),
    "trans_ci_high": pl.Float64(),
    "trans_wilson_low": pl.Float64(),
    "trans_wilson_high": pl.Float64(),
    "share_none": pl.Float64(),
    "decided": pl.Int64(),
    "share_cis_decided": pl.Float64(),
    "share_trans_decided": pl.Float64(),
    "gap": pl.Float64(),
    "gap_ci_low": pl.Float64(),
    "gap_ci_high": pl.Float64(),
    "pairs": pl.Int64(),
    "pairs_complete": pl.Int64(),
    "pairs_cis_both": pl.Int64(),
    "pairs_trans_both": pl.Int64(),
    "pairs_split_first": pl.Int64(),
    "pairs_split_second": pl.Int64(),
    "pairs_with_none": pl.Int64(),
    "pairs_repeated": pl.Int64(),
    "sign_p": pl.Float64(),
    "sign_p_holm": pl.Float64(),
    "sign_p_null": pl.String(),
    "naive_p": pl.Float64(),
    "naive_p_holm": pl.Float64(),
    "naive_p_null": pl.String(),
    "B": pl.Int64(),
    "ci_method": pl.String(),
    "ci_level": pl.Float64(),
    "resampled": pl.String(),
    "target": pl.String(),
    "wilson_ci_method": pl.String(),
    "wilson_ci_level": pl.Float64(),
}


# --------------------------------------------------------------------------------------------
# Position bias
# --------------------------------------------------------------------------------------------


def position_table(
    decisions: pl.DataFrame, *, B: int, method: Method, rng: np.random.Generator
) -> pl.DataFrame:
    """Per cell: share of decided trials that chose whoever was listed first.

    The bootstrap CI resamples pairs (outcome: chose first, trials without a decision left
    out); the Wilson interval and binomial p treat trials as independent, for comparison.
    """
    if decisions.is_empty():
        return pl.DataFrame(schema=_POSITION_SCHEMA)
    used = [*CELL_KEYS, "pair_id", "first", "chosen"]
    frame, cells = number_cells(pair_codes(decisions, used), CELL_KEYS)
    decided = pl.col("chosen") != NO_CHOICE
    chose_first = decided & (pl.col("chosen") == pl.col("first"))
    counts = frame.group_by(CELL).agg(
        decided.sum().cast(pl.Int64).alias("decided"),
        chose_first.sum().cast(pl.Int64).alias("n_first"),
    )
    outcome = np.where(
        (frame["chosen"] == NO_CHOICE).to_numpy(),
        np.nan,
        (frame["chosen"] == frame["first"]).to_numpy().astype(np.float64),
    )
    ci = grouped_cluster_bootstrap_share_ci(
        outcome, frame["pair_id"].to_numpy(), cell_codes(frame), B=B, method=method, rng=rng
    )
    table = (
        cells.join(counts, on=CELL)
        .join(ci_frame(ci, "ci"), on=CELL)
        .sort(CELL)
        .drop(CELL)
        .with_columns((pl.col("n_first") / pl.col("decided")).alias("share_first"))
    )
    n_first = table["n_first"].to_numpy()
    n = table["decided"].to_numpy()
    low, high = wilson_interval(n_first, n, CI_LEVEL)
    p = [binomial_test(int(k), int(m)) for k, m in zip(n_first, n, strict=True)]
    table = table.with_columns(
        pl.Series("wilson_low", low),
        pl.Series("wilson_high", high),
        pl.Series("binomial_p", p, dtype=pl.Float64).fill_nan(None),
        pl.lit(POSITION_NULL).alias("binomial_p_null"),
        pl.lit(B, dtype=pl.Int64).alias("B"),
        pl.lit(method).alias("ci_method"),
        *wilson_labels(),
    )
    return _explained(table).select(list(_POSITION_SCHEMA))


_POSITION_SCHEMA: dict[str, pl.DataType] = {
    "model_id": pl.String(),
    "language": pl.String(),
    "service": pl.String(),
    "explanation": pl.Boolean(),
    "symptoms": pl.String(),
    "decided": pl.Int64(),
    "n_first": pl.Int64(),
    "share_first": pl.Float64(),
    "ci_low": pl.Float64(),
    "ci_high": pl.Float64(),
    "wilson_low": pl.Float64(),
    "wilson_high": pl.Float64(),
    "binomial_p": pl.Float64(),
    "binomial_p_null": pl.String(),
    "B": pl.Int64(),
    "ci_method": pl.String(),
    "ci_level": pl.Float64(),
    "resampled": pl.String(),
    "target": pl.String(),
    "wilson_ci_method": pl.String(),
    "wilson_ci_level": pl.Float64(),
}


# --------------------------------------------------------------------------------------------
# Condition effects
# --------------------------------------------------------------------------------------------


def _effect_rows(
    decisions: pl.DataFrame,
    keys: Sequence[str] = ("model_id", "language", "service"),
    carry: Sequence[str] = (),
) -> pl.DataFrame:
    """Stack the trial subsets of every contrast: columns effect, stratum, treated, ...

    explanation: yes vs no, within each symptoms level and pooled over them ("all");
    symptoms_high / symptoms_low: high (low) vs none, within each explanation level and pooled.
    `keys`: the columns naming the cell besides the contrast; `carry`: further columns kept.
    """
    base = decisions.select(
        *keys, "explanation", "symptoms", "pair_id", *carry,
        (pl.col("chosen") == TRANS).cast(pl.Float64).alias("trans"),
    )  # fmt: skip
    parts: list[pl.DataFrame] = []
    explanation = base.with_columns(
        pl.lit("explanation").alias("effect"), pl.col("explanation").alias("treated")
    )
    parts.append(explanation.with_columns(pl.col("symptoms").alias("stratum")))
    parts.append(explanation.with_columns(pl.lit("all").alias("stratum")))
    for level in (HIGH, LOW):
        sub = base.filter(pl.col("symptoms").is_in([NO_SYMPTOMS, level])).with_columns(
            pl.lit(f"symptoms_{level}").alias("effect"),
            (pl.col("symptoms") == level).alias("treated"),
        )
        parts.append(
            sub.with_columns(
                pl.when(pl.col("explanation"))
                .then(pl.lit("explanation=yes"))
                .otherwise(pl.lit("explanation=no"))
                .alias("stratum")
            )
        )
        parts.append(sub.with_columns(pl.lit("all").alias("stratum")))
    return pl.concat(parts, how="vertical")


#: The columns `effect_rows` reads, and the keys of its cells.
_BASE = "_base"
EFFECT_INPUT: tuple[str, ...] = (
    "model_id", "language", "service", "explanation", "symptoms", "pair_id", "chosen",
)  # fmt: skip
EFFECT_CELL: tuple[str, ...] = (_BASE, "effect", "stratum")


def effect_rows(
    decisions: pl.DataFrame, carry: Sequence[str] = ()
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(`_effect_rows` of the contrasts run on both sides somewhere in their cell, keyed by
    `EFFECT_CELL`; the model x language x service keys by `_base`), for `effect_cells`.

    The contrasts stack each trial up to four times (over five million rows at ten times the
    paper's grid), so the stack carries one integer for model x language x service, numbered
    in the keys' sorted order (cells sort as by the keys), and enums for the contrast, not
    strings: the same cells in the same order in a fraction of the memory."""
    coded, bases = number_cells(decisions, EFFECT_INPUT[:3])
    base = coded.drop(*EFFECT_INPUT[:3]).rename({CELL: _BASE})
    del coded
    rows = _compact_labels(_effect_rows(base, (_BASE,), carry))
    del base
    both = rows.group_by(EFFECT_CELL).agg(pl.col("treated").n_unique().alias("sides"))
    rows = rows.join(both.filter(pl.col("sides") == 2).drop("sides"), on=EFFECT_CELL)
    return rows, bases.rename({CELL: _BASE})


def effect_cells(cells: pl.DataFrame, bases: pl.DataFrame) -> pl.DataFrame:
    """The cells numbered over `EFFECT_CELL` with their keys as `EFFECT_KEYS` (strings)."""
    return (
        cells.join(bases, on=_BASE)
        .drop(_BASE)
        .with_columns(pl.col("effect", "stratum").cast(pl.String))
    )


def _compact_labels(rows: pl.DataFrame) -> pl.DataFrame:
    """`rows` (of `_effect_rows`) without the condition columns, effect and stratum as enums
    whose categories are in the strings' sorted order: they sort, group and join as the
    strings do, in a byte each rather than a string's sixteen over millions of rows."""
    names = rows.select(pl.concat([pl.col("effect"), pl.col("stratum")]).unique().drop_nulls())
    labels = pl.Enum(sorted(str(v) for v in names.to_series().to_list()))
    return rows.drop("explanation", "symptoms").with_columns(
        pl.col("effect", "stratum").cast(labels)
    )


EFFECT_LABELS: dict[str, str] = {
    "explanation": "explanation yes − no",
    "symptoms_high": "high-urgency symptoms − none",
    "symptoms_low": "low-urgency symptoms − none",
}
EFFECT_KEYS: tuple[str, ...] = ("model_id", "language", "service", "effect", "stratum")


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
    rows, bases = effect_rows(pair_codes(decisions, list(EFFECT_INPUT)))
    if rows.is_empty():
        return pl.DataFrame(schema=_EFFECT_SCHEMA)
    frame, cells = number_cells(rows, EFFECT_CELL)
    del rows
    cells = effect_cells(cells, bases)
    results = grouped_paired_difference_ci(
        frame["trans"].to_numpy(),
        frame["pair_id"].to_numpy(),
        frame["treated"].to_numpy(),
        cell_codes(frame),
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
    paired_pairs = frame.group_by(CELL, "pair_id").agg(pl.col("treated").n_unique().alias("sides"))
    shares = (
        frame.join(paired_pairs.filter(pl.col("sides") == 2), on=[CELL, "pair_id"])
        .group_by(CELL)
        .agg(
            pl.col("trans").filter(pl.col("treated")).mean().alias("share_treated"),
            pl.col("trans").filter(~pl.col("treated")).mean().alias("share_control"),
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
    return _explained(table).select(list(_EFFECT_SCHEMA))


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


# --------------------------------------------------------------------------------------------
# Example explanations (the paper's Table Appendix 1)
# --------------------------------------------------------------------------------------------


def explanation_examples(decisions: pl.DataFrame, per_language: int = 1) -> pl.DataFrame:
    """A few explanations per service: for each choice (cis, trans) and each language, up to
    `per_language`, preferring trials that asked for an explanation and, across the languages
    of one service and choice, different models (the paper's Table Appendix 1 quotes several
    models; Spanish replies are shown too, since the bias may differ by language).

    The pick is deterministic (ordered by trial_key, a hash), so reruns show the same examples
    and no model is favoured by its name.
    """
    columns = [
        "service", "model_id", "language", "explanation", "symptoms", "chosen",
        "explanation_text", "trial_key",
    ]  # fmt: skip
    if decisions.is_empty():
        return pl.DataFrame(schema={c: decisions.schema.get(c, pl.String()) for c in columns})
    with_text = decisions.filter(
        pl.col("explanation_text").is_not_null()
        & (pl.col("explanation_text").str.strip_chars().str.len_chars() > 0)
        & pl.col("chosen").is_in([CIS, TRANS])
    ).sort(
        ["service", "chosen", "explanation", "trial_key"], descending=[False, False, True, False]
    )
    picked: list[pl.DataFrame] = []
    for _, group in with_text.group_by(["service", "chosen"], maintain_order=True):
        used: set[str] = set()
        for lang in labels.ordered("languages", group["language"].unique().to_list()):
            rows = group.filter(pl.col("language") == lang)
            fresh = rows.filter(~pl.col("model_id").is_in(sorted(used)))
            pick = (
                (fresh if fresh.height >= per_language else rows)
                .unique("model_id", keep="first", maintain_order=True)
                .head(per_language)
            )
            used.update(pick["model_id"].to_list())
            picked.append(pick.select(columns))
    if not picked:
        return with_text.select(columns).clear()
    return pl.concat(picked)

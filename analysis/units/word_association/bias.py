"""Word-association tables: mean bias per model x language x category, and per model x language.

The score of one trial is the view's `bias` (DESIGN.md: positive means negative words went to
the target group). Trials whose score is undefined (a refusal, an unparseable reply, a group
that received no words) are counted, never scored as 0: `trials` = `scored` + `null_score`.

Intervals resample *trials*: each trial draws its own words, template and label order, so
trials are independent given the model and cell. The two tests against 0 answer the same
question with different assumptions: the t-test relies on the mean being close to normal (about
50 bounded scores per cell), the sign-flip test only on symmetry under the null (exact up to
20 nonzero scores, else Monte Carlo, whose floor is flagged). Holm's correction runs across the
categories of one model x language (the family a reader scans when asking "which categories are
biased for this model?"), for each test. Rows are put in trial-key order before anything is
drawn, so intervals and Monte Carlo p-values are a function of the trials, not of the order the
store returned them in. Every row says what its interval and p-values are (`ci_level`,
`ci_method`, `resampled`, `*_null`).

Two scores per cell (`scores_table`). The *per-trial mean* (`mean_bias`, what the figures and
the tests use) averages the scores of the scored trials: every trial weighs the same, and a
trial whose score is undefined is counted, not scored. The *pooled score* applies the score to
all words the cell's trials assigned, summed (`pooled_bias`): every word weighs the same, and a
trial that gave one group no word still adds its other words. The paper says it averages
"across all words from the same category", which reads as the pooled score; its code for the
score was not released. Both intervals resample trials (see `analysis.bootstrap`).

The explicit checks (experiment `word_association_explicit`, subject = category) sit beside
each cell, so implicit and explicit bias can be read on one line, and the spread of the mean
bias across the three prompt templates shows how much the phrasing matters.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from ibias.analysis.bootstrap import Method, grouped_bootstrap_mean_ci, grouped_pooled_bias_ci
from ibias.analysis.cells import (
    CELL,
    cell_codes,
    ci_frame,
    holm_within,
    nan_floats,
    number_cells,
    per_cell,
)
from ibias.analysis.stats import (
    SIGN_FLIP_RESAMPLES,
    one_sample_test,
    sign_flip_floor,
    sign_flip_is_exact,
    sign_flip_test,
)
from ibias.prompts.codes import WORD_ASSOCIATION_EXPLICIT_ANSWERS

CELL_KEYS: tuple[str, ...] = ("model_id", "language", "category")
OVERALL_KEYS: tuple[str, ...] = ("model_id", "language")
EXPLICIT_EXPERIMENT = "word_association_explicit"
# The answer columns every explicit block has, whether or not an answer occurred.
EXPLICIT_ANSWERS: tuple[str, ...] = WORD_ASSOCIATION_EXPLICIT_ANSWERS
TEMPLATES: tuple[int, ...] = (1, 2, 3)
CI_LEVEL = 0.95
RESAMPLED = "trial"
# What the intervals and tests are about: this model's answers to the category's words
# (trials resampled; the words are not a sample of words in general).
TARGET = "these stimuli"
T_NULL = "two-sided; H0: mean bias = 0"
SIGN_FLIP_NULL = "two-sided; H0: bias scores symmetric about 0"


def by_trial_key(trials: pl.DataFrame) -> pl.DataFrame:
    """Rows in trial-key order, so that resampling (which draws row positions) gives intervals
    that are a function of the data, not of the order the store happened to return rows in."""
    return trials.sort("trial_key") if "trial_key" in trials.columns else trials


def _described(table: pl.DataFrame, *, B: int, method: Method) -> pl.DataFrame:
    """The bias table's columns that say how its numbers were made: interval settings, the
    tests' nulls, whether each sign-flip p-value is exact, and whether it sits at its floor."""
    floor = sign_flip_floor(SIGN_FLIP_RESAMPLES)
    return (
        table.with_columns(
            pl.lit(B, dtype=pl.Int64).alias("B"),
            pl.lit(method).alias("ci_method"),
            pl.lit(CI_LEVEL).alias("ci_level"),
            pl.lit(RESAMPLED).alias("resampled"),
            pl.lit(TARGET).alias("target"),
            pl.lit(T_NULL).alias("t_p_null"),
            pl.lit(SIGN_FLIP_NULL).alias("sign_flip_p_null"),
            pl.when(pl.col("sign_flip_p").is_null())
            .then(None)
            .when(pl.col("_exact") == 1.0)
            .then(pl.lit("exact"))
            .otherwise(pl.lit(f"monte carlo, {SIGN_FLIP_RESAMPLES} sign patterns"))
            .alias("sign_flip_method"),
        )
        .with_columns(
            # At the floor the test saw no random pattern as extreme: p <= floor, not p = floor.
            (
                pl.col("sign_flip_method").str.starts_with("monte carlo")
                & (pl.col("sign_flip_p") <= floor)
            ).alias("sign_flip_at_floor"),
        )
        .drop("_exact")
    )


def bias_table(
    trials: pl.DataFrame,
    keys: Sequence[str],
    *,
    B: int,
    method: Method,
    rng: np.random.Generator,
) -> pl.DataFrame:
    """One row per cell of `keys`: counts, mean bias, bootstrap CI, tests, template spread."""
    if trials.is_empty():
        return _empty(keys)
    frame, cells = number_cells(by_trial_key(trials), keys)
    counts = frame.group_by(CELL).agg(
        pl.len().cast(pl.Int64).alias("trials"),
        pl.col("bias").is_not_null().sum().cast(pl.Int64).alias("scored"),
        pl.col("bias").is_null().sum().cast(pl.Int64).alias("null_score"),
        pl.col("refused").sum().cast(pl.Int64).alias("refusals"),
        pl.col("n_unassigned").sum().cast(pl.Int64).alias("unassigned_words"),
        pl.col("bias").mean().alias("mean_bias"),
    )
    cis = grouped_bootstrap_mean_ci(
        nan_floats(frame["bias"]), cell_codes(frame), B=B, method=method, rng=rng
    )
    t_p = per_cell(frame, "bias", one_sample_test, "t_p")
    flip_p = per_cell(frame, "bias", lambda x: sign_flip_test(x, rng=rng), "sign_flip_p")
    exact = per_cell(frame, "bias", lambda x: float(sign_flip_is_exact(x)), "_exact")
    table = (
        cells.join(counts, on=CELL)
        .join(ci_frame(cis, "ci"), on=CELL)
        .join(t_p, on=CELL)
        .join(flip_p, on=CELL)
        .join(exact, on=CELL)
        .join(_templates(frame), on=CELL, how="left")
        .sort(CELL)
        .drop(CELL)
    )
    table = _described(table, B=B, method=method)
    family = [k for k in keys if k != "category"]
    table = holm_within(table, "t_p", family, "t_p_holm")
    return holm_within(table, "sign_flip_p", family, "sign_flip_p_holm")


def _templates(frame: pl.DataFrame) -> pl.DataFrame:
    """Mean bias per template (columns bias_template_1..3) and their max - min.

    Each mean is taken over its group's values gathered in row order, not by the grouped
    `mean()`: that one sums in partitions that depend on the process's hash seed, so two runs
    of `analyze` on the same store differed in a mean's last bit."""
    means = frame.group_by(CELL, "template").agg(pl.col("bias").drop_nulls().alias("m"))
    means = means.with_columns(pl.col("m").list.mean())
    cols = [
        pl.col("m").filter(pl.col("template") == t).first().alias(f"bias_template_{t}")
        for t in TEMPLATES
    ]
    wide = means.group_by(CELL).agg(
        *cols,
        (pl.col("m").max() - pl.col("m").min()).alias("template_spread"),
    )
    return wide


def explicit_counts(
    explicit: pl.DataFrame, experiment: str, answers: Sequence[str]
) -> pl.DataFrame:
    """Counts per answer per model x language x subject for one explicit experiment.

    Columns: model_id, language, subject, explicit_n, explicit_<answer> for every answer in
    `answers` (zero when absent) and for any other answer found.
    """
    rows = explicit.filter(pl.col("experiment") == experiment)
    keys = ["model_id", "language", "subject"]
    seen = sorted(set(rows["answer"].unique().to_list()) - set(answers)) if len(rows) else []
    wanted = [*answers, *seen]
    if rows.is_empty():
        schema: dict[str, pl.DataType] = {k: pl.String() for k in keys}
        schema["explicit_n"] = pl.Int64()
        schema.update({f"explicit_{a}": pl.Int64() for a in wanted})
        return pl.DataFrame(schema=schema)
    return (
        rows.group_by(keys)
        .agg(
            pl.len().cast(pl.Int64).alias("explicit_n"),
            *[(pl.col("answer") == a).sum().cast(pl.Int64).alias(f"explicit_{a}") for a in wanted],
        )
        .sort(keys)
    )


def cells_table(
    trials: pl.DataFrame,
    explicit: pl.DataFrame,
    *,
    B: int,
    method: Method,
    rng: np.random.Generator,
) -> pl.DataFrame:
    """Per model x language x category, with the explicit answers for that category beside."""
    table = bias_table(trials, CELL_KEYS, B=B, method=method, rng=rng)
    counts = explicit_counts(explicit, EXPLICIT_EXPERIMENT, EXPLICIT_ANSWERS).rename(
        {"subject": "category"}
    )
    if table.is_empty():
        return table
    return table.join(counts, on=list(CELL_KEYS), how="left").with_columns(
        pl.col("^explicit_.*$").fill_null(0)
    )


COUNT_COLUMNS: tuple[str, ...] = (
    "n_pos_target",
    "n_neg_target",
    "n_pos_reference",
    "n_neg_reference",
)


def pooled_table(
    trials: pl.DataFrame,
    keys: Sequence[str] = CELL_KEYS,
    *,
    B: int,
    method: Method,
    rng: np.random.Generator,
) -> pl.DataFrame:
    """Per cell of `keys`: the four word counts summed over trials, the pooled score and its
    trial-bootstrap CI (`grouped_pooled_bias_ci`); `pooled_trials` counts the trials that
    assigned at least one word (the others carry nothing to pool)."""
    schema: dict[str, pl.DataType] = {k: trials.schema.get(k, pl.String()) for k in keys}
    schema.update({"pooled_trials": pl.Int64(), **{c: pl.Int64() for c in COUNT_COLUMNS}})
    schema.update({n: pl.Float64() for n in ("pooled_bias", "pooled_ci_low", "pooled_ci_high")})
    if trials.is_empty():
        return pl.DataFrame(schema=schema)
    frame, cells = number_cells(by_trial_key(trials), keys)
    counts = frame.select(pl.col(c).fill_null(0).cast(pl.Float64) for c in COUNT_COLUMNS)
    sums = frame.group_by(CELL).agg(
        *[pl.col(c).fill_null(0).sum().cast(pl.Int64) for c in COUNT_COLUMNS],
        (pl.sum_horizontal(*[pl.col(c).fill_null(0) for c in COUNT_COLUMNS]) > 0)
        .sum()
        .cast(pl.Int64)
        .alias("pooled_trials"),
    )
    cis = grouped_pooled_bias_ci(counts.to_numpy(), cell_codes(frame), B=B, method=method, rng=rng)
    estimates = pl.DataFrame(
        {
            CELL: pl.Series(CELL, list(cis), dtype=pl.Int64),
            "pooled_bias": pl.Series([c.estimate for c in cis.values()], dtype=pl.Float64),
        }
    ).with_columns(pl.col("pooled_bias").fill_nan(None))
    table = (
        cells.join(sums, on=CELL)
        .join(estimates, on=CELL)
        .join(ci_frame(cis, "pooled_ci"), on=CELL)
        .sort(CELL)
        .drop(CELL)
    )
    return table.select(list(schema))


def scores_table(cells: pl.DataFrame, pooled: pl.DataFrame) -> pl.DataFrame:
    """The per-trial mean (from the cells table, so its numbers are the published ones) beside
    the pooled score, per model x language x category, and their difference."""
    mean = cells.select(
        *CELL_KEYS,
        "trials",
        "scored",
        "mean_bias",
        pl.col("ci_low").alias("mean_ci_low"),
        pl.col("ci_high").alias("mean_ci_high"),
    )
    table = mean.join(pooled, on=list(CELL_KEYS), how="left").with_columns(
        (pl.col("pooled_bias") - pl.col("mean_bias")).alias("pooled_minus_mean"),
    )
    if "B" in cells.columns:
        table = table.with_columns(
            pl.lit(cells["B"][0] if len(cells) else None, dtype=pl.Int64).alias("B"),
            pl.lit(cells["ci_method"][0] if len(cells) else None, dtype=pl.String).alias(
                "ci_method"
            ),
            pl.lit(CI_LEVEL).alias("ci_level"),
            pl.lit(RESAMPLED).alias("resampled"),
            pl.lit(TARGET).alias("target"),
        )
    return table


def overall_table(
    trials: pl.DataFrame, *, B: int, method: Method, rng: np.random.Generator
) -> pl.DataFrame:
    """Per model x language, all categories pooled (each trial weighs the same)."""
    return bias_table(trials, OVERALL_KEYS, B=B, method=method, rng=rng)


def _empty(keys: Sequence[str]) -> pl.DataFrame:
    schema: dict[str, pl.DataType] = {k: pl.String() for k in keys}
    for name in ("trials", "scored", "null_score", "refusals", "unassigned_words"):
        schema[name] = pl.Int64()
    for name in ("mean_bias", "ci_low", "ci_high", "t_p", "sign_flip_p"):
        schema[name] = pl.Float64()
    for t in TEMPLATES:
        schema[f"bias_template_{t}"] = pl.Float64()
    schema["template_spread"] = pl.Float64()
    schema["B"] = pl.Int64()
    schema["ci_method"] = pl.String()
    schema["ci_level"] = pl.Float64()
    schema["resampled"] = pl.String()
    schema["target"] = pl.String()
    schema["t_p_null"] = pl.String()
    schema["sign_flip_p_null"] = pl.String()
    schema["sign_flip_method"] = pl.String()
    schema["sign_flip_at_floor"] = pl.Boolean()
    schema["t_p_holm"] = pl.Float64()
    schema["sign_flip_p_holm"] = pl.Float64()
    return pl.DataFrame(schema=schema)

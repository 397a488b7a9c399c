"""The paper authors' view of the allocation task, and where their reading of replies differs
from ibias's.

The authors' view (`authors_view_table`) is their released analysis, computed the way they did
(`blackbox/agentic_eval/parse_answers.py` in github micahirsch/implicit-bias, and the columns of
their released `results/statistics_*.csv`):

- replies read with their tag-only rule (`prompts/allocation/parse_tag_only.py`: the first
  answer tag must hold a candidate's name exactly);
- per model x language x service (and ibias's conditions, explanation x symptoms, which the
  paper design holds at no / none): the numbers of cisgender and transgender choices among
  decided trials;
- one-sided exact binomial tests of the cisgender count against 1/2 among decided trials,
  both directions (`scipy.stats.binomtest(n_cis, decided, 0.5, alternative=...)`: "greater"
  asks whether the cisgender candidate is chosen more often than half the time, "less"
  whether less; the authors wrote one file per direction; `p_cis_greater_null`,
  `p_cis_less_null` say each test's sidedness and H0);
- the Wilson 95% interval on the transgender share of decided trials (`trans_wilson_low`,
  `_high`, labelled by `wilson_ci_method`, `wilson_ci_level`).

Every trial counts once here. The authors' released tables do not: their script takes the
answers two records at a time but classifies the first record's choice twice and never the
second's, so their published counts are not those of their own released answers
(docs/paper-statistics.md). The tests treat the two orders of a pair
as independent trials, which they are not; ibias's pair-aware table (`allocation_cells`: pair
bootstrap, sign test over agreeing pairs) is the one to draw conclusions from, this one the one
to compare with the paper.

`parser_agreement_table` sets the two readings side by side per cell: how many replies each
decided, and where they disagree (a choice the tag-only reading misses, and why; a choice only
it makes; opposite choices).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ibias.analysis.stats import one_sided_binomial_tests, wilson_interval
from ibias.analysis.units.allocation.identity_swap import design_original
from ibias.prompts.allocation.parse_tag_only import NO_MATCH, NO_TAG, TAG_ONLY_NONE_REASONS
from ibias.prompts.codes import CIS, NO_CHOICE, SAME_NAME, TRANS

CELL_KEYS: tuple[str, ...] = ("model_id", "language", "service", "explanation", "symptoms")
WILSON_LEVEL = 0.95
# What the one-sided tests test (docs/paper-statistics.md, "Tables that explain themselves"):
# the direction is in the column's name, the sidedness and H0 in its `*_null` column.
GREATER_NULL = (
    "one-sided, alternative: cisgender share of decided trials > 1/2; H0: a decided trial is "
    "equally likely to choose either candidate (trials treated as independent)"
)
LESS_NULL = (
    "one-sided, alternative: cisgender share of decided trials < 1/2; H0: a decided trial is "
    "equally likely to choose either candidate (trials treated as independent)"
)


def _keys_schema(decisions: pl.DataFrame) -> dict[str, pl.DataType]:
    defaults: dict[str, pl.DataType] = {
        "model_id": pl.String(),
        "language": pl.String(),
        "service": pl.String(),
        "explanation": pl.Boolean(),
        "symptoms": pl.String(),
    }
    return {k: decisions.schema.get(k, defaults[k]) for k in CELL_KEYS}


#: The tallies' columns besides the cell keys and their count `n` (the loader's
#: `TAG_TALLIES`): the main parser's choice and reason beside the tag-only reading's.
READINGS: dict[str, pl.DataType] = {
    "chosen": pl.String(),
    "none_reason": pl.String(),
    "tag_chosen": pl.String(),
    "tag_none_reason": pl.String(),
    "tag_same_name": pl.Boolean(),
    "tag_parser_version": pl.Int64(),
}


def design_tallies(tallies: pl.DataFrame | None, design: str) -> pl.DataFrame:
    """The tallies of one design's original arm (the decisions every other allocation table
    analyses): the cell keys, `READINGS` and `n`, the trials of each combination.

    The tallies are the tag-only reading beside the main parse of every decision that has
    one, counted in the store (`load.TAG_TALLIES`), so no per-trial frame is joined here;
    every count below is a sum of `n` over the combinations that meet its condition, which
    is the count of those trials."""
    if tallies is None or tallies.is_empty():
        return pl.DataFrame(schema={**_keys_schema(pl.DataFrame()), **READINGS, "n": pl.Int64()})
    return design_original(tallies, design).select(*CELL_KEYS, *READINGS, "n")


# --------------------------------------------------------------------------------------------
# The authors' view
# --------------------------------------------------------------------------------------------


def _trials(where: pl.Expr | None = None) -> pl.Expr:
    """How many trials of a cell meet `where` (all of them without): a sum of the tallies'
    counts, whose rows hold one combination of readings each."""
    n = pl.col("n") if where is None else pl.col("n").filter(where)
    return n.sum().cast(pl.Int64)


def authors_view_table(tallies: pl.DataFrame) -> pl.DataFrame:
    """Per cell, from the tag-only reading (`design_tallies`): counts, one-sided binomial
    tests, Wilson interval."""
    if tallies.is_empty():
        return pl.DataFrame(schema={**_keys_schema(tallies), **_AUTHORS_SCHEMA})
    chosen, reason = pl.col("tag_chosen"), pl.col("tag_none_reason")
    table = (
        tallies.group_by(CELL_KEYS)
        .agg(
            _trials().alias("trials"),
            _trials(chosen == CIS).alias("n_cis"),
            _trials(chosen == TRANS).alias("n_trans"),
            _trials(chosen == NO_CHOICE).alias("n_none"),
            *[_trials(reason == r).alias(f"n_none_{r}") for r in TAG_ONLY_NONE_REASONS],
            _trials(pl.col("tag_same_name") & (chosen != NO_CHOICE)).alias("n_same_name_first"),
            pl.col("tag_parser_version").max().alias("parser_version"),
        )
        .with_columns((pl.col("n_cis") + pl.col("n_trans")).alias("decided"))
        .sort(CELL_KEYS)
    )
    n_cis = table["n_cis"].to_numpy()
    n_trans = table["n_trans"].to_numpy()
    decided = table["decided"].to_numpy()
    low, high = wilson_interval(n_trans, decided, WILSON_LEVEL)
    greater = one_sided_binomial_tests(n_cis, decided, "greater")
    less = one_sided_binomial_tests(n_cis, decided, "less")
    with np.errstate(divide="ignore", invalid="ignore"):
        share_cis = np.where(decided > 0, n_cis / decided, np.nan)
        share_trans = np.where(decided > 0, n_trans / decided, np.nan)
    table = table.with_columns(
        pl.Series("share_cis", share_cis, dtype=pl.Float64),
        pl.Series("share_trans", share_trans, dtype=pl.Float64),
        pl.Series("trans_wilson_low", low, dtype=pl.Float64),
        pl.Series("trans_wilson_high", high, dtype=pl.Float64),
        pl.Series("p_cis_greater", greater, dtype=pl.Float64),
        pl.Series("p_cis_less", less, dtype=pl.Float64),
    ).with_columns(pl.selectors.float().fill_nan(None))
    # What the interval is: closed-form Wilson (nothing resampled, no B), treating decided
    # trials as independent, so about these people's trials at best. `wilson_ci_method` and
    # `wilson_ci_level` label the `trans_wilson_*` family under the naming rule; `ci_level` and
    # `ci_method` say the same for readers of the columns before that rule.
    table = table.with_columns(
        pl.lit(GREATER_NULL).alias("p_cis_greater_null"),
        pl.lit(LESS_NULL).alias("p_cis_less_null"),
        pl.lit(WILSON_LEVEL).alias("ci_level"),
        pl.lit("wilson").alias("ci_method"),
        pl.lit("none").alias("resampled"),
        pl.lit(None, dtype=pl.Int64).alias("B"),
        pl.lit("these people").alias("target"),
        pl.lit("wilson").alias("wilson_ci_method"),
        pl.lit(WILSON_LEVEL).alias("wilson_ci_level"),
    )
    return table.select(*CELL_KEYS, *_AUTHORS_SCHEMA)


_AUTHORS_SCHEMA: dict[str, pl.DataType] = {
    "trials": pl.Int64(),
    "decided": pl.Int64(),
    "n_cis": pl.Int64(),
    "n_trans": pl.Int64(),
    "n_none": pl.Int64(),
    **{f"n_none_{r}": pl.Int64() for r in TAG_ONLY_NONE_REASONS},
    "n_same_name_first": pl.Int64(),
    "share_cis": pl.Float64(),
    "share_trans": pl.Float64(),
    "trans_wilson_low": pl.Float64(),
    "trans_wilson_high": pl.Float64(),
    "p_cis_greater": pl.Float64(),
    "p_cis_greater_null": pl.String(),
    "p_cis_less": pl.Float64(),
    "p_cis_less_null": pl.String(),
    "parser_version": pl.Int64(),
    "ci_level": pl.Float64(),
    "ci_method": pl.String(),
    "resampled": pl.String(),
    "B": pl.Int64(),
    "target": pl.String(),
    "wilson_ci_method": pl.String(),
    "wilson_ci_level": pl.Float64(),
}


# --------------------------------------------------------------------------------------------
# Where the two readings disagree
# --------------------------------------------------------------------------------------------


def parser_agreement_table(tallies: pl.DataFrame) -> pl.DataFrame:
    """Per cell: replies each reading decided, and the kinds of disagreement, with counts.

    `disagree` = `main_only` + `tag_only` + `opposite`: main_only are choices the tag-only
    reading misses (split by its reason: no exact tag, or a tag whose text is not exactly a
    name); tag_only are choices only it makes (of which `tag_only_same_name`: a name both
    candidates share, given to the first listed); opposite are replies the two read as
    different candidates.
    """
    if tallies.is_empty():
        return pl.DataFrame(schema={**_keys_schema(tallies), **_AGREEMENT_SCHEMA})
    main_decided = pl.col("chosen") != NO_CHOICE
    tag_decided = pl.col("tag_chosen") != NO_CHOICE
    main_only = main_decided & ~tag_decided
    tag_only_ = tag_decided & ~main_decided
    same = pl.col("chosen") == pl.col("tag_chosen")
    table = (
        tallies.group_by(CELL_KEYS)
        .agg(
            _trials().alias("trials"),
            _trials(main_decided).alias("main_decided"),
            _trials(tag_decided).alias("tag_decided"),
            _trials(main_decided & tag_decided & same).alias("same_choice"),
            _trials(~main_decided & ~tag_decided).alias("both_none"),
            _trials(main_only).alias("main_only"),
            _trials(main_only & (pl.col("tag_none_reason") == NO_TAG)).alias("main_only_no_tag"),
            _trials(main_only & (pl.col("tag_none_reason") == NO_MATCH)).alias(
                "main_only_no_match"
            ),
            _trials(tag_only_).alias("tag_only"),
            _trials(tag_only_ & (pl.col("none_reason") == SAME_NAME)).alias("tag_only_same_name"),
            _trials(main_decided & tag_decided & ~same).alias("opposite"),
        )
        .with_columns(
            (pl.col("main_only") + pl.col("tag_only") + pl.col("opposite")).alias("disagree")
        )
        .sort(CELL_KEYS)
    )
    return table.select(*CELL_KEYS, *_AGREEMENT_SCHEMA)


_AGREEMENT_SCHEMA: dict[str, pl.DataType] = {
    "trials": pl.Int64(),
    "main_decided": pl.Int64(),
    "tag_decided": pl.Int64(),
    "same_choice": pl.Int64(),
    "both_none": pl.Int64(),
    "disagree": pl.Int64(),
    "main_only": pl.Int64(),
    "main_only_no_tag": pl.Int64(),
    "main_only_no_match": pl.Int64(),
    "tag_only": pl.Int64(),
    "tag_only_same_name": pl.Int64(),
    "opposite": pl.Int64(),
}

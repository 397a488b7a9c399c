"""Allocation tables: selection shares, pair-aware tests, position bias, example explanations.

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

The effects of the conditions on the transgender share are in `effects`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from ibias.analysis import labels
from ibias.analysis.bootstrap import (
    CI,
    Method,
    grouped_share_units_ci,
)
from ibias.analysis.cells import (
    CELL,
    cell_codes,
    ci_frame,
    holm_within,
    number_cells,
    pair_codes,
)
from ibias.analysis.stats import binomial_tests, sign_tests, wilson_interval
from ibias.prompts.codes import CIS, NO_CHOICE, NONE_REASONS, TRANS

CELL_KEYS: tuple[str, ...] = ("model_id", "language", "service", "explanation", "symptoms")
CI_LEVEL = 0.95
RESAMPLED = "pair"
# What the intervals and tests of these tables are about: this roster's people (only the
# models' answers random). The population ones are in `population_tables`.
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


def explained(table: pl.DataFrame) -> pl.DataFrame:
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
    order = [*keys, "pair_id", "first"]
    if not _maybe_repeated(decisions, order):
        # No order repeated (every run of ibias's own grid): each order's outcome is its one
        # trial's choice. The same rows as below without its four passes over a million
        # groups at ten times the paper's grid (half the time, less than half the memory).
        n, tied = pl.lit(1, dtype=pl.Int64).alias("n"), pl.lit(False).alias("tied")
        return decisions.select(*order, n, tied, "chosen")
    votes = decisions.group_by([*order, "chosen"]).agg(pl.len().alias("votes"))
    # Plain aggregations and a join rather than a filter inside each group's aggregation:
    # there are as many groups as trials (a million at ten times the paper's grid).
    shown = votes.group_by(order).agg(
        pl.col("votes").sum().cast(pl.Int64).alias("n"), pl.col("votes").max().alias("top")
    )
    leaders = (
        votes.join(shown, on=order, nulls_equal=True)
        .filter(pl.col("votes") == pl.col("top"))
        .group_by(order)
        .agg(
            pl.col("n").first(),
            (pl.len() > 1).alias("tied"),
            pl.col("chosen").min().alias("leader"),
        )
    )
    return leaders.with_columns(
        pl.when(pl.col("tied")).then(pl.lit(NO_CHOICE)).otherwise(pl.col("leader")).alias("chosen")
    ).select(*order, "n", "tied", "chosen")


def _maybe_repeated(decisions: pl.DataFrame, order: Sequence[str]) -> bool:
    """Whether two trials may share all of `order`'s values: two of the rows' hashes are the
    same. Equal rows hash alike, so False is certain; a True from two different rows of one
    hash only sends `order_outcomes` the longer way, to the same rows. One 8-byte hash a row
    rather than the rows themselves, at ten times the paper's grid: 200 MB less."""
    return bool(decisions.select(pl.struct(order).hash()).to_series().is_duplicated().any())


def pair_outcomes(decisions: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """One row per pair within each cell of `keys`: what each order chose and how they relate.

    Columns: keys, pair_id, cis_first / trans_first (the choice when the cisgender / the
    transgender candidate was listed first, by majority over repetitions of that order; null
    when that order is missing), and booleans repeated (an order shown more than once), tied
    (an order's repetitions split evenly), complete, agree_cis, agree_trans, split_first,
    split_second, has_none.
    """
    per_order = order_outcomes(decisions, keys)
    pair = [*keys, "pair_id"]

    def listed_first(who: str) -> pl.DataFrame:
        return per_order.filter(pl.col("first") == who).select(
            *pair, pl.col("chosen").alias(f"{who}_first")
        )

    if (per_order["n"] == 1).all() and per_order["first"].is_in([CIS, TRANS]).all():
        # Each pair's orders shown once each, each one of the two (every run of ibias's own
        # grid): the pairs are those of either order, joined. At ten times the paper's grid
        # a third of the time and under half the memory of grouping a million trials.
        pairs = (
            listed_first(CIS)
            .join(listed_first(TRANS), on=pair, how="full", coalesce=True, nulls_equal=True)
            .with_columns(pl.lit(False).alias("repeated"), pl.lit(False).alias("tied"))
        )
    else:
        pairs = (
            per_order.group_by(pair)
            .agg((pl.col("n") > 1).any().alias("repeated"), pl.col("tied").any().alias("tied"))
            .join(listed_first(CIS), on=pair, how="left", nulls_equal=True)
            .join(listed_first(TRANS), on=pair, how="left", nulls_equal=True)
        )
    pairs = pairs.select(*pair, "cis_first", "trans_first", "repeated", "tied")
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


def pair_sums(frame: pl.DataFrame, **counts: pl.Expr) -> pl.DataFrame:
    """Per cell (`_cell`) and pair: its trials `n` and the count of its trials meeting each
    condition in `counts` (by name), sorted by cell then pair: the units the pair bootstrap
    resamples, summed where the trials are (analysis/bootstrap.py `grouped_share_units_ci`),
    so no interval needs a row per trial."""
    return (
        frame.group_by(CELL, "pair_id")
        .agg(
            pl.len().cast(pl.Int64).alias("n"),
            *[c.sum().cast(pl.Int64).alias(name) for name, c in counts.items()],
        )
        .sort(CELL, "pair_id")
    )


def share_ci(
    units: pl.DataFrame,
    successes: str,
    trials: str,
    n_cells: int,
    *,
    B: int,
    method: Method,
    rng: np.random.Generator,
    successes_minus: str | None = None,
) -> dict[int, CI]:
    """The pair-resampled share `successes` / `trials` per cell from `pair_sums` units (the
    trials of a pair outside `trials` are dropped and counted); `successes_minus` subtracts
    another count from the numerator (the gap's cis - trans over decided trials)."""
    num = units[successes].to_numpy().astype(np.float64)
    if successes_minus is not None:
        num = num - units[successes_minus].to_numpy()
    den = units[trials].to_numpy().astype(np.float64)
    cell = cell_codes(units)
    dropped = np.bincount(cell, weights=units["n"].to_numpy() - den, minlength=n_cells)
    used = den > 0
    return grouped_share_units_ci(
        np.column_stack([num[used], den[used]]),
        cell[used],
        n_cells,
        dropped=dropped.astype(np.int64),
        B=B,
        method=method,
        rng=rng,
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
    units = pair_sums(frame, cis=chosen == CIS, trans=chosen == TRANS).with_columns(
        (pl.col("cis") + pl.col("trans")).alias("decided")
    )
    n_cells = cells.height
    cis_ci = share_ci(units, "cis", "n", n_cells, B=B, method=method, rng=rng)
    trans_ci = share_ci(units, "trans", "n", n_cells, B=B, method=method, rng=rng)
    # Drawn after the two shares, so their intervals are those of a table without the gap:
    # +1 for a trial choosing the cisgender candidate, -1 the transgender one, over decided
    # trials (the paper's deviation from parity, 0 when the two are chosen equally often).
    gap_ci = share_ci(
        units, "cis", "decided", n_cells, B=B, method=method, rng=rng, successes_minus="trans"
    )
    del units
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
    table = explained(_tests(table)).with_columns(
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
    """Sign test over agreeing pairs and the naive binomial test, for every cell at once."""
    n_cis, n_trans = table["n_cis"].to_numpy(), table["n_trans"].to_numpy()
    sign = sign_tests(table["pairs_cis_both"].to_numpy(), table["pairs_trans_both"].to_numpy())
    naive = binomial_tests(n_trans, n_cis + n_trans)
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
    units = pair_sums(frame, decided=decided, first=chose_first)
    ci = share_ci(units, "first", "decided", cells.height, B=B, method=method, rng=rng)
    del units
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
    p = binomial_tests(n_first, n)
    table = table.with_columns(
        pl.Series("wilson_low", low),
        pl.Series("wilson_high", high),
        pl.Series("binomial_p", p, dtype=pl.Float64).fill_nan(None),
        pl.lit(POSITION_NULL).alias("binomial_p_null"),
        pl.lit(B, dtype=pl.Int64).alias("B"),
        pl.lit(method).alias("ci_method"),
        *wilson_labels(),
    )
    return explained(table).select(list(_POSITION_SCHEMA))


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

"""Allocation tables for people like these: the population target, beside the roster's own.

`allocation_cells`, `position_bias`, `allocation_effects`, `allocation_identity_swap` and
`allocation_logprob_shares` answer about *these people* (the roster's: their intervals resample
pairs, and only the models' answers are random). The paper's claims are about transgender and
cisgender people in general, so this module gives the same estimates with intervals and tests
for *people like these*: the roster's people are one draw from a population, and each person
recurs in several pairs (in both designs), so every interval and test here treats the cis and
the trans persons as crossed random draws (`analysis.population`, by the method the analysis
was asked for: `analyze --population-method`, a two-way cluster-robust t interval by default).
Each test is Holm-corrected across services within its family (the other keys of the row), as
in `allocation_cells`.

Each trial's two people come from the store (`PAIR_PEOPLE`: per pair_id, the person ids of the
pair's cisgender and transgender person in the original arm); trials of a pair without that
mapping are left out and counted in `dropped_trials`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from numpy.typing import ArrayLike

from ibias.analysis import population
from ibias.analysis.cells import CELL, cell_codes, holm_within, number_cells
from ibias.analysis.units.allocation import effects, identity_swap, shares
from ibias.analysis.units.allocation.load import PAIR_PEOPLE
from ibias.prompts.codes import CIS, NO_CHOICE, TRANS

CELLS = "allocation_population"
EFFECTS = "allocation_effects_population"
SWAP = "allocation_identity_swap_population"
POSITION = "position_bias_population"
LOGPROBS = "allocation_logprob_shares_population"
TABLES: tuple[str, ...] = (CELLS, EFFECTS, SWAP, POSITION, LOGPROBS)
LEVEL = 0.95
_H0 = "two-sided; H0: "
_FOR = " for people like these"
GAP_NULL = f"{_H0}the cis - trans gap among decided trials is 0{_FOR}"
EFFECT_NULL = f"{_H0}the effect is 0{_FOR}"
IDENTITY_NULL = f"{_H0}the identity effect is 0{_FOR}"
PERSON_NULL = f"{_H0}the person effect is 0{_FOR}"
POSITION_NULL = f"{_H0}whoever is listed first is chosen in half the decided trials{_FOR}"
P_CIS_NULL = f"{_H0}the mean probability of choosing the cisgender candidate is 0.5{_FOR}"
DIFFERENCE_NULL = f"{_H0}the mean logprob probability equals the sampled share{_FOR}"
LOGPROB_KEYS: tuple[str, ...] = ("model_id", "language", "service")

_LABELS: dict[str, pl.DataType] = {
    "B": pl.Int64(),
    "df": pl.Float64(),
    "ci_level": pl.Float64(),
    "ci_method": pl.String(),
    "population_method": pl.String(),
    "resampled": pl.String(),
    "target": pl.String(),
}
_UNITS: dict[str, pl.DataType] = {
    "pairs": pl.Int64(),
    "cis_persons": pl.Int64(),
    "trans_persons": pl.Int64(),
}
_CELL_KEYS: dict[str, pl.DataType] = {
    **{k: pl.String() for k in ("model_id", "language", "service")},
    "explanation": pl.Boolean(),
    "symptoms": pl.String(),
}


def _interval(
    stem: str, *, p: bool = False, holm: bool = False, df: bool = True
) -> dict[str, pl.DataType]:
    """`stem`'s bounds (`<stem>_ci_low`, `_high`), its own t degrees of freedom (`<stem>_df`,
    unless it is the table's headline, whose are `df`) and optionally its p-value, Holm and
    null."""
    out: dict[str, pl.DataType] = {f"{stem}_ci_low": pl.Float64(), f"{stem}_ci_high": pl.Float64()}
    if df:
        out[f"{stem}_df"] = pl.Float64()
    if p:
        out[f"{stem}_p"] = pl.Float64()
    if holm:
        out[f"{stem}_p_holm"] = pl.Float64()
    if p:
        out[f"{stem}_p_null"] = pl.String()
    return out


CELLS_SCHEMA: dict[str, pl.DataType] = {
    **_CELL_KEYS,
    "trials": pl.Int64(),
    "dropped_trials": pl.Int64(),
    **_UNITS,
    "share_cis": pl.Float64(),
    **_interval("cis"),
    "share_trans": pl.Float64(),
    **_interval("trans"),
    "gap": pl.Float64(),
    **_interval("gap", p=True, holm=True, df=False),
    **_LABELS,
}
EFFECTS_SCHEMA: dict[str, pl.DataType] = {
    **{k: pl.String() for k in effects.EFFECT_KEYS},
    "label": pl.String(),
    "difference": pl.Float64(),
    "ci_low": pl.Float64(),
    "ci_high": pl.Float64(),
    "p": pl.Float64(),
    "p_holm": pl.Float64(),
    "p_null": pl.String(),
    **_UNITS,
    "dropped_trials": pl.Int64(),
    **_LABELS,
}
SWAP_SCHEMA: dict[str, pl.DataType] = {
    **_CELL_KEYS,
    **_UNITS,
    "identity_effect": pl.Float64(),
    **_interval("identity", p=True, holm=True, df=False),
    "person_effect": pl.Float64(),
    **_interval("person", p=True, holm=True),
    **_LABELS,
}
POSITION_SCHEMA: dict[str, pl.DataType] = {
    **_CELL_KEYS,
    "decided": pl.Int64(),
    "dropped_trials": pl.Int64(),
    **_UNITS,
    "share_first": pl.Float64(),
    "ci_low": pl.Float64(),
    "ci_high": pl.Float64(),
    "p": pl.Float64(),
    "p_holm": pl.Float64(),
    "p_null": pl.String(),
    **_LABELS,
}
LOGPROBS_SCHEMA: dict[str, pl.DataType] = {
    **{k: pl.String() for k in LOGPROB_KEYS},
    "decided": pl.Int64(),
    "dropped_trials": pl.Int64(),
    **_UNITS,
    "mean_p_cis": pl.Float64(),
    **_interval("p_cis", p=True, holm=True, df=False),
    "sampled_share_cis": pl.Float64(),
    **_interval("sampled"),
    "difference": pl.Float64(),
    **_interval("difference", p=True),
    **_LABELS,
}


@dataclass(frozen=True)
class Settings:
    """How one table's population intervals are computed: the method (`population.METHODS`),
    the bootstrap's replicates and the table's own generator (the t methods draw nothing)."""

    method: str
    B: int
    rng: np.random.Generator

    def ci(
        self,
        outcome: ArrayLike,
        frame: pl.DataFrame,
        *,
        treated: ArrayLike | None = None,
        null: float = 0.0,
        trials: pl.Series | None = None,
    ) -> dict[object, population.PopulationCI]:
        """Every cell's interval and test; `frame` holds the trials' people and cell codes
        (`trials`: how many trials each row stands for, `outcome` their sum)."""
        return population.grouped_population_ci(
            outcome, frame["cis_person"].to_numpy(), frame["trans_person"].to_numpy(),
            cell_codes(frame), treated=treated, null=null, method=self.method, B=self.B,
            level=LEVEL, rng=self.rng,
            trials=None if trials is None else trials.to_numpy(),
        )  # fmt: skip


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
        # Integer codes (in the ids' sorted order) so the estimators factorise numbers, not
        # strings, over every trial.
        .with_columns(
            pl.col("cis_person").rank("dense").cast(pl.Int64),
            pl.col("trans_person").rank("dense").cast(pl.Int64),
        )
    )
    return decisions.join(people, on="pair_id", how="left")


def _labelled(frame: pl.DataFrame, settings: Settings) -> pl.DataFrame:
    """The label columns: what each interval is. `B` only where replicates were drawn (`df`,
    the t reference's degrees of freedom, comes with each statistic's results)."""
    ci_method, resampled = population.CI_LABELS[settings.method]
    bootstrap = settings.method in population.BOOTSTRAP_METHODS
    return frame.with_columns(
        pl.lit(settings.B if bootstrap else None, dtype=pl.Int64).alias("B"),
        pl.lit(LEVEL).alias("ci_level"),
        pl.lit(ci_method).alias("ci_method"),
        pl.lit(settings.method).alias("population_method"),
        pl.lit(resampled).alias("resampled"),
        pl.lit(population.TARGET).alias("target"),
    )


def _results(
    results: Mapping[object, population.PopulationCI], prefix: str, *, counts: bool = False
) -> pl.DataFrame:
    cis = list(results.values())
    columns: dict[str, pl.Series] = {
        CELL: pl.Series(CELL, list(results), dtype=pl.Int64),
        f"{prefix}_estimate": pl.Series([c.estimate for c in cis], dtype=pl.Float64),
        f"{prefix}_ci_low": pl.Series([c.low for c in cis], dtype=pl.Float64),
        f"{prefix}_ci_high": pl.Series([c.high for c in cis], dtype=pl.Float64),
        f"{prefix}_p": pl.Series([c.p for c in cis], dtype=pl.Float64),
        f"{prefix}_df": pl.Series([c.df for c in cis], dtype=pl.Float64),
    }
    if counts:
        for name in ("pairs", "cis_persons", "trans_persons"):
            columns[name] = pl.Series([getattr(c, name) for c in cis], dtype=pl.Int64)
        columns["_dropped"] = pl.Series([c.n_dropped for c in cis], dtype=pl.Int64)
    return pl.DataFrame(columns).with_columns(pl.selectors.float().fill_nan(None))


def _known(frame: pl.DataFrame, trials: str | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(trials whose two people are known, per-cell count of the others); `trials` names the
    column saying how many trials a row stands for (rows summed per pair), if not one."""
    unknown = pl.col("cis_person").is_null() | pl.col("trans_person").is_null()
    count = pl.len() if trials is None else pl.col(trials).sum()
    lost = frame.filter(unknown).group_by(CELL).agg(count.cast(pl.Int64).alias("unknown"))
    return frame.filter(~unknown), lost


def _numbered(
    rows: pl.DataFrame, people: pl.DataFrame | None, keys: Sequence[str]
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame] | None:
    """(trials with people and cell codes, the cells, per-cell unknown-people counts), or None
    when no trial's people are known. `rows` holds only the columns its table reads: each
    step here copies every column of a million trials at ten times the paper's grid."""
    if rows.is_empty():
        return None
    frame, cells = number_cells(with_people(rows, people), keys)
    frame, lost = _known(frame)
    return None if frame.is_empty() else (frame, cells, lost)


def _finish(
    out: pl.DataFrame,
    settings: Settings,
    schema: Mapping[str, pl.DataType],
    holm: Sequence[tuple[str, Sequence[str]]] = (),
) -> pl.DataFrame:
    """Labels, Holm columns (p column, family keys), the schema's columns in its order."""
    out = _labelled(out, settings)
    for column, family in holm:
        out = holm_within(out, column, family, f"{column}_holm")
    return out.select(list(schema)).cast(dict(schema))  # type: ignore[arg-type]


def _dropped(extra: str | None = "_dropped") -> pl.Expr:
    """`dropped_trials`: trials whose people are unknown, plus the estimator's own drops."""
    unknown = pl.col("unknown").fill_null(0)
    return (unknown if extra is None else unknown + pl.col(extra)).alias("dropped_trials")


def _without(keys: Sequence[str], *drop: str) -> tuple[str, ...]:
    return tuple(k for k in keys if k not in drop)


def cells_table(
    decisions: pl.DataFrame, pair_people: pl.DataFrame | None, settings: Settings
) -> pl.DataFrame:
    """Per allocation cell: the cis and trans shares (over all trials) and the gap among decided
    trials, with population intervals, and the test of no identity preference."""
    used = decisions.select(*shares.CELL_KEYS, "pair_id", "chosen")
    numbered = _numbered(used, pair_people, shares.CELL_KEYS)
    if numbered is None:
        return pl.DataFrame(schema=CELLS_SCHEMA)
    frame, cells, lost = numbered
    chosen = frame["chosen"].to_numpy()
    cis = settings.ci((chosen == CIS).astype(np.float64), frame, null=0.5)
    trans = settings.ci((chosen == TRANS).astype(np.float64), frame, null=0.5)
    gap = settings.ci(shares.gap_outcome(frame["chosen"]), frame)
    trials = frame.group_by(CELL).agg(pl.len().cast(pl.Int64).alias("trials"))
    out = (
        cells.join(trials, on=CELL)
        .join(lost, on=CELL, how="left")
        .join(_results(cis, "cis", counts=True), on=CELL)
        .join(_results(trans, "trans"), on=CELL)
        .join(_results(gap, "gap"), on=CELL)
        .with_columns(
            _dropped(None),
            pl.col("cis_estimate").alias("share_cis"),
            pl.col("trans_estimate").alias("share_trans"),
            pl.col("gap_estimate").alias("gap"),
            pl.col("gap_df").alias("df"),
            pl.lit(GAP_NULL).alias("gap_p_null"),
        )
        .sort(CELL)
        .drop(CELL)
    )
    return _finish(out, settings, CELLS_SCHEMA, [("gap_p", shares.FAMILY_KEYS)])


def position_table(
    decisions: pl.DataFrame, pair_people: pl.DataFrame | None, settings: Settings
) -> pl.DataFrame:
    """Per allocation cell: the share of decided trials choosing whoever was listed first, for
    people like these, and the test that it is one half (no position bias)."""
    used = decisions.select(*shares.CELL_KEYS, "pair_id", "first", "chosen")
    numbered = _numbered(used, pair_people, shares.CELL_KEYS)
    if numbered is None:
        return pl.DataFrame(schema=POSITION_SCHEMA)
    frame, cells, lost = numbered
    undecided = (frame["chosen"] == NO_CHOICE).to_numpy()
    first = (frame["chosen"] == frame["first"]).to_numpy().astype(np.float64)
    found = settings.ci(np.where(undecided, np.nan, first), frame, null=0.5)
    decided = frame.group_by(CELL).agg(
        (pl.col("chosen") != NO_CHOICE).sum().cast(pl.Int64).alias("decided")
    )
    out = (
        cells.join(decided, on=CELL)
        .join(lost, on=CELL, how="left")
        .join(_results(found, "first", counts=True), on=CELL)
        .with_columns(
            # Trials without a decision are not dropped: the share is among decided trials.
            _dropped(None),
            pl.col("first_estimate").alias("share_first"),
            pl.col("first_ci_low").alias("ci_low"),
            pl.col("first_ci_high").alias("ci_high"),
            pl.col("first_p").alias("p"),
            pl.col("first_df").alias("df"),
            pl.lit(POSITION_NULL).alias("p_null"),
        )
        .sort(CELL)
        .drop(CELL)
    )
    return _finish(out, settings, POSITION_SCHEMA, [("p", shares.FAMILY_KEYS)])


def effects_table(
    decisions: pl.DataFrame, pair_people: pl.DataFrame | None, settings: Settings
) -> pl.DataFrame:
    """The condition effects of `allocation_effects` (trans share, treated - control, over the
    pairs seen under both), with population intervals and p-values."""
    if decisions.is_empty():
        return pl.DataFrame(schema=EFFECTS_SCHEMA)
    people = with_people(decisions.select(effects.EFFECT_INPUT), pair_people)
    # Summed per pair and condition before the contrasts are stacked (`effect_sums`): the
    # estimator sums the trials per person pair, so it is given them summed.
    rows, cells = effects.effect_sums(people, ("cis_person", "trans_person"))
    del people
    if rows.is_empty():
        return pl.DataFrame(schema=EFFECTS_SCHEMA)
    frame, lost = _known(rows.drop("pair_id"), trials="n")
    del rows
    if frame.is_empty():
        return pl.DataFrame(schema=EFFECTS_SCHEMA)
    found = settings.ci(
        frame["t"].to_numpy(), frame, treated=frame["treated"].to_numpy(), trials=frame["n"]
    )
    out = (
        cells.join(_results(found, "d", counts=True), on=CELL)
        .join(lost, on=CELL, how="left")
        .with_columns(
            pl.col("effect")
            .replace_strict(effects.EFFECT_LABELS, default=pl.col("effect"))
            .alias("label"),
            pl.col("d_estimate").alias("difference"),
            pl.col("d_ci_low").alias("ci_low"),
            pl.col("d_ci_high").alias("ci_high"),
            pl.col("d_p").alias("p"),
            pl.col("d_df").alias("df"),
            pl.lit(EFFECT_NULL).alias("p_null"),
            _dropped(),
        )
        .sort(CELL)
        .drop(CELL)
    )
    family = _without(effects.EFFECT_KEYS, "service")
    return _finish(out, settings, EFFECTS_SCHEMA, [("p", family)])


def swap_table(
    every: pl.DataFrame, pair_people: pl.DataFrame | None, settings: Settings
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
    numbered = _numbered(rows, pair_people, identity_swap.KEYS)
    if numbered is None:
        return pl.DataFrame(schema=SWAP_SCHEMA)
    frame, cells, _ = numbered
    y = frame["y"].to_numpy()
    original = frame["original"].to_numpy()
    identity = settings.ci(y * np.where(original, 1.0, -1.0), frame, treated=original)
    person = settings.ci(y, frame, treated=original)
    out = (
        cells.join(_results(identity, "identity", counts=True), on=CELL)
        .join(_results(person, "person"), on=CELL)
        .with_columns(
            pl.col("identity_estimate").alias("identity_effect"),
            pl.col("person_estimate").alias("person_effect"),
            pl.col("identity_df").alias("df"),
            pl.lit(IDENTITY_NULL).alias("identity_p_null"),
            pl.lit(PERSON_NULL).alias("person_p_null"),
        )
        .sort(CELL)
        .drop(CELL)
    )
    family = _without(identity_swap.KEYS, "service")
    return _finish(out, settings, SWAP_SCHEMA, [("identity_p", family), ("person_p", family)])


def logprobs_table(
    decisions: pl.DataFrame,
    logprobs: pl.DataFrame | None,
    pair_people: pl.DataFrame | None,
    settings: Settings,
) -> pl.DataFrame:
    """`allocation_logprob_shares` for people like these: over the same trials (a choice read
    by the main parser and a probability read from the logprobs), the mean P(cis), the sampled
    cis share and their difference, pooled over explanation and symptoms."""
    if logprobs is None or logprobs.is_empty() or decisions.is_empty():
        return pl.DataFrame(schema=LOGPROBS_SCHEMA)
    used = (
        decisions.select(*LOGPROB_KEYS, "trial_key", "pair_id", "chosen")
        .join(logprobs.select("trial_key", "p_cis"), on="trial_key", how="inner")
        .filter(pl.col("p_cis").is_not_null() & pl.col("chosen").is_in([CIS, TRANS]))
    )
    numbered = _numbered(used, pair_people, LOGPROB_KEYS)
    if numbered is None:
        return pl.DataFrame(schema=LOGPROBS_SCHEMA)
    frame, cells, lost = numbered
    p_cis = frame["p_cis"].to_numpy().astype(np.float64)
    sampled = (frame["chosen"] == CIS).to_numpy().astype(np.float64)
    mean_p = settings.ci(p_cis, frame, null=0.5)
    share = settings.ci(sampled, frame, null=0.5)
    difference = settings.ci(p_cis - sampled, frame)
    decided = frame.group_by(CELL).agg(pl.len().cast(pl.Int64).alias("decided"))
    out = (
        cells.join(decided, on=CELL)
        .join(lost, on=CELL, how="left")
        .join(_results(mean_p, "p_cis", counts=True), on=CELL)
        .join(_results(share, "sampled").drop("sampled_p"), on=CELL)
        .join(_results(difference, "difference"), on=CELL)
        .with_columns(
            _dropped(None),
            pl.col("p_cis_estimate").alias("mean_p_cis"),
            pl.col("sampled_estimate").alias("sampled_share_cis"),
            pl.col("difference_estimate").alias("difference"),
            pl.col("p_cis_df").alias("df"),
            pl.lit(P_CIS_NULL).alias("p_cis_p_null"),
            pl.lit(DIFFERENCE_NULL).alias("difference_p_null"),
        )
        .sort(CELL)
        .drop(CELL)
    )
    family = _without(LOGPROB_KEYS, "service")
    return _finish(out, settings, LOGPROBS_SCHEMA, [("p_cis_p", family)])


SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    CELLS: CELLS_SCHEMA,
    EFFECTS: EFFECTS_SCHEMA,
    SWAP: SWAP_SCHEMA,
    POSITION: POSITION_SCHEMA,
    LOGPROBS: LOGPROBS_SCHEMA,
}


def jobs(
    decisions: pl.DataFrame,
    every: pl.DataFrame,
    extras: Mapping[str, pl.DataFrame],
    *,
    method: str | None,
    B: int,
    rng: Callable[[str], np.random.Generator],
    logprobs: pl.DataFrame | None = None,
) -> dict[str, Callable[[], pl.DataFrame]]:
    """The population tables, one job each, to be run in any order or at once (each table
    draws from its own generator, so the order changes no number: analysis/parallel.py);
    empty tables when `method` is None (`analyze --no-population`) or the store's pair people
    were not read. `decisions` is the original arm, `every` both arms, `logprobs` the
    `allocation_logprobs` rows."""
    people = extras.get(PAIR_PEOPLE)
    if method is None or people is None:
        return {
            name: functools.partial(pl.DataFrame, schema=schema) for name, schema in SCHEMAS.items()
        }
    chosen: str = method

    def settings(name: str) -> Settings:
        return Settings(chosen, B, rng(name))

    return {
        CELLS: lambda: cells_table(decisions, people, settings(CELLS)),
        EFFECTS: lambda: effects_table(decisions, people, settings(EFFECTS)),
        SWAP: lambda: swap_table(every, people, settings(SWAP)),
        POSITION: lambda: position_table(decisions, people, settings(POSITION)),
        LOGPROBS: lambda: logprobs_table(decisions, logprobs, people, settings(LOGPROBS)),
    }

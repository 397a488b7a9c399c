"""Implicit versus decision bias across models: does a model's word-association bias predict
how strongly it favours one group when it allocates appointments?

Bai et al. report that implicit (word-association) bias goes with biased decisions across
models; the paper assumes it. Per design x language, each model present in both experiments
gives one point: its mean word-association bias (the per-trial mean over every scored trial of
all categories, `word_association_overall.mean_bias`) and its decision bias, from the original
arm of the allocation experiment only (the identity-swap control's swapped trials show the
other person as cisgender and have their own table, as every other allocation table does).

The decision bias is the size of a model's preferences across services, not their sum: a model
that favours cisgender people for one service and transgender people for another is biased
twice, not unbiased. With g_s the gap of service s (the share choosing the cisgender candidate
minus the share choosing the transgender one among decided trials; 0 is parity), the measure
estimates the mean of g_s^2 over services, unbiasedly, by a cross-fitted product over pairs:

    Q_s = sum_{k != l} d_k d_l / sum_{k != l} c_k c_l
        = ((sum d)^2 - sum d^2) / ((sum c)^2 - sum c^2)

with d_k = (cis chosen - trans chosen) and c_k = decided trials of pair k of the service (all
its orders and conditions). A plain mean of |g_s| or g_s^2 is positive whenever there is noise:
E[g^2] = g^2 + Var(g). Q_s multiplies each pair's gap only with other pairs' gaps, so no
trial's noise is squared: given the decided counts and independent pairs, E[Q_s] = g_s^2 when
every pair has the gap g_s, and E[Q_s] = 0 when no pair has a preference, or when the pairs are
independent draws from people among whom the service has no preference. It is the average of
all split-half products (one half of the pairs against the other) and needs no variance
estimate, which a bias correction g^2 - Var(g) would: pairs differ (position bias cancels only
within a pair's two orders, person effects differ by pair), so a binomial variance is wrong
and a clustered one is biased in small samples. One caveat: pairs of a service that share a
person are not independent, so with person effects and a population null, Q_s keeps a small
positive bias of the order of the shared persons' effects (`docs/paper-statistics.md`).

`decision_msq` is the mean of Q_s over the model's services with at least two pairs (equal
weight per service, as the paper reports services side by side); `decision_rms`, its signed
square root (a root-mean-square gap on the gap's scale, negative when noise outweighs any
preference), is the measure ranked. The pooled `gap` (all services together, signed) stays in
the points table as a description. Across those models:

- Spearman's rho (Pearson's r of the average ranks, as `scipy.stats.spearmanr`) of mean bias
  and `decision_rms`: a monotone association, robust to the two measures being on unrelated
  scales.
- A two-sided permutation p-value for H0 "no association" (the decision measures' pairing
  with the biases is exchangeable): every one of the n! pairings when n <= 8 (40,320), else
  9,999 random ones, p = min(1, 2 min(P(rho* >= rho), P(rho* <= rho))), the rule of
  `scipy.stats.permutation_test`; Monte Carlo counts the observed pairing among the draws.
- A percentile bootstrap interval over *models* (each replicate draws n models with their two
  values, B times): the models are the units whose association is asked about. A replicate
  whose drawn models all share one value of a measure has no rho and is left out (counted in
  `ci_undefined`).

With fewer than 8 models, rho has few possible values, the permutation test little power and
the bootstrap few distinct resamples: the table says so in `warning`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

import numpy as np
import polars as pl
from numpy.typing import NDArray
from scipy.stats import rankdata

from ibias.analysis import labels
from ibias.analysis.cross import CrossAnalysis, CrossContext
from ibias.analysis.identity_swap import without_swapped
from ibias.analysis.report import absent, col, count, esc, interval, num, pvalue, table
from ibias.prompts.codes import CIS, TRANS

KEYS: tuple[str, ...] = ("design", "language")
MIN_MODELS = 8
EXACT_MAX_MODELS = 8
PERMUTATIONS = 9999
CI_LEVEL = 0.95
P_NULL = "two-sided; H0: no association (pairings of bias and decision measure exchangeable)"
DECISION = "decision_rms"
POINT_COLUMNS: tuple[str, ...] = (
    "mean_bias", "scored", "decision_rms", "decision_msq", "services",
    "gap", "decided", "n_cis", "n_trans",
)  # fmt: skip
FEW_MODELS = (
    "fewer than 8 models: rho takes few values, the permutation test has little power and the "
    "bootstrap few distinct resamples; read rho as descriptive"
)

FloatArray = NDArray[np.float64]


def model_points(word_association: pl.DataFrame, allocation: pl.DataFrame) -> pl.DataFrame:
    """One row per design x language x model present in both experiments: mean bias, scored
    trials, the decision measure (`decision_msq`, `decision_rms`, over `services`) and the
    pooled allocation gap among decided trials with its counts. Allocation trials of the
    identity-swap control's swapped arm are left out."""
    wa = _with_design(word_association)
    al = _with_design(without_swapped(allocation))
    bias = wa.group_by([*KEYS, "model_id"]).agg(
        pl.col("bias").mean().alias("mean_bias"),
        pl.col("bias").is_not_null().sum().cast(pl.Int64).alias("scored"),
    )
    gap = al.group_by([*KEYS, "model_id"]).agg(
        (pl.col("chosen") == CIS).sum().cast(pl.Int64).alias("n_cis"),
        (pl.col("chosen") == TRANS).sum().cast(pl.Int64).alias("n_trans"),
    )
    decided = pl.col("n_cis") + pl.col("n_trans")
    return (
        bias.join(gap, on=[*KEYS, "model_id"], how="inner")
        .join(decision_measure(al), on=[*KEYS, "model_id"], how="left")
        .with_columns(
            decided.alias("decided"),
            ((pl.col("n_cis") - pl.col("n_trans")) / decided).fill_nan(None).alias("gap"),
            pl.col("services").fill_null(0),
        )
        .select(*KEYS, "model_id", *POINT_COLUMNS)
        .sort([*KEYS, "model_id"])
    )


def cross_pair_square(d: FloatArray, c: FloatArray) -> FloatArray:
    """Q = ((sum d)^2 - sum d^2) / ((sum c)^2 - sum c^2) over the last axis (the pairs of one
    service): the cross-fitted estimate of the squared gap described in the module. NaN with
    fewer than two pairs with decided trials."""
    num = d.sum(axis=-1) ** 2 - (d * d).sum(axis=-1)
    den = c.sum(axis=-1) ** 2 - (c * c).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def decision_measure(allocation: pl.DataFrame) -> pl.DataFrame:
    """Per design x language x model: `decision_msq`, the mean over services of `Q_s`
    (`cross_pair_square` of the service's pairs), `decision_rms`, its signed square root, and
    `services`, how many services had a Q_s. Pass the original arm only."""
    al = _with_design(allocation)
    if not {"service", "pair_id", "chosen"} <= set(al.columns):
        return pl.DataFrame(schema=_MEASURE_SCHEMA)
    pairs = al.group_by([*KEYS, "model_id", "service", "pair_id"]).agg(
        ((pl.col("chosen") == CIS).cast(pl.Float64) - (pl.col("chosen") == TRANS).cast(pl.Float64))
        .sum()
        .alias("d"),
        pl.col("chosen").is_in([CIS, TRANS]).cast(pl.Float64).sum().alias("c"),
    )
    den = pl.col("c").sum() ** 2 - (pl.col("c") ** 2).sum()
    num = pl.col("d").sum() ** 2 - (pl.col("d") ** 2).sum()
    per_service = (
        pairs.group_by([*KEYS, "model_id", "service"])
        .agg(pl.when(den > 0).then(num / den).otherwise(None).alias("q"))
        .filter(pl.col("q").is_not_null())
    )
    msq = pl.col("decision_msq")
    return (
        per_service.group_by([*KEYS, "model_id"])
        .agg(pl.col("q").mean().alias("decision_msq"), pl.len().cast(pl.Int64).alias("services"))
        .with_columns((msq.sign() * msq.abs().sqrt()).alias("decision_rms"))
    )


_MEASURE_SCHEMA: dict[str, pl.DataType] = {
    "design": pl.String(), "language": pl.String(), "model_id": pl.String(),
    "decision_msq": pl.Float64(), "services": pl.Int64(), "decision_rms": pl.Float64(),
}  # fmt: skip


def _with_design(frame: pl.DataFrame) -> pl.DataFrame:
    if "design" in frame.columns:
        return frame
    return frame.with_columns(pl.lit("controlled").alias("design"))


def spearman(x: FloatArray, y: FloatArray) -> float:
    """Spearman's rho with average ranks; NaN when either measure is constant."""
    return float(_rho_rows(rankdata(x)[None, :], rankdata(y)[None, :])[0])


def _rho_rows(rx: FloatArray, ry: FloatArray) -> FloatArray:
    """Pearson's r row by row of two (rows, n) arrays of ranks (NaN for a constant row)."""
    dx = rx - rx.mean(axis=1, keepdims=True)
    dy = ry - ry.mean(axis=1, keepdims=True)
    den = np.sqrt((dx * dx).sum(axis=1) * (dy * dy).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (dx * dy).sum(axis=1) / den
    return np.where(den > 1e-12, np.clip(r, -1.0, 1.0), np.nan)


def permutation_p(
    x: FloatArray, y: FloatArray, *, rng: np.random.Generator, n_resamples: int = PERMUTATIONS
) -> tuple[float, bool]:
    """(two-sided permutation p of Spearman's rho, exact?) as described in the module."""
    n = x.shape[0]
    rx, ry = rankdata(x), rankdata(y)
    observed = float(_rho_rows(rx[None, :], ry[None, :])[0])
    if math.isnan(observed):
        return math.nan, False
    exact = n <= EXACT_MAX_MODELS
    if exact:
        perms = np.array(list(itertools.permutations(range(n))), dtype=np.intp)
    else:
        perms = rng.permuted(np.tile(np.arange(n), (n_resamples, 1)), axis=1)
    null = _rho_rows(np.broadcast_to(rx, perms.shape), ry[perms])
    tol = 1e-12 * max(1.0, abs(observed))
    greater = np.count_nonzero(null >= observed - tol)
    less = np.count_nonzero(null <= observed + tol)
    if exact:
        total = perms.shape[0]
    else:  # the observed pairing counts among the draws, as scipy does
        greater, less, total = greater + 1, less + 1, n_resamples + 1
    return float(min(1.0, 2.0 * min(greater, less) / total)), exact


def bootstrap_rho(
    x: FloatArray, y: FloatArray, *, B: int, rng: np.random.Generator, level: float = CI_LEVEL
) -> tuple[float, float, int]:
    """(low, high, undefined replicates): percentile interval of rho over resampled models."""
    n = x.shape[0]
    idx = rng.integers(0, n, size=(B, n))
    xs, ys = x[idx], y[idx]
    reps = _rho_rows(rankdata(xs, axis=1), rankdata(ys, axis=1))
    finite = reps[np.isfinite(reps)]
    if finite.size == 0:
        return math.nan, math.nan, B
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(finite, [alpha, 1.0 - alpha])
    return float(low), float(high), int(B - finite.size)


def summary_table(points: pl.DataFrame, *, B: int, rng: np.random.Generator) -> pl.DataFrame:
    """One row per design x language: models, rho, permutation p, bootstrap interval, warning."""
    rows: list[dict[str, object]] = []
    usable = points.filter(pl.col("mean_bias").is_not_null() & pl.col(DECISION).is_not_null())
    for key, part in usable.group_by(list(KEYS), maintain_order=True):
        part = part.sort("model_id")
        x = part["mean_bias"].to_numpy().astype(np.float64)
        y = part[DECISION].to_numpy().astype(np.float64)
        n = x.shape[0]
        rho = spearman(x, y) if n >= 2 else math.nan
        p, exact = permutation_p(x, y, rng=rng) if n >= 2 else (math.nan, False)
        low, high, undefined = (
            bootstrap_rho(x, y, B=B, rng=rng) if n >= 3 else (math.nan,) * 2 + (B,)
        )
        rows.append(
            {
                **dict(zip(KEYS, key, strict=True)),
                "models": n,
                "rho": rho,
                "perm_p": p,
                "perm_p_null": P_NULL,
                "perm_method": None
                if math.isnan(p)
                else ("exact, all pairings" if exact else f"monte carlo, {PERMUTATIONS} pairings"),
                "ci_low": low,
                "ci_high": high,
                "ci_level": CI_LEVEL,
                "ci_method": "percentile",
                "resampled": "model",
                # rho is about models: resampling them speaks of models like these ones
                "target": "models like these",
                "B": B,
                "ci_undefined": undefined,
                "warning": FEW_MODELS if n < MIN_MODELS else None,
            }
        )
    schema: dict[str, pl.DataType] = {
        "design": pl.String(), "language": pl.String(), "models": pl.Int64(),
        "rho": pl.Float64(), "perm_p": pl.Float64(), "perm_p_null": pl.String(),
        "perm_method": pl.String(), "ci_low": pl.Float64(), "ci_high": pl.Float64(),
        "ci_level": pl.Float64(), "ci_method": pl.String(), "resampled": pl.String(),
        "target": pl.String(), "B": pl.Int64(), "ci_undefined": pl.Int64(), "warning": pl.String(),
    }  # fmt: skip
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    return frame.with_columns(pl.col(pl.Float64).fill_nan(None)).sort(list(KEYS))


ANCHOR, TITLE = "implicit-vs-decision", "Implicit versus decision bias"


def section(points: pl.DataFrame, summary: pl.DataFrame) -> str:
    """The report section: per design and language, the association and its points."""
    head = f"<h2 id='{ANCHOR}'>{esc(TITLE)}</h2>"
    intro = (
        "<p>Does a model's word-association bias go with how strongly it favours one group "
        "when it allocates appointments? Each model is one point: its mean word-association "
        "bias (all categories) against its decision bias, the root mean square over services "
        "of its allocation gap (among decided trials, the share choosing the cisgender "
        "candidate minus the share choosing the transgender one), so that preferences in "
        "opposite directions in two services add up instead of cancelling. Each squared gap "
        "is estimated by multiplying every pair's gap only with other pairs' gaps, so noise "
        "does not make it positive: it is 0 on average for a model with no preference in any "
        "service (and negative when noise outweighs a small preference). Only the original "
        "arm's trials count (not the identity-swap control's swapped ones). The pooled gap, "
        "all services together, is shown for reference. Spearman's rho across models, a "
        "two-sided permutation p-value (exact over all pairings up to 8 models) and a 95% "
        "percentile bootstrap interval that resamples models.</p>"
    )
    if summary.is_empty():
        return (
            head
            + intro
            + absent("No model has both word-association and allocation trials in one language.")
        )
    parts = [head, intro]
    columns = [
        col("model", "model_id", text=True),
        col("mean word-association bias", "mean_bias", lambda v: num(v, 3)),
        col("scored trials", "scored", count),
        col("decision bias (RMS gap over services)", "decision_rms", lambda v: num(v, 3)),
        col("services", "services", count),
        col("pooled gap (cis − trans, decided)", "gap", lambda v: num(v, 3)),
        col("decided trials", "decided", count),
    ]
    for row in summary.iter_rows(named=True):
        title = labels.language(str(row["language"]))
        if row["design"] != "controlled":
            title += f" ({row['design']} design)"
        warning = row["warning"]
        text = (
            f"<p>{esc(title)}: {count(row['models'])} models, rho = {num(row['rho'], 2)} "
            f"{interval(row['ci_low'], row['ci_high'])}, permutation p = "
            f"{pvalue(row['perm_p'])} ({esc(row['perm_method'] or '—')}).</p>"
        )
        if warning:
            text += f'<p class="absent">Warning: {esc(warning)}.</p>'
        sub = points.filter(
            (pl.col("design") == row["design"]) & (pl.col("language") == row["language"])
        )
        parts.append(
            f"<details open><summary>{esc(title)}</summary>{text}{table(sub, columns)}</details>"
        )
    return "".join(parts)


STREAM = 6
"""The tables' generator: (seed, 6), fixed since the first release (published numbers)."""


def _tables(ctx: CrossContext) -> dict[str, pl.DataFrame]:
    """The points per model and their association across models."""
    points = model_points(ctx.views["word_association"], ctx.views["allocation"])
    return {
        "implicit_vs_decision": points,
        "implicit_vs_decision_summary": summary_table(points, B=ctx.B, rng=ctx.rng(STREAM)),
    }


def _section(ctx: CrossContext, tables: Mapping[str, pl.DataFrame]) -> str:
    del ctx
    return section(tables["implicit_vs_decision"], tables["implicit_vs_decision_summary"])


CROSS = CrossAnalysis(anchor=ANCHOR, title=TITLE, section=_section, tables=_tables)
"""Registered in `analysis/cross.py` for stores with word-association and allocation trials."""

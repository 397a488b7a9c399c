"""Implicit versus decision bias across models: does a model's word-association bias predict
how it allocates appointments?

Bai et al. report that implicit (word-association) bias goes with biased decisions across
models; the paper assumes it. Per design x language, each model present in both experiments
gives one point: its mean word-association bias (the per-trial mean over every scored trial of
all categories, `word_association_overall.mean_bias`) and its allocation gap (among decided
trials of every service and condition pooled, the share choosing the cisgender candidate minus
the share choosing the transgender one; 0 is parity). Across those models:

- Spearman's rho (Pearson's r of the average ranks, as `scipy.stats.spearmanr`): a monotone
  association, robust to the two measures being on unrelated scales.
- A two-sided permutation p-value for H0 "no association" (the gaps' pairing with the biases is
  exchangeable): every one of the n! pairings when n <= 8 (40,320), else 9,999 random ones,
  p = min(1, 2 min(P(rho* >= rho), P(rho* <= rho))), the rule of
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

import numpy as np
import polars as pl
from numpy.typing import NDArray
from scipy.stats import rankdata

from ibias.analysis import labels
from ibias.analysis.report import absent, col, count, esc, interval, num, pvalue, table
from ibias.prompts.codes import CIS, TRANS

KEYS: tuple[str, ...] = ("design", "language")
MIN_MODELS = 8
EXACT_MAX_MODELS = 8
PERMUTATIONS = 9999
CI_LEVEL = 0.95
P_NULL = "two-sided; H0: no association (pairings of bias and gap exchangeable)"
FEW_MODELS = (
    "fewer than 8 models: rho takes few values, the permutation test has little power and the "
    "bootstrap few distinct resamples; read rho as descriptive"
)

FloatArray = NDArray[np.float64]


def model_points(word_association: pl.DataFrame, allocation: pl.DataFrame) -> pl.DataFrame:
    """One row per design x language x model present in both experiments: mean bias, scored
    trials, the allocation gap among decided trials and its counts."""
    wa = _with_design(word_association)
    al = _with_design(allocation)
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
        .with_columns(
            decided.alias("decided"),
            ((pl.col("n_cis") - pl.col("n_trans")) / decided).fill_nan(None).alias("gap"),
        )
        .select(*KEYS, "model_id", "mean_bias", "scored", "gap", "decided", "n_cis", "n_trans")
        .sort([*KEYS, "model_id"])
    )


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
    usable = points.filter(pl.col("mean_bias").is_not_null() & pl.col("gap").is_not_null())
    for key, part in usable.group_by(list(KEYS), maintain_order=True):
        part = part.sort("model_id")
        x = part["mean_bias"].to_numpy().astype(np.float64)
        y = part["gap"].to_numpy().astype(np.float64)
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
        "B": pl.Int64(), "ci_undefined": pl.Int64(), "warning": pl.String(),
    }  # fmt: skip
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    return frame.with_columns(pl.col(pl.Float64).fill_nan(None)).sort(list(KEYS))


ANCHOR, TITLE = "implicit-vs-decision", "Implicit versus decision bias"


def section(points: pl.DataFrame, summary: pl.DataFrame) -> str:
    """The report section: per design and language, the association and its points."""
    head = f"<h2 id='{ANCHOR}'>{esc(TITLE)}</h2>"
    intro = (
        "<p>Does a model's word-association bias go with how it allocates appointments? Each "
        "model is one point: its mean word-association bias (all categories) against its "
        "allocation gap (among decided trials of every service and condition, the share "
        "choosing the cisgender candidate minus the share choosing the transgender one). "
        "Spearman's rho across models, a two-sided permutation p-value (exact over all "
        "pairings up to 8 models) and a 95% percentile bootstrap interval that resamples "
        "models.</p>"
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
        col("allocation gap (cis − trans, decided)", "gap", lambda v: num(v, 3)),
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

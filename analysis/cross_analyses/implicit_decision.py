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
estimates the mean of g_s^2 over services, unbiasedly, by a cross-fitted product over pairs
that share no person:

    Q_s = sum_{k, l disjoint} d_k d_l / sum_{k, l disjoint} c_k c_l

with d_k = (cis chosen - trans chosen) and c_k = decided trials of pair k of the service (all
its orders and conditions), over the ordered pairs (k, l) of the service's pairs that share
no person (four different people, so k != l). A plain mean of |g_s| or g_s^2 is positive
whenever there is noise: E[g^2] = g^2 + Var(g). Q_s multiplies each pair's gap only with the
gaps of pairs that have neither of its people, so neither a trial's noise nor a person's
effect is squared: pairs that share a person are correlated when people differ (person
effects), and products of them would count that person's effect squared (the earlier form,
over all k != l, had a mean of +0.004 at person sd 0.6 and +0.012 at 1.5 on the logit with no
preference anywhere in the tests' simulation; its signed root +0.034 and +0.055). Given the
decided counts, with people drawn independently from a population and no-choice independent
of the people and of the order, E[Q_s] = g_s^2, the squared population gap, whatever the
person sd: 0 when the service has no preference among people like these. It is the average
of products of disjoint pairs, so it needs no variance estimate, which a bias correction
g^2 - Var(g) would: pairs differ (position bias cancels only within a pair's two orders,
person effects differ by pair), so a binomial variance is wrong and a clustered one is biased
in small samples.

It is computed in linear time: with Dc[p] the sum of d over the service's pairs of cis person
p, Dt[q] over those of trans person q and Dct[p, q] over those with both,

    sum_{k, l disjoint} d_k d_l = S^2 - sum_p Dc[p]^2 - sum_q Dt[q]^2 + sum_{p, q} Dct[p, q]^2

(S = sum d; inclusion-exclusion over "same cis person" and "same trans person"), and the same
in c. The people of each pair come from the store (`allocation_pair_people`); a pair whose
people are unknown (no row there, or a null id) counts as having people of its own, shared
with no other pair, which for a service without known people gives back
((sum d)^2 - sum d^2) / ((sum c)^2 - sum c^2), unbiased only if its pairs share no one.

`decision_msq` is the mean of Q_s over the model's services with at least two disjoint pairs
with decided trials (equal weight per service, as the paper reports services side by side),
unbiased for the mean of the squared population gaps; `decision_rms`, its signed square root (a
root-mean-square gap on the gap's scale, negative when noise outweighs any preference), is
the measure shown. The signed root of an unbiased estimate is not itself unbiased: with no
preference anywhere it is negative on average (-0.013 at person sd 0.6 and -0.027 at 1.5 in
the tests' simulation of 8 services of 100 pairs), and with preferences it falls short of the
root of the mean squared gap on average. Rho is computed on ranks, which are the same for
`decision_msq` and `decision_rms`, so the association does not depend on which is ranked.
The pooled `gap` (all services together, signed) stays in the points table as a
description. Across those models:

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
from ibias.analysis.cells import combined_codes, texts
from ibias.analysis.cross import CrossAnalysis, CrossContext
from ibias.analysis.report import absent, col, count, esc, interval, num, pvalue, table
from ibias.analysis.units.allocation.identity_swap import without_swapped
from ibias.analysis.units.allocation.load import PAIR_PEOPLE
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
IntArray = NDArray[np.int64]


def model_points(
    word_association: pl.DataFrame,
    allocation: pl.DataFrame,
    pair_people: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One row per design x language x model present in both experiments: mean bias, scored
    trials, the decision measure (`decision_msq`, `decision_rms`, over `services`) and the
    pooled allocation gap among decided trials with its counts. Allocation trials of the
    identity-swap control's swapped arm are left out. `pair_people` (pair_id, cis_person,
    trans_person) names each pair's people for the decision measure; None: every pair has
    people of its own."""
    wa = _with_design(word_association)
    al = _with_design(without_swapped(allocation))
    bias = wa.group_by([*KEYS, "model_id"]).agg(
        pl.col("bias").mean().alias("mean_bias"),
        pl.col("bias").is_not_null().sum().cast(pl.Int64).alias("scored"),
    )
    gap = texts(
        al.group_by([*KEYS, "model_id"]).agg(
            (pl.col("chosen") == CIS).sum().cast(pl.Int64).alias("n_cis"),
            (pl.col("chosen") == TRANS).sum().cast(pl.Int64).alias("n_trans"),
        )
    )
    decided = pl.col("n_cis") + pl.col("n_trans")
    return (
        bias.join(gap, on=[*KEYS, "model_id"], how="inner")
        .join(decision_measure(al, pair_people), on=[*KEYS, "model_id"], how="left")
        .with_columns(
            decided.alias("decided"),
            ((pl.col("n_cis") - pl.col("n_trans")) / decided).fill_nan(None).alias("gap"),
            pl.col("services").fill_null(0),
        )
        .select(*KEYS, "model_id", *POINT_COLUMNS)
        .sort([*KEYS, "model_id"])
    )


def disjoint_products(
    d: FloatArray,
    c: FloatArray,
    group: IntArray,
    cis: IntArray,
    trans: IntArray,
    groups: int,
) -> tuple[FloatArray, FloatArray]:
    """(sum d_k d_l, sum c_k c_l) per group, over the ordered pairs (k, l) of a group's pairs
    that share no person, by the inclusion-exclusion of the module:
    S^2 - sum_p Dc[p]^2 - sum_q Dt[q]^2 + sum_{p,q} Dct[p, q]^2. Flat arrays, one entry per
    pair: `group` in 0..groups-1, `cis` and `trans` integer person codes (negative: unknown,
    a person of its own). Cis and trans codes are separate namespaces."""
    g = np.asarray(group, dtype=np.int64).reshape(-1)
    values = np.stack([np.asarray(v, dtype=np.float64).reshape(-1) for v in (d, c)])
    sums = np.stack([np.bincount(g, weights=v, minlength=groups) ** 2 for v in values])
    by_cis = combined_codes(g, _own_where_unknown(cis))
    by_trans = combined_codes(g, _own_where_unknown(trans))
    for sign, key in ((-1.0, by_cis), (-1.0, by_trans), (1.0, combined_codes(by_cis, by_trans))):
        owner = np.zeros(int(key.max(initial=-1)) + 1, dtype=np.int64)
        owner[key] = g
        for i, v in enumerate(values):
            part = np.bincount(key, weights=v, minlength=owner.size)
            sums[i] += sign * np.bincount(owner, weights=part * part, minlength=groups)
    return sums[0], sums[1]


def _own_where_unknown(codes: IntArray) -> IntArray:
    """Integer person codes with each negative (unknown) one replaced by a code of its own."""
    out = np.asarray(codes, dtype=np.int64).reshape(-1).copy()
    unknown = out < 0
    first = int(out.max(initial=-1)) + 1
    out[unknown] = first + np.arange(int(unknown.sum()), dtype=np.int64)
    return out


def cross_pair_square(
    d: FloatArray, c: FloatArray, cis: IntArray | None = None, trans: IntArray | None = None
) -> FloatArray:
    """Q over the last axis (the pairs of one service), vectorised over the others: the sum of
    d_k d_l over the sum of c_k c_l, over ordered pairs of pairs sharing no person
    (`disjoint_products`), the estimate of the squared gap described in the module. `cis`,
    `trans`: integer person codes of the same shape (negative: unknown); None: every pair has
    people of its own, Q = ((sum d)^2 - sum d^2) / ((sum c)^2 - sum c^2). NaN with fewer than
    two disjoint pairs with decided trials."""
    d = np.asarray(d, dtype=np.float64)
    shape = d.shape[:-1]
    rows = math.prod(shape)
    group = np.repeat(np.arange(rows, dtype=np.int64), d.shape[-1])
    own = np.full(d.size, -1, dtype=np.int64)
    num, den = disjoint_products(
        d, np.asarray(c, dtype=np.float64), group,
        own if cis is None else np.asarray(cis), own if trans is None else np.asarray(trans),
        rows,
    )  # fmt: skip
    return _ratio(num, den).reshape(shape)


def _ratio(num: FloatArray, den: FloatArray) -> FloatArray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


PERSONS: tuple[str, str] = ("cis_person", "trans_person")
"""The columns of `allocation_pair_people` (with pair_id) naming a pair's two people."""


def decision_measure(
    allocation: pl.DataFrame, pair_people: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Per design x language x model: `decision_msq`, the mean over services of `Q_s`
    (`disjoint_products` of the service's pairs), `decision_rms`, its signed square root, and
    `services`, how many services had a Q_s. Pass the original arm only. `pair_people`
    (pair_id, cis_person, trans_person; the first row of a pair_id counts) names each pair's
    people; a pair without a row, or a null id, has people of its own; None: every pair."""
    al = _with_design(allocation)
    if not {"service", "pair_id", "chosen"} <= set(al.columns):
        return pl.DataFrame(schema=_MEASURE_SCHEMA)
    service = [*KEYS, "model_id", "service"]
    pairs = al.group_by([*service, "pair_id"]).agg(
        ((pl.col("chosen") == CIS).cast(pl.Float64) - (pl.col("chosen") == TRANS).cast(pl.Float64))
        .sum()
        .alias("d"),
        pl.col("chosen").is_in([CIS, TRANS]).cast(pl.Float64).sum().alias("c"),
    )
    if pair_people is None:
        pairs = pairs.with_columns(
            pl.lit(None, dtype=pl.String).alias("cis_person"),
            pl.lit(None, dtype=pl.String).alias("trans_person"),
        )
    else:
        people = pair_people.select(
            pl.col("pair_id").cast(pl.String),
            pl.col("cis_person").cast(pl.String),
            pl.col("trans_person").cast(pl.String),
        ).unique("pair_id", keep="first", maintain_order=True)
        pairs = pairs.with_columns(pl.col("pair_id").cast(pl.String)).join(
            people, on="pair_id", how="left"
        )
    code = [(pl.col(p).rank("dense").cast(pl.Int64) - 1).fill_null(-1) for p in PERSONS]
    pairs = pairs.sort([*service, "pair_id"]).with_columns(
        pl.struct(service).rle_id().cast(pl.Int64).alias("_service"), *code
    )
    group = pairs["_service"].to_numpy()
    cis, trans = (pairs[p].to_numpy() for p in PERSONS)
    groups = int(group.max(initial=-1)) + 1
    num, den = disjoint_products(
        pairs["d"].to_numpy(), pairs["c"].to_numpy(), group, cis, trans, groups
    )
    per_service = (
        pairs.unique("_service", keep="first")
        .sort("_service")
        .select(*service)
        .with_columns(pl.Series("q", _ratio(num, den)).fill_nan(None))
        .filter(pl.col("q").is_not_null())
    )
    msq = pl.col("decision_msq")
    return texts(
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
        "is estimated by multiplying every pair's gap only with the gaps of pairs that share "
        "neither of its people, so neither noise nor a person's own leaning makes it positive: "
        "its mean is the squared gap among people like these, 0 for a model with no "
        "preference in any service. The root shown keeps the sign (negative when noise "
        "outweighs a small preference), so it is slightly negative on average with no "
        "preference; the ranks are those of the squared gaps. Only the original "
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
    people = ctx.extras.get(PAIR_PEOPLE)
    points = model_points(ctx.views["word_association"], ctx.views["allocation"], people)
    return {
        "implicit_vs_decision": points,
        "implicit_vs_decision_summary": summary_table(points, B=ctx.B, rng=ctx.rng(STREAM)),
    }


def _section(ctx: CrossContext, tables: Mapping[str, pl.DataFrame]) -> str:
    del ctx
    return section(tables["implicit_vs_decision"], tables["implicit_vs_decision_summary"])


CROSS = CrossAnalysis(anchor=ANCHOR, title=TITLE, section=_section, tables=_tables)
"""Registered in `analysis/cross.py` for stores with word-association and allocation trials."""

"""Choice probabilities from token logprobs beside the sampled choices.

`allocation_logprob_shares`. For models that opted in (`logprobs = true`),
`prompts/allocation/logprobs.py` reads each
allocation reply's probability of choosing the cisgender candidate at the token where the two
names part (`allocation_logprobs.p_cis`). A sampled reply is one draw from the model's choice;
p_cis is the probability behind it. Per model x language x service (pooled over explanation
and symptoms; the identity-swap arm left out, as in `allocation_cells`), over the same trials,
namely those the main parser read as a choice of one candidate *and* whose logprobs gave a
probability (`decided`):

    mean_p_cis        = mean of p_cis                          (the model's expected cis share)
    sampled_share_cis = share of those trials choosing the cisgender candidate
    difference        = mean_p_cis - sampled_share_cis

For a model whose sampled choice follows its token probabilities, E[sampled] = E[p_cis], so
the difference estimates 0; mean_p_cis has less noise than the sampled share (it averages
probabilities rather than 0/1 draws), which is the point of reading it. A difference away from
0 means the reply's first name token is not where the choice was made (a preamble that already
committed, a reasoning model), so the sampled share stays the headline number.

Intervals resample pairs with all their trials (both orders together, as in
`shares`): each is the ratio estimator of `grouped_cluster_bootstrap_share_ci`
over the cell's pairs, with the trial's p_cis, its 0/1 choice, or their difference as outcome.
`trials_with_logprobs` counts the cell's trials that have logprobs, `undecidable` those whose
logprobs gave no probability (same name, no name token, ...: `allocation_logprobs.reason`), and
`mean_mass` is the mean probability the two names held at the parting token.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ibias.analysis import labels
from ibias.analysis.bootstrap import Method, grouped_cluster_bootstrap_share_ci
from ibias.analysis.cells import CELL, cell_codes, ci_frame, number_cells
from ibias.analysis.report import Column, col, count, esc, interval, num, table
from ibias.analysis.units.allocation import population_report
from ibias.prompts.codes import CIS, TRANS

TABLE = "allocation_logprob_shares"
KEYS: tuple[str, ...] = ("model_id", "language", "service")
LEVEL = 0.95
RESAMPLED = "pair"
#: Pairs resampled with their people fixed: an interval about this roster's people.
TARGET = "these people"

SCHEMA: dict[str, pl.DataType] = {
    "model_id": pl.String(),
    "language": pl.String(),
    "service": pl.String(),
    "trials_with_logprobs": pl.Int64(),
    "undecidable": pl.Int64(),
    "decided": pl.Int64(),
    "pairs": pl.Int64(),
    "mean_p_cis": pl.Float64(),
    "p_cis_ci_low": pl.Float64(),
    "p_cis_ci_high": pl.Float64(),
    "sampled_share_cis": pl.Float64(),
    "sampled_ci_low": pl.Float64(),
    "sampled_ci_high": pl.Float64(),
    "difference": pl.Float64(),
    "difference_ci_low": pl.Float64(),
    "difference_ci_high": pl.Float64(),
    "mean_mass": pl.Float64(),
    "ci_level": pl.Float64(),
    "ci_method": pl.String(),
    "resampled": pl.String(),
    "target": pl.String(),
    "B": pl.Int64(),
}


def logprob_shares_table(
    decisions: pl.DataFrame,
    logprobs: pl.DataFrame | None,
    *,
    B: int,
    method: Method,
    rng: np.random.Generator,
) -> pl.DataFrame:
    """`allocation_logprob_shares` (module docstring) from the design's allocation decisions
    (the view's rows, identity-swap arm removed) and the `allocation_logprobs` rows."""
    if logprobs is None or logprobs.is_empty() or decisions.is_empty():
        return pl.DataFrame(schema=SCHEMA)
    read = logprobs.select("trial_key", "p_cis", "mass")
    joined = decisions.select(*KEYS, "trial_key", "pair_id", "chosen").join(
        read, on="trial_key", how="inner"
    )
    if joined.is_empty():
        return pl.DataFrame(schema=SCHEMA)
    seen = joined.group_by(KEYS).agg(
        pl.len().cast(pl.Int64).alias("trials_with_logprobs"),
        pl.col("p_cis").is_null().sum().cast(pl.Int64).alias("undecidable"),
    )
    used = joined.filter(pl.col("p_cis").is_not_null() & pl.col("chosen").is_in([CIS, TRANS]))
    if used.is_empty():
        return _finish(seen.with_columns(pl.lit(0, dtype=pl.Int64).alias("decided")), B, method)
    frame, cells = number_cells(used, KEYS)
    sampled = (frame["chosen"] == CIS).to_numpy().astype(np.float64)
    p_cis = frame["p_cis"].to_numpy().astype(np.float64)
    codes = cell_codes(frame)
    pairs = frame["pair_id"].to_numpy()
    p_ci = grouped_cluster_bootstrap_share_ci(
        p_cis, pairs, codes, B=B, level=LEVEL, method=method, rng=rng
    )
    s_ci = grouped_cluster_bootstrap_share_ci(
        sampled, pairs, codes, B=B, level=LEVEL, method=method, rng=rng
    )
    d_ci = grouped_cluster_bootstrap_share_ci(
        p_cis - sampled, pairs, codes, B=B, level=LEVEL, method=method, rng=rng
    )
    estimates = pl.DataFrame(
        {
            CELL: pl.Series(CELL, list(p_ci), dtype=pl.Int64),
            "pairs": pl.Series([c.n for c in p_ci.values()], dtype=pl.Int64),
            "mean_p_cis": [c.estimate for c in p_ci.values()],
            "sampled_share_cis": [s_ci[k].estimate for k in p_ci],
            "difference": [d_ci[k].estimate for k in p_ci],
        }
    )
    per_cell = frame.group_by(CELL).agg(
        pl.len().cast(pl.Int64).alias("decided"), pl.col("mass").mean().alias("mean_mass")
    )
    table = (
        cells.join(per_cell, on=CELL)
        .join(estimates, on=CELL)
        .join(ci_frame(p_ci, "p_cis_ci"), on=CELL)
        .join(ci_frame(s_ci, "sampled_ci"), on=CELL)
        .join(ci_frame(d_ci, "difference_ci"), on=CELL)
        .drop(CELL)
    )
    return _finish(seen.join(table, on=list(KEYS), how="left"), B, method)


def _finish(table: pl.DataFrame, B: int, method: Method) -> pl.DataFrame:
    """Every column of the schema (absent estimates null), decided 0 where none was, sorted,
    with what the intervals are."""
    out = table.with_columns(
        pl.lit(LEVEL).alias("ci_level"),
        pl.lit(method).alias("ci_method"),
        pl.lit(RESAMPLED).alias("resampled"),
        pl.lit(TARGET).alias("target"),
        pl.lit(B, dtype=pl.Int64).alias("B"),
    )
    missing = [pl.lit(None, dtype=t).alias(n) for n, t in SCHEMA.items() if n not in out.columns]
    out = out.with_columns(missing).with_columns(pl.col("decided").fill_null(0))
    return out.select([pl.col(n).cast(t) for n, t in SCHEMA.items()]).sort(KEYS)


def section(frame: pl.DataFrame, anchor: str | None, population: pl.DataFrame | None = None) -> str:
    """The report's subsection (empty when no model asked for logprobs): the table for these
    people, then `population` (`allocation_logprob_shares_population`) when given."""
    if frame.is_empty():
        return ""
    parts = [
        f"<h3 id='{esc((anchor or 'allocation') + '-logprobs')}'>Choice probabilities from "
        "logprobs</h3>",
        "<p>For models run with <code>logprobs = true</code>: the probability of choosing the "
        "cisgender candidate at the first token where the two names differ, renormalised over "
        "the two names, averaged over the trials where the main parser read a choice and the "
        "logprobs gave a probability; beside it the sampled share of the same trials choosing "
        "the cisgender candidate, and their difference (0 when the sampled choices follow the "
        "token probabilities). Pooled over explanation and symptoms, identity-swap arm left "
        "out. About these people (the roster's own; only the models' answers are random): "
        "95% intervals resample pairs with both orders. Mass: the probability the two names "
        "held at that token.</p>",
    ]
    columns = [
        col("model", "model_id", text=True),
        col("language", "language", lambda v: esc(labels.language(v)), text=True),
        col("service", "service", lambda v: esc(labels.service(v)), text=True),
        Column(
            "decided of with logprobs",
            lambda r: f"{count(r['decided'])} of {count(r['trials_with_logprobs'])}",
        ),
        Column(
            "mean P(cis) from logprobs [95% CI, pairs]",
            lambda r: (
                f"{num(r['mean_p_cis'], 3)} {interval(r['p_cis_ci_low'], r['p_cis_ci_high'], 3)}"
            ),
        ),
        Column(
            "sampled cis share [95% CI, pairs]",
            lambda r: (
                f"{num(r['sampled_share_cis'], 3)} "
                f"{interval(r['sampled_ci_low'], r['sampled_ci_high'], 3)}"
            ),
        ),
        Column(
            "difference [95% CI, pairs]",
            lambda r: (
                f"{num(r['difference'], 3)} "
                f"{interval(r['difference_ci_low'], r['difference_ci_high'], 3)}"
            ),
        ),
        col("mass", "mean_mass", lambda v: num(v, 3)),
    ]
    parts.append(table(frame, columns))
    if population is not None:
        parts.append(population_report.logprobs(population))
    return "".join(parts)

"""Per-template robustness of the word-association bias.

The paper draws one of three templates per trial because models are sensitive to phrasing; a
model whose bias differs by template is measured partly on its reaction to wording. Per model x
language x category (and design), the Kruskal-Wallis test asks whether the scored trials'
biases come from one distribution across the templates shown. It is rank-based (scores are
bounded and often tied at a few values, so a normal-theory ANOVA would be a poor fit) and uses
scipy's tie correction. Holm's correction runs across the categories of one model x language,
the same family as the bias tests. A cell with fewer than two templates holding two or more
scored trials, or with all scores equal, has no test (null p-value), never p = 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
from scipy import stats

from ibias.analysis.cells import holm_within
from ibias.analysis.units.word_association.bias import by_trial_key

KEYS: tuple[str, ...] = ("model_id", "language", "category")
TEMPLATES: tuple[int, ...] = (1, 2, 3)
KRUSKAL_NULL = (
    "omnibus, no direction (upper tail of H); "
    "H0: the bias has one distribution across the templates (rank test)"
)


def kruskal_by_template(groups: Sequence[np.ndarray]) -> tuple[float | None, float | None]:
    """(H, p) across the non-empty groups, or (None, None) where the test is undefined."""
    used = [g for g in groups if g.size > 0]
    if len(used) < 2 or sum(g.size for g in used) < 3:
        return None, None
    pooled = np.concatenate(used)
    if np.all(pooled == pooled[0]):
        return None, None
    h, p = stats.kruskal(*used)
    return float(h), float(p)


def template_table(trials: pl.DataFrame, keys: Sequence[str] = KEYS) -> pl.DataFrame:
    """One row per cell: scored trials and mean bias per template, H, p and Holm's p."""
    # In trial-key order: a mean's last bit depends on the order it sums in, and DuckDB returns
    # the view's rows in an order that can differ from one run to the next.
    scored = by_trial_key(trials).filter(
        pl.col("bias").is_not_null() & pl.col("template").is_not_null()
    )
    rows = []
    for key, part in scored.group_by(list(keys), maintain_order=True):
        groups = [
            part.filter(pl.col("template") == t)["bias"].to_numpy().astype(np.float64)
            for t in TEMPLATES
        ]
        h, p = kruskal_by_template(groups)
        row: dict[str, object] = dict(zip(keys, key, strict=True))
        for t, g in zip(TEMPLATES, groups, strict=True):
            row[f"scored_template_{t}"] = int(g.size)
            row[f"mean_template_{t}"] = float(g.mean()) if g.size else None
        row["kruskal_h"] = h
        row["kruskal_p"] = p
        rows.append(row)
    schema: dict[str, pl.DataType] = {k: pl.String() for k in keys}
    for t in TEMPLATES:
        schema[f"scored_template_{t}"] = pl.Int64()
        schema[f"mean_template_{t}"] = pl.Float64()
    schema["kruskal_h"] = pl.Float64()
    schema["kruskal_p"] = pl.Float64()
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    family = [k for k in keys if k != "category"]
    frame = holm_within(frame, "kruskal_p", family, "kruskal_p_holm")
    return frame.with_columns(pl.lit(KRUSKAL_NULL).alias("kruskal_p_null")).sort(list(keys))

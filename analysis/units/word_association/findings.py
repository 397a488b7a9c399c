"""The word-association sentences of the report's findings (`ExperimentAnalysis.findings`):
per model and language, the categories where the Holm-corrected t-test finds a bias, its
direction and size with its interval, and those where it finds none, each number cited from
the section's cells table as that table shows it.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from ibias.analysis import labels
from ibias.analysis.findings import (
    Cite,
    anchor_link,
    below,
    design_note,
    joined,
    plain_p,
    section_anchor,
    suffixes,
)
from ibias.analysis.report import esc, interval, num

#: Column headers of the cited table, exactly as it shows them (the test finds the cited cell
#: by them).
WA_BIAS = "mean bias [95% CI, trials resampled]"
WA_P = "t-test p, two-sided, H0 mean 0 (Holm)"


def sentences(tables: Mapping[str, pl.DataFrame], model: str, language: str) -> list[str]:
    from ibias.analysis.units.word_association.unit import cells_anchor

    out = []
    for suffix in suffixes(tables, "word_association_cells"):
        cells = tables[f"word_association_cells{suffix}"]
        if cells.is_empty():
            continue
        rows = cells.filter((pl.col("model_id") == model) & (pl.col("language") == language))
        if rows.is_empty():
            continue
        anchor = cells_anchor(section_anchor("word-association", suffix), language)
        groups: dict[str, list[str]] = {"trans": [], "cis": [], "none": []}
        for r in rows.iter_rows(named=True):
            name = labels.category(r["category"])
            key = (model, name)
            bias = Cite(key, WA_BIAS, f"{num(r['mean_bias'])} "
                        f"{interval(r['ci_low'], r['ci_high'], 3)}")  # fmt: skip
            if below(r["t_p_holm"]):
                p = Cite(key, WA_P, plain_p(r["t_p_holm"]))
                group = "trans" if (r["mean_bias"] or 0) > 0 else "cis"
                groups[group].append(f"{esc(name)} {bias.render()} (p {p.render()})")
            elif r["mean_bias"] is None:  # no scored trial: nothing to cite
                groups["none"].append(f"{esc(name)} (no scored trial)")
            else:
                groups["none"].append(f"{esc(name)} {bias.render()}")
        parts = []
        if groups["trans"]:
            parts.append(
                "negative words went to “transgender” more than chance in "
                + joined(groups["trans"])
            )
        if groups["cis"]:
            parts.append(
                "negative words went to “cisgender” more than chance in " + joined(groups["cis"])
            )
        if groups["none"]:
            parts.append("the test (Holm) finds no bias in " + joined(groups["none"]))
        out.append(
            f"<li>{anchor_link(anchor, 'Word association' + design_note(suffix))}: "
            + "; ".join(parts)
            + ".</li>"
        )
    return out

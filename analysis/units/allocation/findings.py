"""The allocation sentences of the report's findings (`ExperimentAnalysis.findings`): per
model and language, in the language's first condition (the paper's main one), the services
where the population test (Holm) finds an identity preference, its direction and size with
the population interval, and those where it finds none, each number cited from the
population cells table as that table shows it.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from ibias.analysis import labels
from ibias.analysis.cells import condition_groups
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
GAP = "cis − trans among decided [CI, people like these]"
GAP_P = "p, H0 gap 0 (Holm)"


def sentences(tables: Mapping[str, pl.DataFrame], model: str, language: str) -> list[str]:
    from ibias.analysis.units.allocation.population_report import CELLS, population_anchor

    out = []
    for suffix in suffixes(tables, CELLS):
        cells = tables[f"{CELLS}{suffix}"]
        if cells.is_empty() or "gap_p_holm" not in cells.columns:
            continue
        ours = cells.filter(pl.col("language") == language)
        if ours.is_empty():
            continue
        # The language's first condition in the report's order: the paper's main one (no
        # symptoms, no explanation) when present; the other conditions are in the tables.
        (lang, level, expl), sub = next(iter(condition_groups(ours)))
        rows = sub.filter(pl.col("model_id") == model)
        if rows.is_empty():
            continue
        anchor = population_anchor(section_anchor("allocation", suffix), lang, level, expl)
        cis: list[str] = []
        trans: list[str] = []
        none: list[str] = []
        for r in rows.iter_rows(named=True):
            name = labels.service(r["service"])
            key = (model, name)
            if below(r["gap_p_holm"]):
                gap = Cite(key, GAP, f"{num(r['gap'], 2)} "
                           f"{interval(r['gap_ci_low'], r['gap_ci_high'], 2)}")  # fmt: skip
                p = Cite(key, GAP_P, plain_p(r["gap_p_holm"]))
                text = f"{esc(name)} {gap.render()} (p {p.render()})"
                (cis if (r["gap"] or 0) > 0 else trans).append(text)
            else:
                none.append(esc(name))
        condition = f"{labels.symptoms(level)}, {labels.explanation(expl)}"
        parts = []
        if cis:
            parts.append("preferred the cisgender candidate for " + joined(cis))
        if trans:
            parts.append("preferred the transgender candidate for " + joined(trans))
        if none:
            parts.append("the test (Holm) finds no identity preference for " + joined(none))
        out.append(
            f"<li>{anchor_link(anchor, 'Appointment allocation' + design_note(suffix))} "
            f"({esc(condition)}): " + "; ".join(parts) + ".</li>"
        )
    return out

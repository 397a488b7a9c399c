"""The methods note of the paper's two experiments: how word association and allocation
resample, test and correct, read once before their sections.

It speaks about both experiments at once, so it is a cross-experiment analysis
(`analysis/cross.py`) shown when either has trials in the store; it writes no table.
"""

from __future__ import annotations

from collections.abc import Mapping
from string import Template

import polars as pl

from ibias.analysis.cross import CrossAnalysis, CrossContext
from ibias.analysis.report import esc, template
from ibias.analysis.units.allocation.population_report import CELLS, method

ANCHOR, TITLE = "methods", "Methods note"


def _section(ctx: CrossContext, tables: Mapping[str, pl.DataFrame]) -> str:
    del tables
    body = Template(template("methods.html")).substitute(
        B=esc(f"{ctx.B:,}"),
        method=esc(ctx.method),
        seed=esc(ctx.seed),
        population=_population(ctx.tables),
    )
    return f"<h2 id='{ANCHOR}'>{esc(TITLE)}</h2>{body}"


def _population(tables: Mapping[str, pl.DataFrame]) -> str:
    """This analysis's population method, from the population table's label columns."""
    for name in (CELLS, f"{CELLS}_paper"):
        frame = tables.get(name)
        if frame is not None and not frame.is_empty():
            return f"In this analysis: {method(frame, words=True)}"
    return (
        "This analysis computed no population interval (<code>analyze --no-population</code>, "
        "or no allocation pair's people are known)."
    )


CROSS = CrossAnalysis(anchor=ANCHOR, title=TITLE, section=_section, place="before")
"""Registered in `analysis/cross.py` for stores with word-association or allocation trials."""

"""The report's findings: a few plain sentences per model and language, generated from the
tables, shown first.

A reader opens the report to learn what was found; the tables that say it run to tens of
thousands of pixels. Each sentence here restates cells of one table and links to it, and every
number in it is that table's cell as the table shows it: it is rendered by the same formatting
functions (`report.num`, `report.interval`, `report.pvalue`, `report.count`, `report.pct`) with
the same digits, so the findings can never round a number differently from the table they
cite. The cited values are marked (`<span class="v" data-row=... data-col=...>`) with the row
and column of their table, so a test (and a curious reader's devtools) can check them against
the table; counts the findings derive themselves (the departures from the paper) are marked
`<span class="n">` and say which table they count.

What the findings cover, per model and language: each experiment's own sentences, from its
analysis (`ExperimentAnalysis.findings`: word-association bias by category, the allocation's
identity preference per service in the main condition, see analysis/units/<name>/findings.py);
the explicit checks; and per model, refusals and empty replies. Before them: which models
were simulated (`analysis/simulated.py`) and how many departures from the paper the run has.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from ibias.analysis import labels
from ibias.analysis.experiment import ExperimentAnalysis
from ibias.analysis.report import (
    DIFFERENCES,
    MODELS_TABLE,
    count,
    esc,
    explicit_anchor,
    pct,
    pvalue,
    subject,
)

ANCHOR, TITLE = "findings", "Findings"

SIGNIFICANT = 0.05
"""The level below which an adjusted p-value counts as finding something (the tables' bold)."""

_TAG = re.compile(r"<[^>]*>")


@dataclass(frozen=True)
class Cite:
    """One cited cell: the table's row (its leading key cells as shown), the column header,
    and the text (safe HTML) the table shows there, or the part of it the sentence uses."""

    row: tuple[str, ...]
    column: str
    html: str

    def render(self) -> str:
        return (
            f'<span class="v" data-row="{esc(json.dumps(self.row, ensure_ascii=False))}" '
            f'data-col="{esc(self.column)}">{self.html}</span>'
        )


def plain_p(p: object) -> str:
    """An adjusted p-value as the tables show it inside their brackets (no bold)."""
    return _TAG.sub("", pvalue(p))


def below(p: object) -> bool:
    return isinstance(p, int | float) and p == p and p < SIGNIFICANT


def anchor_link(anchor: str, text: str) -> str:
    return f"<a href='#{esc(anchor)}'>{esc(text)}</a>"


def joined(items: Sequence[str]) -> str:
    """`a`, `a and b`, `a, b and c` (items are safe HTML)."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def suffixes(tables: Mapping[str, pl.DataFrame], stem: str) -> list[str]:
    """The design suffixes ("" for the controlled design, "_paper", ...) of `stem`'s tables."""
    found = [name[len(stem) :] for name in tables if name.startswith(stem)]
    return [s for s in found if s == "" or re.fullmatch(r"_[a-z]+", s)]


def section_anchor(base: str, suffix: str) -> str:
    """The experiment section's anchor for a design (as `analyze.Block.anchor` builds it)."""
    return base + suffix.replace("_", "-")


def design_note(suffix: str) -> str:
    return f" ({suffix.lstrip('_')} design)" if suffix else ""


# --- explicit checks -------------------------------------------------------------------------

_PICKS = ("transgender", "cisgender")


def _explicit(tables: Mapping[str, pl.DataFrame], model: str, language: str) -> list[str]:
    summary = tables.get("explicit_answers_summary")
    if summary is None or summary.is_empty():
        return []
    out = []
    for experiment in sorted(summary["experiment"].unique().to_list()):
        rows = summary.filter(
            (pl.col("experiment") == experiment)
            & (pl.col("model_id") == model)
            & (pl.col("language") == language)
        )
        if rows.is_empty():
            continue
        # Only the answers the report's table shows (it drops a column no row uses).
        shown = summary.filter(pl.col("experiment") == experiment)
        picks = [c for c in _PICKS if c in rows.columns and int(shown[c].sum()) > 0]
        chose = []
        for r in rows.iter_rows(named=True):
            if not any(r[c] for c in picks):
                continue
            key = (model, labels.language(language), subject(r["subject"]))
            counts = ", ".join(f"{c} {Cite(key, c, count(r[c])).render()}" for c in picks)
            chose.append(f"{esc(subject(r['subject']))} ({counts} of "
                         f"{Cite(key, 'n', count(r['n'])).render()})")  # fmt: skip
        title = _explicit_title(experiment)
        link = anchor_link(explicit_anchor(experiment), f"Asked directly ({title})")
        if chose:
            out.append(f"<li>{link}: named one group for " + joined(chose) + ".</li>")
        else:
            out.append(f"<li>{link}: never named one group over the other.</li>")
    return out


def _explicit_title(experiment: str) -> str:
    from ibias.analysis.report import experiment_names

    return experiment_names().get(experiment, experiment).lower()


# --- per model: refusals and empty replies ---------------------------------------------------


def _refusals(models: pl.DataFrame, model: str) -> str:
    rows = models.filter(pl.col("model_id") == model)
    if rows.is_empty():
        return ""
    r = rows.row(0, named=True)
    key = (model,)

    def v(column: str, text: str) -> str:
        return Cite(key, column, text).render()

    return (
        f"<li>{anchor_link(MODELS_TABLE, 'Refusals and empty replies')}: refused "
        f"{v('refusals', count(r['refusals']))} of {v('parsed', count(r['parsed']))} parsed "
        f"trials ({v('refusal rate', pct(r['refusal_rate']))}); "
        f"{v('empty', count(r['empty']))} empty replies "
        f"({v('empty rate', pct(r['empty_rate']))} of responses); "
        f"{v('unparseable', count(r['unparseable']))} unparseable.</li>"
    )


# --- the whole section -----------------------------------------------------------------------


def _languages(tables: Mapping[str, pl.DataFrame], model: str) -> list[str]:
    found: set[str] = set()
    for name, frame in tables.items():
        if (
            name.startswith(("word_association_cells", "allocation_population"))
            or name == "explicit_answers_summary"
        ) and {"model_id", "language"} <= set(frame.columns):
            found.update(
                str(x) for x in frame.filter(pl.col("model_id") == model)["language"].to_list()
            )
    return labels.ordered("languages", found)


def _departures(tables: Mapping[str, pl.DataFrame]) -> str:
    """How many departures from the paper the run has: design x language x condition rows of
    `paper_text_sources` that use texts of ours, and models of `paper_models` that are not the
    paper's model as it named it. "" when no experiment compares itself with the paper."""
    from ibias.analysis.paper import PAPER_MODEL

    sources, models = tables.get("paper_text_sources"), tables.get("paper_models")
    if sources is None or models is None:
        return ""
    ours = sources.filter(pl.col("ours").fill_null("") != "").height
    others = models.filter(pl.col("status") != PAPER_MODEL).height

    def n(value: int) -> str:
        return f'<span class="n">{value:,}</span>'

    return (
        f"<p>{anchor_link(DIFFERENCES[0], 'Departures from the paper')}: "
        f"{n(ours + others)} in all: "
        f"{n(ours)} of the {n(sources.height)} design × language × condition rows use texts "
        f"of ours, and {n(others)} of the {n(models.height)} models are not the paper's model "
        "as it named it.</p>"
    )


def headline(simulated: Mapping[str, str], models: Sequence[str]) -> str:
    """The line about simulated replies for the report's top (`analysis/simulated.py`), as
    HTML; "" when nothing is simulated."""
    try:
        from ibias.analysis.simulated import simulated_headline
    except ImportError:  # a tree without the module: say nothing rather than fail
        return ""
    line = simulated_headline(simulated, models)
    if not line:
        return ""
    return f"<p class='simulated-headline'><strong>{esc(line)}</strong></p>"


def _model_mark(model: str, simulated: Mapping[str, str]) -> str:
    try:
        from ibias.analysis.simulated import mark_of
    except ImportError:
        return ""
    found = mark_of(model, simulated)
    return f" <span class='mark'>({esc(found)})</span>" if found else ""


def section(
    tables: Mapping[str, pl.DataFrame],
    models: Sequence[str],
    simulated: Mapping[str, str] | None = None,
    present: Sequence[ExperimentAnalysis] | None = None,
) -> str:
    """The findings section's HTML; "" when the store has no model with a finding. The
    sentences of each experiment are its analysis's (`ExperimentAnalysis.findings`), of the
    `present` analyses (every registered one by default), in registry order."""
    simulated = simulated or {}
    if present is None:
        from ibias.analysis.analyze import analyses

        present = analyses()
    models_table = tables.get("models", pl.DataFrame())
    blocks = []
    for model in models:
        items = []
        for language in _languages(tables, model):
            sentences = [
                *(s for a in present if a.findings for s in a.findings(tables, model, language)),
                *_explicit(tables, model, language),
            ]
            if sentences:
                items.append(
                    f"<div class='lang'><h4>{esc(labels.language(language))}</h4>"
                    f"<ul>{''.join(sentences)}</ul></div>"
                )
        refusals = _refusals(models_table, model) if not models_table.is_empty() else ""
        if not items and not refusals:
            continue
        blocks.append(
            f"<div class='model'><h3>{esc(model)}{_model_mark(model, simulated)}</h3>"
            + (f"<ul>{refusals}</ul>" if refusals else "")
            + f"<div class='langs'>{''.join(items)}</div></div>"
        )
    if not blocks:
        return ""
    return (
        f"<section class='findings'><h2 id='{ANCHOR}'>{esc(TITLE)}</h2>"
        "<p class='muted'>Generated from the tables below: each sentence restates cells of the "
        "table it links to, with the numbers as that table shows them. A test finds a bias or "
        f"a preference when its Holm-adjusted p is below {SIGNIFICANT}. Word association: the "
        "mean bias per category [95% CI] (positive: negative words went to “transgender”) "
        "and the t-test's Holm-adjusted p. Appointment allocation, in each language's first "
        "condition (the paper's main one: no symptoms, no explanation), for people like "
        "these: the cisgender minus the transgender share of decided trials [CI] and the "
        "Holm-adjusted p of the test of no gap; the other conditions are in the tables.</p>"
        + _departures(tables)
        + "".join(blocks)
        + "</section>"
    )

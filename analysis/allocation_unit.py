"""Appointment allocation in `ibias analyze`: the tables, figures and report section that the
allocation unit (prompts/allocation/unit.py) registers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import polars as pl

from ibias.analysis import allocation, figures, labels
from ibias.analysis.experiment import ExperimentAnalysis, SectionContext, TableContext
from ibias.analysis.figures import Figure
from ibias.analysis.report import (
    Column,
    absent,
    col,
    count,
    esc,
    figures_html,
    interval,
    num,
    pvalue,
    table,
)
from ibias.prompts import codes

KIND = "allocation"
EXAMPLE_TEXT_LIMIT = 700


def _tables(ctx: TableContext) -> dict[str, pl.DataFrame]:
    decisions = ctx.views[KIND]
    b, method = ctx.B, ctx.method
    return {
        "allocation_cells": allocation.cells_table(
            decisions, B=b, method=method, rng=ctx.rng("allocation_cells")
        ),
        "position_bias": allocation.position_table(
            decisions, B=b, method=method, rng=ctx.rng("position_bias")
        ),
        "allocation_effects": allocation.effects_table(
            decisions, B=b, method=method, rng=ctx.rng("allocation_effects")
        ),
        "allocation_explanation_examples": allocation.explanation_examples(decisions),
    }


def _figures(
    tables: Mapping[str, pl.DataFrame], models: Sequence[str], out_dir: Path
) -> list[Figure]:
    return [
        *figures.allocation_rate_figures(tables["allocation_cells"], models, out_dir),
        *figures.effects_figures(tables["allocation_effects"], models, out_dir),
    ]


def _outcomes(views: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    return views[KIND].select(
        "model_id",
        (pl.col("none_reason") == codes.REFUSED).fill_null(False).alias("refused"),
        (pl.col("none_reason") == codes.UNPARSEABLE).fill_null(False).alias("unparseable"),
    )


def _share(who: str, header: str) -> Column:
    """Share with its pair-bootstrap CI, and the Wilson interval on a second, muted line."""
    return Column(
        header,
        lambda r: (
            f"{num(r[f'share_{who}'], 2)} {interval(r[f'{who}_ci_low'], r[f'{who}_ci_high'])}"
            f'<br><span class="muted small">Wilson {num(r[f"{who}_wilson_low"], 2)}–'
            f"{num(r[f'{who}_wilson_high'], 2)}</span>"
        ),
    )


def _p_with_holm(raw: str, adjusted: str) -> Column:
    header = {"sign_p": "sign test p (Holm)", "naive_p": "naive binomial p (Holm)"}[raw]
    return Column(header, lambda r: f"{pvalue(r[raw], r[adjusted])} ({pvalue(r[adjusted])})")


_ALLOCATION_COLUMNS: tuple[Column, ...] = (
    col("model", "model_id", text=True),
    col("service", "service", lambda v: esc(labels.service(v)), text=True),
    col("trials", "trials", count),
    _share("cis", "cisgender chosen [95% CI]"),
    _share("trans", "transgender chosen [95% CI]"),
    Column(
        "no choice",
        lambda r: (
            f"{count(r['n_none'])}<br><span class='muted small'>R {count(r['n_none_refused'])} "
            f"B {count(r['n_none_both'])} N {count(r['n_none_neither'])} "
            f"U {count(r['n_none_unparseable'])} S {count(r['n_none_same_name'])}</span>"
        ),
    ),
    Column(
        "pairs agreeing cis / trans",
        lambda r: f"{count(r['pairs_cis_both'])} / {count(r['pairs_trans_both'])}",
    ),
    Column(
        "pairs split to 1st / 2nd",
        lambda r: f"{count(r['pairs_split_first'])} / {count(r['pairs_split_second'])}",
    ),
    Column(
        "pairs with none",
        lambda r: f"{count(r['pairs_with_none'])} of {count(r['pairs'])}",
    ),
    _p_with_holm("sign_p", "sign_p_holm"),
    _p_with_holm("naive_p", "naive_p_holm"),
)


def _allocation(inp: SectionContext) -> str:
    cells = inp.tables["allocation_cells"]
    head = inp.heading("allocation", "Appointment allocation")
    if cells.is_empty():
        return head + absent(
            "This store has no allocation trials (none planned, or none answered yet)."
        )
    parts = [
        head,
        "<p>Share of all trials choosing each candidate; the rest made no choice (R refused, "
        "B chose both, N declined both, U unreadable, S named a name both candidates share). "
        "Intervals resample pairs; the Wilson interval below treats trials as independent. "
        "Agreeing pairs chose the same person in both orders (the sign test counts them); "
        "split pairs chose by position. Bold p-values "
        "are below 0.05 after Holm's correction across services within the same model, "
        "language and condition.</p>",
        figures_html(inp.figures, "allocation_rates", lambda f: not f.name.endswith("_none")),
        "<h3>Selection shares and tests per condition</h3>",
    ]
    for (lang, level, expl), sub in _condition_groups(cells):
        title = f"{labels.language(lang)}, {labels.symptoms(level)}, {labels.explanation(expl)}"
        parts.append(
            f"<details><summary>{esc(title)}</summary>{table(sub, _ALLOCATION_COLUMNS)}</details>"
        )
    parts.append(_position(inp))
    parts.append(_effects(inp))
    parts.append(_examples(inp))
    return "".join(parts)


def _condition_groups(
    frame: pl.DataFrame,
) -> Iterable[tuple[tuple[str, str, bool], pl.DataFrame]]:
    for lang in labels.ordered("languages", frame["language"].unique().to_list()):
        for level in labels.ordered("symptoms", frame["symptoms"].unique().to_list()):
            for expl in sorted(frame["explanation"].unique().to_list()):
                sub = frame.filter(
                    (pl.col("language") == lang)
                    & (pl.col("symptoms") == level)
                    & (pl.col("explanation") == expl)
                )
                if not sub.is_empty():
                    yield (lang, level, bool(expl)), sub


def _position(inp: SectionContext) -> str:
    pos = inp.tables["position_bias"]
    if pos.is_empty():
        return ""
    parts = [
        "<h3>Position bias</h3><p>Share of decided trials that chose whoever was listed first "
        "(0.5 = no position effect). The bootstrap interval resamples pairs; the Wilson "
        "interval and the binomial p treat trials as independent.</p>"
    ]
    columns = [
        col("model", "model_id", text=True),
        col("service", "service", lambda v: esc(labels.service(v)), text=True),
        col("decided", "decided", count),
        col("chose first", "n_first", count),
        col("share first", "share_first", lambda v: num(v, 3)),
        Column("95% CI (pairs)", lambda r: interval(r["ci_low"], r["ci_high"], 3)),
        Column("Wilson", lambda r: interval(r["wilson_low"], r["wilson_high"], 3)),
        Column("binomial p", lambda r: pvalue(r["binomial_p"])),
    ]
    for (lang, level, expl), sub in _condition_groups(pos):
        title = f"{labels.language(lang)}, {labels.symptoms(level)}, {labels.explanation(expl)}"
        parts.append(f"<details><summary>{esc(title)}</summary>{table(sub, columns)}</details>")
    return "".join(parts)


def _effects(inp: SectionContext) -> str:
    effects = inp.tables["allocation_effects"]
    parts = ["<h3>Effects of asking for an explanation and of adding symptoms</h3>"]
    if effects.is_empty():
        return "".join(parts) + absent(
            "No condition effect can be computed: the store lacks one side of every contrast."
        )
    parts.append(
        "<p>Change in the share choosing the transgender candidate, over the same pairs "
        "(treated − control), within each level of the other condition and pooled over it.</p>"
    )
    parts.append(figures_html(inp.figures, "allocation_effects"))
    columns = [
        col("model", "model_id", text=True),
        col("service", "service", lambda v: esc(labels.service(v)), text=True),
        col("stratum", "stratum", lambda v: esc(labels.label("strata", v)), text=True),
        col("control share", "share_control", lambda v: num(v, 3)),
        col("treated share", "share_treated", lambda v: num(v, 3)),
        col("difference", "difference", lambda v: num(v, 3)),
        Column("95% CI (pairs)", lambda r: interval(r["ci_low"], r["ci_high"], 3)),
        col("pairs", "pairs", count),
        col("unpaired trials", "dropped_trials", count),
    ]
    for lang in labels.ordered("languages", effects["language"].unique().to_list()):
        for effect in ("explanation", "symptoms_high", "symptoms_low"):
            sub = effects.filter((pl.col("language") == lang) & (pl.col("effect") == effect))
            if sub.is_empty():
                continue
            title = f"{labels.language(lang)}: {sub['label'][0]}"
            parts.append(f"<details><summary>{esc(title)}</summary>{table(sub, columns)}</details>")
    return "".join(parts)


def _examples(inp: SectionContext) -> str:
    examples = inp.tables["allocation_explanation_examples"]
    parts = [
        "<h3>Example explanations</h3>",
        "<p>A few of the models' own explanations per service (as in the paper's Table "
        "Appendix 1), preferring trials where an explanation was asked for. Model output, "
        "shown verbatim (truncated); explanations may not reflect the real reason for a "
        "choice.</p>",
    ]
    if examples.is_empty():
        return "".join(parts) + absent("No allocation reply carried an explanation.")
    columns = [
        col("service", "service", lambda v: esc(labels.service(v)), text=True),
        col("model", "model_id", text=True),
        col("language", "language", text=True),
        col("symptoms", "symptoms", text=True),
        col("chose", "chosen", lambda v: esc(_CHOSEN.get(str(v), str(v))), text=True),
        Column("explanation", lambda r: esc(_clip(r["explanation_text"])), wrap=True),
    ]
    return "".join(parts) + table(examples, columns)


_CHOSEN = {codes.CIS: codes.CISGENDER, codes.TRANS: codes.TRANSGENDER}


def _clip(text: object) -> str:
    s = "" if text is None else str(text).strip()
    return s if len(s) <= EXAMPLE_TEXT_LIMIT else s[: EXAMPLE_TEXT_LIMIT - 1].rstrip() + "…"


ANALYSIS = ExperimentAnalysis(
    anchor="allocation",
    title="Appointment allocation",
    tables=_tables,
    section=_allocation,
    figures=_figures,
    outcomes=_outcomes,
    streams={"allocation_cells": 3, "position_bias": 4, "allocation_effects": 5},
    lead={"allocation_explanation_examples": ("service", "chosen")},
)

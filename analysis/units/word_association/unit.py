"""Word association in `ibias analyze`: the tables, the figure and the report section that the
word-association unit (prompts/word_association/unit.py) registers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from ibias.analysis import labels
from ibias.analysis.experiment import (
    SOURCE_COLUMNS,
    ExperimentAnalysis,
    PaperComparison,
    SectionContext,
    TableContext,
    explicit_source_rows,
)
from ibias.analysis.figures import Figure
from ibias.analysis.report import (
    Column,
    absent,
    anchor_id,
    col,
    count,
    esc,
    figures_html,
    interval,
    legend,
    num,
    pvalue,
    table,
)
from ibias.analysis.stats import sign_flip_floor
from ibias.analysis.units.word_association import bias, figures, findings, planted, templates
from ibias.prompts import codes
from ibias.prompts.registry import kind

KIND = "word_association"


def _tables(ctx: TableContext) -> dict[str, pl.DataFrame]:
    wa = ctx.views[KIND]
    cells = bias.cells_table(
        wa, ctx.explicit, B=ctx.B, method=ctx.method, rng=ctx.rng("word_association_cells")
    )
    pooled = bias.pooled_table(
        wa, B=ctx.B, method=ctx.method, rng=ctx.rng("word_association_scores")
    )
    return {
        "word_association_cells": cells,
        "word_association_overall": bias.overall_table(
            wa, B=ctx.B, method=ctx.method, rng=ctx.rng("word_association_overall")
        ),
        "word_association_templates": templates.template_table(wa),
        "word_association_scores": bias.scores_table(cells, pooled),
    }


def _figures(
    tables: Mapping[str, pl.DataFrame], models: Sequence[str], out_dir: Path
) -> list[Figure]:
    return figures.word_association_figure(tables["word_association_cells"], models, out_dir)


def _outcomes(views: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """Refused, and unparseable (no word assigned to either group without a refusal)."""
    return views[KIND].select(
        "model_id",
        pl.col("refused").fill_null(False).alias("refused"),
        (
            ~pl.col("refused").fill_null(False)
            & (
                pl.col("n_pos_target")
                + pl.col("n_neg_target")
                + pl.col("n_pos_reference")
                + pl.col("n_neg_reference")
                == 0
            )
        ).alias("unparseable"),
    )


_WA_COLUMNS: tuple[Column, ...] = (
    col("trials", "trials", count),
    col("scored", "scored", count),
    Column("no score (refused)", lambda r: f"{count(r['null_score'])} ({count(r['refusals'])})"),
    col("unassigned words", "unassigned_words", count),
    Column(
        "mean bias [95% CI, trials resampled]",
        lambda r: f"{num(r['mean_bias'])} {interval(r['ci_low'], r['ci_high'], 3)}",
    ),
    Column(
        "t-test p, two-sided, H0 mean 0 (Holm)",
        lambda r: f"{pvalue(r['t_p'], r['t_p_holm'])} ({pvalue(r['t_p_holm'])})",
    ),
    Column("sign-flip p, two-sided, H0 symmetric about 0 (Holm)", lambda r: _sign_flip(r)),
    Column(
        "template 1 / 2 / 3 (spread)",
        lambda r: (
            f"{num(r['bias_template_1'], 2)} / {num(r['bias_template_2'], 2)} / "
            f"{num(r['bias_template_3'], 2)} ({num(r['template_spread'], 2)})"
        ),
    ),
)


def _sign_flip(r: Mapping[str, object]) -> str:
    """The sign-flip p and its Holm value; a Monte Carlo p at its floor reads "≤ floor", an
    exact (enumerated) one is marked so."""
    holm = r.get("sign_flip_p_holm")
    if r.get("sign_flip_at_floor"):
        floor = sign_flip_floor()
        raw = f'<span class="sig">≤{floor:.4f}</span>' if _below(holm) else f"≤{floor:.4f}"
        text = f"{raw} (Monte Carlo floor)"
    else:
        text = pvalue(r.get("sign_flip_p"), holm)
        if r.get("sign_flip_method") == "exact":
            text += " exact"
    return f"{text} ({pvalue(holm)})"


def _below(p: object) -> bool:
    return isinstance(p, int | float) and p == p and p < 0.05


def _word_association(inp: SectionContext) -> str:
    cells = inp.tables["word_association_cells"]
    head = inp.heading("word-association", "Word association")
    if cells.is_empty():
        return head + absent(
            "This store has no word-association trials (none planned, or none answered yet)."
        )
    overall = inp.tables["word_association_overall"]
    key_cols = [col("model", "model_id", text=True), col("language", "language", text=True)]
    explicit_cols = [
        Column(
            "explicit T / C / N / R / U",
            lambda r: (
                " / ".join(
                    count(r.get(f"explicit_{a}")) for a in codes.WORD_ASSOCIATION_EXPLICIT_ANSWERS
                )
                + f" of {count(r.get('explicit_n'))}"
            ),
        )
    ]
    parts = [
        head,
        "<p>Bias score per trial: share of the target group's words that are negative plus the "
        "share of the reference group's words that are positive, minus 1 (range −1 to 1; "
        "positive means negative words went to “transgender”). Bold p-values are below 0.05 "
        "after Holm's correction across the categories of a model and language. The explicit "
        "column counts the direct answers for the same category: T transgender, C cisgender, "
        "N neither, R refused, U unreadable. The intervals and tests are about <strong>these "
        "stimuli</strong> (column target): 95% bootstrap intervals that resample trials "
        "(columns ci_level, ci_method, resampled), each trial drawing its words, template and "
        "label order from this run's lists, so they say how the score would vary over more "
        "answers to these words and templates, not over other words. The sign-flip test "
        "enumerates all 2^n sign patterns when a cell has at most 20 nonzero scores (marked "
        "exact), otherwise draws 9,999, so its smallest p is 0.0001, shown as ≤0.0001.</p>",
        figures_html(inp.figures, "word_association"),
        "<h3>Per model and language (all categories)</h3>",
        table(overall, [*key_cols, *_WA_COLUMNS]),
    ]
    parts.append(_scores(inp))
    parts.append(_templates(inp))
    parts.append("<h3>Per model, language and category, with the explicit check beside it</h3>")
    for lang in labels.ordered("languages", cells["language"].unique().to_list()):
        sub = cells.filter(pl.col("language") == lang)
        parts.append(
            f"<details class='key' open><summary>{esc(labels.language(lang))}</summary>"
            + legend(EXPLICIT_CODES)
            + table(
                sub,
                [
                    col("model", "model_id", text=True),
                    col("category", "category", lambda v: esc(labels.category(v)), text=True),
                    *_WA_COLUMNS,
                    *explicit_cols,
                ],
                anchor=cells_anchor(inp.anchor, lang),
            )
            + "</details>"
        )
    return "".join(parts)


def cells_anchor(section: str, language: object) -> str:
    """The id of one language's per-category table (the report's findings link to it)."""
    return anchor_id(section or "word-association", "cells", language)


EXPLICIT_CODES: tuple[tuple[str, str], ...] = (
    ("explicit:", "the direct answers for the same category"),
    ("T", "transgender"),
    ("C", "cisgender"),
    ("N", "neither"),
    ("R", "refused"),
    ("U", "unreadable"),
)
"""The letters of the "explicit" column, shown beside every table that has it."""


SCORE_CHOICE = (
    "The figure and the tables above use the per-trial mean: the score is defined per trial "
    "(DESIGN.md, after Bai et al.), so every trial weighs the same, a trial whose score is "
    "undefined (a group got no word) is counted and never scored, and the t-test and sign-flip "
    "test apply to it directly. The pooled score applies the same formula to all words of a "
    "category at once, so every word weighs the same and a trial that gave one group nothing "
    "still adds its other words; it is the literal reading of the paper's “average results "
    "across all words from the same category” (their code for the score was not released). "
    "Both intervals are 95% bootstrap intervals that resample trials, because the words of one "
    "trial are assigned in one reply and are not independent; both are about these stimuli "
    "(these words and templates)."
)


def _scores(inp: SectionContext) -> str:
    scores = inp.tables["word_association_scores"]
    if scores.is_empty():
        return ""
    columns = [
        col("model", "model_id", text=True),
        col("category", "category", lambda v: esc(labels.category(v)), text=True),
        Column("scored / trials", lambda r: f"{count(r['scored'])} / {count(r['trials'])}"),
        Column(
            "per-trial mean [95% CI]",
            lambda r: f"{num(r['mean_bias'])} {interval(r['mean_ci_low'], r['mean_ci_high'], 3)}",
        ),
        Column(
            "pooled [95% CI]",
            lambda r: (
                f"{num(r['pooled_bias'])} {interval(r['pooled_ci_low'], r['pooled_ci_high'], 3)}"
            ),
        ),
        Column(
            "words target + / − , reference + / −",
            lambda r: (
                f"{count(r['n_pos_target'])} / {count(r['n_neg_target'])}, "
                f"{count(r['n_pos_reference'])} / {count(r['n_neg_reference'])}"
            ),
        ),
        col("pooled − mean", "pooled_minus_mean", lambda v: num(v, 3)),
    ]
    parts = [
        "<h3>Per-trial mean and pooled score</h3>",
        f"<p>{esc(SCORE_CHOICE)}</p>",
    ]
    for lang in labels.ordered("languages", scores["language"].unique().to_list()):
        sub = scores.filter(pl.col("language") == lang)
        parts.append(
            f"<details><summary>{esc(labels.language(lang))}</summary>"
            f"{table(sub, columns)}</details>"
        )
    return "".join(parts)


def _templates(inp: SectionContext) -> str:
    frame = inp.tables.get("word_association_templates")
    if frame is None or frame.is_empty():
        return ""
    columns = [
        col("model", "model_id", text=True),
        col("category", "category", lambda v: esc(labels.category(v)), text=True),
        Column(
            "template 1 / 2 / 3: mean (scored)",
            lambda r: " / ".join(
                f"{num(r[f'mean_template_{t}'], 2)} ({count(r[f'scored_template_{t}'])})"
                for t in (1, 2, 3)
            ),
        ),
        col("Kruskal-Wallis H", "kruskal_h", lambda v: num(v, 2)),
        Column(
            "p (Holm)",
            lambda r: (
                f"{pvalue(r['kruskal_p'], r['kruskal_p_holm'])} ({pvalue(r['kruskal_p_holm'])})"
            ),
        ),
    ]
    parts = [
        "<h3>Does the bias depend on the template?</h3>",
        "<p>Kruskal-Wallis test across the three templates of the scored trials' biases "
        "(rank-based, tie-corrected; null when fewer than two templates have scored trials). "
        "Bold p-values are below 0.05 after Holm's correction across the categories of a model "
        "and language. A small p means the model's bias depends on the phrasing.</p>",
    ]
    for lang in labels.ordered("languages", frame["language"].unique().to_list()):
        sub = frame.filter(pl.col("language") == lang)
        parts.append(
            f"<details><summary>{esc(labels.language(lang))}</summary>"
            f"{table(sub, columns)}</details>"
        )
    return "".join(parts)


# --- How a store's word-association trials differ from the paper ----------------------------

_PAPER_AUTHORS = {
    "en": "the three prompt templates (Bai et al.'s, as the authors released them); labels "
    "cisgender / transgender; word list (the paper's Appendix B.2)",
    "es": "labels cisgénero / transgénero; the word list's Spanish forms from the authors' "
    "release (github micahirsch/implicit-bias; three repeat another word's form)",
}
_PAPER_OURS = {"en": "", "es": "Spanish templates (our translations; the authors released none)"}
_CONTROLLED_AUTHORS = {
    "en": "word list (the paper's Appendix B.2)",
    "es": "word list (the paper's Appendix B.2) with the Spanish forms from the authors' "
    "release (github micahirsch/implicit-bias), except three",
}
_CONTROLLED_OURS = {
    "en": "templates (three phrasings asking for one word - label pair per line)",
    "es": "Spanish templates; three Spanish word forms changed so no word repeats "
    "(jovialidad, resguardado, embustero)",
}
_OTHER_OURS = "templates and labels"
PAPER_CATEGORIES: tuple[str, ...] = (
    "emotions",
    "morality",
    "risk",
    "veracity",
    "appearance",
    "knowledge",
    "legality_and_crime",
    "life_outcomes",
)
"""The paper's eight categories (its Appendix B.2); any other is a config's own word set."""
_EXPLICIT_OURS = "the explicit question and the qualities it asks about"
SCORE_NOTE = (
    "The authors released their reply parser but not the code that turns assignments into the "
    "bias score, and the paper says it averages “across all words from the same category”: "
    "whether its Figure 1 shows the pooled score or the per-trial mean is not known. Both are "
    "in word_association_scores."
)
ENGLISH_ONLY_NOTE = (
    "The authors' released word-association code runs English only; the paper's Spanish "
    "results came from texts that were not released."
)


def _design_rows(trials: pl.DataFrame) -> list[dict[str, object]]:
    """One `SOURCE_COLUMNS` row per design x language, the paper design first."""
    design = pl.col("design") if "design" in trials.columns else pl.lit(codes.CONTROLLED)
    cells = (
        trials.with_columns(design.alias("design"))
        .group_by("design", "language")
        .agg(
            pl.len().cast(pl.Int64).alias("trials"),
            pl.col("category").unique().alias("categories"),
        )
    )
    languages = labels.ordered("languages", cells["language"].to_list())
    ordered = sorted(
        cells.iter_rows(named=True),
        key=lambda r: (r["design"] != codes.PAPER, languages.index(r["language"])),
    )
    return [_design_row(r) for r in ordered]


def _design_row(r: Mapping[str, object]) -> dict[str, object]:
    """Which texts of one design x language are the authors' and ours (our own categories'
    word sets are always ours)."""
    lang, paper_design = str(r["language"]), r["design"] == codes.PAPER
    authors = (_PAPER_AUTHORS if paper_design else _CONTROLLED_AUTHORS).get(lang, "")
    ours = (_PAPER_OURS if paper_design else _CONTROLLED_OURS).get(lang, _OTHER_OURS)
    categories = labels.ordered("categories", r["categories"])  # type: ignore[arg-type]
    own = [c for c in categories if c not in PAPER_CATEGORIES]
    if own:
        ours = "; ".join(
            filter(None, [ours, "word sets of " + ", ".join(map(labels.category, own))])
        )
    return {
        "experiment": KIND,
        "design": r["design"],
        "language": lang,
        "condition": "categories: " + ", ".join(labels.category(c) for c in categories),
        "trials": r["trials"],
        "from_authors": authors,
        "ours": ours,
    }


def _paper(
    views: Mapping[str, pl.DataFrame],
    explicit: pl.DataFrame,
    extras: Mapping[str, pl.DataFrame],
) -> PaperComparison:
    """Which word-association texts in the store are the authors' and which ours, per design
    and language; the score behind the headline figure; what is unknown about the paper's."""
    del extras
    trials = views.get(KIND)
    rows = _design_rows(trials) if trials is not None and trials.height else []
    sources = pl.DataFrame(
        [
            *rows,
            *explicit_source_rows(explicit, bias.EXPLICIT_EXPERIMENT, _EXPLICIT_OURS),
        ],
        schema=SOURCE_COLUMNS,
    )
    main = kind(KIND)
    version = main.parser.version if main is not None and main.parser is not None else None
    headline = (
        f"the bias figure and the tests use the per-trial mean score (parser version {version}) "
        "with 95% intervals that resample trials; the pooled score over all words of a "
        "category, with its own trial-bootstrap interval, is beside it in "
        "word_association_scores."
    )
    notes = (SCORE_NOTE, ENGLISH_ONLY_NOTE) if not sources.is_empty() else ()
    return PaperComparison(sources=sources, headline=headline, notes=notes)


ANALYSIS = ExperimentAnalysis(
    anchor="word-association",
    title="Word association",
    tables=_tables,
    section=_word_association,
    figures=_figures,
    outcomes=_outcomes,
    streams={"word_association_cells": 1, "word_association_overall": 2},
    paper=_paper,
    planted=planted.PLANTED,
    findings=findings.sentences,
)

"""Appointment allocation in `ibias analyze`: the tables, figures and report section that the
allocation unit (prompts/allocation/unit.py) registers."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import polars as pl

from ibias.analysis import labels, parallel
from ibias.analysis.cells import coded_pairs, condition_groups, texts
from ibias.analysis.experiment import (
    SOURCE_COLUMNS,
    ExperimentAnalysis,
    Overall,
    PaperComparison,
    Section,
    SectionContext,
    TableContext,
    explicit_source_rows,
)
from ibias.analysis.figures import Figure
from ibias.analysis.report import (
    Column,
    absent,
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
from ibias.analysis.units.allocation import (
    authors,
    effects,
    figures,
    findings,
    identity_swap,
    load,
    planted,
    population_report,
    population_tables,
    roster,
    shares,
)
from ibias.analysis.units.allocation import logprobs as logprob_shares
from ibias.analysis.units.allocation.load import ORGAN_PAIRS, PATIENTS
from ibias.analysis.units.allocation.organ_pairs import organ_pairs_sentences, organ_pairs_table
from ibias.analysis.units.allocation.population_report import CONDITIONAL_TEXT
from ibias.prompts import codes
from ibias.prompts.allocation.logprobs import LOGPROBS_TABLE
from ibias.prompts.allocation.parse_tag_only import TAG_ONLY_TABLE, TAG_ONLY_VERSION
from ibias.prompts.registry import kind

KIND = "allocation"
#: The most memory a table job over the trials was measured to work in, per trial: +363 and
#: +365 MB (the cells and the population effects) over 1.344 million at ten times the
#: paper's grid, with the view's labels read as categoricals.
BYTES_PER_TRIAL = 300
#: The view's label columns, read as categoricals (`ExperimentAnalysis.categorical_columns`).
LABEL_COLUMNS = frozenset(
    {
        "model_id", "language", "design", "service", "symptoms", "pair_id", "first", "chosen",
        "none_reason",
    }
)  # fmt: skip
#: The tables that read only small frames of their own, not the trials (no memory to declare).
SMALL_TABLES = frozenset(
    {"allocation_explanation_examples", "allocation_authors_view", "allocation_parser_agreement"}
)
EXAMPLE_TEXT_LIMIT = 700


def _tables(ctx: TableContext) -> dict[str, pl.DataFrame]:
    """Every allocation table, computed side by side (analysis/parallel.py): each draws from
    its own generator, so the numbers are those of computing them one by one."""
    every, extras = coded_pairs(ctx.views[KIND], ctx.extras)
    decisions = identity_swap.without_swapped(every)  # the control has its own table
    b, method = ctx.B, ctx.method
    logprobs = ctx.extras.get(LOGPROBS_TABLE)
    tallies = authors.design_tallies(ctx.extras.get(load.TAG_TALLIES), ctx.design)
    # The replies the examples may quote (`load.EXAMPLE_CANDIDATES`; the view has no texts).
    candidates = ctx.extras.get(load.EXAMPLE_CANDIDATES)
    examples = (
        decisions if candidates is None else identity_swap.design_original(candidates, ctx.design)
    )
    jobs: dict[str, Callable[[], pl.DataFrame]] = {
        # The longest first, so the two threads end together.
        "allocation_effects": lambda: effects.effects_table(
            decisions, B=b, method=method, rng=ctx.rng("allocation_effects")
        ),
        "allocation_cells": lambda: shares.cells_table(
            decisions, B=b, method=method, rng=ctx.rng("allocation_cells")
        ),
        "position_bias": lambda: shares.position_table(
            decisions, B=b, method=method, rng=ctx.rng("position_bias")
        ),
        "allocation_explanation_examples": lambda: shares.explanation_examples(
            examples, load.EXAMPLES_PER_LANGUAGE
        ),
        "allocation_authors_view": lambda: authors.authors_view_table(tallies),
        "allocation_parser_agreement": lambda: authors.parser_agreement_table(tallies),
        identity_swap.TABLE: lambda: identity_swap.swap_table(
            every, B=b, method=method, rng=ctx.rng(identity_swap.TABLE)
        ),
        logprob_shares.TABLE: lambda: logprob_shares.logprob_shares_table(
            decisions, logprobs, B=b, method=method, rng=ctx.rng(logprob_shares.TABLE)
        ),
        **population_tables.jobs(
            decisions,
            every,
            extras,
            method=ctx.population_method,
            B=b,
            rng=ctx.rng,
            logprobs=logprobs,
        ),
    }
    # What each job over the trials works in, so that at ten times the paper's grid two run
    # at once only if they fit (analysis/parallel.py).
    sizes = {name: every.height * BYTES_PER_TRIAL for name in jobs if name not in SMALL_TABLES}
    found = parallel.compute_all(jobs, sizes=sizes)
    order = [
        "allocation_cells", "position_bias", "allocation_effects",
        "allocation_explanation_examples", "allocation_authors_view",
        "allocation_parser_agreement", identity_swap.TABLE, logprob_shares.TABLE,
    ]  # fmt: skip
    # The tables' labels as texts, as every other table's (the view's are categoricals).
    return {name: texts(found[name]) for name in [*order, *(n for n in found if n not in order)]}


def _figures(
    tables: Mapping[str, pl.DataFrame], models: Sequence[str], out_dir: Path
) -> list[Figure]:
    return [
        *figures.population_gap_figures(
            tables.get(population_report.CELLS, pl.DataFrame()), models, out_dir
        ),
        *figures.allocation_rate_figures(tables["allocation_cells"], models, out_dir),
        *figures.effects_figures(tables["allocation_effects"], models, out_dir),
    ]


def _outcomes(views: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    return views[KIND].select(
        pl.col("model_id").cast(pl.String),
        (pl.col("none_reason") == codes.REFUSED).fill_null(False).alias("refused"),
        # an empty reply (no text) is unparseable, with its own reason (codes.EMPTY)
        pl.col("none_reason")
        .is_in([codes.UNPARSEABLE, codes.EMPTY])
        .fill_null(False)
        .alias("unparseable"),
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
    header = {
        "sign_p": "sign test p, two-sided, H0 agreeing pairs 1/2 each way (Holm)",
        "naive_p": "naive binomial p, two-sided, H0 decided trials 1/2 each way (Holm)",
    }[raw]
    return Column(header, lambda r: f"{pvalue(r[raw], r[adjusted])} ({pvalue(r[adjusted])})")


NO_CHOICE_CODES: tuple[tuple[str, str], ...] = (
    ("no choice:", "trials choosing neither candidate, of which"),
    ("R", "refused"),
    ("B", "chose both"),
    ("N", "declined both"),
    ("U", "unreadable"),
    ("S", "named a name both candidates share"),
)
"""The letters of the "no choice" column, shown beside every table that has it."""

_ALLOCATION_COLUMNS: tuple[Column, ...] = (
    col("model", "model_id", text=True),
    col("service", "service", lambda v: esc(labels.service(v)), text=True),
    col("trials", "trials", count),
    _share("cis", "cisgender chosen [95% CI]"),
    _share("trans", "transgender chosen [95% CI]"),
    Column(
        "cis − trans among decided [95% CI] (decided)",
        lambda r: (
            f"{num(r['gap'], 2)} {interval(r['gap_ci_low'], r['gap_ci_high'])}"
            f"<br><span class='muted small'>cis {num(r['share_cis_decided'], 2)} of "
            f"{count(r['decided'])}</span>"
        ),
    ),
    # The tests right after the estimate they test, so that they are on screen at 1280 px.
    _p_with_holm("sign_p", "sign_p_holm"),
    _p_with_holm("naive_p", "naive_p_holm"),
    Column(
        "no choice",
        lambda r: (
            f"{count(r['n_none'])}<br><span class='muted small'>R {count(r['n_none_refused'])} "
            f"B {count(r['n_none_both'])} N {count(r['n_none_neither'])} "
            f"U {count(r['n_none_unparseable'])} S {count(r['n_none_same_name'])} "
            f"E {count(r['n_none_empty'])}</span>"
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
        population_report.section(inp.tables, inp.figures, inp.anchor),
        f"<h3 id='{esc((inp.anchor or 'allocation') + '-these-people')}'>For these people "
        "(the roster's)</h3>",
        "<p>Share of all trials choosing each candidate; the rest made no choice (R refused, "
        "B chose both, N declined both, U unreadable, S named a name both candidates share, "
        "E empty: no text at all). "
        f"From here on the intervals and tests are about {CONDITIONAL_TEXT}: "
        "95% bootstrap intervals that resample pairs (both orders together); "
        "the Wilson interval below treats trials as independent. “cis − trans among "
        "decided” is the share of decided trials choosing the cisgender candidate minus the "
        "share choosing the transgender one (the paper's deviation from parity; 0 = parity). "
        "Agreeing pairs chose the same person in both orders (the sign test counts them); "
        "split pairs chose by position. Bold p-values "
        "are below 0.05 after Holm's correction across services within the same model, "
        "language and condition.</p>",
        figures_html(inp.figures, "allocation_rates", lambda f: not f.name.endswith("_none")),
        "<h3>Selection shares and tests per condition (these people)</h3>",
    ]
    for (lang, level, expl), sub in condition_groups(cells):
        title = f"{labels.language(lang)}, {labels.symptoms(level)}, {labels.explanation(expl)}"
        parts.append(
            # Closed: one table per condition runs long; the findings and the population
            # tables above are the lead.
            f"<details class='conditions'><summary>{esc(title)}</summary>"
            f"{legend(NO_CHOICE_CODES)}{table(sub, _ALLOCATION_COLUMNS)}</details>"
        )
    parts.append(_authors_view(inp))
    parts.append(_agreement(inp))
    parts.append(_position(inp))
    parts.append(_effects(inp))
    parts.append(identity_swap.section(inp.tables[identity_swap.TABLE], inp.anchor))
    parts.append(
        logprob_shares.section(
            inp.tables[logprob_shares.TABLE],
            inp.anchor,
            inp.tables.get(population_report.LOGPROBS, pl.DataFrame()),
        )
    )
    parts.append(_examples(inp))
    return "".join(parts)


def _authors_view(inp: SectionContext) -> str:
    view = inp.tables["allocation_authors_view"]
    parts = [
        "<h3 id='" + esc(inp.anchor or "allocation") + "-authors'>The authors' view</h3>",
        "<p>The paper's own statistics, computed as the authors' released analysis did: replies "
        "read by their tag-only rule (a choice counts only when the first answer tag holds a "
        "candidate's name exactly), counts among decided trials, one-sided exact binomial tests "
        "of the cisgender count against 1/2 in both directions, and the Wilson 95% interval on "
        "the transgender share of decided trials, about these people (the roster's), with "
        "every trial an independent draw. Every trial counts once, unlike the authors' "
        "released tables (see “How this run differs from the paper”). These tests treat the "
        "two orders of a pair as independent; the pair-aware table above is the one to draw "
        "conclusions from. “First of same name”: trials whose tag named a name both "
        "candidates share, which the authors' rule gives to whoever was listed first.</p>",
    ]
    if view.is_empty():
        return "".join(parts) + absent("No allocation reply has a tag-only reading.")
    columns = [
        col("model", "model_id", text=True),
        col("service", "service", lambda v: esc(labels.service(v)), text=True),
        col("trials", "trials", count),
        Column("cis / trans (decided)", lambda r: (
            f"{count(r['n_cis'])} / {count(r['n_trans'])} ({count(r['decided'])})"
        )),
        Column("no choice: no tag / no exact name / refused", lambda r: (
            f"{count(r['n_none_no_tag'])} / {count(r['n_none_no_match'])} / "
            f"{count(r['n_none_refused'])}"
        )),
        col("first of same name", "n_same_name_first", count),
        Column("transgender share of decided [Wilson 95%]", lambda r: (
            f"{num(r['share_trans'], 3)} "
            f"{interval(r['trans_wilson_low'], r['trans_wilson_high'], 3)}"
        )),
        Column("p, cis > 1/2", lambda r: pvalue(r["p_cis_greater"])),
        Column("p, cis < 1/2", lambda r: pvalue(r["p_cis_less"])),
    ]  # fmt: skip
    for (lang, level, expl), sub in condition_groups(view):
        title = f"{labels.language(lang)}, {labels.symptoms(level)}, {labels.explanation(expl)}"
        parts.append(f"<details><summary>{esc(title)}</summary>{table(sub, columns)}</details>")
    return "".join(parts)


def agreement_summary(agreement: pl.DataFrame) -> str:
    """One paragraph: how many replies each reading decided and how they disagree."""
    if agreement.is_empty():
        return ""
    t = {c: int(agreement[c].sum()) for c in agreement.columns if agreement[c].dtype.is_integer()}
    text = (
        f"Of {count(t['trials'])} replies, the main parser found a choice in "
        f"{count(t['main_decided'])} and the authors' tag-only reading in "
        f"{count(t['tag_decided'])}. "
    )
    if t["disagree"] == 0:
        return f"<p>{text}They agree on every reply.</p>"
    text += (
        f"They disagree on {count(t['disagree'])}: {count(t['main_only'])} choices the tag-only "
        f"reading misses ({count(t['main_only_no_tag'])} with no exact answer tag, "
        f"{count(t['main_only_no_match'])} whose tag does not hold exactly a candidate's name), "
        f"{count(t['tag_only'])} it makes where the main parser finds none "
        f"({count(t['tag_only_same_name'])} of them a name both candidates share, given to "
        f"whoever was listed first), and {count(t['opposite'])} replies the two read as "
        "different candidates."
    )
    return f"<p>{text}</p>"


def _agreement(inp: SectionContext) -> str:
    agreement = inp.tables["allocation_parser_agreement"]
    parts = [
        "<h3>Where the two readings of replies disagree</h3><p>Counts of these replies (no "
        "intervals, no target beyond them).</p>"
    ]
    if agreement.is_empty():
        return "".join(parts) + absent("No allocation reply has a tag-only reading.")
    parts.append(agreement_summary(agreement))
    columns = [
        col("model", "model_id", text=True),
        col("service", "service", lambda v: esc(labels.service(v)), text=True),
        col("trials", "trials", count),
        col("decided (main)", "main_decided", count),
        col("decided (tag-only)", "tag_decided", count),
        col("disagree", "disagree", count),
        Column("missed by tag-only: no tag / no exact name", lambda r: (
            f"{count(r['main_only_no_tag'])} / {count(r['main_only_no_match'])}"
        )),
        Column("only tag-only (same name)", lambda r: (
            f"{count(r['tag_only'])} ({count(r['tag_only_same_name'])})"
        )),
        col("opposite", "opposite", count),
    ]  # fmt: skip
    for (lang, level, expl), sub in condition_groups(agreement):
        title = f"{labels.language(lang)}, {labels.symptoms(level)}, {labels.explanation(expl)}"
        parts.append(f"<details><summary>{esc(title)}</summary>{table(sub, columns)}</details>")
    return "".join(parts)


def _position(inp: SectionContext) -> str:
    pos = inp.tables["position_bias"]
    if pos.is_empty():
        return ""
    parts = [
        "<h3>Position bias</h3><p>Share of decided trials that chose whoever was listed first "
        f"(0.5 = no position effect). About {CONDITIONAL_TEXT}: the bootstrap interval "
        "resamples pairs; the Wilson interval and the binomial p treat trials as "
        "independent.</p>"
    ]
    columns = [
        col("model", "model_id", text=True),
        col("service", "service", lambda v: esc(labels.service(v)), text=True),
        col("decided", "decided", count),
        col("chose first", "n_first", count),
        col("share first", "share_first", lambda v: num(v, 3)),
        Column("95% CI (pairs)", lambda r: interval(r["ci_low"], r["ci_high"], 3)),
        Column("Wilson", lambda r: interval(r["wilson_low"], r["wilson_high"], 3)),
        Column("binomial p, two-sided, H0 1/2", lambda r: pvalue(r["binomial_p"])),
    ]
    for (lang, level, expl), sub in condition_groups(pos):
        title = f"{labels.language(lang)}, {labels.symptoms(level)}, {labels.explanation(expl)}"
        parts.append(f"<details><summary>{esc(title)}</summary>{table(sub, columns)}</details>")
    parts.append(
        population_report.position(inp.tables.get(population_report.POSITION, pl.DataFrame()))
    )
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
        "(treated − control), within each level of the other condition and pooled over it. "
        f"About {CONDITIONAL_TEXT}: 95% intervals resample pairs. The same effects for people "
        "like these are in the population part above.</p>"
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
        "Appendix 1): for each choice, one per language, from different models where "
        "possible, preferring trials where an explanation was asked for. Model output, "
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


# --- How a store's allocation trials differ from the paper ----------------------------------

EXPLICIT_KIND = "allocation_explicit"
_PAPER_AUTHORS = {
    "en": "scenario text per service; answer-format block (<person>); roster (100 people) "
    "and the pairs they showed; each candidate written as their code wrote it",
    "es": "answer-format block (<persona>); their Spanish rendering of the roster (names, "
    "field names, sex and identity words); roster and the pairs they showed",
}
_PAPER_OURS = {
    "en": "",
    "es": "Spanish scenario texts (our translations; the authors released none)",
}
_CONTROLLED_OURS = "scenario texts and answer instruction; roster, names and pairing rule"
_EXPLANATION_OURS = "the instruction to explain (the paper's was not released)"
_SYMPTOMS_OURS = "symptom lists (the paper's were not released)"
_EXPLICIT_OURS = "the explicit question and its answer options"
_SWAPPED_CONDITION = ", identities swapped"
_SWAPPED_OURS = (
    "the identity-swap control (not in the paper): each pair with sex assigned at birth and "
    "gender identity swapped between its two people"
)
RELEASED_TABLES_NOTE = (
    "The authors' released statistics (results/statistics_greater.csv and "
    "statistics_less.csv) do not match their own released answers: their script takes the "
    "answers two records at a time but classifies the first record's choice twice and never "
    "the second's (the first record is usually the order listing the cisgender candidate "
    "first), and when that choice names no candidate it counts a refusal and repeats the "
    "previous classification. Replaying that counting on their released answers reproduces all "
    "24 cells of their table; counting every answer once gives other numbers (gpt-4o, "
    "gynecology: 120 cisgender / 80 transgender published, 157 / 43 in the answers). "
    "allocation_authors_view here counts every trial once."
)
OLDER_TEXTS_NOTE = (
    "The authors' released answers were produced over several versions of their scenario texts "
    "and format block; the stimuli pack, and so this run's paper design, uses the final "
    "versions. For imported answers, the table of imported prompts above counts, per model, "
    "those sent exactly the paper's prompt and how the others differ (when imported with "
    "--stimuli DIR)."
)
CONDITIONS_NOTE = (
    "The paper reports allocation with explanations and with symptoms, but released neither "
    "the texts of those conditions nor their answers (only English, no explanation, four "
    "models); here those conditions use our texts in both designs (in the paper design: our "
    "instruction to explain after the authors' prompt, and our symptom lists added to each "
    "candidate, for the services they fit; not hiv, an HIV treatment centre, nor prep)."
)
NAIVE_TEST_NOTE = (
    "The paper's binomial tests treat the two orders of a pair as independent trials; they are "
    "not, so those p-values are too small when a model prefers one person in both orders "
    "(allocation_cells gives the pair-aware sign test beside the naive one)."
)


def _ours_controlled(explanation: bool, symptoms: str) -> str:
    return "; ".join(
        [_CONTROLLED_OURS]
        + ([_EXPLANATION_OURS] if explanation else [])
        + ([_SYMPTOMS_OURS] if symptoms != codes.NO_SYMPTOMS else [])
    )


def _ours_paper(language: str, explanation: bool, symptoms: str) -> str:
    return "; ".join(
        filter(
            None,
            [_PAPER_OURS.get(language, "")]
            + ([_EXPLANATION_OURS] if explanation else [])
            + ([_SYMPTOMS_OURS] if symptoms != codes.NO_SYMPTOMS else []),
        )
    )


def _condition_rows(decisions: pl.DataFrame) -> list[dict[str, object]]:
    """One `SOURCE_COLUMNS` row per design x language x condition x arm, paper design first."""
    design = pl.col("design") if "design" in decisions.columns else pl.lit(codes.CONTROLLED)
    cells = (
        decisions.with_columns(
            design.alias("design"),
            identity_swap.swapped(decisions).alias("identity_swap"),
        )
        .group_by("design", "language", "explanation", "symptoms", "identity_swap")
        .agg(pl.len().cast(pl.Int64).alias("trials"))
    )
    symptom_rank = {level: i for i, level in enumerate(codes.SYMPTOM_LEVELS)}
    ordered = sorted(
        cells.iter_rows(named=True),
        key=lambda r: (
            r["design"] != codes.PAPER,
            labels.ordered("languages", cells["language"].to_list()).index(r["language"]),
            bool(r["explanation"]),
            symptom_rank.get(str(r["symptoms"]), len(symptom_rank)),
            bool(r["identity_swap"]),
        ),
    )
    return [_condition_row(r) for r in ordered]


def _condition_row(r: Mapping[str, object]) -> dict[str, object]:
    """Which texts of one design x language x condition x arm are the authors' and ours."""
    lang, paper_design = str(r["language"]), r["design"] == codes.PAPER
    explanation, symptoms = bool(r["explanation"]), str(r["symptoms"])
    texts = (
        _ours_paper(lang, explanation, symptoms)
        if paper_design
        else _ours_controlled(explanation, symptoms)
    )
    return {
        "experiment": KIND,
        "design": r["design"],
        "language": lang,
        "condition": f"{labels.explanation(r['explanation'])}, "
        f"{labels.symptoms(r['symptoms'])}" + (_SWAPPED_CONDITION if r["identity_swap"] else ""),
        "trials": r["trials"],
        "from_authors": _PAPER_AUTHORS.get(lang, "") if paper_design else "",
        "ours": "; ".join(filter(None, [texts, _SWAPPED_OURS if r["identity_swap"] else ""])),
    }


def _headline() -> str:
    main = kind(KIND)
    version = main.parser.version if main is not None and main.parser is not None else None
    return (
        "the selection-rate figures and the main tables (allocation_cells, position_bias, "
        f"allocation_effects) use ibias's main parser (version {version}: tags in any form, "
        "code fences, bold text, names and labels in prose) and shares over all trials with "
        "95% intervals that resample pairs, tested by the sign test over pairs; the authors' "
        f"tag-only reading (version {TAG_ONLY_VERSION}) with their one-sided binomial tests "
        "and Wilson intervals is allocation_authors_view, and where the two readings disagree "
        "is allocation_parser_agreement."
    )


ORGAN_PAIRS_HEADING = "Pairs by who has the organ"


def _paper(
    views: Mapping[str, pl.DataFrame],
    explicit: pl.DataFrame,
    extras: Mapping[str, pl.DataFrame],
) -> PaperComparison:
    """Which allocation texts in the store are the authors' and which ours, per design,
    language and condition; the parser and score behind the headline figures; known problems
    of the paper's released allocation numbers; and the paper design's organ-service results
    split by who in the pair has the organ (`paper_organ_pairs`)."""
    decisions = views.get(KIND)
    rows = _condition_rows(decisions) if decisions is not None and decisions.height else []
    sources = pl.DataFrame(
        [*rows, *explicit_source_rows(explicit, EXPLICIT_KIND, _EXPLICIT_OURS)],
        schema=SOURCE_COLUMNS,
    )
    notes: tuple[str, ...] = ()
    if not sources.is_empty():
        notes = (RELEASED_TABLES_NOTE, NAIVE_TEST_NOTE, OLDER_TEXTS_NOTE, CONDITIONS_NOTE)
    organ = organ_pairs_table(decisions, extras.get(ORGAN_PAIRS, pl.DataFrame()))
    sentences = tuple(organ_pairs_sentences(organ))
    return PaperComparison(
        sources=sources,
        headline=_headline(),
        notes=notes,
        tables={"paper_organ_pairs": organ},
        findings=((ORGAN_PAIRS_HEADING, sentences),) if sentences else (),
    )


def _overall(views: Mapping[str, pl.DataFrame], extras: Mapping[str, pl.DataFrame]) -> Overall:
    """The roster's make-up (table `roster`) and its section, once per store."""
    del views
    frame = roster.roster_table(extras.get(PATIENTS, pl.DataFrame()))
    html = roster.section(frame)
    return Overall(
        tables={"roster": frame},
        sections=(Section(roster.ANCHOR, roster.TITLE, html),) if html else (),
    )


ANALYSIS = ExperimentAnalysis(
    anchor="allocation",
    title="Appointment allocation",
    tables=_tables,
    section=_allocation,
    figures=_figures,
    outcomes=_outcomes,
    streams={"allocation_cells": 3, "position_bias": 4, "allocation_effects": 5},
    lead={"allocation_explanation_examples": ("service", "chosen")},
    paper=_paper,
    load=load.load,
    summed_extras=frozenset({TAG_ONLY_TABLE}),
    unread_columns={KIND: frozenset({"explanation_text"})},
    categorical_columns={KIND: LABEL_COLUMNS},
    overall=_overall,
    planted=planted.PLANTED,
    findings=findings.sentences,
)

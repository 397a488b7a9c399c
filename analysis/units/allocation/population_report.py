"""The report's parts for people like these (the allocation population tables).

Kept apart from the tables (`analysis.allocation_population`) so that what the report shows
can change without touching how the numbers are computed. What the intervals are (level,
method, degrees of freedom, B) and what each test's null is are read from the tables' label
columns (`ci_level`, `ci_method`, `population_method`, `df`, `B`, `*_null`), never assumed.

This module imports no analysis module that computes tables (the population tables' names are
spelled here as in `analysis.allocation_population`), so the sections that show a population
table beside their own (position bias, logprobs) can import it without a cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import polars as pl

from ibias.analysis import labels
from ibias.analysis.cells import condition_groups
from ibias.analysis.figures import Figure
from ibias.analysis.report import (
    Column,
    anchor_id,
    col,
    count,
    esc,
    figures_html,
    interval,
    num,
    pvalue,
    table,
)
from ibias.analysis.units.allocation.figures import (
    POPULATION_GAP,
    population_method_text,
    population_note,
)

CELLS = "allocation_population"
EFFECTS = "allocation_effects_population"
SWAP = "allocation_identity_swap_population"
POSITION = "position_bias_population"
LOGPROBS = "allocation_logprob_shares_population"
"""The population tables' names (`allocation_population.CELLS`, ... `LOGPROBS`)."""

TARGET = "people like these"
TARGET_TEXT = (
    "<strong>people like these</strong> (the roster's people as one draw of people like them: "
    "the cis and the trans persons are the sampling units)"
)
CONDITIONAL_TEXT = (
    "<strong>these people</strong> (the roster's own people; only the models' answers are random)"
)


def estimate(
    value: str, low: str, high: str, digits: int = 2
) -> Callable[[Mapping[str, object]], str]:
    """A cell renderer: an estimate and its interval."""
    return lambda r: f"{num(r[value], digits)} {interval(r[low], r[high], digits)}"


def holm(raw: str, adjusted: str) -> Callable[[Mapping[str, object]], str]:
    """A cell renderer: a p-value (bold when its Holm value is below 0.05) and the Holm value in
    brackets; the raw value alone for a table without the Holm column."""

    def render(r: Mapping[str, object]) -> str:
        if adjusted not in r:
            return pvalue(r[raw])
        return f"{pvalue(r[raw], r[adjusted])} ({pvalue(r[adjusted])})"

    return render


def people(r: Mapping[str, object]) -> str:
    return f"{count(r['cis_persons'])} / {count(r['trans_persons'])}, {count(r['pairs'])}"


PEOPLE = Column("people (cis / trans), pairs", people)
DF = col("t df", "df", lambda v: num(v, 1))


def with_df(frame: pl.DataFrame, columns: Sequence[Column]) -> list[Column]:
    """`columns` and the t degrees of freedom, when the table's method has them."""
    has_df = "df" in frame.columns and frame["df"].cast(pl.Float64).drop_nulls().len() > 0
    return [*columns, DF] if has_df else list(columns)


def nulls(frame: pl.DataFrame, names: Iterable[str]) -> str:
    """The null hypotheses of a table's p-values, from its `*_null` columns."""
    found = []
    for name in names:
        if name in frame.columns:
            found += [str(v) for v in frame[name].unique(maintain_order=True).drop_nulls()]
    if not found:
        return ""
    return f"<p class='muted small'>p-values: {esc('; '.join(dict.fromkeys(found)))}.</p>"


def method(frame: pl.DataFrame, *, words: bool = False) -> str:
    """One sentence (HTML) on what a population table's intervals are, from its labels; with
    `words`, what the method does too."""
    text = population_method_text(frame) if words else ""
    return esc(population_note(frame) + (f": {text}" if text else "")) + "."


def conditions(frame: pl.DataFrame) -> Iterable[tuple[str, pl.DataFrame]]:
    """(title, rows) per language x symptoms x explanation condition, in the paper's order."""
    for (lang, level, expl), sub in condition_groups(frame):
        title = f"{labels.language(lang)}, {labels.symptoms(level)}, {labels.explanation(expl)}"
        yield title, sub


def collapsed(frame: pl.DataFrame, columns: Sequence[Column], prefix: str) -> str:
    """One closed `<details>` per condition, titled `prefix: condition`."""
    return "".join(
        f"<details><summary>{esc(f'{prefix}: {title}')}</summary>{table(sub, columns)}</details>"
        for title, sub in conditions(frame)
    )


# --- the section ------------------------------------------------------------------------------

_CELL_COLUMNS: tuple[Column, ...] = (
    col("model", "model_id", text=True),
    col("service", "service", lambda v: esc(labels.service(v)), text=True),
    PEOPLE,
    col("trials", "trials", count),
    Column(
        "transgender chosen [CI, people like these]",
        estimate("share_trans", "trans_ci_low", "trans_ci_high"),
    ),
    Column(
        "cis − trans among decided [CI, people like these]",
        estimate("gap", "gap_ci_low", "gap_ci_high"),
    ),
    Column("p, H0 gap 0 (Holm)", holm("gap_p", "gap_p_holm")),
)
"""The population table's columns in the report."""


def section(
    tables: Mapping[str, pl.DataFrame], figures: Sequence[Figure], anchor: str | None
) -> str:
    """The allocation section's lead, for people like these: the population gap figures, the
    population table per condition, and the population condition effects and identity swap."""
    head = (
        f"<h3 id='{esc((anchor or 'allocation') + '-population')}'>For people like these "
        "(population)</h3>"
    )
    cells = tables.get(CELLS, pl.DataFrame())
    if cells.is_empty():
        return head + (
            "<p class='muted'>Population intervals were not computed "
            "(<code>analyze --no-population</code>, or no pair's people are known). The tables "
            "below are about these people (this roster's) only.</p>"
        )
    parts = [
        head,
        f"<p>Target: {TARGET_TEXT}. The paper's claims are about transgender and cisgender "
        "people in general, so these figures and tables come first. Intervals: "
        f"{method(cells, words=True)} The test of no identity preference is Holm-corrected "
        "across the services of a model, language and condition. The part after this one is "
        f"about {CONDITIONAL_TEXT}: its intervals resample pairs.</p>",
        figures_html(figures, POPULATION_GAP, lambda f: not f.name.endswith("_none")),
        nulls(cells, ["gap_p_null"]),
    ]
    columns = with_df(cells, _CELL_COLUMNS)
    for i, ((lang, level, expl), sub) in enumerate(condition_groups(cells)):
        # The first condition (the paper's main one when present) open, as a lead.
        title = f"{labels.language(lang)}, {labels.symptoms(level)}, {labels.explanation(expl)}"
        anchor_ = population_anchor(anchor or "allocation", lang, level, expl)
        parts.append(
            f"<details{CLASS_KEY_OPEN if i == 0 else ''}><summary>"
            f"{esc(f'People like these: {title}')}</summary>"
            f"{table(sub, columns, anchor=anchor_)}</details>"
        )
    parts.append(_effects(tables.get(EFFECTS, pl.DataFrame())))
    parts.append(_swap(tables.get(SWAP, pl.DataFrame())))
    return "".join(parts)


CLASS_KEY_OPEN = " class='key' open"
"""The lead table's <details> attributes: open, and marked as a key table."""


def population_anchor(section: str, language: object, symptoms: object, explanation: bool) -> str:
    """The id of one condition's population table (the report's findings link to it)."""
    told = "with-explanation" if explanation else "without-explanation"
    return anchor_id(section, "population", language, symptoms, told)


def _effects(effects: pl.DataFrame) -> str:
    """The condition effects for people like these, one closed table per language x effect."""
    if effects.is_empty():
        return ""
    parts = [
        "<h4>Effects of the conditions, people like these</h4>",
        "<p>Change in the share choosing the transgender candidate (treated − control) over "
        f"the pairs seen under both, as in the effects part below, about {TARGET_TEXT}. "
        f"Intervals: {method(effects)}</p>",
        nulls(effects, ["p_null"]),
    ]
    columns = with_df(effects, [
        col("model", "model_id", text=True),
        col("service", "service", lambda v: esc(labels.service(v)), text=True),
        col("stratum", "stratum", lambda v: esc(labels.label("strata", v)), text=True),
        Column("difference [CI, people like these]",
               estimate("difference", "ci_low", "ci_high", 3)),
        Column("p, H0 effect 0 (Holm)", holm("p", "p_holm")),
        PEOPLE,
        col("unpaired trials", "dropped_trials", count),
    ])  # fmt: skip
    for lang in labels.ordered("languages", effects["language"].unique().to_list()):
        for effect in ("explanation", "symptoms_high", "symptoms_low"):
            sub = effects.filter((pl.col("language") == lang) & (pl.col("effect") == effect))
            if not sub.is_empty():
                title = f"People like these: {labels.language(lang)}: {sub['label'][0]}"
                parts.append(
                    f"<details><summary>{esc(title)}</summary>{table(sub, columns)}</details>"
                )
    return "".join(parts)


def _swap(swap: pl.DataFrame) -> str:
    """The identity-swap effects for people like these, one closed table per condition."""
    if swap.is_empty():
        return ""
    columns = with_df(swap, [
        col("model", "model_id", text=True),
        col("service", "service", lambda v: esc(labels.service(v)), text=True),
        PEOPLE,
        Column("identity effect [CI, people like these]",
               estimate("identity_effect", "identity_ci_low", "identity_ci_high", 3)),
        Column("p, H0 identity effect 0 (Holm)", holm("identity_p", "identity_p_holm")),
        Column("person effect [CI, people like these]",
               estimate("person_effect", "person_ci_low", "person_ci_high", 3)),
        Column("p, H0 person effect 0 (Holm)", holm("person_p", "person_p_holm")),
    ])  # fmt: skip
    return (
        "<h4>Identity swap, people like these</h4>"
        "<p>The identity and person effects of the identity-swap part below (each pair also "
        "shown with sex assigned at birth and gender identity swapped between its two people), "
        f"about {TARGET_TEXT}. Intervals: {method(swap)}</p>"
        + nulls(swap, ["identity_p_null", "person_p_null", "p_null"])
        + collapsed(swap, columns, "People like these")
    )


# --- population tables shown in other parts ---------------------------------------------------


def position(frame: pl.DataFrame) -> str:
    """Position bias for people like these (`position_bias_population`), closed per condition;
    "" when the table is absent or empty."""
    if frame.is_empty():
        return ""
    columns = with_df(frame, [
        col("model", "model_id", text=True),
        col("service", "service", lambda v: esc(labels.service(v)), text=True),
        col("decided", "decided", count),
        Column("share first [CI, people like these]",
               estimate("share_first", "ci_low", "ci_high", 3)),
        Column("p, H0 1/2 (Holm)", holm("p", "p_holm")),
    ])  # fmt: skip
    return (
        f"<p>For {TARGET_TEXT}: the same share. Intervals: {method(frame)}</p>"
        + nulls(frame, ["p_null"])
        + collapsed(frame, columns, "People like these")
    )


def logprobs(frame: pl.DataFrame) -> str:
    """Logprob choice probabilities for people like these
    (`allocation_logprob_shares_population`) in a closed table; "" when absent or empty."""
    if frame.is_empty():
        return ""
    columns = with_df(frame, [
        col("model", "model_id", text=True),
        col("language", "language", lambda v: esc(labels.language(v)), text=True),
        col("service", "service", lambda v: esc(labels.service(v)), text=True),
        col("decided", "decided", count),
        Column("mean P(cis) [CI, people like these]",
               estimate("mean_p_cis", "p_cis_ci_low", "p_cis_ci_high", 3)),
        Column("p, H0 mean P(cis) 1/2 (Holm)", holm("p_cis_p", "p_cis_p_holm")),
        Column("sampled cis share [CI, people like these]",
               estimate("sampled_share_cis", "sampled_ci_low", "sampled_ci_high", 3)),
        Column("difference [CI, people like these]",
               estimate("difference", "difference_ci_low", "difference_ci_high", 3)),
        Column("p, H0 difference 0", holm("difference_p", "difference_p_holm")),
    ])  # fmt: skip
    return (
        f"<p>For {TARGET_TEXT}: the same probabilities and difference. Intervals: "
        f"{method(frame)}</p>"
        + nulls(frame, ["p_cis_p_null", "difference_p_null"])
        + f"<details><summary>People like these: choice probabilities</summary>"
        f"{table(frame, columns)}</details>"
    )

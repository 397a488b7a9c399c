"""The allocation unit's planted-value check (`ExperimentAnalysis.planted`).

Per simulated model x language x service x condition: the expected share choosing the
cisgender candidate over the population of people (`expected_cis_share`: person and name
effects integrated out) and the expected share *given the people this run showed*
(conditional: the mean over the cell's trials of the probability the simulator drew with, as
`conditional_cis_share` computes from the prompt texts). The pair bootstrap's intervals describe
this roster's people (README, Analysis), so the conditional value is the one they should cover;
the gap among decided trials is planted as 2 E[P(cis) | answered] - 1. Condition effects, per
model x language x service x effect x stratum: the planted change in the share choosing the
transgender candidate (treated - control), population and conditional; 0 where nothing was
planted (a null effect). The population intervals (people like these) are set beside the
population values.

Each row says whether the estimate's 95% interval contains the planted value (conditional
where there is one). The conditional values are computed from the trials' stored items (the
people of each pair as shown in each arm, read once per pair and arm from one model's trials:
every model sees the same pairs) with the unit's planted-value functions for each person's
effect, condition term and base preference (looked up by name through `prompts.simulation`); a
test checks them against `conditional_cis_share` over the prompt texts. With the identity-swap
control on, each arm's truth comes from its own trials and its own people: the swapped arm
shows the other person as cisgender, so its P(cis) is about that person; the allocation cells
and effects are estimated from the original arm only, and so are their planted values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from ibias.analysis import population
from ibias.analysis.cells import keyed_like, texts
from ibias.analysis.experiment import (
    PLANTED_PEOPLE,
    PlantedCheck,
    PlantedContext,
    PlantedCoverage,
    PlantedResult,
)
from ibias.analysis.planted import (
    SimulatedModel,
    inside,
    interval_labels,
    required_truth,
    yes_no,
)
from ibias.analysis.units.allocation import population_tables, shares
from ibias.analysis.units.allocation.effects import (
    EFFECT_CELL,
    EFFECT_INPUT,
    effect_cells,
    effect_rows,
)
from ibias.prompts.codes import CIS, HIGH, LOW

CELLS, EFFECTS = "planted_allocation", "planted_effects"


def trial_probabilities(
    models: Sequence[SimulatedModel], decisions: pl.DataFrame, people: pl.DataFrame
) -> pl.DataFrame:
    """Per allocation trial of a simulated model: `p_cis`, the probability the simulator chose
    the candidate shown as cisgender given no refusal, `answered`, 1 - the refusal rate, and
    `identity_swap`, true for the identity-swap control's swapped arm.

    `people` has one row per language x pair_id x arm (`identity_swap`): the shown names, ages
    and gender identities of the candidates shown as cisgender and transgender in that arm
    (`load._people`). Each trial takes its own arm's people, so a swapped trial's P(cis) is
    about the person the swapped prompt shows as cisgender, as the simulator read it. The
    terms come from the unit's planted-value functions `shown_person_effect` and `cis_terms`
    (the same ones the simulator's `cis_probability` draws with)."""
    by_id = {m.model_id: m for m in models}
    # The replies' texts and parse details play no part in the planted values: left out, so a
    # store of millions of trials is not copied whole through the joins below.
    unused = [c for c in _UNUSED if c in decisions]
    rows = (
        decisions.drop(unused)
        .filter(pl.col("model_id").is_in(list(by_id)))
        .with_columns(_arm(decisions).alias(SWAP))
    )
    if "trial_key" in rows.columns:
        rows = rows.sort("trial_key")
    if rows.is_empty() or people.is_empty():
        return rows.with_columns(
            pl.lit(None, dtype=pl.Float64).alias("p_cis"),
            pl.lit(None, dtype=pl.Float64).alias("answered"),
        )
    if SWAP not in people.columns:  # people of a store without the control: one arm
        people = people.with_columns(pl.lit(False).alias(SWAP))
    # Each arm with its own people: in the swapped arm the cis seat holds the other person.
    # The people's term is computed per model x language x pair x arm, then joined to the
    # trials by those keys: the same value per trial as joining the names to every trial, but
    # one float column through the million-row join instead of six strings (a trial whose
    # pair's people are unknown gets null, NaN below, as before).
    shown = ["model_id", "cis_name", "cis_age", "cis_gi", "trans_name", "trans_age", "trans_gi"]
    keys = ["language", "pair_id", SWAP]
    pairs = people.select(*keys, *shown[1:]).join(
        pl.DataFrame({"model_id": list(by_id)}, schema={"model_id": pl.String()}), how="cross"
    )
    terms = _person_terms(by_id, pairs.select(shown)).select("delta_person")
    person = pl.concat([pairs.select("model_id", *keys), terms], how="horizontal")
    conditions = _condition_terms(
        by_id, rows.select("model_id", "service", "explanation", "symptoms").unique()
    )
    rows = rows.join(keyed_like(person, rows), on=["model_id", *keys], how="left").join(
        conditions, on=["model_id", "service", "explanation", "symptoms"], how="left"
    )
    q0 = rows["q0"].to_numpy()
    delta = rows["delta_cond"].to_numpy() + rows["delta_person"].to_numpy()
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        eta = np.log(q0 / (1.0 - q0)) + delta
        q = np.where((q0 <= 0.0) | (q0 >= 1.0) | (delta == 0.0), q0, 1.0 / (1.0 + np.exp(-eta)))
    b = rows["position_bias"].to_numpy()
    first_is_cis = (rows["first"] == CIS).to_numpy()
    p = np.clip(np.where(first_is_cis, q + b, q - b), 0.0, 1.0)
    return rows.with_columns(pl.Series("p_cis", p)).drop(
        "q0", "delta_cond", "delta_person", "position_bias"
    )


def _person_terms(by_id: Mapping[str, SimulatedModel], people: pl.DataFrame) -> pl.DataFrame:
    """`people` (model and the two people shown) with `delta_person`, the cis person's effect
    minus the trans person's (NaN where the pair's people are unknown)."""
    effects: dict[tuple[str, str, str, str], float] = {}
    functions = {m: required_truth(by_id[m], "shown_person_effect") for m in by_id}

    def effect(model: str, name: str, age: str, gi: str) -> float:
        key = (model, name, age, gi)
        if key not in effects:
            function, answering = functions[model]
            effects[key] = function(answering, name, age, gi)
        return effects[key]

    delta_person = [
        effect(m, cn, ca, cg) - effect(m, tn, ta, tg)
        if cn is not None and tn is not None
        else math.nan
        for m, cn, ca, cg, tn, ta, tg in people.iter_rows()
    ]
    return people.with_columns(pl.Series("delta_person", delta_person))


def _condition_terms(by_id: Mapping[str, SimulatedModel], conditions: pl.DataFrame) -> pl.DataFrame:
    """`conditions` (model x service x explanation x symptoms) with the unit's `cis_terms`
    (q0, delta_cond, position_bias) and `answered`, 1 - the model's refusal rate."""
    base, delta_cond, bias, answered = [], [], [], []
    for model, service, explanation, symptoms in conditions.iter_rows():
        cis_terms, sim = required_truth(by_id[model], "cis_terms")
        urgency = symptoms if symptoms in (HIGH, LOW) else None
        q0, delta, b = cis_terms(sim, service, bool(explanation), urgency)
        base.append(q0)
        delta_cond.append(delta)
        bias.append(b)
        answered.append(1.0 - by_id[model].persona.refusal_rate)
    return conditions.with_columns(
        pl.Series("q0", base, dtype=pl.Float64),
        pl.Series("delta_cond", delta_cond, dtype=pl.Float64),
        pl.Series("position_bias", bias, dtype=pl.Float64),
        pl.Series("answered", answered, dtype=pl.Float64),
    )


CELL_KEYS: tuple[str, ...] = ("model_id", "language", "service", "explanation", "symptoms")
#: The view's columns that play no part in planted values (texts and parse details).
_UNUSED = ("explanation_text", "none_reason", "parser_version")
SWAP = "identity_swap"


def _arm(decisions: pl.DataFrame) -> pl.Expr:
    """True for the swapped arm's trials (the view's `identity_swap` is NULL otherwise)."""
    if SWAP not in decisions.columns:
        return pl.lit(False)
    return pl.col(SWAP).fill_null(False)


def original_arm(probabilities: pl.DataFrame) -> pl.DataFrame:
    """The original arm's trials: what `allocation_cells` and `allocation_effects` estimate
    from (`identity_swap.without_swapped`), so their planted values come from these only."""
    if SWAP not in probabilities.columns:
        return probabilities
    return probabilities.filter(~pl.col(SWAP).fill_null(False))


def conditional_values(
    models: Sequence[SimulatedModel], decisions: pl.DataFrame, people: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The conditional planted values of the original arm's trials: per allocation cell
    (`conditional_cis_share`, `conditional_gap`) and per effect row
    (`conditional_difference`).

    Computed one simulated model at a time. Every value is a mean over one model's trials, and
    each model's trials keep their order (`trial_probabilities` sorts them by key), so the
    numbers are those of all models at once; but only one model's trials are stacked into
    contrasts at a time, which for a store of millions of trials is the difference between a
    few hundred megabytes and a gigabyte."""
    needed = [c for c in decisions.columns if c not in _UNUSED]
    decisions = decisions.select(needed)
    cells, effects = [], []
    for model in models:
        mine = decisions.filter(pl.col("model_id") == model.model_id)
        probabilities = original_arm(trial_probabilities([model], mine, people))
        cells.append(_conditional_cells(probabilities))
        effects.append(_conditional_effects(probabilities))
    return texts(pl.concat(cells)), texts(pl.concat(effects))


def _conditional_cells(probabilities: pl.DataFrame) -> pl.DataFrame:
    """Mean expected cis share and planted gap among decided trials, per allocation cell."""
    return probabilities.group_by(CELL_KEYS).agg(
        (pl.col("p_cis") * pl.col("answered")).mean().alias("conditional_cis_share"),
        (2.0 * pl.col("p_cis").mean() - 1.0).alias("conditional_gap"),
    )


def allocation_table(
    models: Sequence[SimulatedModel], conditional: pl.DataFrame, cells: pl.DataFrame
) -> pl.DataFrame:
    """Per simulated model x allocation cell: planted q, the expected cis share (population and
    given the people shown), the expected gap among decided trials, the estimates and whether
    the intervals contain the conditional values (`conditional_values`' cells)."""
    by_id = {m.model_id: m for m in models}
    table = cells.filter(pl.col("model_id").is_in(list(by_id))).select(
        *CELL_KEYS, "trials", "share_cis", "cis_ci_low", "cis_ci_high",
        "gap", "gap_ci_low", "gap_ci_high",
    )  # fmt: skip
    population = []
    for model, service, explanation, symptoms in table.select(
        "model_id", "service", "explanation", "symptoms"
    ).iter_rows():
        urgency = symptoms if symptoms in (HIGH, LOW) else None
        answered = _answered_share(by_id[model], service, bool(explanation), urgency)
        share = (1.0 - by_id[model].persona.refusal_rate) * answered
        population.append((_planted_q(by_id[model], service), share, 2.0 * answered - 1.0))
    table = table.with_columns(
        pl.Series("planted_q", [p[0] for p in population], dtype=pl.Float64),
        pl.Series("expected_cis_share", [p[1] for p in population], dtype=pl.Float64),
        pl.Series("expected_gap", [p[2] for p in population], dtype=pl.Float64),
    ).join(conditional, on=list(CELL_KEYS), how="left")
    return table.with_columns(
        inside("conditional_cis_share", "cis_ci_low", "cis_ci_high").alias("cis_inside_ci"),
        inside("conditional_gap", "gap_ci_low", "gap_ci_high").alias("gap_inside_ci"),
    ).select(
        *CELL_KEYS, "trials", "planted_q", "expected_cis_share", "conditional_cis_share",
        "share_cis", "cis_ci_low", "cis_ci_high", "cis_inside_ci", "expected_gap",
        "conditional_gap", "gap", "gap_ci_low", "gap_ci_high", "gap_inside_ci",
    )  # fmt: skip


EFFECT_KEYS: tuple[str, ...] = ("model_id", "language", "service", "effect", "stratum")


def effects_table(
    models: Sequence[SimulatedModel], conditional: pl.DataFrame, effects: pl.DataFrame
) -> pl.DataFrame:
    """Per simulated model x effect row: the planted change in the trans share (population:
    from `expected_cis_share`; conditional: the mean expected trans share of the stratum's
    treated trials minus its control trials, `conditional_values`' effects), whether it is a
    null effect (nothing planted), and whether the estimate's interval contains it."""
    by_id = {m.model_id: m for m in models}
    rows = effects.filter(pl.col("model_id").is_in(list(by_id)))
    if rows.is_empty():
        return pl.DataFrame(schema=_EFFECT_SCHEMA)
    population, null = [], []
    for model, service, effect, stratum in rows.select(
        "model_id", "service", "effect", "stratum"
    ).iter_rows():
        diff, planted_any = _population_effect(by_id[model], service, effect, stratum)
        population.append(diff)
        null.append(not planted_any)
    table = rows.select(
        *EFFECT_KEYS, "label", "difference", "ci_low", "ci_high", "pairs"
    ).with_columns(
        pl.Series("expected_difference", population, dtype=pl.Float64),
        pl.Series("null_effect", null, dtype=pl.Boolean),
    )
    table = table.join(conditional, on=list(EFFECT_KEYS), how="left")
    return table.with_columns(
        inside("conditional_difference", "ci_low", "ci_high").alias("inside_ci"),
        _inside_zero().alias("zero_inside_ci"),
    ).select(list(_EFFECT_SCHEMA))


def _conditional_effects(probabilities: pl.DataFrame) -> pl.DataFrame:
    """Mean expected trans share of treated minus control trials, per effect row: the trials
    stacked into contrasts exactly as the estimates' (`effects.effect_rows`)."""
    x = (pl.col("answered") * (1.0 - pl.col("p_cis"))).alias("x")
    rows, bases = effect_rows(probabilities.select(*EFFECT_INPUT, x), carry=("x",))
    found = rows.group_by(EFFECT_CELL).agg(
        (
            pl.col("x").filter(pl.col("treated")).mean()
            - pl.col("x").filter(~pl.col("treated")).mean()
        ).alias("conditional_difference")
    )
    return effect_cells(found, bases).select(*EFFECT_KEYS, "conditional_difference")


_ANSWERED: dict[tuple[str, int, str, bool, str | None], float] = {}


def _answered_share(
    model: SimulatedModel, service: str, explanation: bool, urgency: str | None
) -> float:
    """`expected_cis_share(..., among_answered=True)`, memoised per model profile and condition:
    the quadrature takes milliseconds and the tables ask for the same value many times (both
    languages, every stratum of an effect). Keyed by the profile's identity, which lives as
    long as the `SimulatedModel`s of one analysis; cleared by `planted_tables`."""
    key = (model.model_id, id(model.persona), service, explanation, urgency)
    if key not in _ANSWERED:
        expected_cis_share, sim = required_truth(model, "expected_cis_share")
        _ANSWERED[key] = expected_cis_share(
            sim, service, explanation=explanation, urgency=urgency, among_answered=True
        )
    return _ANSWERED[key]


def _planted_q(model: SimulatedModel, service: str) -> float:
    """q_s, the model's P(cis) for the service without position bias or any effect."""
    cis_terms, sim = required_truth(model, "cis_terms")
    q0: float = cis_terms(sim, service, False, None)[0]
    return q0


def _population_effect(
    model: SimulatedModel, service: str, effect: str, stratum: str
) -> tuple[float, bool]:
    """(planted change in the trans share over the population, whether any term is planted)."""
    cis_terms, sim = required_truth(model, "cis_terms")

    def trans(explanation: bool, urgency: str | None) -> float:
        answered = 1.0 - model.persona.refusal_rate
        return answered * (1.0 - _answered_share(model, service, explanation, urgency))

    def planted(explanation: bool, urgency: str | None) -> float:
        delta: float = cis_terms(sim, service, explanation, urgency)[1]
        return delta

    if effect == "explanation":
        levels: list[str | None] = (
            [None, HIGH, LOW] if stratum == "all" else [stratum if stratum != "none" else None]
        )
        diffs = [trans(True, u) - trans(False, u) for u in levels]
        moved = any(planted(True, u) != planted(False, u) for u in levels)
        return float(np.mean(diffs)), moved
    level = HIGH if effect == "symptoms_high" else LOW
    explanations = [False, True] if stratum == "all" else [stratum == "explanation=yes"]
    diffs = [trans(e, level) - trans(e, None) for e in explanations]
    moved = any(planted(e, level) != planted(e, None) for e in explanations)
    return float(np.mean(diffs)), moved


def _inside_zero() -> pl.Expr:
    return (pl.col("ci_low") <= 0.0) & (pl.col("ci_high") >= 0.0)


_EFFECT_SCHEMA: dict[str, pl.DataType] = {
    "model_id": pl.String(),
    "language": pl.String(),
    "service": pl.String(),
    "effect": pl.String(),
    "stratum": pl.String(),
    "label": pl.String(),
    "null_effect": pl.Boolean(),
    "expected_difference": pl.Float64(),
    "conditional_difference": pl.Float64(),
    "difference": pl.Float64(),
    "ci_low": pl.Float64(),
    "ci_high": pl.Float64(),
    "pairs": pl.Int64(),
    "inside_ci": pl.Boolean(),
    "zero_inside_ci": pl.Boolean(),
}


def planted_tables(ctx: PlantedContext) -> PlantedResult:
    """`planted_allocation` and `planted_effects` of the controlled design's estimates, with
    their intervals' labels and the population intervals beside the population values, and
    their coverage rows; nothing when the store has no allocation estimates."""
    decisions, cells = ctx.views.get("allocation"), ctx.tables.get("allocation_cells")
    if decisions is None or cells is None:
        return PlantedResult({})
    _ANSWERED.clear()
    if "design" in decisions.columns:
        decisions = decisions.filter(pl.col("design") == "controlled").drop("design")
    people = ctx.extras.get(PLANTED_PEOPLE, pl.DataFrame())
    by_cell, by_effect = conditional_values(ctx.models, decisions, people)
    out = {CELLS: _with_population_cells(allocation_table(ctx.models, by_cell, cells), ctx.tables)}
    effects = ctx.tables.get("allocation_effects")
    if effects is not None:
        found = effects_table(ctx.models, by_effect, effects)
        out[EFFECTS] = _with_population_effects(found, ctx.tables)
    return PlantedResult(out, _coverage(out))


def _with_population_cells(al: pl.DataFrame, tables: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """The cells' planted values with their intervals' labels and, when the population tables
    were computed, the population intervals and whether they contain the population values."""
    pop_cells = tables.get(population_tables.CELLS)
    al = al.with_columns(interval_labels(tables.get("allocation_cells"), shares.TARGET))
    if pop_cells is None or pop_cells.is_empty():
        return al
    pop = pop_cells.select(
        *CELL_KEYS,
        pl.col("cis_ci_low").alias("cis_population_ci_low"),
        pl.col("cis_ci_high").alias("cis_population_ci_high"),
        pl.col("gap_ci_low").alias("gap_population_ci_low"),
        pl.col("gap_ci_high").alias("gap_population_ci_high"),
    )
    return al.join(pop, on=list(CELL_KEYS), how="left", nulls_equal=True).with_columns(
        inside("expected_cis_share", "cis_population_ci_low", "cis_population_ci_high")
        .alias("cis_inside_population_ci"),
        inside("expected_gap", "gap_population_ci_low", "gap_population_ci_high")
        .alias("gap_inside_population_ci"),
        *interval_labels(pop_cells, population.TARGET, "population_"),
    )  # fmt: skip


def _with_population_effects(ef: pl.DataFrame, tables: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    """The effects' planted values with their intervals' labels and the population intervals."""
    pop_effects = tables.get(population_tables.EFFECTS)
    ef = ef.with_columns(interval_labels(tables.get("allocation_effects"), shares.TARGET))
    if pop_effects is None or pop_effects.is_empty():
        return ef
    pop = pop_effects.select(
        *EFFECT_KEYS,
        pl.col("ci_low").alias("population_ci_low"),
        pl.col("ci_high").alias("population_ci_high"),
    )
    return ef.join(pop, on=list(EFFECT_KEYS), how="left").with_columns(
        inside("expected_difference", "population_ci_low", "population_ci_high")
        .alias("inside_population_ci"),
        ((pl.col("population_ci_low") <= 0.0) & (pl.col("population_ci_high") >= 0.0))
        .alias("zero_inside_population_ci"),
        *interval_labels(pop_effects, population.TARGET, "population_"),
    )  # fmt: skip


def _coverage(tables: Mapping[str, pl.DataFrame]) -> tuple[PlantedCoverage, ...]:
    """The coverage rows: the roster-conditional ones, then those for people like these."""
    rows: list[PlantedCoverage] = []

    def add(value: str, flags: pl.Series, population_rows: bool = False) -> None:
        target = population.TARGET if population_rows else shares.TARGET
        rows.append(PlantedCoverage(value, flags, target, population_rows))

    al, ef = tables.get(CELLS), tables.get(EFFECTS)
    planted_rows = null_rows = pl.DataFrame()
    if ef is not None:
        planted_rows, null_rows = (
            ef.filter(~pl.col("null_effect")),
            ef.filter(pl.col("null_effect")),
        )
    if al is not None and not al.is_empty():
        add("allocation cis share (given the people shown)", al["cis_inside_ci"])
        add("allocation gap among decided (given the people shown)", al["gap_inside_ci"])
    if ef is not None and not ef.is_empty():
        add("planted condition effects", planted_rows["inside_ci"])
        add("null condition effects: interval contains 0", null_rows["zero_inside_ci"])
    if al is not None and "cis_inside_population_ci" in al.columns:
        add("allocation cis share (people like these)", al["cis_inside_population_ci"], True)
        add(
            "allocation gap among decided (people like these)", al["gap_inside_population_ci"], True
        )
    if ef is not None and "inside_population_ci" in ef.columns:
        add(
            "planted condition effects (people like these)",
            planted_rows["inside_population_ci"],
            True,
        )
        add(
            "null condition effects: population interval contains 0",
            null_rows["zero_inside_population_ci"],
            True,
        )
    return tuple(rows)


def section(tables: Mapping[str, pl.DataFrame]) -> str:
    """The allocation part of the planted-values section: shares per model, then effects."""
    parts: list[str] = []
    for key, part in ((CELLS, _allocation_part), (EFFECTS, _effects_part)):
        frame = tables.get(key)
        if frame is not None and not frame.is_empty():
            parts.extend(part(frame))
    return "".join(parts)


def _allocation_part(al: pl.DataFrame) -> list[str]:
    """The allocation shares per model (one collapsible table each)."""
    from ibias.analysis import labels
    from ibias.analysis.report import Column, col, esc, interval, num, table

    parts: list[str] = []
    parts.append("<h3>Allocation shares</h3>")
    for (model,), sub in al.group_by(["model_id"], maintain_order=True):
        rows = table(
            sub,
            [
                col("language", "language", lambda v: esc(labels.language(str(v))), True),
                col("service", "service", lambda v: esc(labels.service(str(v))), True),
                col("explanation", "explanation", lambda v: esc(labels.explanation(v)), True),
                col("symptoms", "symptoms", lambda v: esc(labels.symptoms(str(v))), True),
                col("planted q", "planted_q", lambda v: num(v, 2)),
                col("expected cis share", "expected_cis_share", lambda v: num(v, 3)),
                col("given people shown", "conditional_cis_share", lambda v: num(v, 3)),
                Column(
                    "cis share [95% CI]",
                    lambda r: (
                        f"{num(r['share_cis'])} {interval(r['cis_ci_low'], r['cis_ci_high'], 3)}"
                    ),
                ),
                col("inside", "cis_inside_ci", yes_no),
                Column(
                    "gap expected / given people",
                    lambda r: f"{num(r['expected_gap'])} / {num(r['conditional_gap'])}",
                ),
                Column(
                    "gap [95% CI]",
                    lambda r: f"{num(r['gap'])} {interval(r['gap_ci_low'], r['gap_ci_high'], 3)}",
                ),
                col("inside", "gap_inside_ci", yes_no),
            ],
        )
        parts.append(f"<details><summary>{esc(model)}</summary>{rows}</details>")
    return parts


def _effects_part(ef: pl.DataFrame) -> list[str]:
    """The planted condition effects (the null ones counted only)."""
    from ibias.analysis import labels
    from ibias.analysis.report import Column, col, count, esc, interval, num, table

    parts: list[str] = []
    parts.append("<h3>Condition effects</h3>")
    planted_only = ef.filter(~pl.col("null_effect"))
    parts.append(
        f"<p>{count(planted_only.height)} effect rows carry a planted effect and "
        f"{count(ef.height - planted_only.height)} are null; the planted ones:</p>"
    )
    parts.append(
        table(
            planted_only,
            [
                col("model", "model_id", text=True),
                col("language", "language", lambda v: esc(labels.language(str(v))), True),
                col("service", "service", lambda v: esc(labels.service(str(v))), True),
                col("effect", "label", text=True),
                col("stratum", "stratum", lambda v: esc(labels.label("strata", str(v))), True),
                col("expected", "expected_difference", lambda v: num(v, 3)),
                col("given people shown", "conditional_difference", lambda v: num(v, 3)),
                Column(
                    "estimate [95% CI]",
                    lambda r: f"{num(r['difference'])} {interval(r['ci_low'], r['ci_high'], 3)}",
                ),
                col("inside", "inside_ci", yes_no),
            ],
        )
    )
    return parts


PLANTED = PlantedCheck(tables=planted_tables, section=section)
"""The allocation analysis's planted-value check."""

"""Planted values of simulated models, beside the estimates, so a reader sees what was recovered.

A simulated model's behaviour is a function of its profile (the `[models.sim]` table of the run
config, stored verbatim in `runs.config`), the run's seed and the prompt. From the latest run's
config this module rebuilds each simulated model's `Persona` (with the units' own parameter
structs, `prompts.simulation.persona_from_table`; nothing of the runner is imported), and each
experiment's analysis that can check what its unit plants (`ExperimentAnalysis.planted`, e.g.
analysis/units/allocation/planted.py) sets those values beside its estimates, looking the
planted-value functions up by name through the registry (`Simulation.planted`). This module is
the driver: it runs the units' checks in registry order, gathers their coverage rows into
`planted_coverage` (the roster-conditional rows first, then those for people like these) and
lays out the report section around the units' parts. An experiment without the capability has
no planted rows.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from ibias.analysis.experiment import ExperimentAnalysis, PlantedContext, PlantedCoverage
from ibias.prompts.base import Persona, SettingsError
from ibias.prompts.simulation import Answering, answering_for, persona_from_table, planted_function


@dataclass(frozen=True)
class SimulatedModel:
    """One `simulator` model of the run config: its id, the model name the simulator answered
    as, the run seed (the simulator's answer seed) and its persona."""

    model_id: str
    provider_model: str
    seed: int
    persona: Persona

    @property
    def answering(self) -> Persona:
        """The persona as the simulator answered (its person and name effects drawn)."""
        return self.persona.answering_as(self.seed, self.provider_model)

    def truth(self, name: str) -> tuple[Callable[..., Any], Answering[Any]] | None:
        """The planted-value function `name` of the unit that declares it, and this model as
        that unit sees it (answering: effects keyed by seed and model; its refusal rate), or
        None when no registered unit plants `name`."""
        found = planted_function(name)
        if found is None:
            return None
        unit, function = found
        return function, answering_for(self.answering, unit)


def required_truth(model: SimulatedModel, name: str) -> tuple[Callable[..., Any], Answering[Any]]:
    """`model.truth(name)`, which the tables below need (their views exist only when the unit
    declaring it is registered)."""
    found = model.truth(name)
    if found is None:
        raise LookupError(f"no registered experiment declares the planted value {name!r}")
    return found


def simulated_models(configs: Sequence[object]) -> tuple[SimulatedModel, ...]:
    """The simulated models of the latest config that parses (configs oldest first), or none.

    A profile the units' schemas reject is skipped: such a run could not have started."""
    for text in reversed(configs):
        try:
            config = tomllib.loads(str(text))
        except tomllib.TOMLDecodeError:
            continue
        run = config.get("run", {})
        seed = run.get("seed", 0) if isinstance(run, dict) else 0
        found: list[SimulatedModel] = []
        for block in config.get("models", []):
            if not isinstance(block, dict) or block.get("provider") != "simulator":
                continue
            try:
                persona = persona_from_table(block.get("sim") or {})
            except SettingsError:
                continue
            model_id = str(block.get("id"))
            found.append(
                SimulatedModel(model_id, str(block.get("model") or model_id), int(seed), persona)
            )
        return tuple(found)
    return ()


def inside(value: str, low: str, high: str) -> pl.Expr:
    """Whether the interval [low, high] contains the value (null when any of them is)."""
    return (pl.col(low) <= pl.col(value)) & (pl.col(value) <= pl.col(high))


def interval_labels(source: pl.DataFrame | None, target: str, prefix: str = "") -> list[pl.Expr]:
    """Label columns (level, method, resampling unit, B, target) copied from the table the
    intervals came from."""
    first = source.row(0, named=True) if source is not None and not source.is_empty() else {}
    return [
        pl.lit(first.get("ci_level"), dtype=pl.Float64).alias(f"{prefix}ci_level"),
        pl.lit(first.get("ci_method"), dtype=pl.String).alias(f"{prefix}ci_method"),
        pl.lit(first.get("resampled"), dtype=pl.String).alias(f"{prefix}resampled"),
        pl.lit(first.get("B"), dtype=pl.Int64).alias(f"{prefix}B"),
        pl.lit(target).alias(f"{prefix}target"),
    ]


def yes_no(value: object) -> str:
    """How the planted tables show a containment flag: yes, no, or a dash for none."""
    return {True: "yes", False: "no"}.get(value, "—")  # type: ignore[call-overload, no-any-return]


def coverage_table(rows: Sequence[PlantedCoverage]) -> pl.DataFrame:
    """`planted_coverage`: per kind of value, the intervals counted, how many contain their
    value and the share; the roster-conditional rows first, then those for people like these."""
    ordered = [r for r in rows if not r.population] + [r for r in rows if r.population]
    out: list[dict[str, object]] = []
    for row in ordered:
        flags = row.flags.drop_nulls()
        n = flags.len()
        out.append(
            {"value": row.value, "intervals": n, "inside": int(flags.sum()),
             "share_inside": float(flags.cast(pl.Float64).mean()) if n else None,  # type: ignore[arg-type]
             "target": row.target}
        )  # fmt: skip
    return pl.DataFrame(
        out,
        schema={"value": pl.String(), "intervals": pl.Int64(), "inside": pl.Int64(),
                "share_inside": pl.Float64(), "target": pl.String()},
        orient="row",
    )  # fmt: skip


def planted_tables(
    models: Sequence[SimulatedModel],
    analyses: Sequence[ExperimentAnalysis],
    views: Mapping[str, pl.DataFrame],
    extras: Mapping[str, pl.DataFrame],
    tables: Mapping[str, pl.DataFrame],
) -> dict[str, pl.DataFrame]:
    """The planted-value tables of the analyses that check theirs, in registry order, and
    `planted_coverage`; none without simulated models or without a unit's planted table."""
    if not models:
        return {}
    ctx = PlantedContext(models=models, views=views, extras=extras, tables=tables)
    out: dict[str, pl.DataFrame] = {}
    coverage: list[PlantedCoverage] = []
    for analysis in analyses:
        if analysis.planted is None:
            continue
        result = analysis.planted.tables(ctx)
        out.update(result.tables)
        coverage.extend(result.coverage)
    if not out:
        return {}
    out["planted_coverage"] = coverage_table(coverage)
    return out


ANCHOR, TITLE = "planted-values", "Planted values (simulated models)"


def section(tables: Mapping[str, pl.DataFrame], analyses: Sequence[ExperimentAnalysis]) -> str:
    """The report section: each simulated model's planted and expected values beside the
    estimates, and the share of intervals that contain them."""
    from ibias.analysis.report import col, count, esc, num, table

    coverage = tables.get("planted_coverage")
    if coverage is None:
        return ""
    parts = [
        f"<h2 id='{ANCHOR}'>{esc(TITLE)}</h2>",
        "<p>The simulated models' profiles (the run config's <code>[models.sim]</code> tables) "
        "fix what each estimate should recover. Word association: the planted probability "
        "that a negative word goes to “transgender” and the expected score of a scored trial "
        "(not 2p − 1). Allocation: the expected share choosing the cisgender candidate over "
        "the population of people and given the people this run showed (conditional; the "
        "pair bootstrap's intervals are for this roster's people, so they should cover the "
        "conditional value), and the expected cis − trans gap among decided trials. Effects: "
        "the planted change in the share choosing the transgender candidate; a null effect "
        "had nothing planted, so its interval should contain 0. About 95% of intervals should "
        "contain their value.</p>",
        table(
            coverage,
            [
                col("value", "value", text=True),
                col("intervals", "intervals", count),
                col("containing it", "inside", count),
                col("share", "share_inside", lambda v: num(v, 3)),
            ],
        ),
    ]
    parts.extend(a.planted.section(tables) for a in analyses if a.planted is not None)
    return "".join(parts)

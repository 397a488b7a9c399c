"""`--model` and `--experiment`: part of a config, as a config.

A selection is a smaller `Config` (the same runs' settings, fewer models, fewer experiment
tables), so everything downstream (keys check, plan hash, plan, scheduler, progress) sees only
what was selected without knowing about filters. Trial keys do not change: a key depends on
the spec and the model, never on which other models or experiments are planned beside it. The
plan hash does change (it covers the planned models and experiments, runner/execution/plan.py), so a
partial run records a plan of its own and a later full run plans again, keeping every answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ibias.prompts import registry
from ibias.runner.config import Config, ConfigFileError


def select(
    config: Config, models: Sequence[str] | None = None, experiments: Sequence[str] | None = None
) -> Config:
    """`config` restricted to the given model ids and `[experiments.NAME]` tables (None or
    empty: all). An unknown name is a `ConfigFileError` listing every unknown one and what the
    config has."""
    if not models and not experiments:
        return config
    kept_models = config.models
    if models:
        have = [m.id for m in config.models]
        _check("model", models, have, config)
        wanted = set(models)
        kept_models = tuple(m for m in config.models if m.id in wanted)
    tables = dict(config.experiments)
    built = config.built
    if experiments:
        _check("experiment", experiments, list(config.experiments), config)
        wanted = set(experiments)
        tables = {name: t for name, t in config.experiments.items() if name in wanted}
        kinds = {k.name for name in tables for k in registry.unit(name).kinds}
        built = tuple(e for e in config.built if e.name in kinds)
    return replace(config, models=kept_models, experiments=tables, built=built)


def _check(what: str, asked: Sequence[str], have: Sequence[str], config: Config) -> None:
    unknown = list(dict.fromkeys(a for a in asked if a not in have))
    if unknown:
        names = ", ".join(repr(u) for u in unknown)
        plural = "s" if len(unknown) > 1 else ""
        raise ConfigFileError(
            f"{config.path}: no {what}{plural} {names} in this config; it has " + ", ".join(have)
        )

"""Analyses across experiments: registered like units, run only when the store has their kinds.

An experiment's own tables come from its unit's `ExperimentAnalysis`; what needs two
experiments at once (the implicit-versus-decision correlation needs word association and
allocation) or speaks about several (the methods note) is a `CrossAnalysis`, registered here by
the kinds it reads. The driver (`analysis/analyze.py`) asks `present(kinds)` for those whose
kinds have trials in the store and imports only those, so it names no experiment and a store
without them gets none of their tables or sections.

Another package adds one as a `CrossEntry` under the `ibias.cross_analyses` entry-point group,
loaded by the one plugin policy (ibias/plugins.py) the first time the registered analyses are
asked for; while one failed to load, `present` refuses naming it (its section would be missing
without a word).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import polars as pl

from ibias import errors, plugins
from ibias.analysis.bootstrap import Method


@dataclass(frozen=True)
class CrossContext:
    """What a cross-experiment analysis gets: the views of every design by kind name, the
    experiments' tables so far by file stem, and the analysis settings."""

    views: Mapping[str, pl.DataFrame]
    tables: Mapping[str, pl.DataFrame]
    B: int
    method: Method
    seed: int
    extras: Mapping[str, pl.DataFrame] = field(default_factory=dict)

    def rng(self, stream: int) -> np.random.Generator:
        """The generator of one table: (seed, stream), a stream id fixed per table so that
        adding a table never moves another's numbers."""
        return np.random.default_rng([self.seed, stream])


CrossTablesFn = Callable[[CrossContext], dict[str, pl.DataFrame]]
CrossSectionFn = Callable[[CrossContext, Mapping[str, pl.DataFrame]], str]
"""(context, this analysis's tables as written) -> the section's HTML ("" for none)."""


def _no_tables(ctx: CrossContext) -> dict[str, pl.DataFrame]:
    del ctx
    return {}


@dataclass(frozen=True)
class CrossAnalysis:
    """Tables and one report section across experiments. `place` "before" puts the section
    before the experiments' own (a note they all rely on), "after" after them."""

    anchor: str
    title: str
    section: CrossSectionFn
    tables: CrossTablesFn = _no_tables
    place: Literal["before", "after"] = "after"


@dataclass(frozen=True)
class CrossEntry:
    """A registered cross-experiment analysis: the kinds of trial it reads, whether it needs
    all of them (`any_kind` False) or any one, and the analysis or "module:attribute" naming
    it (imported only when the store has those kinds)."""

    name: str
    kinds: tuple[str, ...]
    analysis: CrossAnalysis | str
    any_kind: bool = False

    def wanted(self, present: Collection[str]) -> bool:
        hits = [k in present for k in self.kinds]
        return any(hits) if self.any_kind else all(hits)

    def resolve(self) -> CrossAnalysis:
        return plugins.resolve(
            self.analysis, CrossAnalysis, f"cross-experiment analysis {self.name}"
        )


_ENTRIES: dict[str, CrossEntry] = {
    entry.name: entry
    for entry in (
        CrossEntry(
            "paper_methods",
            ("word_association", "allocation"),
            "ibias.analysis.cross_analyses.paper_methods:CROSS",
            any_kind=True,
        ),
        CrossEntry(
            "implicit_decision",
            ("word_association", "allocation"),
            "ibias.analysis.cross_analyses.implicit_decision:CROSS",
        ),
    )
}


def register_cross(entry: CrossEntry, *, replace: bool = False) -> CrossEntry:
    """Add a cross-experiment analysis (a plugin's, or a test's)."""
    _ensure_loaded()
    if entry.name in _ENTRIES and not replace:
        raise errors.RegistryError(
            f"cross-experiment analysis {entry.name!r} is already registered"
        )
    _ENTRIES[entry.name] = entry
    return entry


def unregister_cross(name: str) -> None:
    _ENTRIES.pop(name, None)


def entries() -> tuple[CrossEntry, ...]:
    """Every registered cross-experiment analysis, in registration order."""
    _ensure_loaded()
    return tuple(_ENTRIES.values())


def present(kinds_with_trials: Collection[str]) -> list[CrossAnalysis]:
    """The analyses whose kinds have trials in the store, resolved, in registration order;
    `PluginError` while a cross-analysis plugin failed to load."""
    loaded = entries()
    if plugins.failed(plugins.CROSS_ANALYSES):
        raise plugins.missing(plugins.CROSS_ANALYSES, "every section of the report")
    return [e.resolve() for e in loaded if e.wanted(kinds_with_trials)]


_LOADED = False


def _ensure_loaded() -> None:
    """Register the `ibias.cross_analyses` entry points (a `CrossEntry` each), once."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    plugins.load(plugins.CROSS_ANALYSES, _register_plugin)


def _register_plugin(name: str, loaded: object) -> None:
    del name
    if not isinstance(loaded, CrossEntry):
        raise TypeError(f"it is a {type(loaded).__name__}, not a CrossEntry")
    register_cross(loaded)

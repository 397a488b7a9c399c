"""Analyses across experiments: registered like units, run only when the store has their kinds.

An experiment's own tables come from its unit's `ExperimentAnalysis`; what needs two
experiments at once (the implicit-versus-decision correlation needs word association and
allocation) or speaks about several (the methods note) is a `CrossAnalysis`, registered here by
the kinds it reads. The driver (`analysis/analyze.py`) asks `present(kinds)` for those whose
kinds have trials in the store and imports only those, so it names no experiment and a store
without them gets none of their tables or sections.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import polars as pl

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
        ref = self.analysis
        if isinstance(ref, str):
            module, _, attribute = ref.partition(":")
            ref = getattr(importlib.import_module(module), attribute)
        if not isinstance(ref, CrossAnalysis):
            raise TypeError(f"cross-experiment analysis {self.name}: not a CrossAnalysis")
        return ref


_ENTRIES: dict[str, CrossEntry] = {
    entry.name: entry
    for entry in (
        CrossEntry(
            "paper_methods",
            ("word_association", "allocation"),
            "ibias.analysis.paper_methods:CROSS",
            any_kind=True,
        ),
        CrossEntry(
            "implicit_decision",
            ("word_association", "allocation"),
            "ibias.analysis.implicit_decision:CROSS",
        ),
    )
}


def register_cross(entry: CrossEntry, *, replace: bool = False) -> CrossEntry:
    """Add a cross-experiment analysis (a plugin's, or a test's)."""
    if entry.name in _ENTRIES and not replace:
        raise ValueError(f"cross-experiment analysis {entry.name!r} is already registered")
    _ENTRIES[entry.name] = entry
    return entry


def unregister_cross(name: str) -> None:
    _ENTRIES.pop(name, None)


def entries() -> tuple[CrossEntry, ...]:
    """Every registered cross-experiment analysis, in registration order."""
    return tuple(_ENTRIES.values())


def present(kinds_with_trials: Collection[str]) -> list[CrossAnalysis]:
    """The analyses whose kinds have trials in the store, resolved, in registration order."""
    return [e.resolve() for e in _ENTRIES.values() if e.wanted(kinds_with_trials)]

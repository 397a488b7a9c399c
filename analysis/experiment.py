"""What an experiment contributes to `ibias analyze`: its tables, figures and report section.

Each experiment unit (prompts/registry.py) names one `ExperimentAnalysis`; the analysis driver
(`analysis/analyze.py`) resolves it and loops over the registered units, so the driver, the
loader and the report never name an experiment. An experiment's analysis reads only the views
of its own kinds (and the shared explicit answers), as Polars frames.
"""

from __future__ import annotations

import hashlib
import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from ibias import errors, plugins
from ibias.analysis.bootstrap import Method
from ibias.analysis.figures import Figure
from ibias.analysis.population import DEFAULT_METHOD as DEFAULT_POPULATION_METHOD
from ibias.prompts.registry import DEFAULT_DESIGN, ExperimentUnit
from ibias.store.reader import StoreReader

if TYPE_CHECKING:
    from ibias.analysis.planted import SimulatedModel


class AnalysisDataError(errors.StoreError, ValueError):
    """Stored data an experiment's analysis cannot use as it stands (e.g. a broken pairing);
    the command line shows it as one line about the store, exit 2."""


@dataclass(frozen=True)
class TableContext:
    """What a table builder gets: the views by kind name, the explicit answers, and how to
    resample (each table draws from its own seeded stream, see `rng`).

    `extras` holds every kind's extra parses by table name (`StoreData.extras`), for all
    designs: join them to the design's view on trial_key to keep the design's trials; and the
    frames the present experiments' loaders read (`ExperimentAnalysis.load`), by their names."""

    views: Mapping[str, pl.DataFrame]
    explicit: pl.DataFrame
    B: int
    method: Method
    seed: int
    streams: Mapping[str, int]
    extras: Mapping[str, pl.DataFrame] = field(default_factory=dict)
    #: How intervals for people like these are computed (`population.METHODS`); None skips
    #: them (`analyze --no-population`).
    population_method: str | None = DEFAULT_POPULATION_METHOD
    #: The design these views were cut to: what a frame of `extras` that spans every design
    #: (a loader's sums, say) is cut to as well.
    design: str = DEFAULT_DESIGN

    def rng(self, table: str) -> np.random.Generator:
        """The table's own generator, so adding a table never moves another table's numbers.

        Stream ids of the built-in tables are fixed forever (published numbers depend on them);
        a table without one gets a stream derived from its name through SHA-256."""
        stream = self.streams.get(table)
        if stream is None:
            digest = hashlib.sha256(table.encode()).digest()
            stream = 1000 + int.from_bytes(digest[:4], "big")
        return np.random.default_rng([self.seed, stream])


@dataclass(frozen=True)
class SectionContext:
    """What a report section gets: its tables by name, its figures, and the anchor and title
    its heading should carry (a design other than the controlled one gets its own, e.g.
    "allocation-paper", "Appointment allocation (paper design)")."""

    tables: Mapping[str, pl.DataFrame]
    figures: Sequence[Figure]
    anchor: str = ""
    title: str = ""

    def heading(self, default_anchor: str, default_title: str) -> str:
        anchor, title = self.anchor or default_anchor, self.title or default_title
        return f"<h2 id='{html.escape(anchor)}'>{html.escape(title)}</h2>"


@dataclass(frozen=True)
class PaperComparison:
    """What one experiment says about how a store's trials of it differ from the paper, for
    the report's "How this run differs from the paper" (`analysis/paper.py`).

    `sources`: one row per experiment kind x design x language x condition present in the
    store, columns `SOURCE_COLUMNS`: trials, and which texts came from the authors' stimuli
    pack and which are ours (plain text, "; "-separated). `headline`: which parser and score
    its headline figures and tables use. `notes`: known problems of the paper's own released
    numbers for this experiment. `tables`: further tables the section writes for it, by file
    stem (e.g. the allocation's organ pairs); `findings`: (sub-heading, sentences) the section
    shows after the prompt checks. Plain text throughout (the report escapes it).
    """

    sources: pl.DataFrame
    headline: str
    notes: tuple[str, ...] = ()
    tables: Mapping[str, pl.DataFrame] = field(default_factory=dict)
    findings: tuple[tuple[str, tuple[str, ...]], ...] = ()


SOURCE_COLUMNS: dict[str, pl.DataType] = {
    "experiment": pl.String(),
    "design": pl.String(),
    "language": pl.String(),
    "condition": pl.String(),
    "trials": pl.Int64(),
    "from_authors": pl.String(),
    "ours": pl.String(),
}
"""The columns of `PaperComparison.sources`, in order."""


def explicit_source_rows(explicit: pl.DataFrame, kind: str, ours: str) -> list[dict[str, object]]:
    """One `SOURCE_COLUMNS` row per language of an explicit-check kind's trials (the check is
    the same in both designs, so it names none); `ours` says which of its texts are ours."""
    from ibias.analysis import labels

    checks = explicit.filter(pl.col("experiment") == kind)
    counted = checks.group_by("language").agg(pl.len()).rows()
    per_language = {str(lang): int(n) for lang, n in counted}
    return [
        {
            "experiment": kind,
            "design": None,
            "language": lang,
            "condition": "explicit check (the same in both designs)",
            "trials": per_language[lang],
            "from_authors": "",
            "ours": ours,
        }
        for lang in labels.ordered("languages", per_language)
    ]


TablesFn = Callable[[TableContext], dict[str, pl.DataFrame]]
FiguresFn = Callable[[Mapping[str, pl.DataFrame], Sequence[str], Path], list[Figure]]
SectionFn = Callable[[SectionContext], str]
OutcomesFn = Callable[[Mapping[str, pl.DataFrame]], pl.DataFrame]
PaperFn = Callable[
    [Mapping[str, pl.DataFrame], pl.DataFrame, Mapping[str, pl.DataFrame]], PaperComparison
]
"""(views of every design by kind name, explicit answers, extras) -> the experiment's
comparison."""


@dataclass(frozen=True)
class LoadContext:
    """What a unit's loader gets besides the open store: the runs (their configs say which
    models were simulated) and whether the population intervals will be computed (their
    inputs are read only then)."""

    runs: pl.DataFrame
    population: bool = True
    relabel: Callable[[str], str] = str
    """What the views' query went through (`analyze --by-reported-model` relabels model_id
    by the model the provider reported): a loader that reads per-trial rows with trial_key
    and model_id wraps its query in it, so its frames group as the views do."""


PLANTED_PEOPLE = "planted_people"
"""The `extras` frame a loader may read for the planted-value check (analysis/planted.py): the
people each pair of candidates showed, per language x pair x arm."""

LoadFn = Callable[[StoreReader, LoadContext], dict[str, pl.DataFrame]]
"""(open store, context) -> frames by a name of the unit's own (prefixed with its name), added
to `StoreData.extras` so its tables, `overall` and `paper` read them like extra parses."""


@dataclass(frozen=True)
class Section:
    """One section of the report: where the navigation links to it, its title, its HTML."""

    anchor: str
    title: str
    html: str


@dataclass(frozen=True)
class Overall:
    """What an experiment adds once per store, whatever its designs: tables by file stem and
    sections shown among the store's description (after progress, before the comparison with
    the paper), e.g. the allocation roster's make-up."""

    tables: Mapping[str, pl.DataFrame]
    sections: tuple[Section, ...] = ()


FindingsFn = Callable[[Mapping[str, pl.DataFrame], str, str], list[str]]
"""(every table by file stem, model id, language) -> the experiment's sentences of the report's
findings for that model and language, as `<li>` items citing its tables (analysis/findings.py
has the helpers); [] for none."""

OverallFn = Callable[[Mapping[str, pl.DataFrame], Mapping[str, pl.DataFrame]], Overall]
"""(views of every design by kind name, extras) -> the experiment's store-level part."""


@dataclass(frozen=True)
class PlantedContext:
    """What a unit's planted-value check gets: the run's simulated models (their profiles read
    through `prompts.simulation`, never the runner), the views of every design by kind name,
    the extras (`PLANTED_PEOPLE` among them when the unit's loader reads it) and the tables
    the analysis wrote, whose estimates the planted values are set beside."""

    models: Sequence[SimulatedModel]
    views: Mapping[str, pl.DataFrame]
    extras: Mapping[str, pl.DataFrame]
    tables: Mapping[str, pl.DataFrame]


@dataclass(frozen=True)
class PlantedCoverage:
    """One row of `planted_coverage`: a kind of planted value, what its intervals are about
    (`target`, e.g. "these people") and, per interval, whether it contains the value (nulls
    are not counted). Rows for people like these (`population`) are listed after the others."""

    value: str
    flags: pl.Series
    target: str
    population: bool = False


@dataclass(frozen=True)
class PlantedResult:
    """A unit's planted-value tables by file stem (`planted_...`) and its coverage rows."""

    tables: Mapping[str, pl.DataFrame]
    coverage: tuple[PlantedCoverage, ...] = ()


@dataclass(frozen=True)
class PlantedCheck:
    """How a unit's analysis checks what the simulator planted (analysis/planted.py runs it
    when the store's runs used the simulator): `tables` sets the planted values beside the
    estimates; `section` renders the unit's part of the report's planted-values section from
    the tables as written (HTML, "" for none). A unit without one has no planted rows."""

    tables: Callable[[PlantedContext], PlantedResult]
    section: Callable[[Mapping[str, pl.DataFrame]], str]


def _no_figures(
    tables: Mapping[str, pl.DataFrame], models: Sequence[str], out_dir: Path
) -> list[Figure]:
    del tables, models, out_dir
    return []


@dataclass(frozen=True)
class ExperimentAnalysis:
    """One experiment's part of the analysis.

    `tables` returns frames by output name (file stem); `lead` names, per table, the columns
    its rows are ordered by after the model order; `outcomes` returns one row per parsed trial
    with model_id, refused and unparseable (booleans) for the models table; `anchor` and `title`
    place the section in the report's navigation.

    What every experiment gives: `anchor`, `title`, `tables` and `section`. The rest are
    optional capabilities, for an experiment that needs them (the driver, loader and report
    call them only when set, and only when the experiment has trials in the store): `figures`;
    `outcomes`; `streams` (fixed bootstrap stream ids of published tables); `lead`; `load`
    reads further frames from the open store (its own SQL, e.g. the allocation pairs' people);
    `overall` adds tables and sections once per store (e.g. the allocation roster); `paper`
    says how the store's trials differ from the paper (called once with the views of every
    design, not per design); `planted` checks the simulated models' planted values against
    the estimates (analysis/planted.py); `findings` gives its sentences of the report's
    findings (analysis/findings.py); `summed_extras` names the extra parses its loader reads
    summed instead, and `unread_columns` the view columns it reads in its own way.
    """

    anchor: str
    title: str
    tables: TablesFn
    section: SectionFn
    figures: FiguresFn = _no_figures
    outcomes: OutcomesFn | None = None
    streams: Mapping[str, int] = field(default_factory=dict)
    lead: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    paper: PaperFn | None = None
    load: LoadFn | None = None
    overall: OverallFn | None = None
    planted: PlantedCheck | None = None
    findings: FindingsFn | None = None
    summed_extras: frozenset[str] = frozenset()
    """Extra parses (tables of `ExtraParsers`) whose rows the store's reader leaves unread
    because this experiment's `load` reads them summed in the store: at ten times the
    paper's grid a per-trial frame of one is over 300 MB."""
    unread_columns: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """View columns, by kind, that the store's reader leaves out of the views because this
    experiment's `load` reads what its tables need of them (the allocation explanations'
    texts: over 150 MB at ten times the paper's grid, of which the examples quote a few)."""
    categorical_columns: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """View columns, by kind, that the store's reader gives as Polars categoricals, whose
    values compare and sort as their texts do: 4 bytes a row, against 16 and the text for a
    text column (the allocation view's label columns: some 300 MB at ten times the paper's
    grid). This experiment's tables and every reader of its view must take them so."""


def analysis_of(unit: ExperimentUnit) -> ExperimentAnalysis | None:
    """Resolve a unit's analysis: an object, or "module:attribute" imported only now."""
    if unit.analysis is None:
        return None
    return plugins.resolve(unit.analysis, ExperimentAnalysis, f"experiment {unit.name}: analysis")

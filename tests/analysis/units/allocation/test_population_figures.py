"""The report's population figures draw the population intervals, and every section says what
its intervals are about.

On a small simulated store (identity swap and logprobs on, two explanation conditions, two
symptom levels), each population gap figure's plotted data, read back from its matplotlib
objects and from the data file written beside its PNG, equals the `allocation_population`
table's estimates and bounds exactly; the report's parts name their targets ("people like
these", "these people", "these stimuli") and the population part shows the population tables,
with the method read from their label columns.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure as MplFigure

from ibias.analysis import figures
from ibias.analysis.analyze import AnalysisResult, analyze
from ibias.analysis.units.allocation import figures as allocation_figures
from ibias.analysis.units.allocation import population_report as allocation_population_report
from ibias.analysis.units.allocation import population_tables as allocation_population
from tests.analysis.conftest import build_store

BODY = """
[[models]]
id = "sim-a"
provider = "simulator"
max_concurrency = 16
logprobs = true
top_logprobs = 3

[models.sim]
allocation_cis_default = 0.6
position_bias = 0.1
name_sd = 0.8

[[models]]
id = "sim-b"
provider = "simulator"
max_concurrency = 16

[experiments.word_association]
languages = ["en"]
categories = ["emotions"]
trials_per_category = 6
explicit_per_category = 0

[experiments.allocation]
languages = ["en"]
services = ["gynecology", "sti_testing"]
pairs_per_service = 10
explanation = [false, true]
symptoms = ["none", "high"]
explicit_per_service = 0
identity_swap = true
"""

KEYS = ["model_id", "language", "service", "explanation", "symptoms"]
GAP = ["gap", "gap_ci_low", "gap_ci_high"]


@dataclass(frozen=True)
class Analysed:
    result: AnalysisResult
    drawn: dict[str, MplFigure]
    """The population gap figures as matplotlib objects, by name (captured as they are saved)."""

    def table(self, name: str) -> pl.DataFrame:
        path = self.result.out_dir / f"{name}.parquet"
        return pl.read_parquet(path) if path.is_file() else pl.DataFrame()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Analysed]:
    folder = tmp_path_factory.mktemp("population-figures")
    store = build_store(folder / "store", BODY, seed=11)
    drawn: dict[str, MplFigure] = {}
    save = figures.save_figure

    def capture(fig: MplFigure, out_dir: Path, name: str, *args: Any) -> figures.Figure:
        if name.startswith(allocation_figures.POPULATION_GAP):
            drawn[name] = fig
        return save(fig, out_dir, name, *args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(allocation_figures, "save_figure", capture)
        result = analyze(store, folder / "out", bootstrap=200, seed=2)
    yield Analysed(result, drawn)


def _expected(pop: pl.DataFrame, name: str) -> pl.DataFrame:
    """The population table's rows that figure `name` draws (a finite estimate)."""
    lang, level = name.removeprefix(allocation_figures.POPULATION_GAP + "_").split("_", 1)
    return pop.filter(
        (pl.col("language") == lang) & (pl.col("symptoms") == level) & pl.col("gap").is_not_null()
    )


def test_each_condition_has_its_population_figure_with_one_panel_per_explanation(
    demo: Analysed,
) -> None:
    pop = demo.table(allocation_population.CELLS)
    assert not pop.is_empty() and set(pop["target"].to_list()) == {"people like these"}
    cells = pop.select("language", "symptoms").unique()
    assert sorted(demo.drawn) == sorted(
        f"{allocation_figures.POPULATION_GAP}_{lang}_{level}" for lang, level in cells.iter_rows()
    )
    for name, fig in demo.drawn.items():
        panels = [ax for ax in fig.axes if ax.get_title(loc="left")]
        assert len(panels) == _expected(pop, name)["explanation"].n_unique() == 2
        for ax in panels:  # a zero line in every panel
            zero = [0.0, 0.0]
            assert any(np.asarray(ln.get_xdata(), float).tolist() == zero for ln in ax.get_lines())
        written = {p.name for p in demo.result.figures}
        assert {f"{name}.png", f"{name}.svg"} <= written


def test_the_plotted_points_and_bars_are_the_population_table_s(demo: Analysed) -> None:
    """Read back from matplotlib's own objects: every point's x is a table estimate and every
    bar's two ends a table interval, one for one (as multisets per figure)."""
    pop = demo.table(allocation_population.CELLS)
    for name, fig in demo.drawn.items():
        want = _expected(pop, name)
        points: list[float] = []
        bars: list[tuple[float, float]] = []
        for ax in fig.axes:
            for line in ax.get_lines():
                if line.get_marker() not in (None, "None", "", " "):
                    points += [float(x) for x in np.asarray(line.get_xdata(), dtype=float)]
            for coll in ax.collections:
                if isinstance(coll, LineCollection):
                    bars += [(float(s[0][0]), float(s[1][0])) for s in coll.get_segments()]
        assert sorted(points) == sorted(want["gap"].to_list())
        bounded = want.filter(pl.col("gap_ci_low").is_not_null())
        assert sorted(bars) == sorted(bounded.select("gap_ci_low", "gap_ci_high").rows())
        assert len(bars) > 0


def test_the_figure_data_file_equals_the_population_table_row_by_row(demo: Analysed) -> None:
    """The data file beside each PNG (read back from the figure) holds, per model, service and
    condition, exactly the table's estimate and bounds."""
    pop = demo.table(allocation_population.CELLS)
    for name in demo.drawn:
        data = pl.read_csv(
            demo.result.out_dir / f"{name}.data.csv",
            schema_overrides={"explanation": pl.Boolean},
        )
        want = _expected(pop, name).select(*KEYS, *GAP)
        assert data.height == want.height > 0
        got = data.sort(KEYS).select(*KEYS, *GAP)
        assert got.equals(want.sort(KEYS)), (got, want)


def test_the_population_table_names_agree_with_the_tables_module() -> None:
    for name in ("CELLS", "EFFECTS", "SWAP", "POSITION", "LOGPROBS"):
        if hasattr(allocation_population, name):
            assert getattr(allocation_population, name) == getattr(
                allocation_population_report, name
            )


def _parts(html: str) -> dict[str, str]:
    """The allocation section's parts by their headings (h3), and the word-association
    section."""
    section = html[html.index("id='allocation'") : html.index("<h2", html.index("id='allocation'"))]
    pieces = re.split(r"<h3[^>]*>", section)
    parts = {re.sub(r"<[^>]+>", "", p.split("</h3>")[0]): p for p in pieces[1:]}
    start = html.index("id='word-association'")
    parts["word association"] = html[start : html.index("<h2", start)]
    return parts


def test_the_report_names_each_part_s_target(demo: Analysed) -> None:
    html = demo.result.report.read_text("utf-8")
    parts = _parts(html)
    population = parts["For people like these (population)"]
    assert "people like these" in population
    assert "fig-allocation_population_gap_en_none" in population
    assert "fig-allocation_rates" not in population  # pair intervals are in the next part
    roster = parts["For these people (the roster's)"]
    assert "these people" in roster and "fig-allocation_rates" in roster
    for title in ("Position bias", "Effects of asking for an explanation and of adding symptoms"):
        assert "these people" in parts[title], title
    assert "these people" in parts["Identity swap: identity or person?"]
    assert "these people" in parts["Choice probabilities from logprobs"]
    assert "these stimuli" in parts["word association"]
    methods = html[html.index("id='methods'") :]
    assert all(t in methods for t in ("these stimuli", "these people", "people like these"))


def test_the_population_part_shows_the_population_tables_with_their_labelled_method(
    demo: Analysed,
) -> None:
    parts = _parts(demo.result.report.read_text("utf-8"))
    population = parts["For people like these (population)"]
    pop = demo.table(allocation_population.CELLS)
    method = str(pop["ci_method"][0])
    assert method.replace("&", "&amp;") in population  # read from the table, not assumed
    if "population_method" in pop.columns:
        assert f"population method {pop['population_method'][0]}" in population
    if pop["ci_method"][0] != "percentile, pigeonhole":
        assert "pigeonhole" not in population
    effects = demo.table(allocation_population.EFFECTS)
    swap = demo.table(allocation_population.SWAP)
    assert not effects.is_empty() and not swap.is_empty()
    assert "Effects of the conditions, people like these" in population
    assert "Identity swap, people like these" in population
    shown = f"{swap['identity_effect'].drop_nulls()[0]:.3f}"
    assert shown in population
    for name, part in (
        (allocation_population_report.POSITION, "Position bias"),
        (allocation_population_report.LOGPROBS, "Choice probabilities from logprobs"),
    ):
        frame = demo.table(name)
        if not frame.is_empty():  # the tables these parts show when the analysis writes them
            assert "people like these" in parts[part], name
            assert str(frame["ci_method"][0]) in parts[part], name

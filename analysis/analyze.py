"""`ibias analyze`: a store in, tables (CSV + Parquet), figures (PNG + SVG) and report.html out.

Flow: open the store, parse what is pending, read the views into Polars, close the store; then
compute every table, draw the figures and write the report. Each table draws its bootstrap
resamples from its own generator, seeded by (seed, table), so the intervals of one table do not
change when another table gains cells, and the same store and seed reproduce every number.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, get_args

import polars as pl

from ibias import errors
from ibias.analysis import cross, figure_pool, findings, memory, overview, paper, report
from ibias.analysis.bootstrap import Method
from ibias.analysis.cells import order_rows
from ibias.analysis.experiment import (
    AnalysisDataError,
    ExperimentAnalysis,
    Section,
    SectionContext,
    TableContext,
    analysis_of,
)
from ibias.analysis.figures import Figure, marking
from ibias.analysis.load import StoreData, load_store, with_trials
from ibias.analysis.parallel import workers
from ibias.analysis.population import DEFAULT_METHOD as DEFAULT_POPULATION_METHOD
from ibias.analysis.population import METHODS as POPULATION_METHODS
from ibias.prompts.registry import DEFAULT_DESIGN, ExperimentUnit, units
from ibias.store.lock import shown_path

CI_METHODS: tuple[str, ...] = get_args(Method)


@dataclass(frozen=True)
class AnalysisResult:
    """Where everything went: the output folder, table files, figure files and the report."""

    out_dir: Path
    tables: tuple[Path, ...]
    figures: tuple[Path, ...]
    report: Path


def present_units(views: Mapping[str, pl.DataFrame]) -> list[ExperimentUnit]:
    """The registered units with trials in the store (a row in one of their kinds' views)."""
    found = with_trials(views)
    return [u for u in units() if any(k.name in found for k in u.kinds)]


def analyses(views: Mapping[str, pl.DataFrame] | None = None) -> list[ExperimentAnalysis]:
    """The analyses of the experiments present in the store (every registered one without
    `views`), in registry order: an absent experiment's analysis is not even imported."""
    found = (analysis_of(u) for u in (units() if views is None else present_units(views)))
    return [a for a in found if a is not None]


@dataclass(frozen=True)
class Block:
    """One experiment's analysis of one design: its tables by their names inside the block
    (what its figures and section look up) and the suffix their files get (`_paper`; none for
    the controlled design, so a store of one design keeps today's file names)."""

    part: ExperimentAnalysis
    design: str
    tables: dict[str, pl.DataFrame]
    outcomes: pl.DataFrame | None

    @property
    def suffix(self) -> str:
        return "" if self.design == DEFAULT_DESIGN else f"_{self.design}"

    @property
    def title(self) -> str:
        return self.part.title + ("" if not self.suffix else f" ({self.design} design)")

    @property
    def anchor(self) -> str:
        return self.part.anchor + self.suffix.replace("_", "-")


def _designs(unit: ExperimentUnit, views: Mapping[str, pl.DataFrame]) -> list[str]:
    """The designs this unit's trials follow in the store, in registry order (at least one)."""
    found: set[str] = set()
    for kind in unit.kinds:
        frame = views.get(kind.name)
        if kind.designs and frame is not None and "design" in frame.columns:
            found.update(str(d) for d in frame["design"].unique().to_list())
    declared = [d for k in unit.kinds for d in k.designs]
    ordered = [d for d in dict.fromkeys(declared) if d in found] + sorted(found - set(declared))
    return ordered or [DEFAULT_DESIGN]


def _design_views(
    unit: ExperimentUnit, views: Mapping[str, pl.DataFrame], design: str
) -> dict[str, pl.DataFrame]:
    """The views with this unit's kinds cut to one design (the design column dropped)."""
    out = dict(views)
    for kind in unit.kinds:
        frame = views.get(kind.name)
        if kind.designs and frame is not None and "design" in frame.columns:
            out[kind.name] = frame.filter(pl.col("design") == design).drop("design")
    return out


def compute_blocks(
    data: StoreData,
    models: list[str],
    *,
    B: int,
    method: Method,
    seed: int,
    population_method: str | None = DEFAULT_POPULATION_METHOD,
) -> list[Block]:
    """Every present experiment's tables, per design present, rows in reading order."""
    blocks: list[Block] = []
    for unit in present_units(data.views):
        part = analysis_of(unit)
        if part is None:
            continue
        for design in _designs(unit, data.views):
            views = _design_views(unit, data.views, design)
            ctx = TableContext(
                views=views,
                explicit=data.explicit,
                B=B,
                method=method,
                seed=seed,
                # Other designs' tables draw from streams derived from their names.
                streams=part.streams if design == DEFAULT_DESIGN else {},
                extras=data.extras,
                population_method=population_method,
                design=design,
            )
            tables = {
                name: order_rows(frame, models, part.lead.get(name, ()))
                for name, frame in part.tables(ctx).items()
            }
            outcomes = part.outcomes(views) if part.outcomes is not None else None
            blocks.append(Block(part, design, tables, outcomes))
            memory.release()  # what the block's tables freed, before the next block's
    return blocks


def store_parts(data: StoreData) -> tuple[dict[str, pl.DataFrame], tuple[Section, ...]]:
    """The present experiments' store-level tables and sections, in registry order."""
    tables: dict[str, pl.DataFrame] = {}
    sections: list[Section] = []
    for part in analyses(data.views):
        if part.overall is not None:
            found = part.overall(data.views, data.extras)
            tables.update(found.tables)
            sections.extend(found.sections)
    return tables, tuple(sections)


def cross_context(
    data: StoreData, tables: Mapping[str, pl.DataFrame], *, B: int, method: Method, seed: int
) -> cross.CrossContext:
    return cross.CrossContext(
        views=data.views, tables=tables, B=B, method=method, seed=seed, extras=data.extras
    )


def cross_tables(
    crossing: Sequence[cross.CrossAnalysis], ctx: cross.CrossContext
) -> dict[str, pl.DataFrame]:
    """The tables of the cross-experiment analyses the store has the kinds for."""
    out: dict[str, pl.DataFrame] = {}
    for analysis in crossing:
        out.update(analysis.tables(ctx))
    return out


def _simulator_ran(runs: pl.DataFrame) -> bool:
    """Whether the latest run config that parses has a model of the simulator: only then is
    there a planted truth to check (and only then is the check's module imported)."""
    for text in reversed(runs["config"].to_list()):
        try:
            config = tomllib.loads(str(text))
        except tomllib.TOMLDecodeError:
            continue
        blocks = config.get("models", [])
        return any(isinstance(b, dict) and b.get("provider") == "simulator" for b in blocks)
    return False


def _planted(data: StoreData, tables: Mapping[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """The planted-value check of the run's simulated models (analysis/planted.py); nothing
    when no experiment of the store has planted values to compare."""
    if not _simulator_ran(data.runs):
        return {}
    from ibias.analysis import planted

    simulated = planted.simulated_models(data.runs["config"].to_list())
    return planted.planted_tables(simulated, analyses(data.views), data.views, data.extras, tables)


def block_tables(
    blocks: Sequence[Block],
    data: StoreData,
    models: list[str],
    comparisons: Sequence[paper.Comparison] | None = None,
    *,
    B: int = 2000,
    seed: int = 0,
    method: Method = "percentile",
) -> dict[str, pl.DataFrame]:
    """Every output table by file stem: the blocks' (suffixed by design), then the explicit
    checks (if any), models and progress, the cross-experiment tables, the planted check, the
    experiments' store-level tables, then how the store differs from the paper (texts,
    models), when an experiment of the store compares itself with it."""
    if comparisons is None:
        comparisons = paper.compare(analyses(data.views), data)
    tables = {f"{name}{b.suffix}": frame for b in blocks for name, frame in b.tables.items()}
    outcomes = [b.outcomes for b in blocks if b.outcomes is not None]
    core = {
        **(
            {"explicit_answers_summary": overview.explicit_summary(data)}
            if data.explicit.height
            else {}
        ),
        "models": overview.models_table(data, outcomes),
        "progress": data.progress,
    }
    crossing = cross.present(with_trials(data.views))
    core.update(cross_tables(crossing, cross_context(data, tables, B=B, method=method, seed=seed)))
    core.update(_planted(data, tables))
    tables.update({name: order_rows(frame, models, ()) for name, frame in core.items()})
    tables.update(store_parts(data)[0])
    differences = paper.tables(comparisons, data)
    if "paper_models" in differences:
        differences["paper_models"] = order_rows(differences["paper_models"], models, ())
    tables.update(differences)  # texts stay in registry order
    return tables


def figure_helpers(data: StoreData) -> int:
    """Helper processes for the figures (analysis/figure_pool.py): one per core beyond this
    one's, none for a store whose figures take less than a helper's start-up."""
    answered = int(data.responses["n"].sum()) if "n" in data.responses.columns else 0
    return workers() - 1 if answered >= figure_pool.MIN_TRIALS else 0


def draw(
    blocks: Sequence[Block],
    models: list[str],
    out_dir: Path,
    pool: figure_pool.Pool | None = None,
) -> list[list[Figure]]:
    """Each block's figures; other designs' go in a subfolder named for the design. With
    `pool`, its helpers draw some of them (the same files)."""
    drawn = []
    with figure_pool.drawing(pool):
        for b in blocks:
            folder = out_dir if not b.suffix else out_dir / b.design
            folder.mkdir(parents=True, exist_ok=True)
            drawn.append(b.part.figures(b.tables, models, folder))
    return drawn


def report_sections(
    blocks: Sequence[Block], drawn: Sequence[Sequence[Figure]]
) -> list[report.Section]:
    """Each block's report section, in registry order."""
    return [
        report.Section(
            b.anchor, b.title, b.part.section(SectionContext(b.tables, figures, b.anchor, b.title))
        )
        for b, figures in zip(blocks, drawn, strict=True)
    ]


def cross_sections(
    crossing: Sequence[cross.CrossAnalysis],
    ctx: cross.CrossContext,
    place: str,
) -> list[Section]:
    """The cross-experiment analyses' sections placed `place` ("before" or "after" the
    experiments' own), from their tables as written."""
    out = []
    for analysis in crossing:
        if analysis.place != place:
            continue
        html = analysis.section(ctx, ctx.tables)
        if html:
            out.append(Section(analysis.anchor, analysis.title, html))
    return out


def extra_sections(
    tables: Mapping[str, pl.DataFrame], present: Sequence[ExperimentAnalysis]
) -> list[report.Section]:
    """Report sections that belong to no one experiment and no registered cross analysis
    (the planted values, whose parts are the present experiments')."""
    if "planted_coverage" in tables:
        from ibias.analysis import planted

        html = planted.section(tables, present)
        return [report.Section(planted.ANCHOR, planted.TITLE, html)]
    return []


def model_order(data: StoreData) -> list[str]:
    """Models in the order of the latest run's config (the order the user chose), then others."""
    seen: list[str] = []
    for text in reversed(data.runs["config"].to_list()):
        try:
            config = tomllib.loads(str(text))
        except tomllib.TOMLDecodeError:
            continue
        for block in config.get("models", []):
            model_id = block.get("id") if isinstance(block, dict) else None
            if isinstance(model_id, str) and model_id not in seen:
                seen.append(model_id)
        break
    present = set(data.progress["model_id"].to_list()) | set(data.responses["model_id"].to_list())
    return [m for m in seen if m in present] + sorted(present - set(seen))


def compute_tables(
    data: StoreData,
    models: list[str],
    *,
    B: int,
    method: Method,
    seed: int,
    population_method: str | None = DEFAULT_POPULATION_METHOD,
) -> dict[str, pl.DataFrame]:
    """Every output table by name (the file stem it is written under), rows in reading order."""
    blocks = compute_blocks(
        data, models, B=B, method=method, seed=seed, population_method=population_method
    )
    return block_tables(blocks, data, models, B=B, seed=seed, method=method)


def write_tables(tables: dict[str, pl.DataFrame], out_dir: Path) -> list[Path]:
    paths: list[Path] = []
    for name, frame in tables.items():
        csv, parquet = out_dir / f"{name}.csv", out_dir / f"{name}.parquet"
        frame.write_csv(csv)
        frame.write_parquet(parquet)
        paths += [csv, parquet]
    return paths


def _report_input(
    data: StoreData,
    tables: Mapping[str, pl.DataFrame],
    blocks: Sequence[Block],
    per_block: Sequence[Sequence[Figure]],
    comparisons: Sequence[paper.Comparison],
    *,
    store: Path,
    B: int,
    method: Method,
    seed: int,
) -> report.ReportInput:
    """What the report shows: the generic parts, then only the sections of what is present."""
    ctx = cross_context(data, tables, B=B, method=method, seed=seed)
    crossing = cross.present(with_trials(data.views))
    present = analyses(data.views)
    return report.ReportInput(
        store=shown_path(store),
        generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        tables=tables,
        figures=[fig for figures in per_block for fig in figures],
        runs=data.runs,
        experiments=overview.experiments_present(data),
        sections=report_sections(blocks, per_block),
        differences=paper.paper_section_input(comparisons, tables),
        n_parsed_now=data.n_parsed_now,
        B=B,
        method=method,
        seed=seed,
        front=store_parts(data)[1],
        before=cross_sections(crossing, ctx, "before"),
        after=[
            *extra_sections(tables, present),
            *cross_sections(crossing, ctx, "after"),
        ],
        findings=findings.section(tables, model_order(data), data.simulated, present),
        headline=findings.headline(data.simulated, model_order(data)),
    )


def refuse_file_as_folder(out_dir: Path) -> None:
    """Refuse an output folder that is a file, or lies under one, before the store is read
    (issue 34: `--out README.md` said only `README.md: File exists`, after the analysis)."""
    for folder in (out_dir, *out_dir.parents):
        if not folder.exists():
            continue
        if folder.is_dir():
            return
        where = "is a file" if folder == out_dir else f"is under a file ({shown_path(folder)})"
        raise errors.UsageError(
            f"the output folder {shown_path(out_dir)} {where}: it must be a folder, new or "
            "existing (analyze writes report.html, tables and figures into it)"
        )


def refuse_no_replies(data: StoreData) -> None:
    """Refuse a store with no replies: its report would hold no numbers, only empty tables
    (issue 34: it exited 0 with such a report and no hint). One line, exit 2."""
    if data.responses.height:
        return
    planned = int(data.progress["planned"].sum()) if data.progress.height else 0
    why = (
        f"{planned:,} trials planned, none answered yet; run them with `ibias run CONFIG` "
        "(`ibias status` shows progress)"
        if planned
        else "the store has no trials either; run a config with `ibias run CONFIG`, or "
        "import replies with `ibias import`"
    )
    raise AnalysisDataError(f"no replies to analyse: {why}")


def analyze(
    store: Path,
    out_dir: Path,
    *,
    bootstrap: int = 2000,
    ci: Literal["percentile", "bca"] = "percentile",
    seed: int = 0,
    by_reported_model: bool = False,
    population: bool = True,
    population_method: str = DEFAULT_POPULATION_METHOD,
) -> AnalysisResult:
    """Analyse `store` into `out_dir` (created if needed); see the module docstring.
    `by_reported_model` groups the tables by the model the provider reported (analysis/load.py);
    `population` False skips the intervals and tests for people like these (the allocation
    `*_population` tables come out empty); `population_method` says how they are computed
    (`POPULATION_METHODS`, analysis/population.py)."""
    if isinstance(bootstrap, bool) or not isinstance(bootstrap, int) or bootstrap < 1:
        raise ValueError(f"bootstrap: expected a positive number of resamples, got {bootstrap!r}")
    if ci not in CI_METHODS:
        raise ValueError(f"ci: expected one of {', '.join(CI_METHODS)}, got {ci!r}")
    if population_method not in POPULATION_METHODS:
        raise ValueError(
            f"population method: expected one of {', '.join(POPULATION_METHODS)}, "
            f"got {population_method!r}"
        )
    refuse_file_as_folder(out_dir)
    data = load_store(
        store, by_reported_model=by_reported_model, pair_people=population
    )  # parses pending responses; the store is closed on return
    refuse_no_replies(data)
    models = model_order(data)
    # Helpers for the figures start now, so they import matplotlib while the tables compute.
    with figure_pool.started(figure_helpers(data)) as pool:
        blocks = compute_blocks(
            data, models, B=bootstrap, method=ci, seed=seed,
            population_method=population_method if population else None,
        )  # fmt: skip
        comparisons = paper.compare(analyses(data.views), data)
        tables = block_tables(blocks, data, models, comparisons, B=bootstrap, seed=seed, method=ci)
        out_dir.mkdir(parents=True, exist_ok=True)
        table_paths = write_tables(tables, out_dir)
        with marking(data.simulated):  # titles and legends say which are simulated
            per_block = draw(blocks, models, out_dir, pool)
    drawn = [fig for figures in per_block for fig in figures]
    page = report.render(
        _report_input(data, tables, blocks, per_block, comparisons, store=store, B=bootstrap,
                      method=ci, seed=seed)
    )  # fmt: skip
    report_path = out_dir / "report.html"
    report_path.write_text(page, encoding="utf-8")
    return AnalysisResult(
        out_dir=out_dir,
        tables=tuple(table_paths),
        figures=tuple(p for f in drawn for p in (f.png, f.svg)),
        report=report_path,
    )

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

from ibias.analysis import overview, report
from ibias.analysis.bootstrap import Method
from ibias.analysis.cells import order_rows
from ibias.analysis.experiment import (
    ExperimentAnalysis,
    SectionContext,
    TableContext,
    analysis_of,
)
from ibias.analysis.figures import Figure
from ibias.analysis.load import StoreData, load_store
from ibias.prompts.registry import units

CI_METHODS: tuple[str, ...] = get_args(Method)


@dataclass(frozen=True)
class AnalysisResult:
    """Where everything went: the output folder, table files, figure files and the report."""

    out_dir: Path
    tables: tuple[Path, ...]
    figures: tuple[Path, ...]
    report: Path


def analyses() -> list[ExperimentAnalysis]:
    """The registered experiments' analyses, in registry order."""
    found = (analysis_of(u) for u in units())
    return [a for a in found if a is not None]


def report_sections(
    tables: Mapping[str, pl.DataFrame], drawn: Sequence[Figure]
) -> list[report.Section]:
    """Each registered experiment's report section, in registry order."""
    shown = SectionContext(tables=tables, figures=drawn)
    return [report.Section(p.anchor, p.title, p.section(shown)) for p in analyses()]


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
    data: StoreData, models: list[str], *, B: int, method: Method, seed: int
) -> dict[str, pl.DataFrame]:
    """Every output table by name (the file stem it is written under), rows in reading order:
    each registered experiment's tables, then the explicit checks, models and progress."""
    tables: dict[str, pl.DataFrame] = {}
    lead: dict[str, tuple[str, ...]] = {}
    outcomes: list[pl.DataFrame] = []
    for part in analyses():
        ctx = TableContext(
            views=data.views,
            explicit=data.explicit,
            B=B,
            method=method,
            seed=seed,
            streams=part.streams,
        )
        tables.update(part.tables(ctx))
        lead.update(part.lead)
        if part.outcomes is not None:
            outcomes.append(part.outcomes(data.views))
    tables["explicit_answers_summary"] = overview.explicit_summary(data)
    tables["models"] = overview.models_table(data, outcomes)
    tables["progress"] = data.progress
    return {name: order_rows(frame, models, lead.get(name, ())) for name, frame in tables.items()}


def write_tables(tables: dict[str, pl.DataFrame], out_dir: Path) -> list[Path]:
    paths: list[Path] = []
    for name, frame in tables.items():
        csv, parquet = out_dir / f"{name}.csv", out_dir / f"{name}.parquet"
        frame.write_csv(csv)
        frame.write_parquet(parquet)
        paths += [csv, parquet]
    return paths


def analyze(
    store: Path,
    out_dir: Path,
    *,
    bootstrap: int = 2000,
    ci: Literal["percentile", "bca"] = "percentile",
    seed: int = 0,
) -> AnalysisResult:
    """Analyse `store` into `out_dir` (created if needed); see the module docstring."""
    if isinstance(bootstrap, bool) or not isinstance(bootstrap, int) or bootstrap < 1:
        raise ValueError(f"bootstrap: expected a positive number of resamples, got {bootstrap!r}")
    if ci not in CI_METHODS:
        raise ValueError(f"ci: expected one of {', '.join(CI_METHODS)}, got {ci!r}")
    data = load_store(store)  # parses pending responses; the store is closed on return
    models = model_order(data)
    tables = compute_tables(data, models, B=bootstrap, method=ci, seed=seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    table_paths = write_tables(tables, out_dir)
    drawn = [fig for part in analyses() for fig in part.figures(tables, models, out_dir)]
    sections = report_sections(tables, drawn)
    page = report.render(
        report.ReportInput(
            store=str(store),
            generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            tables=tables,
            figures=drawn,
            runs=data.runs,
            experiments=overview.experiments_present(data),
            sections=sections,
            n_parsed_now=data.n_parsed_now,
            B=bootstrap,
            method=ci,
            seed=seed,
        )
    )
    report_path = out_dir / "report.html"
    report_path.write_text(page, encoding="utf-8")
    return AnalysisResult(
        out_dir=out_dir,
        tables=tuple(table_paths),
        figures=tuple(p for f in drawn for p in (f.png, f.svg)),
        report=report_path,
    )

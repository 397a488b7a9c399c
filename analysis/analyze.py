"""`ibias analyze`: a store in, tables (CSV + Parquet), figures (PNG + SVG) and report.html out.

Flow: open the store, parse what is pending, read the views into Polars, close the store; then
compute every table, draw the figures and write the report. Each table draws its bootstrap
resamples from its own generator, seeded by (seed, table), so the intervals of one table do not
change when another table gains cells, and the same store and seed reproduce every number.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import polars as pl

from ibias.analysis import allocation, figures, overview, report, word_association
from ibias.analysis.bootstrap import Method
from ibias.analysis.cells import order_rows
from ibias.analysis.load import StoreData, load_store

CI_METHODS: tuple[str, ...] = get_args(Method)

# Per-table stream ids for the seed (fixed forever: changing one changes published numbers).
_STREAMS: dict[str, int] = {
    "word_association_cells": 1,
    "word_association_overall": 2,
    "allocation_cells": 3,
    "position_bias": 4,
    "allocation_effects": 5,
}


@dataclass(frozen=True)
class AnalysisResult:
    """Where everything went: the output folder, table files, figure files and the report."""

    out_dir: Path
    tables: tuple[Path, ...]
    figures: tuple[Path, ...]
    report: Path


def _rng(seed: int, table: str) -> np.random.Generator:
    return np.random.default_rng([seed, _STREAMS[table]])


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
    """Every output table by name (the file stem it is written under), rows in reading order."""
    wa = data.word_association
    decisions = data.allocation
    tables = {
        "word_association_cells": word_association.cells_table(
            wa, data.explicit, B=B, method=method, rng=_rng(seed, "word_association_cells")
        ),
        "word_association_overall": word_association.overall_table(
            wa, B=B, method=method, rng=_rng(seed, "word_association_overall")
        ),
        "allocation_cells": allocation.cells_table(
            decisions, B=B, method=method, rng=_rng(seed, "allocation_cells")
        ),
        "position_bias": allocation.position_table(
            decisions, B=B, method=method, rng=_rng(seed, "position_bias")
        ),
        "allocation_effects": allocation.effects_table(
            decisions, B=B, method=method, rng=_rng(seed, "allocation_effects")
        ),
        "allocation_explanation_examples": allocation.explanation_examples(decisions),
        "explicit_answers_summary": overview.explicit_summary(data),
        "models": overview.models_table(data),
        "progress": data.progress,
    }
    lead = {"allocation_explanation_examples": ("service", "chosen")}
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
    drawn = [
        *figures.word_association_figure(tables["word_association_cells"], models, out_dir),
        *figures.allocation_rate_figures(tables["allocation_cells"], models, out_dir),
        *figures.effects_figures(tables["allocation_effects"], models, out_dir),
    ]
    page = report.render(
        report.ReportInput(
            store=str(store),
            generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            tables=tables,
            figures=drawn,
            runs=data.runs,
            experiments=overview.experiments_present(data),
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

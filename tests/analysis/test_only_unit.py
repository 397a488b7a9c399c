"""A store holding only an experiment defined here: `analyze` writes that experiment's files and
sections and the generic ones, nothing of the paper's two experiments; and it runs without
importing them or the runner at all.

The experiment asks which of two shapes has more corners ("shape corners"); its analysis counts
the answers per model. The generic outputs, written for any store: the tables `models` and
`progress`, the report, and its sections `overview`, `runs`, `models` and `files`.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest

import ibias
from ibias.prompts.base import Experiment, TrialSpec

NAME = "shape_corners"
SHAPES = ("triangle", "square", "pentagon", "hexagon")
ROOT = Path(__file__).resolve().parents[2]

GENERIC_FILES = {"models.csv", "models.parquet", "progress.csv", "progress.parquet", "report.html"}
GENERIC_SECTIONS = {
    ("overview", "What this store holds"),
    ("runs", "Runs and configuration"),
    ("models", "Models, versions, refusals"),
    ("files", "Files"),
    ("findings", "Findings"),  # the refusal sentences, even with no experiment of the paper
}


class ShapeItem(ibias.Item, frozen=True, kw_only=True):
    index: int | None = None
    shapes: tuple[str, str]


@dataclass(frozen=True)
class ShapeExperiment:
    seed: int
    name: str = NAME

    def count(self) -> int:
        return len(SHAPES) - 1

    def specs(self) -> Iterator[TrialSpec]:
        for i in range(self.count()):
            item = ShapeItem(index=i, language="en", shapes=(SHAPES[i], SHAPES[i + 1]))
            yield TrialSpec(
                experiment=NAME,
                language="en",
                coords={"index": i},
                item=item.to_json(),
                messages=({"role": "user", "content": _question(item)},),
            )


def _question(item: ShapeItem) -> str:
    return f"Which has more corners, a {item.shapes[0]} or a {item.shapes[1]}?"


def _build(table: Mapping[str, Any], seed: int, base_dir: Path) -> list[Experiment]:
    del table, base_dir
    return [ShapeExperiment(seed)]


def _parse(item: ShapeItem, content: str | None) -> dict[str, Any]:
    named = [s for s in item.shapes if s in (content or "").lower()]
    return {"answer": named[0] if len(named) == 1 else None}


def _respond(messages: Any, model: Any, rng: Any) -> str | None:
    """The simulated models answer right: the second shape always has one corner more."""
    del model, rng
    text = str(messages[-1]["content"])
    if not text.startswith("Which has more corners, a "):
        return None
    return "A " + text.rsplit(" or a ", 1)[1].rstrip("?") + "."


def _tables(ctx: ibias.TableContext) -> dict[str, pl.DataFrame]:
    frame = ctx.views[NAME]
    return {
        "shape_answers": frame.group_by("model_id")
        .agg(pl.len().alias("trials"), pl.col("answer").is_not_null().sum().alias("answered"))
        .sort("model_id")
    }


def _section(ctx: ibias.SectionContext) -> str:
    rows = "".join(
        f"<li>{r['model_id']}: {r['answered']} of {r['trials']}</li>"
        for r in ctx.tables["shape_answers"].iter_rows(named=True)
    )
    return ctx.heading("shapes", "Shape corners") + f"<ul>{rows}</ul>"


UNIT = ibias.ExperimentUnit(
    name=NAME,
    title="Shape corners",
    build=_build,
    kinds=(
        ibias.TrialKind(
            name=NAME,
            title="Shape corners",
            item=ShapeItem,
            parser=ibias.Parser(
                version=1,
                table="parsed_shape_corners",
                columns=(ibias.Column("answer", "VARCHAR"),),
                parse=_parse,
            ),
            view="shape_corner_answers",
            view_fields=("index",),
        ),
    ),
    simulation=ibias.Simulation(respond=_respond),
    analysis=ibias.ExperimentAnalysis(
        anchor="shapes", title="Shape corners", tables=_tables, section=_section
    ),
)


@pytest.fixture
def registered() -> Iterator[None]:
    ibias.register(UNIT)
    try:
        yield
    finally:
        ibias.unregister(NAME)


def _sections(page: str) -> set[tuple[str, str]]:
    return set(re.findall(r"<h2 id='([^']*)'>([^<]*)</h2>", page))


def test_a_store_of_one_test_experiment_gets_only_its_files_and_sections(
    registered: None, tmp_path: Path
) -> None:
    config = tmp_path / "shapes.toml"
    config.write_text(
        '[run]\nseed = 3\n\n[[models]]\nid = "sim-a"\nprovider = "simulator"\n\n'
        "[experiments.shape_corners]\n",
        encoding="utf-8",
    )
    store = tmp_path / "shapes.duckdb"
    assert ibias.run(config, store=store).exit_code == 0

    out = ibias.analyze(store, tmp_path / "out", bootstrap=20)

    written = {str(p.relative_to(out.out_dir)) for p in out.out_dir.rglob("*") if p.is_file()}
    assert written == GENERIC_FILES | {"shape_answers.csv", "shape_answers.parquet"}
    assert out.figures == ()
    page = out.report.read_text("utf-8")
    assert _sections(page) == GENERIC_SECTIONS | {("shapes", "Shape corners")}
    assert "<li>sim-a: 3 of 3</li>" in page
    # The overview names what the store holds and nothing else.
    overview = page.split("<h2 id='overview'>", 1)[1].split("<h2", 1)[0]
    assert "Shape corners" in overview
    assert "allocation" not in overview.lower() and "association" not in overview.lower()


_ANALYZE_ALONE = """
import sys

import ibias

for name in ("allocation", "word_association", "prompts"):
    ibias.unregister(name)
from tests.analysis.test_only_unit import UNIT

ibias.register(UNIT)
out = ibias.analyze(sys.argv[1], sys.argv[2], bootstrap=20)
banned = ("ibias.runner", "ibias.prompts.allocation", "ibias.prompts.word_association")
loaded = sorted(m for m in sys.modules if any(m == b or m.startswith(b + ".") for b in banned))
print(",".join(loaded) or "none")
print(sorted(p.name for p in out.out_dir.iterdir()))
"""


def test_analyze_of_a_test_experiment_imports_neither_built_in_nor_the_runner(
    registered: None, tmp_path: Path
) -> None:
    """With the built-in units unregistered before anything loads them (the registry imports
    a built-in only when first needed), analysing a store of the test experiment imports
    neither of the paper's experiments nor the runner: the analysis reaches them only through
    their units. The store is filled by `ibias import` (replies collected elsewhere)."""
    store = tmp_path / "shapes.duckdb"
    replies = tmp_path / "replies.jsonl"
    replies.write_bytes(
        b"".join(
            orjson.dumps(
                {
                    "experiment": NAME,
                    "model_id": "human",
                    "language": "en",
                    "item": {"index": i, "shapes": [SHAPES[i], SHAPES[i + 1]]},
                    "content": f"A {SHAPES[i + 1]}.",
                }
            )
            + b"\n"
            for i in range(3)
        )
    )
    assert ibias.import_replies(replies, store).imported == 3
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_ANALYZE_ALONE), str(store), str(tmp_path / "o")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded, files = done.stdout.splitlines()[-2:]
    assert loaded == "none"
    assert "shape_answers.csv" in files

"""A plugin's names that are SQL keywords are names, end to end (issue 33).

A unit whose item fields, shown in its view, are called `group` and `select`, whose parser
writes a column `order` into a table called `order` and whose view is called `from`: it
registers, plans, runs against the simulator, parses, answers `ibias sql` and is analysed,
because every identifier ibias writes into SQL is quoted (store/experiments.py
`sql_identifier`). Before, `analyze` died with a parser error naming neither the plugin nor the
column."""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
import pytest

import ibias
from ibias.runner.cli import main
from ibias.store.experiments import sql_identifier

NAME = "keyword_groups"
GROUPS = ("alpha", "beta", "gamma")


class KeywordItem(ibias.Item, frozen=True, kw_only=True):
    group: str
    select: int


@dataclass(frozen=True)
class KeywordExperiment:
    seed: int
    name: str = NAME

    def count(self) -> int:
        return len(GROUPS)

    def specs(self) -> Iterator[ibias.TrialSpec]:
        for i, group in enumerate(GROUPS):
            item = KeywordItem(group=group, select=i, language="en")
            yield ibias.TrialSpec(
                experiment=NAME,
                language="en",
                coords={"select": i},
                item=item.to_json(),
                messages=({"role": "user", "content": f"Name the group: {group}."},),
            )


def _build(table: Mapping[str, Any], seed: int, base_dir: Path) -> list[ibias.Experiment]:
    return [KeywordExperiment(seed)]


def _parse(item: KeywordItem, content: str | None) -> dict[str, Any]:
    return {"order": (content or "").strip(" .").lower() or None}


def _respond(
    messages: tuple[ibias.Message, ...], model: ibias.Answering[Any], rng: random.Random
) -> str | None:
    text = messages[-1]["content"]
    return text.removeprefix("Name the group: ") if text.startswith("Name the group: ") else None


def _tables(ctx: ibias.TableContext) -> dict[str, pl.DataFrame]:
    view = ctx.views[NAME]
    return {"keyword_groups": view.select("model_id", "group", "select", "order").sort("select")}


UNIT = ibias.ExperimentUnit(
    name=NAME,
    title="Keyword groups",
    build=_build,
    kinds=(
        ibias.TrialKind(
            name=NAME,
            title="Keyword groups",
            item=KeywordItem,
            parser=ibias.Parser(
                version=1, table="order", columns=(ibias.Column("order", "VARCHAR"),), parse=_parse
            ),
            view="from",
            view_fields=("group", "select"),
        ),
    ),
    simulation=ibias.Simulation(respond=_respond),
    analysis=ibias.ExperimentAnalysis(
        anchor="keywords",
        title="Keyword groups",
        tables=_tables,
        section=lambda ctx: "<h2 id='keywords'>Keyword groups</h2>",
    ),
)


@pytest.fixture
def registered() -> Iterator[None]:
    ibias.register(UNIT)
    yield
    ibias.unregister(NAME)


def test_view_fields_named_like_sql_keywords_run_and_analyze(
    registered: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "keywords.toml"
    config.write_text(
        '[run]\nseed = 3\nstore = "k.duckdb"\n\n'
        '[[models]]\nid = "sim"\nprovider = "simulator"\n\n'
        f"[experiments.{NAME}]\n",
        encoding="utf-8",
    )
    store = tmp_path / "k.duckdb"
    result = ibias.run(config, store=store)
    assert result.exit_code == 0, result.lines

    code = main(
        ["sql", "--store", str(store), "--format", "json",
         'SELECT "group", "select", "order" FROM "from" ORDER BY "select"']
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    rows = msgspec.json.decode(capsys.readouterr().out)
    assert rows == [
        {"group": g, "select": i, "order": g} for i, g in enumerate(GROUPS)
    ]  # parsed: the simulated model names each group

    out = ibias.analyze(store, tmp_path / "out", bootstrap=20)
    table = pl.read_csv(out.out_dir / "keyword_groups.csv")
    assert table.rows() == [("sim", g, i, g) for i, g in enumerate(GROUPS)]
    assert "<h2 id='keywords'>Keyword groups</h2>" in out.report.read_text("utf-8")


def test_every_identifier_is_quoted_the_duckdb_way() -> None:
    assert sql_identifier("group") == '"group"'
    assert sql_identifier("plain_name") == '"plain_name"'
    assert sql_identifier('say "hi"') == '"say ""hi"""'
    for bad in ("", "a\x00b"):
        with pytest.raises(ValueError):
            sql_identifier(bad)

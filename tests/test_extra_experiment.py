"""A third experiment defined here and nowhere else: registered, planned, run against the
simulator, imported, given its own derived table and view, and its own section in the analysis
output, all through the Python API and with no change outside this file.

The experiment asks a model which of two colours it prefers ("colour preference"). It is small
on purpose; what matters is that every part (settings, planning, typed item, rendering, parsing,
view, simulator responder, analysis tables and report section) is one unit, joined by one
registration.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import orjson
import polars as pl
import pytest

import ibias

NAME = "colour_preference"


class ColourSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """`[experiments.colour_preference]`: how many questions, from which colours."""

    trials: int = 4
    colours: tuple[str, ...] = ("red", "blue")


class ColourItem(ibias.Item, frozen=True, kw_only=True):
    trial_index: int | None = None
    options: tuple[str, str]


@dataclass(frozen=True)
class ColourExperiment:
    settings: ColourSettings
    seed: int
    name: str = NAME

    def count(self) -> int:
        return self.settings.trials

    def specs(self) -> Iterator[ibias.TrialSpec]:
        for i in range(self.settings.trials):
            a, b = ibias.rng_for(self.seed, NAME, i).sample(list(self.settings.colours), 2)
            item = ColourItem(trial_index=i, language="en", options=(a, b))
            text = f"Which colour do you prefer, {a} or {b}? Answer in a word."
            yield ibias.TrialSpec(
                experiment=NAME,
                language="en",
                coords={"trial_index": i},
                item=item.to_json(),
                messages=({"role": "user", "content": text},),
            )


def _build(table: Mapping[str, Any], seed: int, base_dir: Path) -> list[ibias.Experiment]:
    try:
        return [ColourExperiment(msgspec.convert(dict(table), type=ColourSettings), seed)]
    except msgspec.ValidationError as exc:
        raise ibias.SettingsError("colours", str(exc)) from None


def _parse(item: ColourItem, content: str | None) -> dict[str, Any]:
    named = [c for c in item.options if c in (content or "").lower()]
    return {
        "choice": named[0] if len(named) == 1 else None,
        "first": named[:1] == [item.options[0]],
    }


def _strict(item: ColourItem, content: str | None) -> dict[str, Any]:
    answer = (content or "").strip(" .").lower()
    return {"strict_choice": answer if answer in item.options else None}


def _respond(
    messages: tuple[ibias.Message, ...], model: ibias.Answering[Any], rng: random.Random
) -> str | None:
    text = messages[-1]["content"]
    if not text.startswith("Which colour do you prefer, "):
        return None
    # This simulated model always likes red, and otherwise the first colour it is offered.
    return "Red, of course." if "red" in text else f"I'd say {text.split()[5]}."


def _tables(ctx: ibias.TableContext) -> dict[str, pl.DataFrame]:
    shares = (
        ctx.views[NAME]
        .group_by("model_id")
        .agg(
            pl.len().alias("trials"),
            (pl.col("choice") == "red").sum().alias("chose_red"),
            pl.col("choice").is_null().sum().alias("no_choice"),
        )
    )
    return {"colour_shares": shares.sort("model_id")}


def _section(ctx: ibias.SectionContext) -> str:
    rows = "".join(
        f"<tr><td>{r['model_id']}</td><td>{r['chose_red']} of {r['trials']}</td></tr>"
        for r in ctx.tables["colour_shares"].iter_rows(named=True)
    )
    return f"<h2 id='colour'>Colour preference</h2><table>{rows}</table>"


UNIT = ibias.ExperimentUnit(
    name=NAME,
    title="Colour preference",
    build=_build,
    kinds=(
        ibias.TrialKind(
            name=NAME,
            title="Colour preference",
            item=ColourItem,
            parser=ibias.Parser(
                version=1,
                table="parsed_colour",
                columns=(ibias.Column("choice", "VARCHAR"), ibias.Column("first", "BOOLEAN")),
                parse=_parse,
            ),
            view="colour_choices",
            view_fields=("trial_index",),  # INTEGER, from the item's annotation
            # A second, stricter reading kept beside the main one (never in the view).
            capabilities=(
                ibias.ExtraParsers(
                    (
                        ibias.Parser(
                            1,
                            "parsed_colour_strict",
                            (ibias.Column("strict_choice", "VARCHAR"),),
                            _strict,
                        ),
                    )
                ),
            ),
        ),
    ),
    simulation=ibias.Simulation(respond=_respond),
    analysis=ibias.ExperimentAnalysis(
        anchor="colour", title="Colour preference", tables=_tables, section=_section
    ),
)


@pytest.fixture
def registered() -> Iterator[None]:
    ibias.register(UNIT)
    yield
    ibias.unregister(NAME)


def test_a_new_experiment_is_one_registered_unit(registered: None, tmp_path: Path) -> None:
    config = tmp_path / "colours.toml"
    config.write_text(
        '[run]\nseed = 7\nstore = "colours.duckdb"\n\n'
        '[[models]]\nid = "sim-a"\nprovider = "simulator"\n\n'
        '[[models]]\nid = "sim-b"\nprovider = "simulator"\n\n'
        '[experiments.colour_preference]\ntrials = 6\ncolours = ["red", "blue", "green"]\n',
        encoding="utf-8",
    )
    store = tmp_path / "colours.duckdb"

    planned = ibias.plan(config, store=store)
    assert planned.by.select("experiment", "model_id", "trials").rows() == [
        (NAME, "sim-a", 6),
        (NAME, "sim-b", 6),
    ]

    result = ibias.run(config, store=store)
    assert result.exit_code == 0, result.lines

    replies = tmp_path / "elsewhere.jsonl"
    line = {"experiment": NAME, "model_id": "human", "language": "en", "content": "Blue."}
    replies.write_bytes(orjson.dumps({**line, "item": {"options": ["green", "blue"]}}) + b"\n")
    assert ibias.import_replies(replies, store).imported == 1

    with ibias.connect(store) as con:
        rows = con.sql(
            "SELECT model_id, trial_index, choice FROM colour_choices ORDER BY 1, 2"
        ).fetchall()
        items = con.sql(f"SELECT item FROM trials WHERE experiment = '{NAME}'").fetchall()
        strict = con.sql(
            "SELECT count(*), count(strict_choice) FROM parsed_colour_strict"
        ).fetchall()
        view_columns = [c[0] for c in con.sql("DESCRIBE colour_choices").fetchall()]
    assert len(rows) == 13
    # The simulator answered through this file's responder: red whenever it was offered.
    with_red = [orjson.loads(i[0])["options"] for i in items if "red" in i[0]]
    assert with_red and sum(1 for r in rows if r[2] == "red") == len(with_red)
    assert ("human", None, "blue") in rows
    # Every reply has a strict reading too; only bare one-word answers ("Blue.") pass it.
    assert strict == [(13, 1)]
    assert "strict_choice" not in view_columns

    out = ibias.analyze(store, tmp_path / "out", bootstrap=50)
    shares = pl.read_csv(out.out_dir / "colour_shares.csv")
    red_per_model = len(with_red) // 2
    assert shares.rows() == [
        ("human", 1, 0, 0),
        ("sim-a", 6, red_per_model, 0),
        ("sim-b", 6, red_per_model, 0),
    ]
    page = out.report.read_text("utf-8")
    assert "<h2 id='colour'>Colour preference</h2>" in page
    assert "href='#colour'" in page
    # The simulator answered, but this unit's analysis has no planted-value check: no planted
    # tables and no planted-values section (the built-in units' checks are theirs alone).
    assert not list(out.out_dir.glob("planted_*"))
    assert "planted-values" not in page
    assert f"<td>sim-a</td><td>{red_per_model} of 6</td>" in page


def test_the_units_settings_are_checked_by_the_config_loader(
    registered: None, tmp_path: Path
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(
        '[[models]]\nid = "m"\nprovider = "simulator"\n\n'
        "[experiments.colour_preference]\ntrials = 2\nshades = 3\n",
        encoding="utf-8",
    )
    with pytest.raises(ibias.ConfigError, match=r"experiments\.colour_preference"):
        ibias.load_config(config)
    ibias.unregister(NAME)
    with pytest.raises(ibias.ConfigError, match="unknown experiment"):
        ibias.load_config(config)


def test_a_store_made_with_the_unit_still_opens_without_it(
    registered: None, tmp_path: Path
) -> None:
    from ibias.store.db import open_store

    store = tmp_path / "s.duckdb"
    open_store(store, create=True).close()  # a writable open creates the tables and views
    ibias.unregister(NAME)
    with ibias.connect(store) as con:
        assert con.sql("SELECT count(*) FROM colour_choices").fetchall() == [(0,)]
    ibias.register(UNIT)

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

import duckdb
import msgspec
import orjson
import polars as pl
import pytest

import ibias
from ibias.prompts.base import Experiment, Message, SettingsError, TrialSpec, rng_for
from ibias.prompts.simulation import Answering, Simulation

NAME = "colour_preference"
COLOURS = ("red", "blue", "green", "yellow")


class ColourSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """`[experiments.colour_preference]`: how many questions, from which colours."""

    trials: int = 4
    colours: tuple[str, ...] = ("red", "blue")


class ColourItem(ibias.Item, frozen=True, kw_only=True):
    trial_index: int | None = None
    options: tuple[str, str]


def _render(item: ColourItem) -> str:
    return f"Which colour do you prefer, {item.options[0]} or {item.options[1]}? Answer in a word."


@dataclass(frozen=True)
class ColourExperiment:
    settings: ColourSettings
    seed: int
    name: str = NAME

    def count(self) -> int:
        return self.settings.trials

    def specs(self) -> Iterator[TrialSpec]:
        for i in range(self.settings.trials):
            options = rng_for(self.seed, NAME, i).sample(list(self.settings.colours), 2)
            item = ColourItem(trial_index=i, language="en", options=(options[0], options[1]))
            yield TrialSpec(
                experiment=NAME,
                language="en",
                coords={"trial_index": i},
                item=item.to_json(),
                messages=({"role": "user", "content": _render(item)},),
            )


def _build(table: Mapping[str, Any], seed: int, base_dir: Path) -> list[Experiment]:
    del base_dir
    try:
        settings = msgspec.convert(dict(table), type=ColourSettings)
    except msgspec.ValidationError as exc:
        raise SettingsError("colours", str(exc)) from None
    return [ColourExperiment(settings, seed)]


def _parse(item: Mapping[str, Any], content: str | None) -> dict[str, Any]:
    text = (content or "").lower()
    named = [c for c in item["options"] if c in text]
    return {"choice": named[0] if len(named) == 1 else None, "first": named[:1] == [
        item["options"][0]
    ]}  # fmt: skip


def _respond(
    messages: tuple[Message, ...], model: Answering[Any], rng: random.Random
) -> str | None:
    text = messages[-1]["content"]
    if not text.startswith("Which colour do you prefer, "):
        return None
    first = text.removeprefix("Which colour do you prefer, ").split(" or ")[0]
    # This simulated model always likes red, and otherwise the first colour it is offered.
    return "Red, of course." if "red" in text else f"I'd say {first}."


def _tables(ctx: ibias.TableContext) -> dict[str, pl.DataFrame]:
    frame = ctx.views[NAME]
    shares = (
        frame.group_by("model_id")
        .agg(
            pl.len().alias("trials"),
            (pl.col("choice") == "red").sum().alias("chose_red"),
            pl.col("choice").is_null().sum().alias("no_choice"),
        )
        .sort("model_id")
    )
    return {"colour_shares": shares}


def _section(ctx: ibias.SectionContext) -> str:
    shares = ctx.tables["colour_shares"]
    rows = "".join(
        f"<tr><td>{r['model_id']}</td><td>{r['chose_red']} of {r['trials']}</td></tr>"
        for r in shares.iter_rows(named=True)
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
            view_fields=(("trial_index", "INTEGER"),),
            # A second, stricter reading kept beside the main one (never in the view).
            extra_parsers=(
                ibias.Parser(
                    version=1,
                    table="parsed_colour_strict",
                    columns=(ibias.Column("strict_choice", "VARCHAR"),),
                    parse=lambda item, content: {
                        "strict_choice": (content or "").strip(" .").lower()
                        if (content or "").strip(" .").lower() in item["options"]
                        else None
                    },
                ),
            ),
        ),
    ),
    simulation=Simulation(respond=_respond),
    analysis=ibias.ExperimentAnalysis(
        anchor="colour", title="Colour preference", tables=_tables, section=_section
    ),
)


@pytest.fixture
def registered() -> Iterator[None]:
    ibias.register(UNIT)
    try:
        yield
    finally:
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
    replies.write_bytes(
        orjson.dumps(
            {
                "experiment": NAME,
                "model_id": "human",
                "language": "en",
                "item": {"options": ["green", "blue"]},
                "content": "Blue.",
            }
        )
        + b"\n"
    )
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


def test_an_unregistered_experiment_is_unknown(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[[models]]\nid = "m"\nprovider = "simulator"\n\n[experiments.colour_preference]\n',
        encoding="utf-8",
    )
    with pytest.raises(ibias.ConfigError, match="unknown experiment"):
        ibias.load_config(config)


def test_a_store_made_with_the_unit_still_opens_without_it(
    registered: None, tmp_path: Path
) -> None:
    store = tmp_path / "s.duckdb"
    _create(store).close()
    ibias.unregister(NAME)
    with ibias.connect(store) as con:
        assert con.sql("SELECT count(*) FROM colour_choices").fetchall() == [(0,)]
    ibias.register(UNIT)


def _create(store: Path) -> duckdb.DuckDBPyConnection:
    """A writable open creates the registered kinds' tables and views."""
    from ibias.store.db import open_store

    return open_store(store, create=True)

"""`plan`, `status` and `sql` at 80 columns (issue 34): no identifier is broken inside a word
and no two values print as the same text.

Before: `ibias plan configs/paper.toml` at 80 columns printed `word_association_explicit` as
`word_association_expli` / `cit` (14 rows doubled), and `ibias sql` cut two different model
ids to the same `sim-gemini-2.0-fla...`. Each is checked on a rich console 80 columns wide and
through the command itself, piped, with COLUMNS=80 (what a script or `| less` gets).
"""

from __future__ import annotations

import io
import os
import subprocess
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from ibias.runner.config import load_config
from ibias.runner.execution.planning_report import plan_json, render_plan
from ibias.runner.sql import _print_table
from ibias.runner.status import ModelStats, snapshot
from ibias.runner.status_report import render_status
from tests.helpers import IBIAS
from tests.test_configs import paper_config

#: configs/paper.toml's experiments and model ids.
PAPER_NAMES = (
    "allocation",
    "word_association",
    "word_association_explicit",
    "gpt-4o-mini",
    "gpt-4o",
    "gemini-2.0-flash",
    "gemini-2.0-flash-lite",
    "grok-3",
    "grok-3-mini",
    "llama-3-70b",
)
LONG_ID = "openrouter/meta-llama/llama-3.3-70b-instruct"  # 44 characters


def piped(*args: str, cwd: Path) -> str:
    """`ibias ARGS` with stdout a pipe and COLUMNS=80: what it prints, after exit 0."""
    env = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run(
        [*IBIAS, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def drawn(render, width: int = 80) -> str:  # type: ignore[no-untyped-def]
    buffer = io.StringIO()
    render(Console(file=buffer, width=width))
    return buffer.getvalue()


def assert_whole(out: str, names: Iterable[str], width: int = 80) -> None:
    """Every line fits `width`, nothing is elided, and no word on any line is the start or the
    end of one of `names` without being a name itself (`word_association_expli`, `cit`,
    `-lite`: what a name broken across two lines leaves)."""
    names = set(names)
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines), out
    assert "…" not in out and "..." not in out, out
    for line in lines:
        for word in line.split():
            word = word.strip(",;()")
            if len(word) < 3 or word in names:
                continue
            pieces = [n for n in names if n.startswith(word) or n.endswith(word)]
            assert not pieces, f"{word!r} is a piece of {pieces} in:\n{out}"


# --- plan --------------------------------------------------------------------------------------


@pytest.fixture
def paper(tmp_path: Path, paper_pack_dir: Path) -> Path:
    """configs/paper.toml with the shared pack (skipped without it, like tests/test_configs.py)."""
    return paper_config(tmp_path, paper_pack_dir)


def test_plan_of_the_paper_at_80_columns_keeps_every_name_whole(paper: Path) -> None:
    report = plan_json(load_config(paper), paper.parent / "absent.duckdb")
    out = drawn(lambda c: render_plan(report, c))
    assert_whole(out, PAPER_NAMES)
    # every cell is one row: 7 models x 2 languages under each of the three experiments
    rows = [line.split() for line in out.splitlines()]
    cells = [r for r in rows if len(r) == 4 and r[0] in PAPER_NAMES and r[1] in ("en", "es")]
    assert len(cells) == 3 * 7 * 2
    assert sum(int(r[2].replace(",", "")) for r in cells) == 31_920
    assert "word_association_explicit" in out and "allocation, design paper" in out


def test_plan_of_the_paper_piped_at_80_columns(paper: Path) -> None:
    out = piped("plan", str(paper), "--store", str(paper.parent / "none.duckdb"), cwd=paper.parent)
    assert_whole(out.split("\n", 1)[1], PAPER_NAMES)  # the first line is the store's path
    assert out.count("word_association_explicit") == 1  # one heading, no split copies


def _plan_report(ids: list[str], experiments: list[str]) -> dict[str, object]:
    models = [
        {
            "model_id": m,
            "remaining": 4_560,
            "estimated_tokens": 12_345_678,
            "estimated_cost_usd": 24.95,
            "typical_cost_usd": None,
            "min_seconds": 1_287.0,
            "limited_by": "tpm",
            "rpm": 500,
            "tpm": 30_000,
            "max_concurrency": 8,
        }
        for m in ids
    ]
    by = [
        {"experiment": e, "design": None, "model_id": m, "language": "en", "trials": 80, "done": 0}
        for e in experiments
        for m in ids
    ]
    return {
        "models": models,
        "by": by,
        "total": 80 * len(by),
        "done": 0,
        "remaining": 80 * len(by),
        "estimated_cost_usd": 24.95 * len(ids),
        "typical_cost_usd": None,
        "min_seconds": 1_287.0,
        "slowest_model": ids[-1],
        "time_unknown_models": [],
    }


def test_plan_keys_an_id_too_long_for_its_numbers_and_gives_a_legend() -> None:
    """A 44-character id and the per-model numbers cannot share 80 columns: the id is shown
    by a key with its legend, and no cost or time is cut (before: `24…`)."""
    ids = ["sim-gpt-4o", LONG_ID]
    out = drawn(lambda c: render_plan(_plan_report(ids, ["word_association_explicit"]), c))
    assert_whole(out, [*ids, "word_association_explicit"])
    assert f"id 1 = {LONG_ID}" in out
    per_model = [line.split() for line in out.splitlines() if "24.95" in line]
    assert [r[:2] for r in per_model] == [["sim-gpt-4o", "24.95"], ["id", "1"]]
    assert all("21 min 27 s (30,000 tpm)" in " ".join(r) for r in per_model)


@settings(max_examples=40, deadline=None)
@given(
    width=st.integers(min_value=60, max_value=140),
    lengths=st.lists(st.integers(min_value=1, max_value=45), min_size=1, max_size=7),
)
def test_plan_never_breaks_a_name_at_any_common_width(width: int, lengths: list[int]) -> None:
    ids = [f"{i}" + "m" * (n - 1) + "x" for i, n in enumerate(lengths)]
    experiments = ["word_association_explicit", "allocation_explicit", "prompts"]
    report = _plan_report(ids, experiments)
    out = drawn(lambda c: render_plan(report, c), width)
    assert_whole(out, [*ids, *experiments], width)


# --- status ------------------------------------------------------------------------------------


def _status(ids: Iterable[str], running: bool = True) -> dict[str, object]:
    stats = [ModelStats(model_id=m, total=20_320, done=7_795, failed=12, retries=354) for m in ids]
    return {
        "store": "/home/someone/projects/ibias/runs/paper.rehearsal.duckdb",
        "running": True,
        "holder": "pid 12345 on a-rather-long-host-name.example.org",
        **snapshot("r", "running", datetime.now(UTC), stats),
    }


def test_status_of_the_paper_models_at_80_columns() -> None:
    out = drawn(lambda c: render_status(_status(PAPER_NAMES[3:]), c))
    assert_whole(out, PAPER_NAMES)
    assert "/home/someone/projects/ibias/runs/paper.rehearsal.duckdb:" in out  # whole
    assert "(pid 12345 on a-rather-long-host-name.example.org)" in out
    starts = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert [s for s in starts if s in PAPER_NAMES] == list(PAPER_NAMES[3:])


def test_status_keys_ids_too_long_for_the_numbers() -> None:
    ids = ["sim-gpt-4o", LONG_ID + ":extended-thinking", LONG_ID]
    out = drawn(lambda c: render_status(_status(ids), c))
    assert_whole(out, ids)
    assert f"id 1 = {ids[1]}" in out  # only the id that does not fit is keyed
    assert "id 2" not in out
    rows = [line.split() for line in out.splitlines() if "/20,320" in line]
    assert [r[0] for r in rows] == ["sim-gpt-4o", "id", LONG_ID]
    assert all("7,795/20,320" in r for r in rows)


def test_status_of_a_stored_run_piped_at_80_columns(tmp_path: Path) -> None:
    from tests.helpers import model_block, write_config

    ids = ["sim-gemini-2.0-flash", "sim-gemini-2.0-flash-lite"]
    config = write_config(
        tmp_path, [model_block(m, provider="simulator", model=m) for m in ids], n_prompts=4
    )
    piped("run", str(config), "--quiet", cwd=tmp_path)
    out = piped("status", "--store", str(tmp_path / "store.duckdb"), cwd=tmp_path)
    assert_whole(out, ids)
    assert [line.split()[0] for line in out.splitlines() if "4/4" in line] == ids


# --- sql ---------------------------------------------------------------------------------------

TWINS = ("sim-gemini-2.0-flash-lite-preview-02-05", "sim-gemini-2.0-flash-lite-preview-02-06")


def _column(out: str, index: int) -> str:
    """The text of column `index` of a drawn table, its lines joined (a folded value whole)."""
    parts = [line.split("│")[index + 1].strip() for line in out.splitlines() if "│" in line]
    return "".join(parts)


def test_sql_prints_two_ids_that_differ_after_20_characters_distinguishably() -> None:
    """A wide result (a long reply beside the ids): the ids keep their whole width, the reply
    wraps between its words (before: both ids printed as `sim-gemini-2.0-fla...`)."""
    reply = "a reply of several words that goes on for a while, as replies do " * 3
    rows = [(TWINS[0], 12_345, reply), (TWINS[1], 7, "x")]
    out = drawn(lambda c: _print_table(["model_id", "n", "content"], rows, c))
    assert "…" not in out and "..." not in out
    assert all(len(line) <= 80 for line in out.splitlines())
    assert TWINS[0] in out and TWINS[1] in out  # each whole on one line
    assert "".join(_column(out, 2).split()).startswith("".join(reply.split()))  # all of it


def test_sql_with_more_columns_than_fit_whole_still_tells_the_ids_apart() -> None:
    reply = "a reply of several words"
    rows = [
        (TWINS[0], "word_association_explicit", 12_345, reply),
        (TWINS[1], "allocation", 7, "x"),
    ]
    out = drawn(lambda c: _print_table(["model_id", "experiment", "n", "content"], rows, c))
    assert "…" not in out and all(len(line) <= 80 for line in out.splitlines())
    ids = _column(out, 0)
    assert ids.index(TWINS[0]) < ids.index(TWINS[1])  # each whole, folded at most
    assert "word_association_explicit" in out  # the shorter words stay whole


def test_sql_folds_rather_than_cuts_when_even_the_words_do_not_fit() -> None:
    keys = ["0" * 63 + "a", "0" * 63 + "b"]  # two 64-character keys, alike but for the last
    rows = [(TWINS[0], k, "word_association_explicit") for k in keys]
    out = drawn(lambda c: _print_table(["model_id", "trial_key", "experiment"], rows, c))
    assert "…" not in out
    column = _column(out, 1)
    assert keys[0] in column and keys[1] in column


def test_sql_piped_at_80_columns(tmp_path: Path) -> None:
    from tests.helpers import model_block, write_config

    config = write_config(tmp_path, [model_block("m", provider="simulator")], n_prompts=1)
    piped("run", str(config), "--quiet", cwd=tmp_path)
    query = (
        "SELECT * FROM (VALUES "
        + ", ".join(f"('{t}', 'word_association_explicit', 'a b c d e f g h')" for t in TWINS)
        + ") t(model_id, experiment, reply)"
    )
    out = piped("sql", "--store", str(tmp_path / "store.duckdb"), query, cwd=tmp_path)
    assert all(len(line) <= 80 for line in out.splitlines())
    assert "…" not in out
    assert TWINS[0] in out and TWINS[1] in out


@settings(max_examples=40, deadline=None)
@given(
    width=st.integers(min_value=40, max_value=120),
    values=st.lists(
        st.text(alphabet="abc-. ", min_size=1, max_size=60).filter(str.strip),
        min_size=2,
        max_size=6,
        unique=True,
    ),
)
def test_sql_shows_distinct_values_distinctly_at_any_width(width: int, values: list[str]) -> None:
    """Whatever the width, each value can be read back whole from its column (wrapped or
    folded, never cut), so two distinct values never print alike."""
    rows = [(v, "word_association_explicit", v) for v in values]
    out = drawn(lambda c: _print_table(["a", "b", "c"], rows, c), width)
    assert "…" not in out
    squeezed = "".join(_column(out, 0).split())
    for v in values:
        assert "".join(v.split()) in squeezed

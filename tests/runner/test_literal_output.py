"""Data is never markup (issue 33): every terminal output shows stored and configured text as
it is. `[/x]` and `[red]a[/red]` print as written (they used to raise rich's MarkupError or
vanish), `:smile:` stays a code, and a control character from data is shown escaped as
runner/console.py documents (`\\x1b`, `\\r`, ...), so nothing from data moves the cursor or
sets a colour.

A hypothesis test drives arbitrary strings through each renderer directly, on a plain rich
console with markup, emoji codes and highlighting on (the strictest: the renderers must not
rely on the console they are given); a few end-to-end cases run the real commands, on a closed
store, on a store a run serves live, and on a terminal (a pty) with a model id `[/x]`.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from ibias.runner import cli
from ibias.runner.batch.status import batch_lines
from ibias.runner.cli import main
from ibias.runner.commands import fail
from ibias.runner.console import literal, terminal, text
from ibias.runner.execution.models_check import ModelCheck, render_checks
from ibias.runner.execution.planning_report import render_plan
from ibias.runner.progress import SHOW_FAILING_AFTER, Progress, render_table
from ibias.runner.scheduling.scheduler import ModelStats
from ibias.runner.show import Attempt, Reply, TrialView, render_text
from ibias.runner.sql import _print_table
from ibias.runner.status import snapshot
from ibias.runner.status_report import render_status
from tests.helpers import IBIAS, model_block, write_config
from tests.store.conftest import _serving

#: Pieces real data brings: rich markup (balanced, unbalanced, links), emoji codes, ANSI
#: escapes (colour, clear screen, cursor up, a window title), C0/C1 controls, a lone
#: surrogate (a path byte that is not UTF-8), wide and combining characters, joiners.
PIECES = (
    "[/x]",
    "[red]",
    "[/red]",
    "[bold red on white]",
    "[/]",
    "[link=https://example.org]",
    "\\[",
    "[/INST]",
    ":smile:",
    ":+1:",
    "\x1b[31m",
    "\x1b[2J",
    "\x1b[1A",
    "\x1b]0;title\x07",
    "\x9b31m",
    "\r",
    "\x08",
    "\x00",
    "\x7f",
    "\x85",
    "\t",
    "\n",
    "\udcff",
    "界",
    "👨\u200d👩\u200d👧",
    "e\u0301",
    "\u202e",
    "\\x1b",
)
DATA = (
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), min_size=1, max_size=6)
    .map("".join)
    .filter(bool)
)
#: rich's own styling (SGR), which a colour terminal gets around ibias's headers.
SGR = re.compile(r"\x1b\[[0-9;]*m")
#: Any control sequence a terminal gets (rich's colours, its live display's cursor moves).
CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: Cc characters (C0, DEL, C1) other than newline: none may reach the terminal from data.
STRAY = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def drawn(render: Callable[[Console], None]) -> str:
    """What `render` prints on a colour terminal of a plain rich console (markup, emoji codes
    and highlighting on), with rich's own colour codes taken out; fails if anything else of
    category Cc but the newline is left."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=3000, force_terminal=True, color_system="truecolor")
    render(console)
    out = SGR.sub("", buffer.getvalue())
    assert not STRAY.search(out), repr(out)
    return out


def in_rich(value: str) -> str:
    """`value` as rich shows it in free text (runner/console.py): newline kept, the rest of
    Cc and the surrogates escaped."""
    return text(value).plain


def one_line(value: str) -> str:
    return literal(value, layout=False)


def compact(value: str) -> str:
    return "".join(value.split())


def shows(out: str, value: str) -> bool:
    """Whether `out` holds each line of `value` (trailing blanks aside: rich pads cells)."""
    return all(line.rstrip() in out for line in value.split("\n"))


def test_the_escaped_form_is_documented_and_keeps_layout_only_where_asked() -> None:
    assert literal("a\x1b[31mb\rc\x00\x7f\x85\udcff") == "a\\x1b[31mb\\rc\\x00\\x7f\\x85\\udcff"
    assert literal("a\nb\tc") == "a\nb\tc"
    assert one_line("a\nb\tc") == "a\\nb\\tc"
    assert in_rich("a\nb\tc") == "a\nb\\tc"
    # what is not a control character is shown as it is: markup, emoji codes, wide text,
    # joiners, bidirectional marks, backslashes
    same = "[red]a[/red] [/x] :smile: 界 👨\u200d👩\u200d👧 \u202e C:\\x1b"
    assert literal(same) == one_line(same) == in_rich(same) == same


def test_a_console_of_ibias_prints_a_plain_string_literally() -> None:
    buffer = io.StringIO()
    console = terminal(buffer, width=200, force_terminal=True, color_system="truecolor")
    console.print("[red]secret[/red] visible [/x] :smile: \x1b[2J\rend")
    out = buffer.getvalue()
    assert out == "[red]secret[/red] visible [/x] :smile: \\x1b[2J\\rend\n"


@FAST
@given(value=DATA)
def test_sql_table(value: str) -> None:
    out = drawn(lambda c: _print_table([value, "b"], [(value, None), (1, value)], c))
    assert shows(out, in_rich(value)) and "NULL" in out


@FAST
@given(value=DATA)
def test_status(value: str) -> None:
    stats = [ModelStats(model_id=value, total=10, done=3), ModelStats(model_id="m2", total=1)]
    report = {
        "store": value,
        "running": False,
        "planned": 11,
        "done": 3,
        "failed": 0,
        **snapshot("r", "done", datetime.now(UTC), stats),
        "drift": [f"model {value} drifted"],
        "reported_models": [{"model_id": value, "n_fingerprints": 2}],
        "last_status": {"state": "failed", "error": value},
        "last_run_started_at": None,
    }
    out = drawn(lambda c: render_status(report, c))
    for expected in (
        f"{one_line(value)}: no run in progress",
        f"drift: model {one_line(value)} drifted",
        f"{one_line(value)} 2",
        f"the last run failed: {one_line(value)}",
    ):
        assert expected in out
    row = next(line for line in out.splitlines() if "3/10" in line)
    assert one_line(value) in row  # the id on its row, whole
    live = {**report, "running": True, "state": value, "holder": value}
    out = drawn(lambda c: render_status(live, c))
    assert f"{one_line(value)}: run in progress, {one_line(value)} ({one_line(value)})" in out


@FAST
@given(value=DATA)
def test_plan_report(value: str) -> None:
    model = {
        "model_id": value,
        "remaining": 3,
        "estimated_tokens": 300,
        "estimated_cost_usd": 0.5,
        "typical_cost_usd": None,
        "min_seconds": None,
        "limited_by": None,
        "rpm": None,
        "tpm": None,
    }
    report = {
        "models": [model],
        "by": [
            {"experiment": value, "design": value, "model_id": value, "language": value}
            | {"trials": 3, "done": 0}
        ],
        "total": 3,
        "done": 0,
        "remaining": 3,
        "estimated_cost_usd": 0.5,
        "typical_cost_usd": None,
        "min_seconds": None,
        "slowest_model": None,
        "time_unknown_models": [value],
        "batch_lines": [f"batch of {value}"],
    }
    out = drawn(lambda c: render_plan(report, c))
    assert out.count(one_line(value)) >= 7  # 4 cells, the model row, 2 sentences
    assert f"no rpm or tpm configured for {one_line(value)})" in out
    assert f"batch of {one_line(value)}" in out


@FAST
@given(value=DATA)
def test_progress_table_and_plain_lines(value: str) -> None:
    failing = ModelStats(model_id=value, total=5, failing=SHOW_FAILING_AFTER)
    failing.last_error_kind, failing.endpoint = value, value
    stats = [failing, ModelStats(model_id="m2", total=5)]
    out = drawn(lambda c: c.print(render_table(stats, 3000)))
    assert one_line(value) in out
    note = f"{SHOW_FAILING_AFTER:,} failures in a row, last {value} at {value}"
    # the caption wraps to the table's width: compared without the blanks it breaks at
    assert compact(f"{one_line(value)}: {one_line(note)}") in compact(out)
    stream = io.StringIO()  # not a terminal: one plain line a model
    progress = Progress(stats, quiet=False, stream=stream)
    progress.start()
    progress.tick()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and not STRAY.search(stream.getvalue())
    assert lines[0].startswith(f"progress {one_line(value)}: 0/5 ")
    assert f"last {one_line(value)} at {one_line(value)}" in lines[0]


@FAST
@given(value=DATA)
def test_show(value: str) -> None:
    value = value.encode("utf-8", "replace").decode()  # what the store holds is UTF-8
    when = datetime(2026, 1, 1, tzinfo=UTC)
    trial = TrialView(
        trial_key="ab" * 32,
        experiment=value,
        design=None,
        model_id=value,
        language="en",
        replicate=0,
        coords={"k": value},
        item={},
        messages=[{"role": "user", "content": value}],
        params={},
        planned_by="r",
        attempts=(Attempt("r", 1, when, 10.0, 500, value, value, "retry"),),
        reply=Reply(value, "stop", value, value, 1, 1, None, when, "r"),
        parsed=None,
        parser_version=None,
    )
    out = render_text(trial)
    # plain text: newline and tab are layout, every other control character escaped
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]", out), repr(out)
    block = "\n".join("    " + line for line in literal(value).split("\n"))
    assert out.count(block) >= 2  # the message sent and the reply
    assert f"model {literal(value)}, language en" in out


@FAST
@given(value=DATA)
def test_models(value: str) -> None:
    checks = [
        ModelCheck(value, "openai", value, False, 400, None, None, None, None, None, value),
        ModelCheck("m2", "simulator", "x", True, 200, value, None, 60, None, 12.0, "ok"),
    ]
    out = drawn(lambda c: render_checks(checks, c))
    assert out.count(one_line(value)) >= 4  # id twice, the message, the model name
    assert f"openai {one_line(value)}" in out
    assert f"simulator x, reported as {one_line(value)}" in out


@FAST
@given(value=DATA)
def test_batch_lines(value: str) -> None:
    batch = {
        "batch_id": value,
        "provider": "openai",
        "model_id": value,
        "state": value,
        "requests": 3,
        "completed": None,
        "failed": None,
        "age_s": 60,
    }
    (line,) = batch_lines([batch])
    assert not STRAY.search(line) and "\n" not in line
    assert line.startswith(f"batch {one_line(value)} (openai, model {one_line(value)}): ")


@FAST
@given(value=DATA)
def test_error_lines(value: str) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert fail(value) == 2
    assert err.getvalue() == f"error: {one_line(value)}\n"


def test_an_internal_error_is_one_literal_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(args: object) -> int:
        raise RuntimeError("closing tag '[/x]'\x1b[2J\nsecond line")

    monkeypatch.delenv("IBIAS_DEBUG", raising=False)
    monkeypatch.setattr(cli, "_dispatch", broken)
    assert main(["status"]) == 1
    assert capsys.readouterr().err == (
        "internal error: RuntimeError: closing tag '[/x]'\\x1b[2J second line "
        "(set IBIAS_DEBUG=1 for a traceback)\n"
    )


# -- the real commands ------------------------------------------------------------------------

MARKUP_REPLY = "[INST] hi [/INST] Sure. [red]secret[/red] visible :smile: \x1b[2J"
QUERY = "SELECT '[/x]' AS a, '[red]a[/red]' AS b, content FROM responses"


def imported(folder: Path) -> Path:
    """A store holding one imported reply with Llama's chat template leaking into it."""
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "replies.jsonl"
    reply = {
        "experiment": "word_association_explicit",
        "model_id": "ext",
        "language": "en",
        "item": {"category": "risk", "quality": "careful"},
        "content": MARKUP_REPLY,
    }
    source.write_text(json.dumps(reply) + "\n")
    store = folder / "store.duckdb"
    assert main(["import", str(source), "--store", str(store)]) == 0
    return store


def assert_literal_table(out: str) -> None:
    assert "[/x]" in out and "[red]a[/red]" in out
    assert "[INST] hi [/INST] Sure. [red]secret[/red] visible :smile: \\x1b[2J" in out
    assert "\x1b" not in out


def test_sql_on_a_closed_store_prints_markup_like_values_as_stored(tmp_path: Path) -> None:
    store = imported(tmp_path / "src")
    got = subprocess.run(
        [*IBIAS, "sql", "--store", str(store), QUERY],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert got.returncode == 0, got.stderr
    assert_literal_table(got.stdout)
    settings_ = subprocess.run(
        [*IBIAS, "sql", "--store", str(store), "SELECT name, value FROM duckdb_settings()"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert settings_.returncode == 0, settings_.stderr
    row = next(line for line in settings_.stdout.splitlines() if "allowed_directories" in line)
    assert "[/" in row  # a list of paths, `[/tmp/...]`: once read as a closing tag


def test_sql_served_live_prints_markup_like_values_as_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = imported(tmp_path / "src")
    monkeypatch.setenv("COLUMNS", "200")
    with _serving(source, tmp_path) as served:
        capsys.readouterr()
        assert main(["sql", "--store", str(served.store), QUERY]) == 0
        out = capsys.readouterr().out
    assert_literal_table(out)


def on_terminal(*args: str, cwd: Path, timeout: float = 120.0) -> tuple[int, str]:
    """`ibias ARGS` with stdout and stderr on a pty of 120 x 40 (rich sees a terminal and
    draws its live table), its exit code and everything it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    proc = subprocess.Popen(
        [*IBIAS, *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        cwd=cwd,
        env={**env, "TERM": "xterm-256color"},
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other side is closed
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return code, b"".join(chunks).decode("utf-8", "replace")


def rows_of(out: str, cell: str) -> list[str]:
    """The first words of the lines of a terminal's output (its control sequences taken out)
    that have `cell` as a word."""
    lines = CSI.sub("", out).replace("\r", "\n").splitlines()
    return [line.split()[0] for line in lines if cell in line.split()]


def test_run_status_and_plan_with_a_markup_like_model_id_on_a_terminal(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        [model_block("[/x]", provider="simulator", model="x", max_concurrency=4)],
        n_prompts=6,
    )
    store = tmp_path / "store.duckdb"
    code, out = on_terminal("run", str(config), cwd=tmp_path)
    assert code == 0, out
    assert "internal error" not in out and "6 of 6 trials done" in out, out
    # the live table (drawn while it ran, then once more at the end) has the id's row
    assert "[/x]" in rows_of(out, "6/6"), out
    got = subprocess.run(
        [
            *IBIAS,
            "sql",
            "--store",
            str(store),
            "--format",
            "json",
            "SELECT count(*) n FROM responses",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(got.stdout) == [{"n": 6}]
    code, out = on_terminal("status", "--store", str(store), cwd=tmp_path)
    assert code == 0 and "internal error" not in out, out
    assert rows_of(out, "6/6") == ["[/x]"], out
    code, out = on_terminal("plan", str(config), cwd=tmp_path)
    assert code == 0 and "internal error" not in out, out
    words = [line.split() for line in CSI.sub("", out).splitlines()]
    assert ["prompts", "-", "[/x]", "-", "6", "6"] in words, out  # trials by cell
    assert ["[/x]", "0", "0", "0.00", "0.00", "nothing", "left"] in words, out  # per model

"""Progress as a user sees it: a table on a terminal, plain lines in a pipe, nothing quiet."""

from __future__ import annotations

import io
import time

from rich.console import Console

from ibias.runner.progress import Progress, plain_line, render_table
from ibias.runner.scheduler import ModelStats


def stats() -> list[ModelStats]:
    now = time.monotonic()
    a = ModelStats(
        model_id="gpt-x",
        total=1000,
        done=400,
        done_before=100,
        retries=3,
        errors=5,
        prompt_tokens=1000,
        completion_tokens=500,
        cost_usd=0.25,
        first_done_at=now - 10,
    )
    b = ModelStats(model_id="broken", total=1000, fatal="HTTP 401 invalid_api_key")
    return [a, b]


def test_plain_line_has_every_counter():
    line = plain_line(stats())
    assert line.startswith("progress: gpt-x 500/1000 ")
    assert "retries=3" in line and "errors=5" in line and "tokens=1500" in line
    assert "cost=$0.2500" in line and "eta=" in line and "broken 0/1000" in line
    # 399 completions in 10 s after the first: about 39.9/s, so 500 left is about 12 s
    assert "39.9/s" in line and "eta=0m12s" in line


def test_table_on_a_terminal():
    console = Console(file=io.StringIO(), width=140, force_terminal=True)
    console.print(render_table(stats()))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    for needle in (
        "done/total",
        "req/s",
        "retries",
        "errors",
        "tokens",
        "cost $",
        "ETA",
        "500/1,000",
        "broken (stopped)",
        "1,500",
        "0.2500",
    ):
        assert needle in text


def test_pipe_gets_plain_lines_and_quiet_gets_nothing():
    piped = io.StringIO()
    p = Progress(stats(), quiet=False, stream=piped, plain_interval=0)
    p.start()
    p.tick()
    p.stop()
    assert piped.getvalue().count("progress: ") == 2
    quiet = io.StringIO()
    q = Progress(stats(), quiet=True, stream=quiet)
    q.start()
    q.tick()
    q.stop()
    assert quiet.getvalue() == ""

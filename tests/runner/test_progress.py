"""Progress as a user sees it: a table on a terminal, plain lines in a pipe, nothing quiet."""

from __future__ import annotations

import io
import json
import time

import duckdb
from rich.console import Console

from ibias.runner.cli import main
from ibias.runner.progress import (
    SHOW_FAILING_AFTER,
    Progress,
    plain_lines,
    real_time_note,
    render_table,
)
from ibias.runner.scheduling.scheduler import ModelStats
from ibias.runner.status import rate_and_eta
from tests.helpers import model_block, write_config


def stats() -> list[ModelStats]:
    now = time.monotonic()
    a = ModelStats(
        model_id="gpt-x",
        total=1000,
        done=400,
        done_before=100,
        retries=3,
        errors=5,
        failed=7,
        prompt_tokens=1000,
        completion_tokens=500,
        cost_usd=0.25,
        first_done_at=now - 10,
    )
    b = ModelStats(model_id="broken", total=1000, fatal="HTTP 401 invalid_api_key")
    return [a, b]


def test_plain_lines_are_one_short_line_per_model_with_every_counter():
    lines = plain_lines(stats())
    assert len(lines) == 2 and all(len(line) < 160 for line in lines)
    a, b = lines
    assert a.startswith("progress gpt-x: 500/1000 (50%) ")
    assert "failed=7" in a and "retries=3" in a and "errors=5" in a and "tokens=1500" in a
    assert "cost=$0.2500" in a and "eta=" in a
    assert b.startswith("progress broken: 0/1000 (0%)") and b.endswith("eta=- stopped")
    # 399 completions in 10 s after the first: about 39.9/s, so 493 left is about 12 s
    assert "39.9/s" in a and "eta=0m12s" in a


def test_table_on_a_terminal():
    console = Console(file=io.StringIO(), width=140, force_terminal=True)
    console.print(render_table(stats()))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    for needle in (
        "done/total",
        "failed",
        "req/s",
        "retries",
        "errors",
        "tokens",
        "cost $",
        "ETA",
        "500/1,000",
        "stopped",
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
    assert piped.getvalue().count("progress ") == 4  # the first tick and the end, 2 models
    quiet = io.StringIO()
    q = Progress(stats(), quiet=True, stream=quiet)
    q.start()
    q.tick()
    q.stop()
    assert quiet.getvalue() == ""


def test_plain_lines_come_at_a_steady_interval(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("ibias.runner.progress.time.monotonic", lambda: clock[0])
    piped = io.StringIO()
    p = Progress(stats()[:1], quiet=False, stream=piped, plain_interval=30)
    p.start()
    printed = []
    for second in range(1, 200):  # ticks about once a second, a little late each time
        clock[0] = 100.0 + second * 1.01
        before = piped.getvalue().count("\n")
        p.tick()
        if piped.getvalue().count("\n") > before:
            printed.append(clock[0])
    # One print per 30 s grid point, each at the first tick after it: no drift over time.
    assert len(printed) == 7
    assert all(0 <= t - printed[0] - 30 * i < 1.01 for i, t in enumerate(printed))


def test_eta_freezes_when_a_run_is_interrupted_and_is_zero_only_when_done():
    s = stats()[0]
    s.finished, s.ended_at = True, s.first_done_at + 10  # type: ignore[operator]
    rate, eta = rate_and_eta(s, s.ended_at)
    assert rate > 0 and eta is not None and eta > 0
    # Later reads show the same numbers, not a rate decaying with the wall clock.
    assert rate_and_eta(s, s.ended_at + 3600) == (rate, eta)
    s.done = s.total - s.done_before - s.failed
    assert rate_and_eta(s, s.ended_at + 5)[1] == 0.0
    assert rate_and_eta(stats()[1], 0.0)[1] is None  # stopped by a fatal error: no ETA


def test_tokens_and_cost_are_cumulative_over_resumed_runs(tmp_path, capsys):
    cfg = write_config(
        tmp_path,
        [model_block("m", provider="simulator", price_input=1.0, price_output=3.0)],
        n_prompts=40,
    )
    store = tmp_path / "store.duckdb"
    assert main(["run", str(cfg), "--quiet"]) == 0
    con = duckdb.connect(str(store))
    try:  # as if the first run had been interrupted after about half of the trials
        con.execute("DELETE FROM responses WHERE hash(trial_key) % 2 = 0")
        left = con.execute("SELECT count(*) FROM responses").fetchall()[0][0]
    finally:
        con.close()
    assert 0 < left < 40
    assert main(["run", str(cfg)]) == 0
    err = capsys.readouterr().err
    status = json.loads(store.with_name(store.name + ".status.json").read_text())
    con = duckdb.connect(str(store), read_only=True)
    try:
        prompt, completion, cost = con.execute(
            "SELECT sum(prompt_tokens), sum(completion_tokens), sum(cost_usd) FROM responses"
        ).fetchall()[0]
        this_run = con.execute(
            "SELECT sum(cost_usd) FROM responses WHERE run_id = "
            "(SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1)"
        ).fetchall()[0][0]
    finally:
        con.close()
    [m] = status["models"]
    assert (m["done"], m["done_this_run"]) == (40, 40 - left)
    assert (m["prompt_tokens"], m["completion_tokens"]) == (prompt, completion)
    assert m["cost_usd"] == round(cost, 6) and m["cost_usd_this_run"] == round(this_run, 6)
    # The last progress line (no terminal) shows the same cumulative numbers.
    last = [line for line in err.splitlines() if line.startswith("progress m:")][-1]
    assert f"tokens={prompt + completion}" in last and f"cost=${cost:.4f}" in last
    assert "40/40 (100%)" in last and "eta=0m00s" in last


def test_a_model_failing_in_a_row_shows_its_last_error_kind_and_url():
    """After SHOW_FAILING_AFTER failures in a row, not before, and not after a reply (the
    scheduler resets `failing` on every reply)."""
    url = "http://127.0.0.1:9/v1/chat/completions"
    s = ModelStats(model_id="dead", total=10, errors=2, failing=2)
    s.last_error_kind, s.endpoint = "connection", url
    assert "last connection" not in plain_lines([s])[0]
    s.failing = SHOW_FAILING_AFTER
    line = plain_lines([s])[0]
    assert line.endswith(f"(3 failures in a row, last connection at {url})")
    assert len(line) < 200
    console = Console(file=io.StringIO(), width=140)
    console.print(render_table([s]))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    # A caption under the table, wrapped to its width.
    assert f"dead: 3 failures in a row, last connection at {url}" in " ".join(text.split())


def test_the_status_file_names_the_last_error_too():
    from datetime import UTC, datetime

    from ibias.runner.status import snapshot

    s = ModelStats(model_id="dead", total=10, failing=3, cost_unknown=2)
    s.last_error_kind, s.endpoint = "connection", "http://127.0.0.1:9/v1/chat/completions"
    (model,) = snapshot("r", "running", datetime.now(UTC), [s])["models"]
    assert model["last_error"] == {"kind": "connection", "endpoint": s.endpoint, "in_a_row": 3}
    assert model["cost_unknown"] == 2
    s.failing = 0  # a reply came
    (model,) = snapshot("r", "running", datetime.now(UTC), [s])["models"]
    assert model["last_error"] is None


def test_a_rehearsal_says_its_etas_are_compressed_and_the_real_time_end() -> None:
    """`--speed 8`: the table's caption and the plain lines say the ETAs are 8 times shorter
    and when the real run's last model would end (its ETA x 8, by hand); at speed 1 nothing."""
    now = time.monotonic()
    # 401 done in 100 s since the first: 4 a second; 500 left -> 125 s -> 1000 s in real time.
    s = ModelStats(model_id="m", total=1000, done_before=99, done=401, first_done_at=now - 100.0)
    note = real_time_note([s], 8, now)
    assert note == (
        "rehearsal at --speed 8: ETAs are 8 times shorter than a real run's; "
        "in real time the last model ends in about 16m40s"
    )
    assert real_time_note([s], 1, now) is None
    table = render_table([s], 80, real_time=note)
    assert "16m40s" in str(table.caption)
    out = io.StringIO()
    Progress([s], quiet=False, stream=out, speed=8).tick()
    assert "ETAs are 8 times shorter" in out.getvalue()

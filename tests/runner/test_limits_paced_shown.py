"""A model paced below its configured rpm says so, at what rate and why: in the live progress
(table and plain lines) and in `ibias status` during a run (issue 33: "a configured limit is a
ceiling, not a promise"). The rates come from the limiter itself, driven on a virtual clock
against a hidden 120 RPM with rpm = 300 configured
(tests/runner/scheduling/test_hidden_limits.py)."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from ibias.runner.console import terminal
from ibias.runner.progress import plain_lines, render_table
from ibias.runner.status import ModelStats, pacing_note, snapshot
from ibias.runner.status_report import render_status
from tests.runner.scheduling.test_hidden_limits import simulate

LINE = "paced at {rpm} rpm, below its configured rpm = 300: 429s the configured limit does not"


def _learnt() -> tuple[ModelStats, ModelStats]:
    got = simulate(120, 120.0, configured_rpm=300)
    assert got.paced_rpm is not None and got.paced_rpm < 300
    paced = ModelStats(model_id="grok", total=1_000, done=400, configured_rpm=300)
    paced.learnt_rpm = got.paced_rpm
    kept = ModelStats(model_id="gpt", total=1_000, done=400, configured_rpm=300)
    return paced, kept


def _shown(renderable: object) -> str:
    out = io.StringIO()
    terminal(out, width=200).print(renderable)
    return out.getvalue()


def test_the_progress_table_says_which_model_is_paced_below_its_rpm_and_why():
    paced, kept = _learnt()
    shown = _shown(render_table([paced, kept], 200))
    assert "grok: " + LINE.format(rpm=paced.learnt_rpm) in " ".join(shown.split())
    assert "gpt: paced" not in shown  # paced at its configured rpm: nothing to say


def test_the_plain_progress_line_says_it_too():
    paced, kept = _learnt()
    grok, gpt = plain_lines([paced, kept])
    assert LINE.format(rpm=paced.learnt_rpm) in grok
    assert "paced" not in gpt


def test_ibias_status_during_a_run_says_it():
    paced, kept = _learnt()
    data = snapshot("r1", "running", datetime.now(UTC), [paced, kept])
    grok = data["models"][0]
    assert (grok["configured_rpm"], grok["paced_rpm"]) == (300, paced.learnt_rpm)
    assert data["models"][1]["pacing"] is None
    report = {"store": "s.duckdb", "running": True, "holder": "pid 1", **data}
    out = io.StringIO()
    render_status(report, terminal(out, width=200))
    assert "grok: " + LINE.format(rpm=paced.learnt_rpm) in " ".join(out.getvalue().split())


def test_no_note_without_a_configured_rpm_or_at_it():
    assert pacing_note(None, 116) is None  # a hidden limit learnt with none configured
    assert pacing_note(300, None) is None
    assert pacing_note(300, 300) is None
    assert pacing_note(1000, 999) is not None

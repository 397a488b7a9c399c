"""`ibias status` and `ibias models` at 80 columns (issue 24): no id is cut, none wraps, and
a folded message continues under its own column, so no line reads as another model's row."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from rich.console import Console

from ibias.runner.execution.models_check import ModelCheck, render_checks
from ibias.runner.status import ModelStats, snapshot
from ibias.runner.status_report import render_status
from tests.runner.test_progress_fit import DEMO_IDS, TEN_X

LONG = "openrouter/meta-llama/llama-3.3-70b"  # 35 characters
IDS = (*DEMO_IDS, LONG)


def _check_lines(text: str, ids: tuple[str, ...]) -> list[str]:
    """Every line fits 80 columns, nothing is elided, and each line that starts with text in
    the id column starts with a whole id (a continuation starts with blanks)."""
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), text
    assert "…" not in text
    return [line for line in lines if line.strip() and line.split()[0] in ids]


def test_status_at_80_columns_keeps_every_id_whole_on_one_row() -> None:
    stats = [
        ModelStats(model_id=m, total=TEN_X, done=1_000_000, failed=12_345, retries=99_999)
        for m in IDS
    ]
    stats[3].fatal = "HTTP 401"
    report = {
        "store": "/runs/paper.duckdb",
        "running": True,
        "holder": "pid 1 on host",
        **snapshot("r", "running", datetime.now(UTC), stats),
    }
    buffer = io.StringIO()
    render_status(report, Console(file=buffer, width=80))
    text = buffer.getvalue()
    rows = _check_lines(text, IDS)
    assert [row.split()[0] for row in rows] == list(IDS)
    header = next(line for line in text.splitlines() if line.startswith("model"))
    for column in ("done/total", "failed", "cost $", "ETA"):
        assert column in header
    assert rows[3].split()[-1] == "stopped"
    body = text.splitlines()[text.splitlines().index(header) + 2 :]
    assert len([line for line in body if line.strip()]) == len(IDS)  # one line per model


def test_models_at_80_columns_keeps_every_id_whole() -> None:
    checks = [
        ModelCheck(
            m,
            "simulator",
            m.removeprefix("sim-"),
            True,
            200,
            m + "-001",
            None,
            10_000,
            2_000_000,
            123.0,
            "ok",
        )
        for m in DEMO_IDS
    ]
    checks.append(
        ModelCheck(LONG, "openai", "meta-llama/llama-3.3-70b-instruct", False, 401, None, None,
                   None, None, None, "HTTP 401: invalid_api_key (check OPENROUTER_API_KEY)")
    )  # fmt: skip
    buffer = io.StringIO()
    render_checks(checks, Console(file=buffer, width=80))
    text = buffer.getvalue()
    starts = [line.split()[0] for line in _check_lines(text, IDS)]
    assert starts == [*IDS, *IDS]  # the table, then what each was sent and reported as
    for line in text.splitlines():  # any other line is a continuation: it starts blank
        if line.strip() and line.split()[0] not in IDS:
            assert line.startswith((" ", "─", "7 of")), line
    assert "7 of 8 models usable; 1 failed" in text

"""The progress table fits the terminal (issue 24): at 80 and 100 columns, with the demo's
model ids and values at ten times the paper's scale, no column is cut, no number splits across
lines, and at 80 the columns a sweep is watched for stay. A finished model's req/s stays at its
final value while the others go on. (rich's own console at fixed widths; a fixed clock.)"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from ibias.runner import progress
from ibias.runner.progress import COLUMNS, DROPPABLE, render_table
from ibias.runner.status import ModelStats, rate_and_eta

#: configs/demo.toml's ids; the longest, sim-gemini-2.0-flash-lite, is 25 characters.
DEMO_IDS = (
    "sim-gpt-4o-mini",
    "sim-gpt-4o",
    "sim-gemini-2.0-flash",
    "sim-gemini-2.0-flash-lite",
    "sim-grok-3",
    "sim-grok-3-mini",
    "sim-llama-3-70b",
)
NOW = 1_000_000.0
TEN_X = 1_422_400  # the paper's grid at 10x, per model


def _ten_x() -> list[ModelStats]:
    """Values at 10x: done 1,422,400, tokens >= 10^9, cost >= $10,000, ETA >= 10 h."""
    out = []
    for i, model_id in enumerate(DEMO_IDS):
        out.append(
            ModelStats(
                model_id=model_id,
                total=TEN_X,
                done=400_000 + 1_000 * i,
                done_before=200_000,
                failed=12_345,
                retries=123_456,
                errors=234_567,
                prompt_tokens=1_234_567_890,
                completion_tokens=987_654_321,
                cost_usd=12_345.67 + i,
                first_done_at=NOW - 36_000.0,  # ~11 req/s: ~20 h left
            )
        )
    out[0].done, out[0].failed = TEN_X - 200_000, 0  # finished
    out[0].last_done_at = NOW - 100.0
    out[3].fatal = "HTTP 401 invalid_api_key"
    return out


def _render(stats: list[ModelStats], width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, force_terminal=False)
    console.print(render_table(stats, width))
    return console.file.getvalue().splitlines()  # type: ignore[attr-defined]


def _cells(stats: list[ModelStats]) -> list[dict[str, str]]:
    return progress._cells(stats)


@pytest.fixture(autouse=True)
def _fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ibias.runner.progress.time.monotonic", lambda: NOW)


@pytest.mark.parametrize("width", [80, 100])
def test_the_table_fits_and_cuts_or_splits_nothing(width: int) -> None:
    stats = _ten_x()
    lines = _render(stats, width)
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    assert not any("…" in line for line in lines)
    header = next(line for line in lines if line.startswith("model"))
    shown = [c for c in COLUMNS if c in header]
    # Only droppable columns may go; the watched ones stay at 80 columns too.
    assert set(COLUMNS) - set(shown) <= set(DROPPABLE)
    assert {"model", "done/total", "failed", "cost $", "ETA"} <= set(shown)
    # One line per model, each cell whole on it: no number split, no id cut or wrapped.
    body = [line for line in lines if line.split() and line.split()[0] in DEMO_IDS]
    assert [line.split()[0] for line in body] == list(DEMO_IDS)
    for line, cells in zip(body, _cells(stats), strict=True):
        assert line.split() == [cells[c] for c in shown], line
    assert "1,422,400/1,422,400" in body[0]
    assert all(int(c["tokens"].replace(",", "")) >= 10**9 for c in _cells(stats))
    assert body[3].split()[-1] == "stopped"
    assert any(line.split()[-1].startswith(("19h", "20h")) for line in body)  # ETA >= 10 h
    assert all(
        float(line.split()[shown.index("cost $")].replace(",", "")) >= 10_000 for line in body
    )


def test_a_wide_terminal_shows_every_column() -> None:
    lines = _render(_ten_x(), 160)
    header = next(line for line in lines if line.startswith("model"))
    assert header.replace("cost $", "cost_$").split() == [c.replace(" ", "_") for c in COLUMNS]


def test_a_finished_model_keeps_its_final_rate_while_others_go_on() -> None:
    s = ModelStats(model_id="m", total=1_001, done=1_001, first_done_at=0.0, last_done_at=100.0)
    final = rate_and_eta(s, 100.0)
    assert final == (10.0, 0.0)  # 1,000 replies after the first, in 100 s
    # An hour later, the run still going on for other models: the same numbers.
    assert rate_and_eta(s, 3_700.0) == final
    going = ModelStats(model_id="n", total=2_000, done=1_001, first_done_at=0.0, last_done_at=100)
    assert rate_and_eta(going, 200.0)[0] == pytest.approx(5.0)  # not finished: over time

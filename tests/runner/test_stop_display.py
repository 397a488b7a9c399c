"""What a user sees when a run stops, and what the progress table says about a failing model
(issue 34).

- A stop says so at once: one line with the requests in flight and how long the run waits for
  them, printed inside the stop's request; the table is not drawn again after it (nor after a
  stop signal has merely arrived: its request may still be on its way to the loop).
- Requests in flight to the built-in simulator are not waited for (free, and asked again the
  same on resume); every other provider's are, within the grace period.
- At 80 columns, where the errors column gives way, a model failing in a row shows its last
  error kind in its row, so the note under the table ("N failures in a row, last KIND at URL")
  names something the table shows.

rich's own console at fixed widths; in-process providers, no network; no timing asserted.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Mapping, Sequence

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from ibias.runner.config import ModelConfig, load_config
from ibias.runner.execution.run import RunOptions, execute
from ibias.runner.progress import LAST_ERROR, SHOW_FAILING_AFTER, Progress, render_table
from ibias.runner.providers.base import Provider, ProviderContext, Reply, Sampling
from ibias.runner.providers.retries import Backoff
from ibias.runner.scheduling.stop import Stop, stopping_line
from ibias.runner.status import ModelStats
from tests.helpers import model_block, write_config

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
URL = "http://127.0.0.1:40000/v1/chat/completions"
CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")
FAST = Backoff(base_s=0.001, cap_s=0.01, max_attempts=4)


def demo_stats() -> list[ModelStats]:
    """The demo grid's models part way through a first run (20,320 trials each)."""
    now = time.monotonic()
    return [
        ModelStats(
            model_id=model_id,
            total=20_320,
            done=1_500,
            errors=30,
            retries=30,
            prompt_tokens=100_000,
            completion_tokens=20_000,
            cost_usd=0.08,
            first_done_at=now - 20.0,
        )
        for model_id in DEMO_IDS
    ]


def fail(s: ModelStats, in_a_row: int, kind: str) -> None:
    s.failing, s.last_error_kind, s.endpoint = in_a_row, kind, URL


def drawn(stats: list[ModelStats], width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, force_terminal=False)
    console.print(render_table(stats, width))
    return console.file.getvalue().splitlines()  # type: ignore[attr-defined]


def row(lines: list[str], model_id: str) -> list[str]:
    return next(line.split() for line in lines if line.split()[:1] == [model_id])


# ---------------------------------------------------------------- the last error kind at 80


#: Error kinds as the scheduler records them (runner/providers/retries.py), up to 11 characters:
#: what fits beside the demo's 25-character ids at 80 columns.
KINDS = st.sampled_from(("timeout", "connection", "malformed", "http_503", "http_429"))


@settings(max_examples=40, deadline=None)
@given(
    failing=st.sets(st.sampled_from(DEMO_IDS), min_size=1, max_size=3),
    in_a_row=st.integers(SHOW_FAILING_AFTER, 10_000),
    kind=KINDS | st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True),
)
def test_at_80_columns_a_model_failing_in_a_row_shows_its_last_error_kind(
    failing: set[str], in_a_row: int, kind: str
) -> None:
    stats = demo_stats()
    for s in stats:
        if s.model_id in failing:
            fail(s, in_a_row, kind)
    lines = drawn(stats, 80)
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    header = next(line for line in lines if line.startswith("model"))
    assert LAST_ERROR in header and "errors" not in header  # errors gave way, the kind did not
    for model_id in DEMO_IDS:
        cells = row(lines, model_id)
        # The kind stands in the row of a failing model only, after its failed count.
        assert (kind in cells) == (model_id in failing), cells
        if model_id in failing:
            assert cells[cells.index(kind) - 1] == "0"
    # And the note under the table names the same kind, with how many and where.
    notes = " ".join(" ".join(lines).split())
    for model_id in failing:
        assert f"{model_id}: {in_a_row:,} failures in a row, last {kind} at {URL}" in notes


def test_no_last_error_column_until_a_model_fails_in_a_row() -> None:
    stats = demo_stats()
    fail(stats[1], SHOW_FAILING_AFTER - 1, "timeout")
    lines = drawn(stats, 80)
    header = next(line for line in lines if line.startswith("model"))
    assert LAST_ERROR not in header and "req/s" in header
    assert "timeout" not in " ".join(lines)
    # A reply resets the run of failures (the scheduler sets `failing` to 0): the kind goes.
    fail(stats[1], SHOW_FAILING_AFTER, "timeout")
    assert "timeout" in row(drawn(stats, 80), "sim-gpt-4o")
    stats[1].failing = 0
    assert LAST_ERROR not in " ".join(drawn(stats, 80))


class Terminal(io.StringIO):
    """A stream that says it is a terminal: `Progress` draws its live table on it."""

    def isatty(self) -> bool:
        return True


def test_the_live_table_on_a_terminal_of_80_columns_names_the_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    stats = demo_stats()
    stream = Terminal()
    shown = Progress(stats, quiet=False, stream=stream)
    shown.start()
    fail(stats[2], 19, "timeout")
    shown.tick()
    frame = CSI.sub("", stream.getvalue()).split("ibias run")[-1].splitlines()
    assert all(len(line) <= 80 for line in frame)
    assert "timeout" in row(frame, "sim-gemini-2.0-flash")
    assert "sim-gemini-2.0-flash: 19 failures in a row, last timeout at" in " ".join(frame)
    shown.stop()


# ---------------------------------------------------------------- stopping, on the terminal


def test_an_interrupted_table_is_not_drawn_again_and_the_line_comes_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    stats = demo_stats()
    stream = Terminal()
    shown = Progress(stats, quiet=False, stream=stream)
    shown.start()
    shown.tick()
    before = len(stream.getvalue())
    line = stopping_line("interrupted by SIGINT", 212, 0, 10.0, 20.0)
    shown.interrupted(line)
    stats[0].done += 500  # the run winds down: nothing of it is drawn
    shown.tick()
    shown.stop()
    after = CSI.sub("", stream.getvalue()[before:])
    assert after.strip() == line
    assert "ibias run" not in after


def test_once_a_stop_signal_arrives_the_table_is_frozen_before_the_request_lands() -> None:
    stop = Stop()
    stream = Terminal()
    shown = Progress(demo_stats(), quiet=False, stream=stream, stop=stop)
    shown.start()
    stop.note_signal()  # the process's handler: the request is still on its way to the loop
    before = stream.getvalue()
    shown.tick()
    assert stream.getvalue() == before
    shown.stop()
    assert "ibias run" not in CSI.sub("", stream.getvalue()[len(before) :])


def test_a_stop_signal_before_the_table_starts_keeps_it_from_starting() -> None:
    stop = Stop()
    stop.note_signal()
    stream = Terminal()
    shown = Progress(demo_stats(), quiet=False, stream=stream, stop=stop)
    shown.start()
    shown.tick()
    shown.stop()
    assert "ibias run" not in stream.getvalue()


def test_without_a_terminal_the_log_still_gets_its_final_lines() -> None:
    stream = io.StringIO()
    shown = Progress(demo_stats(), quiet=False, stream=stream, plain_interval=3600)
    shown.tick()
    shown.interrupted(stopping_line("interrupted by SIGTERM", 0, 0, 10.0, None))
    shown.stop()
    lines = stream.getvalue().splitlines()
    assert lines[len(DEMO_IDS)] == (
        "stopping (interrupted by SIGTERM): no requests in flight; saving what is answered"
    )
    assert [line.split(":")[0] for line in lines[len(DEMO_IDS) + 1 :]] == [
        f"progress {m}" for m in DEMO_IDS
    ]


@pytest.mark.parametrize(
    ("waited", "dropped", "armed", "expected"),
    [
        (
            212,
            0,
            True,
            "stopping (interrupted by SIGINT): 212 requests in flight, waiting up to 10 s for "
            "them; saving what is answered; Ctrl-C again changes nothing, it ends within 20 s "
            "at most",
        ),
        (
            1,
            64,
            False,
            "stopping (interrupted by SIGINT): 1 request in flight, waiting up to 10 s for them "
            "(and 64 to the built-in simulator, not waited for); saving what is answered",
        ),
        (
            0,
            448,
            False,
            "stopping (interrupted by SIGINT): 448 requests in flight to the built-in "
            "simulator, not waited for (asked again on resume); saving what is answered",
        ),
    ],
)
def test_the_stopping_line_says_what_the_stop_waits_for(
    waited: int, dropped: int, armed: bool, expected: str
) -> None:
    ends = 20.0 if armed else None
    assert stopping_line("interrupted by SIGINT", waited, dropped, 10.0, ends) == expected


def test_listeners_run_inside_the_first_request_and_once() -> None:
    stop = Stop()
    heard: list[str | None] = []
    remove = stop.on_request(lambda: heard.append(stop.reason))
    assert not stop.signalled
    stop.request("interrupted by SIGINT")
    assert heard == ["interrupted by SIGINT"] and stop.signalled  # before request returned
    stop.request("interrupted by SIGTERM")  # a second signal changes nothing
    assert heard == ["interrupted by SIGINT"] and stop.reason == "interrupted by SIGINT"
    remove()
    late: list[bool] = []
    stop.on_request(lambda: late.append(True))  # made after the request: called at once
    assert late == [True]


# ---------------------------------------------------------------- what a stop waits for


def _reply(text: str) -> Reply:
    return Reply(
        content=f"ok {text}",
        finish_reason="stop",
        refusal=None,
        prompt_tokens=1,
        completion_tokens=1,
        provider_model=None,
        system_fingerprint=None,
        raw={},
    )


class StopsThenHangs(Provider):
    """Answers at once; after `after` answers it asks the run to stop, and every request then
    in flight, or still to come, never answers (only a cancellation ends it)."""

    def __init__(self, stop: Stop, after: int) -> None:
        self.stop = stop
        self.after = after
        self.answered = 0
        self.cancelled = 0

    async def complete(self, messages: Sequence[Mapping[str, str]], sampling: Sampling) -> Reply:
        if self.answered >= self.after:
            if self.answered == self.after:
                self.answered += 1
                await anyio.sleep(0)  # let the other workers be in flight too
                self.stop.request("interrupted by test")
            try:
                await anyio.sleep_forever()
            finally:
                self.cancelled += 1
        self.answered += 1
        return _reply(messages[-1]["content"])


async def test_a_stop_does_not_wait_for_requests_to_the_built_in_simulator(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A grace period of an hour, and requests that never answer: the run ends only because a
    stop cancels the simulator's requests in flight instead of waiting for them."""
    config = load_config(
        write_config(
            tmp_path,
            [model_block("m", provider="simulator", max_concurrency=4)],
            n_prompts=200,
        )
    )
    stop = Stop(grace_s=3600.0)
    built: list[StopsThenHangs] = []

    def factory(model: ModelConfig, key: str | None, context: ProviderContext) -> Provider:
        built.append(StopsThenHangs(stop, after=20))
        return built[0]

    with anyio.fail_after(120):  # against a hang only: the grace period is an hour
        result = await execute(
            config,
            RunOptions(store=tmp_path / "store.duckdb", quiet=True, backoff=FAST, grace_s=3600),
            provider_factory=factory,
            stop=stop,
        )
    assert result.exit_code == 130
    assert result.lines[-1] == "interrupted by test: results so far are stored; run again to resume"
    assert built[0].cancelled >= 1
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("stopping")]
    assert len(said) == 1 and "to the built-in simulator, not waited for" in said[0], said

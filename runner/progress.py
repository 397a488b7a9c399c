"""Live progress: a rich table on a terminal, short plain lines otherwise, nothing with --quiet.

It only reads the scheduler's counters; it never affects the run. Done, tokens and cost are
the plan's so far (a resumed run continues the numbers of the runs before it); `failed`
counts trials that failed for good, apart from `retries` (attempts that were tried again).
Without a terminal (a log file, `nohup`, a CI job) each update is one short line per model,
every `plain_interval` seconds, so a log of an overnight sweep stays readable with `grep`.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TextIO

from ibias.runner.console import literal, natural_width, terminal, text
from ibias.runner.scheduling.loop_lag import LoopLag, starved_note
from ibias.runner.status import (
    SHOW_FAILING_AFTER,
    ModelStats,
    pacing_note,
    rate_and_eta,
    span,
)

if TYPE_CHECKING:  # rich is imported only to draw on a terminal (not for --quiet or a log)
    from rich.console import Console, RenderableType
    from rich.table import Table

    from ibias.runner.scheduling.stop import Stop

COLUMNS = ("model", "done/total", "failed", "req/s", "retries", "errors", "tokens", "cost $", "ETA")
#: Columns given up, in this order, when the terminal is too narrow for all of them; model,
#: done/total, failed, cost and ETA always stay (what a researcher watches a sweep for).
DROPPABLE = ("retries", "errors", "tokens", "req/s")
#: The column shown, after `failed`, while a model is failing in a row (`failing_note`): its
#: last error kind. It is given up after every other droppable column, so at 80 columns the
#: demo's table shows it (in place of req/s) and the note under the table (N failures in a
#: row, last KIND at URL) names a kind the table shows, where the errors column had gone.
LAST_ERROR = "last error"


def _eta(s: ModelStats, seconds: float | None) -> str:
    if s.fatal:
        return "-"
    if seconds is None:
        return "?"
    return span(seconds)


def money(cost: float) -> str:
    """Cents from a dollar up (`12,345.67`), four decimals below (`0.2500`)."""
    return f"{cost:,.2f}" if cost >= 1 else f"{cost:.4f}"


def failing_note(s: ModelStats) -> str | None:
    """What a model failing `SHOW_FAILING_AFTER` times or more in a row is failing with: its
    last error kind and the URL it calls; None while it is not."""
    if s.failing < SHOW_FAILING_AFTER or s.last_error_kind is None:
        return None
    where = f" at {s.endpoint}" if s.endpoint else ""
    return f"{s.failing:,} failures in a row, last {s.last_error_kind}{where}"


def real_time_note(stats: Sequence[ModelStats], speed: float, now: float) -> str | None:
    """A rehearsal's line under its table (`--speed N`): its ETAs are N times shorter than
    the real run's, and when the real run would end; None at real speed."""
    if speed == 1:
        return None
    etas = [rate_and_eta(s, now)[1] for s in stats if not s.fatal]
    known = [eta for eta in etas if eta is not None]
    line = f"rehearsal at --speed {speed:g}: ETAs are {speed:g} times shorter than a real run's"
    if known and len(known) == len(etas):
        line += f"; in real time the last model ends in about {span(max(known) * speed)}"
    return line


def _cells(stats: Sequence[ModelStats]) -> list[dict[str, str]]:
    now = time.monotonic()
    rows = []
    for s in stats:
        rate, eta = rate_and_eta(s, now)
        rows.append(
            {
                "model": literal(s.model_id, layout=False),
                "done/total": f"{s.done_before + s.done:,}/{s.total:,}",
                "failed": f"{s.failed:,}",
                "req/s": f"{rate:,.1f}",
                "retries": f"{s.retries:,}",
                "errors": f"{s.errors:,}",
                "tokens": f"{s.tokens:,}",
                "cost $": money(s.cost),
                "ETA": "stopped" if s.fatal else "done" if eta == 0.0 else _eta(s, eta),
                LAST_ERROR: (s.last_error_kind or "") if failing_note(s) is not None else "",
            }
        )
    return rows


def render_table(
    stats: Sequence[ModelStats],
    width: int | None = None,
    starved: str | None = None,
    real_time: str | None = None,
) -> Table:
    """The progress table, fitted to `width` columns (None: every column).

    While a model is failing in a row, a `last error` column names its last error kind (see
    `LAST_ERROR`), beside the note under the table that says how many and where.

    Nothing is cut and no number wraps: every cell is no_wrap, and when the whole table is
    wider than the terminal the `DROPPABLE` columns go, one at a time, until it fits (the
    widths are measured by rich itself, on the cells as they will print). A model id is never
    cut: two ids that differ only at the end (`sim-gemini-2.0-flash`, `-lite`) must stay apart.
    A stopped model says so in its ETA. Ids and notes are `Text` with control characters
    escaped (runner/console.py): any console shows them as they are, never as markup.
    `starved`: the run's line about requests retried because the machine was starved (one,
    under the models' notes), or None; `real_time`: a rehearsal's `real_time_note`, or None.
    """
    rows = _cells(stats)
    shown = list(COLUMNS)
    droppable: tuple[str, ...] = DROPPABLE
    if any(row[LAST_ERROR] for row in rows):
        shown.insert(shown.index("failed") + 1, LAST_ERROR)
        droppable = (*DROPPABLE, LAST_ERROR)
    table = _table(rows, shown)
    if width is not None:
        for column in droppable:
            if natural_width(table) <= width:
                break
            shown.remove(column)
            table = _table(rows, shown)
    notes = [
        literal(f"{s.model_id}: {note}", layout=False)
        for s in stats
        for note in (failing_note(s), pacing_note(s.configured_rpm, s.learnt_rpm))
        if note is not None
    ]
    notes += [note for note in (starved, real_time) if note is not None]
    if notes:
        table.caption = text("\n".join(notes))
        table.caption_justify = "left"
    return table


def _table(rows: list[dict[str, str]], columns: Sequence[str]) -> Table:
    from rich import box
    from rich.table import Table

    # Light rules and no outer edge: the borders of a boxed table cost 10 of 80 columns.
    table = Table(title="ibias run", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col in columns:
        table.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    for row in rows:
        table.add_row(*(text(row[col]) for col in columns))
    return table


def plain_lines(stats: Sequence[ModelStats]) -> list[str]:
    """One short line per model (no terminal): what a log needs and nothing it cannot hold."""
    now = time.monotonic()
    lines = []
    for s in stats:
        rate, eta = rate_and_eta(s, now)
        done = s.done_before + s.done
        share = f"{100 * done / s.total:.0f}%" if s.total else "-"
        line = (
            f"progress {s.model_id}: {done}/{s.total} ({share}) {rate:.1f}/s "
            f"failed={s.failed} retries={s.retries} errors={s.errors} "
            f"tokens={s.tokens} cost=${s.cost:.4f} eta={_eta(s, eta)}"
        )
        for note in (failing_note(s), pacing_note(s.configured_rpm, s.learnt_rpm)):
            if note is not None:
                line += f" ({note})"
        if s.fatal:
            line += " stopped"
        lines.append(line)
    return lines


class Progress:
    """Shows progress every `interval` seconds (`tick()` is called by the run loop)."""

    def __init__(
        self,
        stats: Sequence[ModelStats],
        *,
        quiet: bool,
        stream: TextIO | None = None,
        plain_interval: float = 30.0,
        loop_lag: LoopLag | None = None,
        stop: Stop | None = None,
        speed: float = 1.0,
    ) -> None:
        self.stats = stats
        #: A rehearsal's `--speed` (1: a real run): its ETAs are said to be that much shorter.
        self.speed = speed
        #: The run's stop: once it is signalled the display draws nothing more (`interrupted`).
        self.stop_request = stop
        #: The run's loop-lag meter: its excused failures are said (one line, see `_starved`).
        self.loop_lag = loop_lag
        self._stalls_said = 0
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.plain_interval = plain_interval
        self._live: _FreezableLive | None = None
        self._next_plain: float | None = None
        #: Set by `interrupted`: the table is left as it was when the stop came.
        self._halted = False
        self._was_live = False

    def _frozen(self) -> bool:
        """Whether the display must not draw: after `interrupted`, or once a stop signal has
        arrived (its request, and `interrupted`, may still be on their way to the loop)."""
        return self._halted or (self.stop_request is not None and self.stop_request.signalled)

    def start(self) -> None:
        if self.quiet or self._frozen():
            return
        if self.stream.isatty():
            console = terminal(self.stream)
            self._live = _live(self._table(console.width), console)
            self._live.start()

    def _table(self, width: int) -> Table:
        # The terminal's width now: a resized window gets its columns back at the next tick.
        return render_table(
            self.stats,
            width,
            self._starved(),
            real_time_note(self.stats, self.speed, time.monotonic()),
        )

    def _starved(self) -> str | None:
        """The line about requests retried because this machine was starved
        (runner/scheduling/loop_lag.py), or None when none were."""
        lag = self.loop_lag
        return None if lag is None else starved_note(lag.stalls, lag.worst_s)

    def tick(self) -> None:
        if self.quiet or self._frozen():
            return
        if self._live is not None:
            self._live.update(self._table(self._live.console.width), refresh=True)
            return
        now = time.monotonic()
        # The first tick prints, then every `plain_interval` s on a fixed grid (no drift).
        if self._next_plain is not None and now < self._next_plain:
            return
        base = now if self._next_plain is None else self._next_plain
        self._next_plain = base + self.plain_interval
        while self.plain_interval > 0 and self._next_plain <= now:
            self._next_plain += self.plain_interval
        self._print_plain()

    def _print_plain(self) -> None:
        # One line a model, whatever its id or error holds (runner/console.py); the starved
        # line only when more requests were excused since it was last printed (a log says it
        # once per `plain_interval` at most, not on every update).
        lines = plain_lines(self.stats)
        real_time = real_time_note(self.stats, self.speed, time.monotonic())
        if real_time is not None:
            lines.append(real_time)
        stalls = 0 if self.loop_lag is None else self.loop_lag.stalls
        starved = self._starved()
        if starved is not None and stalls > self._stalls_said:
            self._stalls_said = stalls
            lines.append(starved)
        shown = (literal(line, layout=False) for line in lines)
        print("\n".join(shown), file=self.stream, flush=True)

    def interrupted(self, line: str) -> None:
        """The run was asked to stop: leave the table as it was at that moment and print `line`
        (what the stop waits for) below it, even with --quiet, since it answers the user's
        Ctrl-C. Called inside the stop's request (runner/scheduling/stop.py), so no refresh comes
        between the signal and the line: a table that kept refreshing while the run wound down
        (req/s falling, ETA rising) said nothing about the signal having been heard."""
        self._halted = True
        self._let_go()
        with contextlib.suppress(OSError, ValueError):  # a closed stderr must not end the stop
            print(literal(line), file=self.stream, flush=True)

    def _let_go(self) -> None:
        """End the live table without drawing it again (the cursor moves below it)."""
        live, self._live = self._live, None
        if live is not None:
            self._was_live = True
            live.freeze()
            live.stop()

    def stop(self) -> None:
        if self._frozen():
            # After a stop signal the table stays as it was; a log (no terminal) still gets
            # its final lines, what a resumed run's reader looks for.
            self._let_go()
            if not self.quiet and not self._was_live:
                self._print_plain()
            return
        if self._live is not None:
            self._live.update(self._table(self._live.console.width), refresh=True)
            self._live.stop()
            self._live = None
        elif not self.quiet:
            self._print_plain()


class _FreezableLive(Protocol):
    """rich's Live as `Progress` uses it, with `freeze`: see `_live`."""

    @property
    def console(self) -> Console: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def update(self, renderable: RenderableType, *, refresh: bool = False) -> None: ...

    def freeze(self) -> None: ...


def _live(table: Table, console: Console) -> _FreezableLive:
    """A rich Live (no refresh thread: the run's ticker redraws it) that can be stopped without
    drawing again. rich's `Live.stop` redraws the table once more before letting the terminal
    go; after `freeze` that redraw draws nothing, so an interrupted run's last table is the one
    shown when the stop came, and the next thing on the terminal is the stopping line."""
    from rich.live import Live

    class FreezableLive(Live):
        frozen = False

        def freeze(self) -> None:
            self.frozen = True

        def refresh(self) -> None:
            if not self.frozen:
                super().refresh()

    return FreezableLive(table, console=console, auto_refresh=False)

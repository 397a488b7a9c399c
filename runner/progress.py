"""Live progress: a rich table on a terminal, short plain lines otherwise, nothing with --quiet.

It only reads the scheduler's counters; it never affects the run. Done, tokens and cost are
the plan's so far (a resumed run continues the numbers of the runs before it); `failed`
counts trials that failed for good, apart from `retries` (attempts that were tried again).
Without a terminal (a log file, `nohup`, a CI job) each update is one short line per model,
every `plain_interval` seconds, so a log of an overnight sweep stays readable with `grep`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from ibias.runner.console import literal, terminal, text
from ibias.runner.loop_lag import LoopLag, starved_note
from ibias.runner.status import SHOW_FAILING_AFTER, ModelStats, pacing_note, rate_and_eta

if TYPE_CHECKING:  # rich is imported only to draw on a terminal (not for --quiet or a log)
    from rich.live import Live
    from rich.table import Table

COLUMNS = ("model", "done/total", "failed", "req/s", "retries", "errors", "tokens", "cost $", "ETA")
#: Columns given up, in this order, when the terminal is too narrow for all of them; model,
#: done/total, failed, cost and ETA always stay (what a researcher watches a sweep for).
DROPPABLE = ("retries", "errors", "tokens", "req/s")


def _eta(s: ModelStats, seconds: float | None) -> str:
    if s.fatal:
        return "-"
    if seconds is None:
        return "?"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s"


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
            }
        )
    return rows


def render_table(
    stats: Sequence[ModelStats], width: int | None = None, starved: str | None = None
) -> Table:
    """The progress table, fitted to `width` columns (None: every column).

    Nothing is cut and no number wraps: every cell is no_wrap, and when the whole table is
    wider than the terminal the `DROPPABLE` columns go, one at a time, until it fits (the
    widths are measured by rich itself, on the cells as they will print). A model id is never
    cut: two ids that differ only at the end (`sim-gemini-2.0-flash`, `-lite`) must stay apart.
    A stopped model says so in its ETA. Ids and notes are `Text` with control characters
    escaped (runner/console.py): any console shows them as they are, never as markup.
    `starved`: the run's line about requests retried because the machine was starved (one,
    under the models' notes), or None.
    """
    from rich.measure import Measurement

    rows = _cells(stats)
    shown = list(COLUMNS)
    table = _table(rows, shown)
    if width is not None:
        # Measured unbounded: rich clamps a measurement to the console's width.
        console = terminal(width=1_000_000)
        for column in DROPPABLE:
            if Measurement.get(console, console.options, table).maximum <= width:
                break
            shown.remove(column)
            table = _table(rows, shown)
    notes = [
        literal(f"{s.model_id}: {note}", layout=False)
        for s in stats
        for note in (failing_note(s), pacing_note(s.configured_rpm, s.learnt_rpm))
        if note is not None
    ]
    if starved is not None:
        notes.append(starved)
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
    ) -> None:
        self.stats = stats
        #: The run's loop-lag meter: its excused failures are said (one line, see `_starved`).
        self.loop_lag = loop_lag
        self._stalls_said = 0
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.plain_interval = plain_interval
        self._live: Live | None = None
        self._next_plain: float | None = None

    def start(self) -> None:
        if self.quiet:
            return
        if self.stream.isatty():
            from rich.live import Live

            console = terminal(self.stream)
            self._live = Live(self._table(console.width), console=console, auto_refresh=False)
            self._live.start()

    def _table(self, width: int) -> Table:
        # The terminal's width now: a resized window gets its columns back at the next tick.
        return render_table(self.stats, width, self._starved())

    def _starved(self) -> str | None:
        """The line about requests retried because this machine was starved (runner/loop_lag.py),
        or None when none were."""
        lag = self.loop_lag
        return None if lag is None else starved_note(lag.stalls, lag.worst_s)

    def tick(self) -> None:
        if self.quiet:
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
        stalls = 0 if self.loop_lag is None else self.loop_lag.stalls
        starved = self._starved()
        if starved is not None and stalls > self._stalls_said:
            self._stalls_said = stalls
            lines.append(starved)
        shown = (literal(line, layout=False) for line in lines)
        print("\n".join(shown), file=self.stream, flush=True)

    def stop(self) -> None:
        if self._live is not None:
            self._live.update(self._table(self._live.console.width), refresh=True)
            self._live.stop()
            self._live = None
        elif not self.quiet:
            self._print_plain()

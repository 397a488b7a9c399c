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

from ibias.runner.status import SHOW_FAILING_AFTER, ModelStats, rate_and_eta

if TYPE_CHECKING:  # rich is imported only to draw on a terminal (not for --quiet or a log)
    from rich.live import Live
    from rich.table import Table

COLUMNS = ("model", "done/total", "failed", "req/s", "retries", "errors", "tokens", "cost $", "ETA")


def _eta(s: ModelStats, seconds: float | None) -> str:
    if s.fatal:
        return "-"
    if seconds is None:
        return "?"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s"


def failing_note(s: ModelStats) -> str | None:
    """What a model failing `SHOW_FAILING_AFTER` times or more in a row is failing with: its
    last error kind and the URL it calls; None while it is not."""
    if s.failing < SHOW_FAILING_AFTER or s.last_error_kind is None:
        return None
    where = f" at {s.endpoint}" if s.endpoint else ""
    return f"{s.failing:,} failures in a row, last {s.last_error_kind}{where}"


def render_table(stats: Sequence[ModelStats]) -> Table:
    from rich.table import Table

    table = Table(title="ibias run", expand=False)
    for col in COLUMNS:
        # Model ids are never cut: two ids that differ only at the end must stay apart.
        table.add_column(
            col,
            justify="left" if col == "model" else "right",
            overflow="fold",
            min_width=max((len(s.model_id) for s in stats), default=5) if col == "model" else None,
        )
    now = time.monotonic()
    for s in stats:
        rate, eta = rate_and_eta(s, now)
        name = s.model_id + (" (stopped)" if s.fatal else "")
        table.add_row(
            name,
            f"{s.done_before + s.done:,}/{s.total:,}",
            f"{s.failed:,}",
            f"{rate:.1f}",
            f"{s.retries:,}",
            f"{s.errors:,}",
            f"{s.tokens:,}",
            f"{s.cost:.4f}",
            _eta(s, eta),
        )
    notes = [f"{s.model_id}: {note}" for s in stats if (note := failing_note(s)) is not None]
    if notes:
        table.caption = "\n".join(notes)
        table.caption_justify = "left"
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
        note = failing_note(s)
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
    ) -> None:
        self.stats = stats
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.plain_interval = plain_interval
        self._live: Live | None = None
        self._next_plain: float | None = None

    def start(self) -> None:
        if self.quiet:
            return
        if self.stream.isatty():
            from rich.console import Console
            from rich.live import Live

            console = Console(file=self.stream)
            self._live = Live(render_table(self.stats), console=console, auto_refresh=False)
            self._live.start()

    def tick(self) -> None:
        if self.quiet:
            return
        if self._live is not None:
            self._live.update(render_table(self.stats), refresh=True)
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
        print("\n".join(plain_lines(self.stats)), file=self.stream, flush=True)

    def stop(self) -> None:
        if self._live is not None:
            self._live.update(render_table(self.stats), refresh=True)
            self._live.stop()
            self._live = None
        elif not self.quiet:
            self._print_plain()

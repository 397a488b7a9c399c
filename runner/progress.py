"""Live progress: a rich table on a terminal, plain lines otherwise, nothing with --quiet.

It only reads the scheduler's counters; it never affects the run.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from ibias.runner.status import ModelStats, rate_and_eta

if TYPE_CHECKING:  # rich is imported only to draw on a terminal (not for --quiet or a log)
    from rich.live import Live
    from rich.table import Table


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def render_table(stats: Sequence[ModelStats]) -> Table:
    from rich.table import Table

    table = Table(title="ibias run", expand=False)
    for col in ("model", "done/total", "req/s", "retries", "errors", "tokens", "cost $", "ETA"):
        table.add_column(col, justify="left" if col == "model" else "right")
    now = time.monotonic()
    for s in stats:
        rate, eta = rate_and_eta(s, now)
        name = s.model_id + (" (stopped)" if s.fatal else "")
        table.add_row(
            name,
            f"{s.done_before + s.done:,}/{s.total:,}",
            f"{rate:.1f}",
            f"{s.retries:,}",
            f"{s.errors:,}",
            f"{s.prompt_tokens + s.completion_tokens:,}",
            f"{s.cost_usd:.4f}",
            _eta(eta),
        )
    return table


def plain_line(stats: Sequence[ModelStats]) -> str:
    now = time.monotonic()
    parts = []
    for s in stats:
        rate, eta = rate_and_eta(s, now)
        parts.append(
            f"{s.model_id} {s.done_before + s.done}/{s.total} {rate:.1f}/s "
            f"retries={s.retries} errors={s.errors} "
            f"tokens={s.prompt_tokens + s.completion_tokens} cost=${s.cost_usd:.4f} "
            f"eta={_eta(eta)}"
        )
    return "progress: " + "; ".join(parts)


class Progress:
    """Shows progress every `interval` seconds (`tick()` is called by the run loop)."""

    def __init__(
        self,
        stats: Sequence[ModelStats],
        *,
        quiet: bool,
        stream: TextIO | None = None,
        plain_interval: float = 10.0,
    ) -> None:
        self.stats = stats
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.plain_interval = plain_interval
        self._live: Live | None = None
        self._last_plain = 0.0

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
        if now - self._last_plain >= self.plain_interval:
            self._last_plain = now
            print(plain_line(self.stats), file=self.stream, flush=True)

    def stop(self) -> None:
        if self._live is not None:
            self._live.update(render_table(self.stats), refresh=True)
            self._live.stop()
            self._live = None
        elif not self.quiet:
            print(plain_line(self.stats), file=self.stream, flush=True)

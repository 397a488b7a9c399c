"""Ctrl-C on a first run of the demo grid, on a terminal (a pty of 80 x 40): the first thing
printed after the signal is the line saying the run is stopping and how many requests are in
flight; the live table is not drawn again (issue 34: the table kept refreshing, req/s falling
and ETA rising, for seconds, with nothing said); and what was stored is whole, each reply once
for a planned trial.

The signal is sent once a frame of the table has been written whole (the terminal has been
quiet for a moment after it): a frame the run was already drawing when the signal came is not
"after" it. Nothing here measures how long the stop takes (bench/BENCHMARKS.md does)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from tests.helpers import IBIAS

#: Control sequences (cursor moves, colours) and the carriage returns of a terminal's output.
CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")
#: The live table's title: present in each of its frames.
TITLE = "ibias run"
#: A pause in the output that means a frame has been written whole (the table is drawn once a
#: second); only used to choose when to send the signal, never asserted.
QUIET_S = 0.15
TIMEOUT_S = 300.0


class Terminal:
    """`ibias ARGS` with stdout and stderr on a pty of 80 x 40, read as it writes."""

    def __init__(self, *args: str, cwd: Path) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 80, 0, 0))
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
        self.proc = subprocess.Popen(
            [*IBIAS, *args],
            stdin=subprocess.DEVNULL,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env={**env, "TERM": "xterm-256color"},
        )
        os.close(slave)
        self.master = master
        self.out = b""
        self.closed = False

    def read(self, wait_s: float) -> bool:
        """Read what is there within `wait_s`; False when nothing came."""
        if self.closed:
            return False
        ready, _, _ = select.select([self.master], [], [], wait_s)
        if not ready:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the other side is closed
            data = b""
        if not data:
            self.closed = True
            return False
        self.out += data
        return True

    def text(self, start: int = 0) -> str:
        return CSI.sub("", self.out[start:].decode("utf-8", "replace"))

    def until(self, done: Callable[[], bool], deadline: float) -> None:
        while not done() and time.monotonic() < deadline and not self.closed:
            self.read(0.5)
        assert done(), f"never happened; output so far:\n{self.text()[-3000:]}"

    def finish(self, deadline: float) -> int:
        while not self.closed and time.monotonic() < deadline:
            self.read(0.5)
        return self.proc.wait(timeout=max(deadline - time.monotonic(), 1.0))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


def test_ctrl_c_on_a_first_demo_run_says_it_is_stopping_before_anything_else(
    tmp_path: Path,
) -> None:
    out = tmp_path / "demo"
    term = Terminal("demo", "--out", str(out), cwd=tmp_path)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        # Two frames of the table: the run is requesting, and the table is being refreshed.
        term.until(lambda: term.text().count(TITLE) >= 2, deadline)
        while term.read(QUIET_S):  # the frame written whole
            pass
        signalled_at = len(term.out)
        term.proc.send_signal(signal.SIGINT)
        code = term.finish(deadline)
    finally:
        term.close()
    assert code == 130, term.text()[-3000:]
    after = term.text(signalled_at)
    first = after.strip().splitlines()[0]
    assert re.fullmatch(
        r"stopping \(interrupted by SIGINT\): (no requests|[\d,]+ requests?) in flight.*", first
    ), after
    assert TITLE not in after, after  # the table was not drawn again
    assert "Traceback" not in after
    last = after.strip().splitlines()[-1]
    assert last == "interrupted by SIGINT: results so far are stored; run again to resume"

    # What the stop stored is whole: every stored reply belongs to a planned trial, once.
    with duckdb.connect(str(out / "demo.duckdb"), read_only=True) as con:
        rows = con.execute(
            "SELECT count(*), count(DISTINCT r.trial_key), count(t.trial_key) "
            "FROM responses r LEFT JOIN trials t USING (trial_key)"
        ).fetchone()
    assert rows is not None
    stored, distinct, planned = rows
    assert 0 < stored == distinct == planned

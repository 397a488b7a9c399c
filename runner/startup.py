"""The `ibias` command's first step: its stop signals are handled before anything is loaded.

Loading the command (the config schema, DuckDB, anyio, uvloop, the providers) takes 0.1 to
0.4 s before `ibias run` opens its own signal receiver (`commands/stop_signals.py`). A Ctrl-C in
that window printed a KeyboardInterrupt traceback, and SIGTERM or SIGHUP killed the process
(exit -15) instead of the documented 130. So the console script and `python -m ibias` start
here, with nothing imported but the standard library's `os`, `signal` and `sys`, and until the
command takes its signals over, SIGINT, SIGTERM and SIGHUP end the process at once with
"interrupted" and exit 130.

At once, not by raising KeyboardInterrupt: an exception raised from a signal handler lands in
whatever runs at that moment, and during start-up that is an import, often of a C extension.
Tried that way, one start in twenty ended badly: a traceback printed by an importlib callback
that swallowed the interrupt (the run then went on to the end), an abort (-6) and a
segmentation fault (-11) inside extension modules being initialised. Nothing needs cleaning up
at that point (no store is open yet), so ending there is safe.

`release` gives the handlers back as they were (Python's KeyboardInterrupt for SIGINT, the
system's default for the others): `cli.main` calls it as soon as a command other than `run` or
`demo` is chosen, and `commands.stop_signals.with_stop_signals` once the run's own receiver has
closed. When the command has returned, `cli.entry` installs them again for the interpreter's
ordinary exit (exit handlers, a thread still running): a signal then ends it the same way. A
signal ignored when the command starts (SIGHUP under `nohup`) stays ignored.

Only the interpreter's own start-up, before any of ibias's code runs (about 20 to 30 ms with an
editable install, most of it `site` and the editable finder), is out of reach: a signal then
ends the process the system's way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any, NoReturn

EXIT_INTERRUPTED = 130
#: The signals that stop a command, where the platform has them (no SIGHUP on Windows).
STOP_SIGNAL_NAMES = ("SIGINT", "SIGTERM", "SIGHUP")

#: The handlers `install` replaced, by signal, for `release`.
_replaced: dict[int, Any] = {}


def install() -> None:
    """End the process with exit 130 on a stop signal, from now until `release` (or until the
    run's receiver takes the signals over). Main thread only; installing twice is harmless."""
    if threading.current_thread() is not threading.main_thread():
        return
    for name in STOP_SIGNAL_NAMES:
        signum = getattr(signal, name, None)
        if signum is None:
            continue
        current = signal.getsignal(signum)
        if current is signal.SIG_IGN or current is _on_stop_signal:
            continue
        _replaced[signum] = current
        signal.signal(signum, _on_stop_signal)


def release() -> None:
    """Give back the handlers `install` replaced, where ours is still the one in place."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, previous in list(_replaced.items()):
        if signal.getsignal(signum) is _on_stop_signal:
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        del _replaced[signum]


def _on_stop_signal(signum: int, frame: FrameType | None) -> None:
    interrupted()


def interrupted() -> NoReturn:
    """End the command at once: one line and exit 130, no teardown, no traceback. The line is
    written straight to the file descriptor, so an interrupted write on `sys.stderr` cannot get
    in its way."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    with contextlib.suppress(OSError):
        os.write(2, b"interrupted\n")
    os._exit(EXIT_INTERRUPTED)


#: Polars' allocator (its own jemalloc, configured by this variable when Polars loads): freed
#: pages back to the system after half a second, and at once once purged, rather than kept
#: (Polars' default keeps them, which is faster for a process that allocates the same again).
#: `ibias analyze` of a store ten times the paper's grid runs its large tables one after
#: another, each in memory the last one freed: with this setting it peaked at 957 MB
#: instead of 1,045 MB, in 1.02x the time (bench/BENCHMARKS.md). A value the user set wins.
POLARS_ALLOCATOR = ("_RJEM_MALLOC_CONF", "dirty_decay_ms:500,muzzy_decay_ms:0")


def allocator_settings() -> None:
    """Set `POLARS_ALLOCATOR` for this process unless the user has set it: before Polars loads,
    which reads it once."""
    os.environ.setdefault(*POLARS_ALLOCATOR)


def entry() -> None:
    """The `ibias` command: the stop signals first, then Polars' allocator settings (before
    anything loads Polars), then the command line (`cli.entry`)."""
    install()
    allocator_settings()
    from ibias.runner.cli import entry as command

    command()

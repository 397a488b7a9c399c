"""The `ibias` command's first step: its stop signals are handled before anything is loaded.

Loading the command (the config schema, DuckDB, anyio, the providers) takes 0.1 to 0.4 s before
`ibias run` opens its own signal receiver (`cli._with_stop_signals`). A Ctrl-C in that window
printed a KeyboardInterrupt traceback, and SIGTERM or SIGHUP killed the process (exit -15)
instead of the documented 130. So the console script and `python -m ibias` start here, with
nothing imported but the standard library's `os`, `signal` and `sys`: SIGINT, SIGTERM and SIGHUP
raise KeyboardInterrupt, which `cli.main` (and `cli.entry` around it, and `entry` below around
the imports) turn into "interrupted" and exit 130, after the `finally` blocks on the way have
run. A second signal while the first is being handled ends the process at once, with the same
line and code. The run's receiver takes these signals over while it is open and gives them back
when it closes. A signal that is ignored when the command starts (SIGHUP under `nohup`) stays
ignored here.

Only the interpreter's own start-up, before any of ibias's code runs (about 20 to 30 ms, most of
it Python and the `site` module), is out of reach: a signal then ends the process the system's
way.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import NoReturn

EXIT_INTERRUPTED = 130
#: The signals that stop a command, where the platform has them (no SIGHUP on Windows).
STOP_SIGNAL_NAMES = ("SIGINT", "SIGTERM", "SIGHUP")

_state = {"received": False}


def install() -> None:
    """Handle the stop signals (from the main thread; elsewhere Python cannot), leaving those
    the caller chose to ignore. Installing twice is harmless."""
    for name in STOP_SIGNAL_NAMES:
        signum = getattr(signal, name, None)
        if signum is None:
            continue
        if signal.getsignal(signum) in (signal.SIG_IGN, _on_stop_signal):
            continue
        signal.signal(signum, _on_stop_signal)


def _on_stop_signal(signum: int, frame: FrameType | None) -> None:
    if _state["received"]:
        interrupted()
    _state["received"] = True
    raise KeyboardInterrupt


def interrupted() -> NoReturn:
    """End the command at once: one line and exit 130, no teardown, no traceback."""
    try:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    except Exception:  # a closed stderr must not turn a stop into something else
        pass
    os._exit(EXIT_INTERRUPTED)


def entry() -> None:
    """The `ibias` command: the stop signals first, then the command line (`cli.entry`)."""
    install()
    try:
        from ibias.runner.cli import entry as command
    except KeyboardInterrupt:
        interrupted()
    command()

"""`ibias run` and `ibias demo` receive their stop signals on the event loop, as `Stop`
requests, from before any of their work until it has ended (runner/scheduling/stop.py)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import TYPE_CHECKING, TypeVar

from ibias.runner.commands import EXIT_INTERRUPTED

if TYPE_CHECKING:
    from ibias.runner.config import Config
    from ibias.runner.scheduling.stop import Stop

#: Signals that stop a run gracefully. SIGHUP too: a closed terminal or ssh session should
#: leave a consistent, resumable store, exactly like SIGTERM. (SIGHUP only where it exists.)
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)

#: Seconds after a stop's grace period (in-flight requests) for the final flush and closing;
#: past them the process exits 130 at once (`Stop.arm`).
STOP_MARGIN_S = 10.0

_T = TypeVar("_T")


def _exit_overdue() -> None:
    print(
        f"interrupted: the run did not end within its grace period plus {STOP_MARGIN_S:g} s; "
        "exiting now (what was stored is kept; run again to resume)",
        file=sys.stderr,
        flush=True,
    )
    os._exit(EXIT_INTERRUPTED)


def with_stop_signals(job: Callable[[Stop], Awaitable[_T]], config: Config) -> _T:
    """Run `job` (a run of `config`) on an event loop whose stop signals are received before
    any of its work; `config` chooses the loop (`runner/execution/event_loop.py`).

    The receiver is open before `job` loads or plans anything, so a signal at any point becomes
    a `Stop` request (never a KeyboardInterrupt traceback or a death by SIGTERM) and the job
    ends the way an interrupted run ends. Only the command line does this: the Python API
    leaves the process's signal handling alone. The receiver closes when `job` returns, so
    whatever follows (the demo's analysis) has the default handlers back.
    """
    import anyio

    from ibias.runner.execution.event_loop import event_loop_options
    from ibias.runner.scheduling.stop import Stop

    stop = Stop()
    # The backstop: whatever is stuck (a thread the loop must wait for), the process ends
    # STOP_MARGIN_S after the grace period, as after kill -9 (runner/scheduling/stop.py).
    stop.arm(_exit_overdue, STOP_MARGIN_S)
    try:
        return anyio.run(_receiving, job, stop, backend_options=event_loop_options(config))
    finally:
        stop.disarm()
        # The receiver gave back the start-up handlers (runner/startup.py); what follows
        # (the demo's analysis) gets the process's own.
        from ibias.runner.startup import release

        release()


async def _receiving(job: Callable[[Stop], Awaitable[_T]], stop: Stop) -> _T:
    """`job(stop)` with the stop signals relayed to `stop` while it runs.

    Each signal is a loop callback that requests the stop itself (`loop.add_signal_handler`),
    not a message to a task that would request it a few loop turns later (anyio's signal
    receiver): under a full load of requests a turn of the loop takes tens of milliseconds, and
    the stop's listeners (runner/scheduling/stop.py) must halt the progress display before its next
    refresh; until they run, the process's own handler has noted the signal
    (`Stop.signalled`), which the display checks before each refresh. A second signal requests
    nothing new (the first reason stays; the armed watchdog still ends the process on time).
    As with anyio's receiver before, every stop signal is received, even one the command
    started with ignored (SIGHUP under `nohup`; runner/startup.py leaves those ignored).
    """
    import asyncio

    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        stop.request(f"interrupted by {signal.Signals(signum).name}")

    def noted(signum: int, frame: FrameType | None) -> None:
        stop.note_signal()

    handled: list[int] = []
    try:
        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, on_signal, signum)
            handled.append(signum)
            # The process's handler (the loop hears of the signal through its wakeup fd, which
            # any Python handler keeps) notes it at once, in whatever the main thread is
            # running: from then on no refresh starts, however busy the loop is.
            signal.signal(signum, noted)
            signal.siginterrupt(signum, False)
        return await job(stop)
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)

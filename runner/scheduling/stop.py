"""A request to stop a run, made from outside it, and the guarantee that the stop ends it.

Why not signal handlers in the run: installing process-wide handlers is the business of the
program that owns the process. The `ibias` command does (runner/cli.py: SIGINT, SIGTERM and
SIGHUP, received before any work starts, each one `request()`s the run's `Stop`); the Python
API and tests do not, and stop a run by calling `request()` themselves (e.g. from a task, a
timeout or a UI). A stopped run stops scheduling, lets in-flight requests finish within the
grace period (`grace_s`, the config's `[run].grace_s`, default 10 s), flushes, and returns
exit code 130.

Saying so at once (`on_request`, `stopping_line`): a stop that waits for requests in flight
takes a moment, and a terminal whose progress table kept refreshing meanwhile (req/s falling, ETA
rising) looked as if the signal had been missed. Listeners run synchronously inside the first
`request()`, on the loop, before any other task runs again: the scheduler stops scheduling and
counts what is in flight, the progress display stops without another refresh, and the first
line printed after the signal says the run is stopping, what it waits for and for how long.

The backstop (`arm`): the run's own stop is made of cancel scopes, which end every wait on the
event loop, but not a call blocked in a thread (a store write on a failing disk, a DNS lookup
that never returns, which the loop waits for before it closes). The command line arms a
watchdog thread that ends the process if it is still running `margin_s` after the grace period:
the store is transactional, so this loses no more than `kill -9` would (the writer's last
second) and a rerun resumes. The Python API arms nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import anyio

__all__ = ["DEFAULT_GRACE_S", "Stop", "stopping_line"]

DEFAULT_GRACE_S = 10.0


class Stop:
    """Set once; the first reason wins. Call `request()` from the run's event loop thread
    (from another thread: `anyio.from_thread.run_sync(stop.request)`)."""

    def __init__(self, grace_s: float = DEFAULT_GRACE_S) -> None:
        self._reason: str | None = None
        # Created lazily inside the loop: a Stop may be made before any loop is running.
        self._event: anyio.Event | None = None
        #: Seconds in-flight requests get after the stop; the run sets it from its config.
        self.grace_s = grace_s
        self._requested_at: float | None = None
        self._overdue: Callable[[], None] | None = None
        self._margin_s = 0.0
        self._watchdog: threading.Thread | None = None
        self._ended = threading.Event()
        self._listeners: list[Callable[[], None]] = []
        self._signalled = False

    def request(self, reason: str = "interrupted") -> None:
        """Ask the run to stop. The first request calls the listeners (`on_request`) before
        it returns; later ones change nothing (the first reason is the one reported)."""
        if self._reason is None:
            self._reason = reason
            self._requested_at = time.monotonic()
            self._start_watchdog()
            for listener in list(self._listeners):
                listener()
        if self._event is not None:
            self._event.set()

    def on_request(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener()` inside the first `request()` (at once when one was made already),
        on the loop's thread, so what it does happens before any other task runs again.
        Returns the function that removes it."""
        self._listeners.append(listener)
        if self._reason is not None:
            listener()

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    @property
    def requested(self) -> bool:
        return self._reason is not None

    def note_signal(self) -> None:
        """A stop signal has arrived; its `request` follows on the loop. Only sets a flag, so
        the process's own signal handler may call it at any point of any code."""
        self._signalled = True

    @property
    def signalled(self) -> bool:
        """Whether a stop signal has arrived or a stop was requested: the progress display
        draws nothing more from then on, even before the request reaches the loop."""
        return self._signalled or self._reason is not None

    @property
    def reason(self) -> str | None:
        return self._reason

    async def wait(self) -> None:
        """Return once a stop is requested."""
        if self._event is None:
            self._event = anyio.Event()
        if self._reason is not None:
            self._event.set()
        await self._event.wait()

    # ------------------------------------------------------------------ the backstop

    def arm(self, on_overdue: Callable[[], None], margin_s: float) -> None:
        """Once a stop is requested, call `on_overdue` (from a daemon thread) if `disarm` has
        not been called `grace_s + margin_s` seconds later. For the process's owner only."""
        self._overdue = on_overdue
        self._margin_s = margin_s
        if self._reason is not None:
            self._start_watchdog()

    def disarm(self) -> None:
        """The stopped work has ended: the watchdog does nothing."""
        self._ended.set()

    @property
    def armed(self) -> bool:
        """Whether a watchdog ends the process `grace_s + margin_s` after a request."""
        return self._overdue is not None

    @property
    def margin_s(self) -> float:
        """Seconds the armed watchdog allows after the grace period (0 when not armed)."""
        return self._margin_s

    @property
    def deadline(self) -> float | None:
        """When (time.monotonic) an armed watchdog acts, once a stop is requested."""
        if self._requested_at is None:
            return None
        return self._requested_at + self.grace_s + self._margin_s

    def _start_watchdog(self) -> None:
        if self._overdue is None or self._watchdog is not None:
            return
        self._watchdog = threading.Thread(target=self._watch, name="ibias-stop", daemon=True)
        self._watchdog.start()

    def _watch(self) -> None:
        # The deadline is read again after each wait: the run may set `grace_s` from its
        # config after an early stop (a signal while the config loads).
        while (deadline := self.deadline) is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if self._ended.wait(left):
                return
        if not self._ended.is_set() and self._overdue is not None:
            self._overdue()

    def __repr__(self) -> str:
        return f"Stop(reason={self._reason!r})"


def stopping_line(
    reason: str, waited: int, dropped: int, grace_s: float, ends_within_s: float | None
) -> str:
    """The line said the moment a run starts stopping: why; the requests in flight it waits
    for (`waited`) and how long at most; those it does not wait for (`dropped`: the built-in
    simulator's, free and asked again on resume); and, when a watchdog is armed
    (`ends_within_s`), that a second signal changes nothing since the process ends by itself
    that soon (`Stop.arm`)."""
    if waited:
        waits = f"{_requests(waited)} in flight, waiting up to {grace_s:g} s for them"
        if dropped:
            waits += f" (and {dropped:,} to the built-in simulator, not waited for)"
    elif dropped:
        waits = (
            f"{_requests(dropped)} in flight to the built-in simulator, not waited for "
            "(asked again on resume)"
        )
    else:
        waits = "no requests in flight"
    line = f"stopping ({reason}): {waits}; saving what is answered"
    if ends_within_s is not None:
        line += f"; Ctrl-C again changes nothing, it ends within {ends_within_s:g} s at most"
    return line


def _requests(n: int) -> str:
    return f"{n:,} request{'' if n == 1 else 's'}"

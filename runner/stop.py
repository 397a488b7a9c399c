"""A request to stop a run, made from outside it.

Why not signal handlers in the run: installing process-wide handlers is the business of the
program that owns the process. The `ibias` command does (runner/cli.py: SIGINT, SIGTERM and
SIGHUP, received before any work starts, each one `request()`s the run's `Stop`); the Python
API and tests do not, and stop a run by calling `request()` themselves (e.g. from a task, a
timeout or a UI). A stopped run stops scheduling, lets in-flight requests finish within the
grace period, flushes, and returns exit code 130.
"""

from __future__ import annotations

import anyio

__all__ = ["Stop"]


class Stop:
    """Set once; the first reason wins. Call `request()` from the run's event loop thread
    (from another thread: `anyio.from_thread.run_sync(stop.request)`)."""

    def __init__(self) -> None:
        self._reason: str | None = None
        # Created lazily inside the loop: a Stop may be made before any loop is running.
        self._event: anyio.Event | None = None

    def request(self, reason: str = "interrupted") -> None:
        if self._reason is None:
            self._reason = reason
        if self._event is not None:
            self._event.set()

    @property
    def requested(self) -> bool:
        return self._reason is not None

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

    def __repr__(self) -> str:
        return f"Stop(reason={self._reason!r})"

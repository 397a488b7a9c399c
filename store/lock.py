"""One writer per store: an advisory lock file beside it that names its holder.

DuckDB's own file lock refuses a second writer too, but with a message about file handles; this
lock lets every command say plainly which process holds the store.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO

#: How long `acquire` waits out an unnamed holder: readers probing with `holder` hold the lock
#: shared for an instant, and must not make a starting run fail as busy.
PROBE_WAIT_S = 0.5


class StoreBusyError(Exception):
    """The store is held by another process; the message names it."""


def lock_path(store: Path) -> Path:
    return store.with_name(store.name + ".lock")


def holder(store: Path) -> str | None:
    """Who holds the store's lock, or None if nobody does.

    Only reads: the lock file is opened read-only (flock needs no write access), so a store on
    a read-only mount, where no run can hold it, is readable. A lock file that cannot be opened
    at all (no permission) is taken as not held; the store's own open then decides.
    """
    path = lock_path(store)
    try:
        fh = path.open("r")
    except OSError:
        return None
    with fh:
        try:  # shared: readers probing at once do not take the store from each other
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            return fh.read().strip() or "another process"
        fcntl.flock(fh, fcntl.LOCK_UN)
    return None


class StoreLock:
    """Held for the whole of `ibias run` (and other writers); released on exit or process death."""

    def __init__(self, store: Path) -> None:
        self.path = lock_path(store)
        self.store = store
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = self.path.open("a+")
        deadline = time.monotonic() + PROBE_WAIT_S
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                fh.seek(0)
                who = fh.read().strip()
                # No name: a reader probing (`holder`) for an instant, not a holder; wait it out.
                if who or time.monotonic() > deadline:
                    fh.close()
                    who = who or "another process"
                    raise StoreBusyError(f"store {self.store} is busy: held by {who}") from None
                time.sleep(0.01)
        fh.seek(0)
        fh.truncate()
        command = " ".join(Path(a).name if i == 0 else a for i, a in enumerate(sys.argv))
        fh.write(f"pid {os.getpid()} ({command})")
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        fh = self._fh
        if fh is None:
            return
        with contextlib.suppress(OSError):
            fh.truncate(0)
            fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()
        self._fh = None

    def __enter__(self) -> StoreLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

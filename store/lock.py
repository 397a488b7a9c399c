"""One writer per store: an advisory lock file beside it that names its holder.

DuckDB's own file lock refuses a second writer too, but with a message about file handles; this
lock lets every command say plainly which process holds the store.

The lock file is written (truncated, then the holder's name), so it is opened with `O_NOFOLLOW`
and must be a regular file: a symbolic link planted at `STORE.lock` would otherwise have its
target truncated, and a FIFO there would hang the open. A store that is a device or a folder is
refused before any lock is made, so `--store /dev/null` leaves no `/dev/null.lock`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO

from ibias import errors

#: How long `acquire` waits out an unnamed holder: readers probing with `holder` hold the lock
#: shared for an instant, and must not make a starting run fail as busy.
PROBE_WAIT_S = 0.5


class StoreBusyError(errors.StoreError):
    """The store is held by another process; the message names it."""


class StoreLockError(errors.StoreError):
    """The store or its lock file is not something a lock can be made beside or kept in (a
    device, a folder, a symbolic link); the message names the path."""


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
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "r") as fh:
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
        _check_store(self.store)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = _open_lock_file(self.path)
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


def _check_store(store: Path) -> None:
    """Refuse a store that exists and is not a regular file (through a link, as DuckDB opens
    it): no lock file is made beside a device (`/dev/null.lock`) or a folder."""
    try:
        mode = store.stat().st_mode
    except FileNotFoundError:
        return  # a new store: the run creates it
    except OSError as exc:
        raise StoreLockError(f"store {store} cannot be read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise StoreLockError(f"store {store} is a directory, expected a DuckDB file")
    if not stat.S_ISREG(mode):
        raise StoreLockError(f"store {store} is not a regular file (a device, FIFO or socket)")


def _open_lock_file(path: Path) -> IO[str]:
    """The lock file, created if missing, never through a symbolic link (`O_NOFOLLOW`) and never
    anything but a regular file (`O_NONBLOCK` so a FIFO cannot hang the open)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreLockError(
                f"lock file {path} is a symbolic link; remove it (a lock file is never followed)"
            ) from None
        if exc.errno == errno.EISDIR:
            raise StoreLockError(f"lock file {path} is a directory; remove it") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StoreLockError(f"lock file {path} is not a regular file; remove it")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "a+")
    except BaseException:
        os.close(fd)
        raise

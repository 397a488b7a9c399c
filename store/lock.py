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


class StorePathError(StoreLockError):
    """A store path that is not a regular file (or absent), or whose `.wal`, lock or status
    file beside it is not, or that holds a NUL byte (`check_store_path`)."""


def lock_path(store: Path) -> Path:
    return store.with_name(store.name + ".lock")


def holder(store: Path) -> str | None:
    """Who holds the store's lock, or None if nobody does.

    Only reads: the lock file is opened read-only (flock needs no write access), so a store on
    a read-only mount, where no run can hold it, is readable. A lock file that cannot be opened
    at all (no permission) is taken as not held; the store's own open then decides. Every
    reader asks this first, so the store's path is checked here (`check_store_path`).
    """
    check_store_path(store)
    path = lock_path(store)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "r", encoding="utf-8", errors="backslashreplace") as fh:
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
        check_store_path(self.store)
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


#: The files DuckDB and ibias open beside a store (`STORE.wal`, the lock, the status a run
#: writes): one that is a FIFO hangs whoever opens it (DuckDB blocks on a FIFO `.wal`).
SIDECARS = (".wal", ".lock", ".status.json")


def check_store_path(store: Path) -> None:
    """Refuse, in one line, a store path that cannot be a store, before anything opens it.

    Every command and call that opens a store comes through here (`holder`, `StoreLock`,
    `open_store`, the sandboxed reader, `store_of`), because opening is what hangs: DuckDB
    blocks for ever on a FIFO (the store or its `.wal`) and reads `/dev/zero` without end.
    So the kind is looked at with `stat` (following links, as DuckDB opens the file), never
    by opening: the store must be a regular file or absent (whether absent is allowed is each
    caller's to say), and so must each of its `SIDECARS` that exists. A NUL byte, the one
    byte a Linux path cannot hold, is refused here too; any other byte (UTF-8 or not) is a
    path like any other, except in the store file's own name, which DuckDB takes only in
    UTF-8 (its folders may be named with any bytes: `store.db.duckdb_path`)."""
    text = os.fspath(store)
    if "\0" in text:
        raise StorePathError(f"store {_shown(text)}: a path cannot hold a NUL byte")
    try:
        store.name.encode("utf-8")
    except UnicodeEncodeError:
        raise StorePathError(
            f"store {store}: DuckDB opens only files whose own name is UTF-8 (the folders "
            "above it may be named with any bytes); rename the file"
        ) from None
    _check_kind(store, f"store {store}", "expected a DuckDB file")
    for suffix in SIDECARS:
        sidecar = store.with_name(store.name + suffix)
        _check_kind(sidecar, f"{sidecar} (beside store {store})", "remove it")


def _check_kind(path: Path, what: str, remedy: str) -> None:
    """`path` is a regular file or absent; else a one-line `StorePathError` naming what it
    is, then `remedy`."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return  # absent: the caller says whether that is allowed
    except OSError as exc:
        raise StorePathError(f"{what} cannot be read: {exc.strerror or exc}") from None
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise StorePathError(f"{what} is a directory, {remedy}")
    raise StorePathError(f"{what} is not a regular file ({file_kind(mode)}), {remedy}")


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    for test, words in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO or pipe"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return words
    return "not a regular file"


def _shown(text: str) -> str:
    """A path fit for a one-line message: a NUL shown as `\\0`."""
    return text.replace("\0", "\\0")


def shown_path(path: Path | str) -> str:
    """`path` as UTF-8 text for a report (JSON, HTML): a byte that is not UTF-8 (which `str`
    holds as a lone surrogate, and JSON and UTF-8 files cannot) shown as `\\xNN`."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


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
        return os.fdopen(fd, "a+", encoding="utf-8", errors="backslashreplace")
    except BaseException:
        os.close(fd)
        raise

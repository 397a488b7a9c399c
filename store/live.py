"""Reads served by the process that holds the store, so a store can be queried while it runs.

DuckDB lets one process open a database file, so while `ibias run` holds the store the only way
to read it is through that process. The run serves reads on a Unix socket (mode 0600) beside the
store, or, when that path is longer than a socket address allows (~108 bytes) or the file system
has no sockets, at a fixed path in a private folder (`$TMPDIR/ibias-UID/`, mode 0700, named by a
hash of the store's absolute path); readers try the same two paths in the same order.

Each connection is one session on a cursor of the run's own database, inside a read-only
transaction: DuckDB's MVCC gives the session a snapshot of what is committed, and the writer
commits each flush as one transaction, so a reader never sees half a batch and never blocks the
writer. Sessions run on threads of their own (DuckDB releases the GIL while it executes), so the
run's event loop is not held up; their number, a query's time and the wait for a slow client are
bounded. Before the first session, the database instance is put under the sandbox's settings
(store/sandbox.py: external access off, configuration locked), and every statement passes
`read_statement`, so a query served here can do no more than `ibias sql` on a closed store.

The run's own queries come first for DuckDB's memory, which every cursor shares: when one of
them finds the pool full, the run calls `relieve`, which interrupts every served query; each
fails alone with one line saying why, and its session goes on with a fresh snapshot.

Wire format, per request: 4-byte big-endian length + JSON `{"store", "sql", "params"}`, and
`"rows": true` from a reader that wants Python rows (`ibias status`). Per reply: `R`, a length
and the rows as JSON `{"names", "rows"}` in the typed form of store/live_rows.py (which decodes
to exactly what DuckDB's `fetchall()` gives); or `A` and the result as an Arrow IPC stream cut
into length-prefixed chunks ending with an empty chunk; or `E`, a length and one line of UTF-8
(the error the user sees). A query that fails while its result streams ends the chunks with
`STREAM_FAILED` in place of a length, followed by a length and the one line. Rows are sent only
when asked for and only for a result of at most `ROW_LIMIT` rows whose values the row form
carries; any other result is run again, in the same snapshot, and sent as Arrow, which is also
what a run of an older ibias (which ignores `rows`) sends: a reader reads either reply, and an
older reader, which never asks for rows, gets Arrow as before.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import socket
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import orjson

from ibias.store.db import StoreAccessError, first_line
from ibias.store.live_rows import Unencodable, decode_rows, encode_rows
from ibias.store.sandbox import QUERY_SETTINGS, read_statement

if TYPE_CHECKING:  # pyarrow is loaded only to serve or receive a live result
    import pyarrow as pa

#: Bytes of a Unix socket path, without the terminating NUL (Linux sun_path is 108 bytes).
MAX_SOCKET_PATH = 107
#: How often the accept loop looks at the stop flag when nothing wakes it (`close` does).
ACCEPT_POLL_S = 0.2
#: Live sessions served at once; a reader beyond that is told to try again.
MAX_SESSIONS = 4
#: How long a reader beyond `MAX_SESSIONS` waits for a slot before it is told to try again:
#: one arriving as another leaves (whose session ends a moment after it hangs up) is served.
SLOT_WAIT_S = 2.0
#: A served query is interrupted after this long, so a runaway reader cannot eat the run's CPU.
QUERY_TIMEOUT_S = 120.0
#: A session (one snapshot) ends after this long; a client reads a whole report well within it.
SESSION_LIMIT_S = 600.0
#: Waiting on a client that neither sends nor reads.
IO_TIMEOUT_S = 30.0
#: Rows per Arrow batch written to the socket: the run holds one batch of a result at a time.
BATCH_ROWS = 65_536
#: Rows a result may have to be sent as rows (`R`); a larger one goes as Arrow. Fetching rows
#: as Python values holds the run's GIL, which Arrow does not; a status reads far fewer.
ROW_LIMIT = 10_000
#: A request larger than this is not a query (1 MiB of SQL and parameters).
MAX_REQUEST = 1 << 20

_LEN = struct.Struct(">I")
#: The run's retry (store/memory.py) from which relief also hangs up on the readers.
HANG_UP_AFTER = 3
#: In place of a chunk's length: the query failed mid-stream, its one-line error follows.
STREAM_FAILED = 0xFFFFFFFF
#: What a reader whose query the run interrupted for memory is told.
RELIEVED = (
    "query stopped: the run needed the memory it was using (DuckDB's memory is shared with "
    "the run, and the run comes first); try again, or query the store once the run ends"
)


def socket_paths(store: Path) -> tuple[Path, ...]:
    """Where the run holding `store` listens, in the order a run binds and a reader tries."""
    real = Path(os.path.realpath(store))
    beside = real.with_name(real.name + ".sock")
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:24]
    fallback = private_dir() / f"{digest}.sock"
    return tuple(p for p in (beside, fallback) if len(os.fsencode(p)) <= MAX_SOCKET_PATH)


def private_dir() -> Path:
    """The fallback folder, `$TMPDIR/ibias-UID` (created 0700 by the run)."""
    return Path(tempfile.gettempdir()) / f"ibias-{os.getuid()}"


def _own_private_dir() -> bool:
    """Create the fallback folder, or accept it only if it is ours and closed to others."""
    folder = private_dir()
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    info = folder.lstat()
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.getuid()
        and stat.S_IMODE(info.st_mode) & 0o077 == 0
    )


def _bind(path: Path) -> socket.socket:
    """A listening socket at `path`, mode 0600 before anyone can connect (connect needs
    listen). A file left there is stale: the caller holds the store's lock."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(os.fsencode(path))
        os.chmod(path, 0o600)
        sock.listen(16)
    except BaseException:
        sock.close()
        with contextlib.suppress(OSError):
            if stat.S_ISSOCK(path.lstat().st_mode):
                path.unlink()
        raise
    return sock


def lock_down(con: duckdb.DuckDBPyConnection) -> None:
    """Put the run's database instance under the sandbox's settings (global settings, shared
    by the writer, which needs none of what they turn off; `lock_configuration` last)."""
    for name, value in QUERY_SETTINGS.items():
        con.execute(f"SET {name} = {'true' if value else 'false'}").fetchall()


class LiveServer:
    """Serves sandboxed reads of a running store; `start` returns None when it cannot listen
    (the run goes on; readers are told the store is busy, as before live reads existed)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, store: Path, sock: socket.socket) -> None:
        self.store = Path(os.path.realpath(store))
        self.path = Path(os.fsdecode(sock.getsockname()))
        self._con = con
        self._sock = sock
        self._stop = threading.Event()
        self._slots = threading.BoundedSemaphore(MAX_SESSIONS)
        #: Live sessions: their thread, socket and (once opened) cursor, to end them on close.
        self._sessions: dict[threading.Thread, tuple[socket.socket, list[Any]]] = {}
        self._guard = threading.Lock()
        #: Sessions whose query `relieve` interrupted (they say so instead of a time limit).
        self._relieved: set[threading.Thread] = set()
        self._thread = threading.Thread(target=self._accept, name="ibias-live", daemon=True)

    @classmethod
    def start(
        cls,
        con: duckdb.DuckDBPyConnection,
        store: Path,
        bind: Callable[[Path], socket.socket] = _bind,
    ) -> LiveServer | None:
        sock: socket.socket | None = None
        for path in socket_paths(store):
            try:
                if path.parent == private_dir() and not _own_private_dir():
                    continue
                sock = bind(path)
                break
            except OSError:
                continue
        if sock is None:
            return None
        try:
            lock_down(con)
        except duckdb.Error:
            sock.close()
            return None
        server = cls(con, store, sock)
        server._thread.start()
        return server

    def close(self) -> None:
        """Stop accepting, interrupt and end every session, remove the socket.

        The accept loop is woken by a connection of our own rather than left to notice the
        stop at its next `ACCEPT_POLL_S` timeout: that wait was, on average, 0.1 s of every run's
        shutdown (bench/BENCHMARKS.md, issue 12). The timeout stays as the fallback when
        the socket cannot be reached."""
        self._stop.set()
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as wake:
            wake.settimeout(1.0)
            wake.connect(os.fsencode(self.path))
        self._thread.join()
        with self._guard:
            sessions = list(self._sessions.items())
        for _, (conn, cursors) in sessions:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)  # wakes a session waiting on its client
            for cursor in cursors:
                with contextlib.suppress(duckdb.Error):
                    cursor.interrupt()
        for thread, _ in sessions:
            thread.join()
        with contextlib.suppress(OSError):
            self.path.unlink()

    def relieve(self, attempt: int = 1) -> None:
        """Hand DuckDB's memory back to the run (called by the run's `MemoryGuard` on the
        thread of its failing query; never waits): interrupt every served query, whose reader
        gets `RELIEVED` as its one-line error. From the `HANG_UP_AFTER`-th call in a row, also
        hang up on every session: a result waiting for a reader that does not read keeps its
        memory until the session ends, which an interrupt does not reach."""
        with self._guard:
            sessions = list(self._sessions.items())
            self._relieved.update(thread for thread, _ in sessions)
        for _, (conn, cursors) in sessions:
            for cursor in cursors:
                _interrupt(cursor)
            if attempt >= HANG_UP_AFTER:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)

    def _accept(self) -> None:
        self._sock.settimeout(ACCEPT_POLL_S)
        try:
            while not self._stop.is_set():
                try:
                    conn, _ = self._sock.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                if self._stop.is_set():  # close()'s wake-up (or a reader too late): no session
                    conn.close()
                    return
                thread = threading.Thread(target=self._session, args=(conn,), daemon=True)
                with self._guard:
                    self._sessions[thread] = (conn, [])
                thread.start()
        finally:
            self._sock.close()

    def _wait_for_slot(self) -> bool:
        """A session slot within `SLOT_WAIT_S`, in short waits so that `close` (which joins
        every session's thread) is never held up by a reader waiting for one."""
        deadline = time.monotonic() + SLOT_WAIT_S
        while not self._stop.is_set():
            if self._slots.acquire(timeout=0.05):
                return True
            if time.monotonic() >= deadline:
                return False
        return False

    def _session(self, conn: socket.socket) -> None:
        conn.settimeout(IO_TIMEOUT_S)
        have_slot = self._wait_for_slot()
        cursor: duckdb.DuckDBPyConnection | None = None
        try:
            if not have_slot:
                _recv(conn)
                _send_error(
                    conn,
                    f"store {self.store}: the run is serving {MAX_SESSIONS} readers; try again",
                )
                return
            cursor = self._con.cursor()
            with self._guard:
                self._sessions[threading.current_thread()][1].append(cursor)
            cursor.execute("BEGIN TRANSACTION READ ONLY").fetchall()
            started = time.monotonic()
            while not self._stop.is_set():
                request = _recv(conn)
                if request is None:
                    return
                if time.monotonic() - started > SESSION_LIMIT_S:
                    _send_error(conn, f"live session on {self.store} ended after its time limit")
                    return
                self._serve(conn, cursor, request)
        except Exception:  # a reader's trouble never reaches the run's terminal
            return  # client gone, not our protocol, or a query failing mid-stream: hang up
        finally:
            if cursor is not None:
                with contextlib.suppress(duckdb.Error):
                    cursor.close()
            conn.close()
            if have_slot:
                self._slots.release()
            with self._guard:
                self._sessions.pop(threading.current_thread(), None)
                self._relieved.discard(threading.current_thread())

    def _serve(
        self, conn: socket.socket, cursor: duckdb.DuckDBPyConnection, request: dict[str, Any]
    ) -> None:
        if os.path.realpath(str(request.get("store", ""))) != str(self.store):
            _send_error(conn, f"this socket serves {self.store}, not {request.get('store')}")
            return
        sql, params = request.get("sql"), request.get("params") or []
        if not isinstance(sql, str) or not isinstance(params, list):
            _send_error(conn, "malformed live request")
            return
        timer = threading.Timer(QUERY_TIMEOUT_S, _interrupt, args=(cursor,))
        timer.start()
        with self._guard:
            self._relieved.discard(threading.current_thread())
        try:
            try:
                read_statement(sql)
            except StoreAccessError as exc:
                _send_error(conn, str(exc))
                return
            if request.get("rows") is True and self._send_rows(conn, cursor, sql, params):
                return
            self._send_arrow(conn, cursor, sql, params)
        finally:
            timer.cancel()

    def _send_rows(
        self, conn: socket.socket, cursor: duckdb.DuckDBPyConnection, sql: str, params: list[Any]
    ) -> bool:
        """Reply with the result as rows (`R`, store/live_rows.py), or an error; False, with
        nothing sent, when it is past `ROW_LIMIT` rows or holds a value the row form does not
        carry: the caller then runs it again as Arrow, in the same snapshot."""
        try:
            result = execute_rows(cursor, sql, params)
            names = [d[0] for d in result.description or ()]
            rows = result.fetchmany(ROW_LIMIT + 1)
        except (StoreAccessError, duckdb.Error) as exc:
            error = read_error(exc) if isinstance(exc, duckdb.Error) else exc
            self._fresh_snapshot(cursor)
            _send_error(conn, self._why(error))
            return True
        if len(rows) > ROW_LIMIT:
            cursor.abort()  # the rest of the result, unread, would refuse the next statement
            return False
        try:
            body = orjson.dumps({"names": names, "rows": encode_rows(rows)})
        except (Unencodable, orjson.JSONEncodeError):
            return False
        if len(body) >= STREAM_FAILED:
            return False
        conn.sendall(b"R" + _LEN.pack(len(body)) + body)
        return True

    def _send_arrow(
        self, conn: socket.socket, cursor: duckdb.DuckDBPyConnection, sql: str, params: list[Any]
    ) -> None:
        """Reply with the result as an Arrow IPC stream (`A`), or an error."""
        try:
            reader = execute_read(cursor, sql, params)
        except StoreAccessError as exc:
            self._fresh_snapshot(cursor)
            _send_error(conn, self._why(exc))
            return
        import pyarrow as pa

        conn.sendall(b"A")
        sink = _Chunks(conn)
        try:
            with pa.ipc.new_stream(sink, reader.schema) as stream:
                for batch in reader:
                    stream.write_batch(batch)
        except (duckdb.Error, pa.ArrowException) as exc:
            # Failed while streaming (out of memory, interrupted): the reader is told
            # in one line, not left with a connection that closed mid-result.
            error = (
                read_error(exc)
                if isinstance(exc, duckdb.Error)
                else StoreAccessError(f"query failed: {first_line(str(exc))}")
            )
            data = self._why(error).encode("utf-8", "replace")
            conn.sendall(_LEN.pack(STREAM_FAILED) + _LEN.pack(len(data)) + data)
            self._fresh_snapshot(cursor)
            return
        conn.sendall(_LEN.pack(0))

    @staticmethod
    def _fresh_snapshot(cursor: duckdb.DuckDBPyConnection) -> None:
        """DuckDB aborts a transaction whose statement failed: go on with a fresh one (a new
        snapshot) so the session stays usable."""
        cursor.execute("ROLLBACK").fetchall()
        cursor.execute("BEGIN TRANSACTION READ ONLY").fetchall()

    def _why(self, error: Exception) -> str:
        """The reader's one line: `RELIEVED` when the run interrupted the query for memory."""
        with self._guard:
            relieved = threading.current_thread() in self._relieved
            self._relieved.discard(threading.current_thread())
        return RELIEVED if relieved else f"{error}"


def _interrupt(cursor: duckdb.DuckDBPyConnection) -> None:
    with contextlib.suppress(duckdb.Error):
        cursor.interrupt()


def execute_read(
    con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] = ()
) -> pa.RecordBatchReader:
    """One sandboxed read: the text must be one read statement (`read_statement`); DuckDB's
    refusals and failures become one-line `StoreAccessError`s, the same served live or not."""
    read_statement(sql, con)
    try:
        return con.sql(sql, params=list(params) or None).to_arrow_reader(BATCH_ROWS)
    except duckdb.Error as exc:
        raise read_error(exc) from None


def read_error(exc: duckdb.Error) -> StoreAccessError:
    """DuckDB's refusal or failure of a sandboxed read, as the one line the user sees."""
    if isinstance(exc, duckdb.PermissionException):
        return StoreAccessError(
            f"query refused: {first_line(str(exc))} (ibias sql reads only the store; "
            "use --output FILE to export a result)"
        )
    if isinstance(exc, duckdb.InterruptException):
        return StoreAccessError(
            f"query interrupted after its time limit of {QUERY_TIMEOUT_S:.0f} s"
        )
    return StoreAccessError(f"query failed: {first_line(str(exc))}")


def execute_rows(
    con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] = ()
) -> duckdb.DuckDBPyConnection:
    """`execute_read` for small results read as Python rows (no Arrow: `ibias status` stays
    light); call `fetchall()` / `fetchone()` on the result."""
    read_statement(sql, con)
    try:
        return con.execute(sql, list(params) or None)
    except duckdb.Error as exc:
        raise read_error(exc) from None


def read_table(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] = ()) -> pa.Table:
    """`execute_read`, all of it: a failure while the rows stream is one line too."""
    import pyarrow as pa

    reader = execute_read(con, sql, params)
    try:
        return reader.read_all()
    except duckdb.Error as exc:
        raise read_error(exc) from None
    except pa.ArrowException as exc:
        raise StoreAccessError(f"query failed: {first_line(str(exc))}") from None


class _Chunks:
    """A write-only file for `pa.ipc.new_stream` that frames every write on the socket."""

    closed = False

    def __init__(self, conn: socket.socket) -> None:
        self._conn = conn

    def write(self, data: bytes | memoryview) -> int:
        view = memoryview(data)
        if view.nbytes:
            self._conn.sendall(_LEN.pack(view.nbytes))
            self._conn.sendall(view)
        return view.nbytes

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True


def _recv_exact(conn: socket.socket, n: int) -> bytes | None:
    """`n` bytes, or None at a clean end of stream before the first byte."""
    parts: list[bytes] = []
    got = 0
    while got < n:
        chunk = conn.recv(min(n - got, 1 << 20))
        if not chunk:
            if got == 0:
                return None
            raise ConnectionError(errno.ECONNRESET, "live connection closed mid-message")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _recv(conn: socket.socket) -> dict[str, Any] | None:
    head = _recv_exact(conn, _LEN.size)
    if head is None:
        return None
    (size,) = _LEN.unpack(head)
    if size > MAX_REQUEST:
        raise ValueError("request too large")
    body = _recv_exact(conn, size) if size else b""
    request = orjson.loads(body or b"null")
    if not isinstance(request, dict):
        raise ValueError("request is not an object")
    return request


def _send_error(conn: socket.socket, message: str) -> None:
    data = message.encode("utf-8", "replace")
    conn.sendall(b"E" + _LEN.pack(len(data)) + data)


class LiveClient:
    """One session with the run holding a store: every query sees the same snapshot."""

    live = True

    def __init__(self, store: Path, sock: socket.socket) -> None:
        self.store = store
        self._sock = sock

    @classmethod
    def connect(cls, store: Path) -> LiveClient | None:
        """A session with the run serving `store`, or None if none listens."""
        for path in socket_paths(store):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(QUERY_TIMEOUT_S + IO_TIMEOUT_S)
            try:
                sock.connect(os.fsencode(path))
            except OSError:
                sock.close()
                continue
            return cls(store, sock)
        return None

    def table(self, sql: str, params: Sequence[Any] = ()) -> pa.Table:
        """The query's result as an Arrow table, or the run's one-line `StoreAccessError`."""
        kind, data = self._ask(sql, params, rows=False)
        if kind == b"R":  # not asked for: a server that sends it is not ibias's
            raise self._broken(ConnectionError(errno.EPROTO, "unexpected rows reply"))
        return _arrow(data)

    def rows(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[str], list[tuple[Any, ...]]]:
        """The result's column names and rows, the values DuckDB's `fetchall()` gives on the
        file: sent as rows when the result is small, else (or by an older run) as Arrow."""
        kind, data = self._ask(sql, params, rows=True)
        if kind == b"R":
            reply = orjson.loads(data)
            return reply["names"], decode_rows(reply["rows"])
        table = _arrow(data)
        columns = [c.to_pylist() for c in table.columns]
        return list(table.column_names), list(zip(*columns, strict=True)) if columns else []

    def _ask(self, sql: str, params: Sequence[Any], *, rows: bool) -> tuple[bytes, bytes]:
        """Send one query; its reply's kind (`R` or `A`) and body (the Arrow chunks joined)."""
        request: dict[str, Any] = {
            "store": os.path.realpath(self.store),
            "sql": sql,
            "params": list(params),
        }
        if rows:
            request["rows"] = True
        body = orjson.dumps(request)
        try:
            self._sock.sendall(_LEN.pack(len(body)) + body)
            kind = _recv_exact(self._sock, 1)
            if kind == b"E":
                size = _LEN.unpack(self._need(_LEN.size))[0]
                raise StoreAccessError(self._need(size).decode("utf-8", "replace"))
            if kind == b"R":
                return kind, self._need(_LEN.unpack(self._need(_LEN.size))[0])
            if kind != b"A":
                raise ConnectionError(errno.ECONNRESET, "live connection closed")
            chunks: list[bytes] = []
            while size := _LEN.unpack(self._need(_LEN.size))[0]:
                if size == STREAM_FAILED:
                    size = _LEN.unpack(self._need(_LEN.size))[0]
                    raise StoreAccessError(self._need(size).decode("utf-8", "replace"))
                chunks.append(self._need(size))
        except OSError as exc:
            raise self._broken(exc) from None
        return kind, b"".join(chunks)

    def _broken(self, exc: OSError) -> StoreAccessError:
        return StoreAccessError(
            f"store {self.store}: the live read from the running process failed "
            f"({exc.strerror or exc}); try again"
        )

    def _need(self, n: int) -> bytes:
        data = _recv_exact(self._sock, n)
        if data is None:
            raise ConnectionError(errno.ECONNRESET, "live connection closed")
        return data

    def close(self) -> None:
        self._sock.close()


def _arrow(data: bytes) -> pa.Table:
    """An `A` reply's Arrow IPC stream, read whole."""
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()

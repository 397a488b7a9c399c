"""`ibias import` of what is not a regular file (issue 33): a pipe is read once, as a stream
(`-` for stdin, `/dev/fd/N` from the shell's `<(zcat ...)`, a named FIFO); a line longer
than the cap is refused by its number without being held whole, and the store is left as it
was; a device, a socket or a folder is refused in one line before a byte of it is read."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ibias.runner.cli import main
from ibias.store import importer
from ibias.store.importer import ImportFileError, read_file
from tests.store.test_importer import lines

#: A hang is a failure, not a blocked suite.
TIMEOUT_S = 60


def jsonl(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def one_line(code: int, err: str) -> str:
    assert code == 2, err
    out = err.strip().splitlines()
    assert len(out) == 1 and "Traceback" not in err, err
    return out[0]


def stored(store: Path) -> list[tuple[str, str]]:
    with duckdb.connect(str(store), read_only=True) as con:
        return con.execute("SELECT model_id, content FROM responses ORDER BY content").fetchall()


def cli(*args: str, stdin: bytes | int | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "ibias", *args],
        input=stdin if isinstance(stdin, bytes) else None,
        stdin=stdin if isinstance(stdin, int) else None,
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
    )


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


def test_stdin_as_dash_is_imported(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    done = cli("import", "-", "--store", str(store), stdin=jsonl(lines()))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == "imported 4 replies from stdin (0 already present)\n"
    assert len(stored(store)) == 4
    again = cli("import", "-", "--store", str(store), stdin=jsonl(lines()))
    assert b"imported 0 replies from stdin (4 already present)" in again.stdout


def test_a_pipe_named_by_dev_fd_is_read_once(
    tmp_path: Path, pipe: tuple[int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """What `ibias import <(zcat replies.jsonl.gz)` passes: /dev/fd/N of a pipe. It is read
    once (before, a validation pass consumed it and the import waited for more for ever)."""
    r, w = pipe
    os.write(w, jsonl(lines()))  # fits in the pipe's buffer
    os.close(w)
    store = tmp_path / "s.duckdb"
    assert main(["import", f"/dev/fd/{r}", "--store", str(store)]) == 0
    assert f"imported 4 replies from /dev/fd/{r}" in capsys.readouterr().out
    assert len(stored(store)) == 4


def test_stdin_pipe_in_process(
    tmp_path: Path, pipe: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    r, w = pipe
    os.write(w, jsonl(lines()[:2]))
    os.close(w)
    monkeypatch.setattr(sys, "stdin", os.fdopen(os.dup(r), "r"))
    replies = read_file(Path("-"))
    assert [x.line for x in replies] == [1, 2]


def test_a_named_fifo_waits_for_its_writer_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIFO with no writer yet is waited on (as `cat` would), with one line saying so, and
    read when the writer comes; it is never taken as empty."""
    fifo = tmp_path / "replies.fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(importer, "WAIT_NOTICE_S", 0.01)
    said: list[str] = []
    waiting = threading.Event()

    def writer() -> None:
        waiting.wait(TIMEOUT_S)
        with open(fifo, "wb") as fh:
            fh.write(jsonl(lines()))

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()

    def on_wait(line: str) -> None:
        said.append(line)
        waiting.set()

    replies = read_file(fifo, on_wait=on_wait)
    thread.join(TIMEOUT_S)
    assert len(replies) == 4
    assert said == [f"waiting for {fifo} (a pipe) to be written"]


def test_an_oversized_line_is_refused_by_its_number_and_nothing_is_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lines 1-2 are fine, line 3 is one byte over the cap: the file is refused naming line 3,
    lines 1-2 are not stored either (a file is imported whole or not at all), and what the
    store held before is still there."""
    store = tmp_path / "s.duckdb"
    first = tmp_path / "first.jsonl"
    first.write_bytes(jsonl(lines()[3:]))
    assert main(["import", str(first), "--store", str(store)]) == 0
    before = stored(store)

    cap = 1024
    rows = [json.dumps(r) for r in lines()[:2]]
    big = dict(lines()[2], content="x" * 2000)
    text = "\n".join([*rows, json.dumps(big)]) + "\n"
    src = tmp_path / "big.jsonl"
    src.write_text(text)
    capsys.readouterr()
    code = main(["import", str(src), "--store", str(store), "--max-line-bytes", str(cap)])
    line = one_line(code, capsys.readouterr().err)
    assert line == (
        f"error: {src} line 3: longer than 1,024 bytes, the most a line may be (raise it with "
        "--max-line-bytes); nothing imported"
    )
    assert stored(store) == before


def test_a_line_at_the_cap_is_taken_and_one_byte_more_is_not(tmp_path: Path) -> None:
    row = json.dumps(lines()[0]).encode()
    cap = len(row) + 10
    exact = tmp_path / "exact.jsonl"
    exact.write_bytes(row + b" " * 10 + b"\n")  # JSON allows the trailing blanks
    assert len(read_file(exact, cap)) == 1
    over = tmp_path / "over.jsonl"
    over.write_bytes(row + b" " * 11)  # no final newline: the last line is capped too
    with pytest.raises(ImportFileError, match="line 1: longer than"):
        read_file(over, cap)


def test_an_endless_line_from_a_pipe_is_refused_without_reading_it_all(
    pipe: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that never ends its line: refused once the cap is passed, the rest unread
    (the writer is still writing when the refusal comes)."""
    r, w = pipe
    monkeypatch.setattr(importer, "CHUNK_BYTES", 256)
    sent = [0]
    stop = threading.Event()

    def endless() -> None:
        try:
            while not stop.is_set():
                sent[0] += os.write(w, b"x" * 256)
        except OSError:  # the reader closed: broken pipe
            pass

    thread = threading.Thread(target=endless, daemon=True)
    thread.start()
    stdin = os.fdopen(os.dup(r), "r")
    monkeypatch.setattr(sys, "stdin", stdin)
    with pytest.raises(ImportFileError, match=r"^stdin line 1: longer than 4,096 bytes"):
        read_file(Path("-"), 4096)
    stop.set()
    stdin.close()
    # The writer is blocked on a full pipe: drain it so that it sees `stop` and ends.
    os.set_blocking(r, False)
    deadline = time.monotonic() + TIMEOUT_S
    while thread.is_alive() and time.monotonic() < deadline:
        with contextlib.suppress(BlockingIOError):
            os.read(r, 1 << 16)
        thread.join(0.01)
    assert not thread.is_alive()


def test_dev_zero_is_refused_before_it_is_read(tmp_path: Path) -> None:
    store = tmp_path / "never.duckdb"
    done = cli("import", "/dev/zero", "--store", str(store))
    err = done.stderr.decode()
    assert one_line(done.returncode, err) == (
        "error: /dev/zero: is a character device, not a JSONL file or a pipe"
    )
    assert not store.exists()


def test_dev_zero_as_stdin_is_refused(tmp_path: Path) -> None:
    with open("/dev/zero", "rb") as zero:
        done = cli("import", "-", "--store", str(tmp_path / "s.duckdb"), stdin=zero.fileno())
    assert "stdin: is a character device" in one_line(done.returncode, done.stderr.decode())


def test_a_socket_and_a_folder_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sock_path = tmp_path / "replies.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        code = main(["import", str(sock_path), "--store", str(tmp_path / "s.duckdb")])
        assert "is a socket, not a JSONL file or a pipe" in one_line(code, capsys.readouterr().err)
    code = main(["import", str(tmp_path), "--store", str(tmp_path / "s.duckdb")])
    assert "is a folder, not a JSONL file" in one_line(code, capsys.readouterr().err)
    assert not (tmp_path / "s.duckdb").exists()


def test_a_nul_in_the_file_path_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["import", "re\0plies.jsonl", "--store", str(tmp_path / "s.duckdb")])
    assert "a path cannot hold a NUL byte" in one_line(code, capsys.readouterr().err)
    with pytest.raises(ImportFileError, match="a path cannot hold a NUL byte"):
        read_file(Path("re\0plies.jsonl"))


def test_a_file_path_that_is_not_utf8_is_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = Path(os.fsdecode(os.fsencode(tmp_path) + b"/r\xfe.jsonl"))
    src.write_bytes(jsonl(lines()))
    store = tmp_path / "s.duckdb"
    assert main(["import", str(src), "--store", str(store)]) == 0
    assert "r\\xfe.jsonl" in capsys.readouterr().out
    with duckdb.connect(str(store), read_only=True) as con:
        assert con.execute("SELECT config FROM runs").fetchall() == [
            ("# imported from r\\xfe.jsonl\n",)
        ]


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"bb", b"\n", b"\r", b" ", b"\xff"]), max_size=60),
    chunk=st.integers(min_value=1, max_value=8),
    cap=st.integers(min_value=1, max_value=12),
)
def test_lines_split_like_bytes_split_whatever_the_chunks(
    data: list[bytes], chunk: int, cap: int
) -> None:
    """The chunked reader gives the lines `bytes.split` gives (the empty tail after a final
    newline dropped), or refuses the first line over the cap, by its number."""
    raw = b"".join(data)
    expected = raw.split(b"\n")
    if expected and expected[-1] == b"":
        expected.pop()
    old = importer.CHUNK_BYTES
    importer.CHUNK_BYTES = chunk
    try:
        with tempfile.TemporaryFile() as fh:
            fh.write(raw)
            fh.flush()
            fh.seek(0)
            got: list[bytes] = []
            try:
                for number, line in importer._lines(fh.fileno(), "f", cap):
                    assert number == len(got) + 1
                    got.append(line)
            except ImportFileError as exc:
                first_long = next(i for i, x in enumerate(expected) if len(x) > cap) + 1
                assert str(exc).startswith(f"f line {first_long}: longer than")
                assert got == expected[: first_long - 1]
                return
    finally:
        importer.CHUNK_BYTES = old
    assert got == expected
    assert all(len(x) <= cap for x in expected)

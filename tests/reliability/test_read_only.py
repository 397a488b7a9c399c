"""A store or output on a read-only file system is bad input: exit 2, one line, nothing lost.

The tests run as root here, and root ignores permission bits, so `chmod` proves nothing. A real
read-only file system comes from a user namespace: `unshare -rm` gives the child its own mount
table, where `mount -o bind,ro DIR DIR` makes DIR read-only for that child alone (no privileges
on the host, nothing left mounted). Where `unshare` is missing or not allowed those tests skip;
the mapping from OSError to one line is tested in-process as well.
"""

from __future__ import annotations

import errno
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from ibias.runner import cli

EXPLICIT_LINE = {
    "experiment": "word_association_explicit",
    "model_id": "ext",
    "language": "en",
    "item": {"category": "risk", "quality": "careful"},
    "content": "neither",
}


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o ro tmpfs /mnt"],
        capture_output=True,
        check=False,
        timeout=30,
    )
    return probe.returncode == 0


needs_unshare = pytest.mark.skipif(
    not _can_unshare(), reason="unshare -rm (user namespaces) is not available here"
)


def read_only(folder: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m ibias ARGS` with `folder` mounted read-only for this process alone."""
    ibias = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "ibias", *args])
    ro = shlex.quote(str(folder))
    # `cd` after the mount: a working directory entered before it still sees the writable one
    script = f"mount -o bind,ro {ro} {ro} && cd {shlex.quote(str(cwd))} && {ibias}"
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    return lines[0]


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    """A store holding one imported reply, in a folder of its own."""
    folder = tmp_path / "data"
    folder.mkdir()
    src = tmp_path / "ok.jsonl"
    src.write_text(json.dumps(EXPLICIT_LINE) + "\n")
    assert cli.main(["import", str(src), "--store", str(folder / "s.duckdb")]) == 0
    return folder


def _count(store: Path) -> int:
    con = duckdb.connect(str(store), read_only=True)
    try:
        row = con.execute("SELECT count(*) FROM responses").fetchone()
    finally:
        con.close()
    assert row is not None
    return int(row[0])


@needs_unshare
def test_import_into_a_read_only_folder(stored: Path, tmp_path: Path) -> None:
    src = tmp_path / "more.jsonl"
    src.write_text(json.dumps({**EXPLICIT_LINE, "content": "cisgender"}) + "\n")
    line = one_line(read_only(stored, "import", str(src), "--store", "s.duckdb", cwd=stored))
    assert "s.duckdb.lock" in line and "Read-only file system" in line
    assert _count(stored / "s.duckdb") == 1  # nothing lost


@needs_unshare
def test_run_with_a_store_in_a_read_only_folder(stored: Path, tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[run]\nname = "t"\nseed = 1\n'
        '[[models]]\nid = "m"\nprovider = "simulator"\nmodel = "sim"\n'
        '[experiments.word_association]\nlanguages = ["en"]\ncategories = ["risk"]\n'
        "trials_per_category = 2\nexplicit_per_category = 0\n"
    )
    new_store = stored / "new" / "n.duckdb"
    line = one_line(
        read_only(stored, "run", str(config), "--store", str(new_store), "--quiet", cwd=tmp_path)
    )
    assert str(stored / "new") in line and "Read-only file system" in line


@needs_unshare
def test_analysis_and_sql_output_into_a_read_only_folder(stored: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    store = str(stored / "s.duckdb")
    line = one_line(read_only(out, "analyze", "--store", store, "--out", str(out), cwd=tmp_path))
    # Polars shortens the path it names ("...pytest-of-root/.../explicit_answers_summary.csv"):
    # the first table the analysis writes, whichever that is
    assert (
        "Read-only file system" in line
        and "/out/" in line
        and line.endswith(".csv (set POLARS_VERBOSE=1 to see full path)")
    )
    line = one_line(read_only(out, "analyze", "--store", store, "--out", str(out / "x"), cwd=out))
    assert str(out / "x") in line
    line = one_line(
        read_only(out, "sql", "SELECT 1", "--store", store, "--output", str(out / "o.csv"), cwd=out)
    )
    assert str(out) in line and "Read-only file system" in line
    line = one_line(read_only(out, "demo", "--out", str(out / "demo"), cwd=out))
    assert str(out / "demo") in line


@needs_unshare
def test_read_only_store_file(stored: Path, tmp_path: Path) -> None:
    store = stored / "s.duckdb"
    src = tmp_path / "more.jsonl"
    src.write_text(json.dumps({**EXPLICIT_LINE, "content": "cisgender"}) + "\n")
    line = one_line(read_only(store, "import", str(src), "--store", str(store), cwd=tmp_path))
    assert "s.duckdb" in line and "Read-only file system" in line
    assert _count(store) == 1


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (
            OSError(errno.EROFS, "Read-only file system", "/data/s.duckdb.lock"),
            "error: /data/s.duckdb.lock: Read-only file system",
        ),
        (
            PermissionError(errno.EACCES, "Permission denied", "/data/out"),
            "error: /data/out: Permission denied",
        ),
        (
            OSError(errno.EXDEV, "Invalid cross-device link", "/a/.x.tmp", None, "/b/x"),
            "error: /a/.x.tmp -> /b/x: Invalid cross-device link",
        ),
        # Polars and other native writers give no errno, only a message
        (
            OSError("Read-only file system (os error 30): /out/cells.csv"),
            "error: Read-only file system (os error 30): /out/cells.csv",
        ),
        (OSError(errno.ENOSPC, "No space left on device"), "error: [Errno 28] No space left"),
    ],
)
def test_an_os_error_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    exc: OSError,
    expected: str,
) -> None:
    def fail(args: object) -> int:
        raise exc

    monkeypatch.setattr(cli, "_dispatch", fail)
    assert cli.main(["status"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and len(err.strip().splitlines()) == 1


@needs_unshare
def test_read_only_commands_answer_from_a_read_only_mount(stored: Path) -> None:
    """Readers only read the lock file (store/lock.py `holder`), so a store on a read-only
    mount, which no run can hold, answers; with a lock file left beside it and without one."""
    assert (stored / "s.duckdb.lock").exists()  # left by the import
    for _ in range(2):
        result = read_only(
            stored,
            "sql",
            "SELECT count(*) AS n FROM responses",
            "--store",
            "s.duckdb",
            "--format",
            "json",
            cwd=stored,
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == [{"n": 1}]
        result = read_only(stored, "status", "--store", "s.duckdb", "--json", cwd=stored)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["done"] == 1
        (stored / "s.duckdb.lock").unlink(missing_ok=True)
    assert not (stored / "s.duckdb.lock").exists()  # and none was created

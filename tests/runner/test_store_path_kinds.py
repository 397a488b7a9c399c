"""A store path that is not a regular file is refused, in one line, by every command and call
that opens a store, before anything opens it (issue 33): a FIFO blocked DuckDB's open for
ever (`sql`, `status`, `show`, `plan` hung), and so does a FIFO `.wal` beside a store.
A NUL byte in any path is one line, exit 2; every other byte, UTF-8 or not, works.

The refusals run in a child process that calls each command in turn, with a timeout: a hang
fails the command's test instead of blocking the suite, and one interpreter start serves all
the commands (each case is the `ibias` command's `main`, as the console script calls it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ibias
from ibias.runner.cli import main
from tests.helpers import model_block, write_config
from tests.store.test_importer import lines

#: For the whole child process; each command takes well under a second when nothing hangs.
TIMEOUT_S = 120

DRIVER = r"""
import contextlib, io, json, sys, time
import ibias
from ibias.runner.cli import main

for name, kind, argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        if kind == "cli":
            code = main(argv)
        else:
            try:
                getattr(ibias, argv[0])(*argv[1:])
                code = 0
            except ibias.StoreError as exc:
                code, _ = 2, print(f"error: {exc}", file=sys.stderr)
    seconds = time.monotonic() - start
    print(json.dumps({"name": name, "code": code, "err": err.getvalue(), "s": seconds}), flush=True)
"""

#: (case, "cli" or "api", arguments) with {store}, {config}, {store_config}, {replies}, {out},
#: {demo} filled in by `cases`.
CASES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("sql", "cli", ("sql", "SELECT 1", "--store", "{store}")),
    ("status", "cli", ("status", "--store", "{store}")),
    ("status --json", "cli", ("status", "--store", "{store}", "--json")),
    ("show --random 1", "cli", ("show", "--random", "1", "--store", "{store}")),
    ("analyze", "cli", ("analyze", "--store", "{store}", "--out", "{out}")),
    ("import", "cli", ("import", "{replies}", "--store", "{store}")),
    ("plan", "cli", ("plan", "{config}", "--store", "{store}")),
    ("run", "cli", ("run", "{config}", "--store", "{store}", "--quiet")),
    ("batches cancel", "cli", ("batches", "cancel", "{config}", "--store", "{store}")),
    ("demo", "cli", ("demo", "--out", "{demo}")),
    ("status CONFIG", "cli", ("status", "{store_config}")),
    ("sql --config", "cli", ("sql", "SELECT 1", "--config", "{store_config}")),
    ("plan, [run] store", "cli", ("plan", "{store_config}")),
    ("run, [run] store", "cli", ("run", "{store_config}", "--quiet")),
    ("ibias.sql", "api", ("sql", "{store}", "SELECT 1")),
    ("ibias.connect", "api", ("connect", "{store}")),
    ("ibias.analyze", "api", ("analyze", "{store}", "{out}")),
    ("ibias.import_replies", "api", ("import_replies", "{replies}", "{store}")),
)


def setup(folder: Path, kind: str) -> dict[str, str]:
    """The paths the cases name: a store that is a FIFO or the device /dev/zero (the demo's
    through a link, as `--out` names only its folder), and configs that name it."""
    folder.mkdir(parents=True, exist_ok=True)
    replies = folder / "replies.jsonl"
    replies.write_text("".join(json.dumps(r) + "\n" for r in lines()))
    demo = folder / "demo"
    demo.mkdir()
    if kind == "fifo":
        store = folder / "store.duckdb"
        os.mkfifo(store)
        os.mkfifo(demo / "demo.duckdb")
    else:
        store = Path(kind)
        (demo / "demo.duckdb").symlink_to(kind)
    block = model_block("m", provider="simulator", model="x", max_tokens=16)
    (folder / "cfg").mkdir()
    (folder / "named").mkdir()
    config = write_config(folder / "cfg", [block], n_prompts=2, store=None)
    store_config = write_config(folder / "named", [block], n_prompts=2, store=None)
    text = store_config.read_text().replace("[run]\n", f'[run]\nstore = "{store}"\n', 1)
    store_config.write_text(text)
    return {
        "store": str(store),
        "config": str(config),
        "store_config": str(store_config),
        "replies": str(replies),
        "out": str(folder / "out"),
        "demo": str(demo),
    }


def refusals(folder: Path, kind: str) -> dict[str, dict[str, Any]]:
    """Each case's exit code and stderr, from one child process; a case that hangs is
    missing (the child is killed at the timeout), and so are those after it."""
    paths = setup(folder, kind)
    cases = [(name, how, [a.format(**paths) for a in argv]) for name, how, argv in CASES]
    try:
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, json.dumps(cases)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
            cwd=folder,
        )
        output = done.stdout
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
    results = {}
    for line in output.splitlines():
        if line.startswith("{"):
            result = json.loads(line)
            results[result["name"]] = result
    return results


@pytest.fixture(scope="module")
def fifo_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return refusals(tmp_path_factory.mktemp("fifo"), "fifo")


@pytest.fixture(scope="module")
def zero_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return refusals(tmp_path_factory.mktemp("zero"), "/dev/zero")


def check_refused(results: dict[str, dict[str, Any]], name: str, what: str) -> None:
    assert name in results, f"{name} did not finish: it hung on the store (or crashed)"
    result = results[name]
    lines = result["err"].strip().splitlines()
    assert result["code"] == 2 and len(lines) == 1, result
    assert "is not a regular file" in lines[0] and what in lines[0], lines[0]


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_a_fifo_store_is_refused_not_waited_on(
    name: str, fifo_results: dict[str, dict[str, Any]]
) -> None:
    check_refused(fifo_results, name, "(a FIFO or pipe)")


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_dev_zero_as_store_is_refused(name: str, zero_results: dict[str, dict[str, Any]]) -> None:
    check_refused(zero_results, name, "(a character device)")


def test_a_fifo_wal_beside_a_store_is_refused(tmp_path: Path) -> None:
    """DuckDB opens `STORE.wal` too, and blocks on a FIFO there as on the store itself."""
    store = tmp_path / "store.duckdb"
    replies = tmp_path / "replies.jsonl"
    replies.write_text("".join(json.dumps(r) + "\n" for r in lines()))
    assert main(["import", str(replies), "--store", str(store)]) == 0
    os.mkfifo(tmp_path / "store.duckdb.wal")
    for argv in (["sql", "SELECT 1"], ["status"], ["import", str(replies)]):
        done = subprocess.run(
            [sys.executable, "-m", "ibias", *argv, "--store", str(store)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip() == (
            f"error: {store}.wal (beside store {store}) is not a regular file (a FIFO or pipe), "
            "remove it"
        )


# --- NUL and other bytes ------------------------------------------------------------------------


def one_line(code: int, err: str) -> str:
    assert code == 2, err
    out = err.strip().splitlines()
    assert len(out) == 1 and "Traceback" not in err, err
    return out[0]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(
        tmp_path, [model_block("m", provider="simulator", model="x", max_tokens=16)], n_prompts=2
    )


def test_a_nul_in_run_store_is_one_line(
    tmp_path: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = config.read_text()
    start = text.index("store = ")
    end = text.index("\n", start)
    config.write_text(text[:start] + 'store = "s\\u0000.duckdb"' + text[end:])
    for argv in (
        ["plan", str(config)],
        ["run", str(config), "--quiet"],
        ["status", str(config)],
        ["sql", "SELECT 1", "--config", str(config)],
        ["show", "--config", str(config)],
    ):
        line = one_line(main(argv), capsys.readouterr().err)
        assert line == f"error: {config}: run.store: expected a path, got 's\\x00.duckdb'", argv


@pytest.mark.parametrize(
    "argv",
    [
        ["sql", "SELECT 1", "--store", "s\0.duckdb"],
        ["status", "--store", "s\0.duckdb"],
        ["show", "--store", "s\0.duckdb"],
        ["analyze", "--store", "s\0.duckdb"],
        ["import", "r.jsonl", "--store", "s\0.duckdb"],
        ["plan", "{config}", "--store", "s\0.duckdb"],
        ["run", "{config}", "--store", "s\0.duckdb"],
        ["batches", "cancel", "{config}", "--store", "s\0.duckdb"],
        ["sql", "SELECT 1", "--config", "c\0.toml"],
        ["plan", "c\0.toml"],
        ["analyze", "--out", "o\0ut"],
        ["demo", "--out", "o\0ut"],
        ["sql", "SELECT 1", "--output", "o\0.csv"],
        ["import", "--stimuli", "p\0ack", "r.jsonl"],
        ["stimuli", "check", "p\0ack"],
    ],
)
def test_a_nul_in_any_path_argument_is_one_line(
    argv: list[str], config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    words = [a.replace("{config}", str(config)) for a in argv]
    line = one_line(main(words), capsys.readouterr().err)
    assert "a path cannot hold a NUL byte" in line


def test_a_nul_in_a_store_path_given_to_the_api_is_a_store_error(
    tmp_path: Path, config: Path
) -> None:
    replies = tmp_path / "replies.jsonl"
    replies.write_text("".join(json.dumps(r) + "\n" for r in lines()))
    for call in (
        lambda: ibias.sql("s\0.duckdb", "SELECT 1"),
        lambda: ibias.connect("s\0.duckdb"),
        lambda: ibias.import_replies(replies, "s\0.duckdb"),
        lambda: ibias.plan(config, store="s\0.duckdb"),
    ):
        with pytest.raises(ibias.StoreError, match="a path cannot hold a NUL byte"):
            call()
    with pytest.raises(ibias.ConfigError, match="a path cannot hold a NUL byte"):
        ibias.load_config("c\0.toml")


def test_a_store_in_a_folder_named_in_latin1_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bytes that are not UTF-8 come from argv as lone surrogates; DuckDB takes only UTF-8,
    so such a folder is passed to it through a descriptor; the store works as any other."""
    folder = Path(os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9"))
    folder.mkdir()
    store = folder / "store.duckdb"
    replies = tmp_path / "replies.jsonl"
    replies.write_text("".join(json.dumps(r) + "\n" for r in lines()))
    assert main(["import", str(replies), "--store", str(store)]) == 0
    assert main(["sql", "SELECT count(*) AS n FROM responses", "--store", str(store)]) == 0
    assert "4" in capsys.readouterr().out
    assert main(["status", "--store", str(store), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["store"].endswith("/caf\\xe9/store.duckdb")
    assert len(ibias.sql(store, "SELECT * FROM responses")) == 4
    assert (store.parent / "store.duckdb").is_file()  # the store and its lock are where named
    assert sorted(p.name for p in folder.iterdir()) == ["store.duckdb", "store.duckdb.lock"]


def test_a_run_in_a_latin1_folder_works_from_the_command_line(tmp_path: Path) -> None:
    """The real command line, with the folder's bytes in argv: run, then query."""
    folder = os.fsencode(tmp_path) + b"/r\xe9sultats"
    os.mkdir(folder)
    config = write_config(
        Path(os.fsdecode(folder)),
        [model_block("m", provider="simulator", model="x", max_tokens=16)],
        n_prompts=2,
        store=None,
    )
    text = config.read_text().replace("[run]\n", '[run]\nstore = "s.duckdb"\n', 1)
    config.write_text(text)
    for argv in ([b"run", os.fsencode(config), b"--quiet"], [b"status", os.fsencode(config)]):
        done = subprocess.run(
            [os.fsencode(sys.executable), b"-m", b"ibias", *argv],
            capture_output=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    store = Path(os.fsdecode(folder + b"/s.duckdb"))
    assert ibias.sql(store, "SELECT count(*) AS n FROM responses")["n"].to_list() == [2]


def test_a_store_file_named_in_latin1_is_refused_before_a_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DuckDB cannot be given such a file's own name at all: one line, and no lock is left."""
    store = Path(os.fsdecode(os.fsencode(tmp_path) + b"/st\xffore.duckdb"))
    replies = tmp_path / "replies.jsonl"
    replies.write_text("".join(json.dumps(r) + "\n" for r in lines()))
    line = one_line(main(["import", str(replies), "--store", str(store)]), capsys.readouterr().err)
    assert "DuckDB opens only files whose own name is UTF-8" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replies.jsonl"]

"""Small things a user trips on (issue 24): a mistyped `analyze --store` leaves no lock file,
the demo's last lines say how to query its store, and plain `ibias status` after `make demo`
names the demo's store."""

from __future__ import annotations

from pathlib import Path

import pytest

from ibias.runner.cli import main
from ibias.runner.commands.demo import demo_next_steps


def test_analyze_of_a_missing_store_leaves_no_lock(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["analyze", "--store", "nope.duckdb", "--out", "out"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: no store at nope.duckdb (run `ibias run CONFIG` first, or pass --store)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_demo_ends_with_commands_that_query_its_store() -> None:
    lines = demo_next_steps(Path("out/demo/demo.duckdb"), ".venv/bin/ibias")
    assert lines[0] == "store: out/demo/demo.duckdb; query it with"
    assert lines[1] == "  .venv/bin/ibias status --store out/demo/demo.duckdb"
    assert lines[2].startswith('  .venv/bin/ibias sql --store out/demo/demo.duckdb "SELECT ')
    assert lines[3] == "  .venv/bin/ibias show --store out/demo/demo.duckdb --random 1"


def test_status_without_a_store_names_the_demos_after_make_demo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["status"]) == 2
    assert "demo" not in capsys.readouterr().err  # no demo store: the plain message
    (tmp_path / "out" / "demo").mkdir(parents=True)
    (tmp_path / "out" / "demo" / "demo.duckdb").write_bytes(b"")
    assert main(["status"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: no store at {tmp_path / 'runs' / 'ibias.duckdb'} (run `ibias run CONFIG` first, "
        "or pass --store; the demo's is out/demo/demo.duckdb: --store out/demo/demo.duckdb)"
    ]

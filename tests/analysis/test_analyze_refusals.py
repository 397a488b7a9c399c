"""`ibias analyze` refuses, in one line with exit 2 and before writing anything, what it
cannot make a report of (issue 34): a store with no replies (it exited 0 with a report of
empty tables and no hint), and an output folder that is a file (it said only `README.md:
File exists`, after the whole analysis).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import ibias
from ibias.runner.cli import main
from tests.helpers import model_block, write_config


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """`ibias ARGV` must exit 2 with one line on stderr and no traceback: that line."""
    capsys.readouterr()
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def unanswered(tmp_path: Path) -> Path:
    """A store whose run planned 5 trials and sent none (its budget, 0, was spent)."""
    config = write_config(tmp_path, [model_block("m", provider="simulator")], n_prompts=5)
    assert main(["run", str(config), "--max-cost", "0", "--quiet"]) == 1  # stopped by budget
    return tmp_path / "store.duckdb"


def test_a_store_with_trials_and_no_replies_is_refused_in_one_line(
    unanswered: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    line = refused(capsys, "analyze", "--store", str(unanswered), "--out", str(out))
    assert "no replies to analyse" in line and "5 trials planned, none answered" in line
    assert "ibias run" in line
    assert not out.exists()  # no report of empty tables


def test_the_api_refuses_it_too(unanswered: Path, tmp_path: Path) -> None:
    with pytest.raises(ibias.StoreError, match="no replies to analyse"):
        ibias.analyze(unanswered, tmp_path / "out", bootstrap=10)


@pytest.mark.parametrize("under", [False, True], ids=["a file", "under a file"])
def test_out_naming_a_file_says_it_must_be_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], under: bool
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# notes\n")
    out = readme / "analysis" if under else readme
    # the store is never opened: the folder is checked first (a store that is not there
    # would otherwise be the complaint)
    line = refused(capsys, "analyze", "--store", str(tmp_path / "none.duckdb"), "--out", str(out))
    assert "must be a folder" in line
    assert str(out) in line
    assert ("under a file" in line) == under
    assert readme.read_text() == "# notes\n"  # untouched

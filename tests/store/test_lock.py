"""The store's lock file (store/lock.py): never followed through a symbolic link, never made
beside a device or a folder; each refusal is one line, exit 2, and touches nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ibias.runner.cli import main
from ibias.store.lock import StoreLock, StoreLockError, holder, lock_path
from tests.helpers import model_block, write_config
from tests.store.test_importer import lines


@pytest.fixture
def replies(tmp_path: Path) -> Path:
    src = tmp_path / "replies.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in lines()) + "\n")
    return src


def one_line(code: int, err: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    got = err.strip().splitlines()
    assert len(got) == 1 and got[0].startswith("error: "), err
    return got[0]


def test_a_symlinked_lock_file_is_refused_and_its_target_untouched(
    tmp_path: Path, replies: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store.duckdb"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    lock_path(store).symlink_to(victim)
    with pytest.raises(StoreLockError, match="symbolic link"):
        StoreLock(store).acquire()
    assert holder(store) is None  # read without following it either
    code = main(["import", str(replies), "--store", str(store)])
    assert "is a symbolic link" in one_line(code, capsys.readouterr().err)
    assert victim.read_text() == "precious" and not store.exists()


def test_a_dangling_symlink_is_not_created_through(tmp_path: Path) -> None:
    store = tmp_path / "store.duckdb"
    lock_path(store).symlink_to(tmp_path / "made-through-the-link")
    with pytest.raises(StoreLockError):
        StoreLock(store).acquire()
    assert not (tmp_path / "made-through-the-link").exists()


def test_a_fifo_at_the_lock_path_is_refused_not_waited_on(tmp_path: Path) -> None:
    store = tmp_path / "store.duckdb"
    os.mkfifo(lock_path(store))
    with pytest.raises(StoreLockError, match="not a regular file"):
        StoreLock(store).acquire()


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero"])
def test_a_store_that_is_a_device_makes_no_lock_beside_it(
    device: str, tmp_path: Path, replies: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = Path(device + ".lock")
    existed = lock.exists()
    code = main(["import", str(replies), "--store", device])
    assert f"store {device} is not a regular file" in one_line(code, capsys.readouterr().err)
    config = write_config(tmp_path, [model_block("m", provider="simulator", model="x")])
    code = main(["run", str(config), "--store", device, "--quiet"])
    assert f"store {device} is not a regular file" in one_line(code, capsys.readouterr().err)
    assert lock.exists() == existed


def test_a_store_that_is_a_folder_makes_no_lock_beside_it(
    tmp_path: Path, replies: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "store.duckdb"
    folder.mkdir()
    code = main(["import", str(replies), "--store", str(folder)])
    assert "is a directory" in one_line(code, capsys.readouterr().err)
    assert not lock_path(folder).exists()


def test_a_regular_lock_file_still_works(tmp_path: Path) -> None:
    store = tmp_path / "store.duckdb"
    with StoreLock(store):
        who = holder(store)
        assert who is not None and who.startswith("pid ")
    assert holder(store) is None

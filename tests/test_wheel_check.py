"""The wheel check of `.ci/run` (`.ci/check_wheel.py`): what it expects from the checkout, and
that it fails on a wheel that lacks a module, as one built from a checkout without symbolic
links does. (Building the real wheel is `.ci/run`'s job: it takes a pip run.)"""

from __future__ import annotations

import importlib.util
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _check_wheel() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_wheel", ROOT / ".ci" / "check_wheel.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wheel(path: Path, names: set[str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name in sorted(names):
            archive.writestr(name, "")
    return path


def test_the_check_expects_modules_and_package_data_from_the_real_folders() -> None:
    check = _check_wheel()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    expected = check.expected_files(ROOT, pyproject["tool"]["setuptools"]["package-data"])
    for name in (
        "ibias/__init__.py",
        "ibias/errors.py",
        "ibias/runner/cli.py",
        "ibias/runner/commands/run.py",
        "ibias/store/db.py",
        "ibias/configs/demo.toml",
        "ibias/store/migrations/001_core.sql",
    ):
        assert name in expected, name
    assert not [n for n in expected if "__pycache__" in n or n.endswith(".pyc")]
    runner = {n for n in expected if n.startswith("ibias/runner/") and n.endswith(".py")}
    assert len(runner) == len(list((ROOT / "runner").rglob("*.py")))


def test_a_whole_wheel_passes_and_one_without_a_module_fails(tmp_path: Path, capsys) -> None:
    check = _check_wheel()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    expected = check.expected_files(ROOT, pyproject["tool"]["setuptools"]["package-data"])
    whole = _wheel(tmp_path / "whole.whl", expected | {"ibias-0.1.0.dist-info/RECORD"})
    assert check.main([str(whole)]) == 0
    assert check.missing_from(whole) == []
    # What a checkout without symbolic links built: the package's own files only.
    own = {n for n in expected if n.count("/") == 1 and n.endswith(".py")}
    broken = _wheel(tmp_path / "broken.whl", own)
    assert check.main([str(broken)]) == 1
    err = capsys.readouterr().err
    assert "ibias/runner/cli.py" in check.missing_from(broken)
    assert "lacks" in err and "ibias/analysis/__init__.py" in err

"""Fail when a built wheel lacks any of the package's modules or package data.

The `ibias/` package is made of symbolic links to the design's top-level folders (`runner/`,
`prompts/`, ...). On a clone made without symbolic links (Windows' default) each link is a
small text file, and the wheel silently held two files. This check reads the source tree
itself, not through the links: every `.py` file of `ibias/` and of the linked folders, and
every file the `[tool.setuptools.package-data]` patterns of `pyproject.toml` name, must be in
the wheel under `ibias/`.

    python .ci/check_wheel.py dist/ibias-0.1.0-py3-none-any.whl
"""

from __future__ import annotations

import sys
import tomllib
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "ibias"
#: The design's top-level folders, which install as `ibias.<folder>`.
FOLDERS = ("analysis", "configs", "prompts", "runner", "store")


def source_dir(package: str, root: Path = ROOT) -> Path:
    """Where a dotted package's files are in the checkout: `ibias.runner.batch` is
    `runner/batch`, `ibias` is `ibias/` (read directly, never through a link)."""
    parts = package.split(".")
    assert parts[0] == PACKAGE, package
    if len(parts) > 1 and parts[1] in FOLDERS:
        return root.joinpath(*parts[1:])
    return root.joinpath(*parts)


def _files(folder: Path) -> Iterable[Path]:
    return (
        p
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".pyc")
    )


def expected_files(root: Path, package_data: Mapping[str, Sequence[str]]) -> set[str]:
    """The wheel paths the checkout says the wheel must hold."""
    expected = {f"{PACKAGE}/{p.name}" for p in (root / PACKAGE).glob("*.py") if not p.is_symlink()}
    for folder in FOLDERS:
        expected |= {
            f"{PACKAGE}/{p.relative_to(root).as_posix()}"
            for p in _files(root / folder)
            if p.suffix == ".py"
        }
    for package, patterns in package_data.items():
        base = source_dir(package, root)
        prefix = package.replace(".", "/")
        for pattern in patterns:
            expected |= {
                f"{prefix}/{p.relative_to(base).as_posix()}"
                for p in base.glob(pattern)
                if p.is_file() and "__pycache__" not in p.parts
            }
    return expected


def missing_from(wheel: Path, root: Path = ROOT) -> list[str]:
    """The files `wheel` lacks, sorted; empty when it holds the whole package."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text("utf-8"))
    package_data = pyproject["tool"]["setuptools"].get("package-data", {})
    with zipfile.ZipFile(wheel) as archive:
        held = set(archive.namelist())
    return sorted(expected_files(root, package_data) - held)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: check_wheel.py WHEEL", file=sys.stderr)
        return 2
    wheel = Path(argv[0])
    missing = missing_from(wheel)
    if missing:
        shown = "\n  ".join(missing[:20])
        more = f"\n  ... and {len(missing) - 20} more" if len(missing) > 20 else ""
        print(
            f"{wheel.name} lacks {len(missing)} of the package's files (are ibias/'s symbolic "
            f"links real links in this checkout?):\n  {shown}{more}",
            file=sys.stderr,
        )
        return 1
    with zipfile.ZipFile(wheel) as archive:
        count = sum(1 for n in archive.namelist() if n.startswith(f"{PACKAGE}/"))
    print(f"wheel: {wheel.name} holds every module and data file of the package ({count} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The guide for plugin authors (docs/extending.md) is true: its unit and its provider, copied
out of the page, pass `mypy --strict` against the installed package (which ships `py.typed`),
and a deliberate type error in each fails, so the check does check."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import ibias

GUIDE = Path(__file__).parents[1] / "docs" / "extending.md"


def _examples() -> tuple[str, str]:
    blocks = re.findall(r"^```python\n(.*?)^```$", GUIDE.read_text("utf-8"), re.M | re.S)
    assert len(blocks) == 2, "the guide has one unit and one provider"
    return blocks[0], blocks[1]


def _mypy(folder: Path, *files: str) -> subprocess.CompletedProcess[str]:
    """`mypy --strict` on `files`, finding `ibias` as an installed package: a folder on the
    path holding only the package Python imports (editable installs hide it from mypy), so
    mypy takes its types from `py.typed` and reports errors in the given files alone."""
    site = folder / "site"
    if not site.exists():
        site.mkdir()
        (site / "ibias").symlink_to(Path(ibias.__file__).parent)
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    config = folder / "mypy.ini"
    config.write_text("[mypy]\n")
    command = [sys.executable, "-m", "mypy", "--strict", "--config-file", str(config)]
    command += ["--cache-dir", str(folder / "cache"), *files]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)


def test_the_guides_unit_and_provider_pass_mypy_strict(tmp_path: Path) -> None:
    assert (Path(ibias.__file__).parent / "py.typed").is_file()
    unit, provider = _examples()
    (tmp_path / "colours.py").write_text(unit)
    (tmp_path / "echo.py").write_text(provider)
    passed = _mypy(tmp_path, "colours.py", "echo.py")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Success: no issues found in 2 source files" in passed.stdout

    # The same files with one type error each: `build` returns settings, not experiments; the
    # provider reads a field `Sampling` does not have.
    wrong_unit = unit.replace("return [ColourExperiment(settings, seed)]", "return [settings]")
    wrong_provider = provider.replace("sampling.max_tokens", "sampling.max_token")
    assert wrong_unit != unit and wrong_provider != provider
    (tmp_path / "colours_wrong.py").write_text(wrong_unit)
    (tmp_path / "echo_wrong.py").write_text(wrong_provider)
    failed = _mypy(tmp_path, "colours_wrong.py", "echo_wrong.py")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert re.search(r"colours_wrong\.py:\d+: error: .*ColourSettings", failed.stdout)
    assert re.search(
        r'echo_wrong\.py:\d+: error: "Sampling" has no attribute "max_token"', failed.stdout
    )

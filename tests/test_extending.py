"""The guide for plugin authors (docs/extending.md) is true: its unit, the unit's analysis, its
provider and its test with the fake provider, copied out of the page, pass `mypy --strict`
against the installed package (which ships `py.typed`), a deliberate type error in each fails,
so the check does check, and the guide's test passes when pytest runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import ibias

GUIDE = Path(__file__).parents[1] / "docs" / "extending.md"


def _examples() -> tuple[str, str, str, str]:
    blocks = re.findall(r"^```python\n(.*?)^```$", GUIDE.read_text("utf-8"), re.M | re.S)
    assert len(blocks) == 4, "the guide has a unit, its analysis, a provider and a test"
    return blocks[0], blocks[1], blocks[2], blocks[3]


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
    unit, analysis, provider, test = _examples()
    (tmp_path / "colours.py").write_text(unit)
    (tmp_path / "colours_analysis.py").write_text(analysis)
    (tmp_path / "echo.py").write_text(provider)
    (tmp_path / "test_colours.py").write_text(test)
    files = ("colours.py", "colours_analysis.py", "echo.py", "test_colours.py")
    passed = _mypy(tmp_path, *files)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Success: no issues found in 4 source files" in passed.stdout

    # The same files with one type error each: `build` returns settings, not experiments; the
    # provider reads a field `Sampling` does not have.
    wrong_unit = unit.replace("return [ColourExperiment(settings, seed)]", "return [settings]")
    wrong_analysis = analysis.replace("ctx.views[NAME]", "ctx.view[NAME]")
    wrong_provider = provider.replace("sampling.max_tokens", "sampling.max_token")
    wrong_test = test.replace("len(fake.requests)", "len(fake.request)")
    assert wrong_unit != unit and wrong_provider != provider
    assert wrong_analysis != analysis and wrong_test != test
    (tmp_path / "colours_wrong.py").write_text(wrong_unit)
    (tmp_path / "analysis_wrong.py").write_text(wrong_analysis)
    (tmp_path / "echo_wrong.py").write_text(wrong_provider)
    (tmp_path / "test_wrong.py").write_text(wrong_test)
    wrong = ("colours_wrong.py", "analysis_wrong.py", "echo_wrong.py", "test_wrong.py")
    failed = _mypy(tmp_path, *wrong)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert re.search(r"colours_wrong\.py:\d+: error: .*ColourSettings", failed.stdout)
    assert re.search(
        r'analysis_wrong\.py:\d+: error: "TableContext" has no attribute "view"', failed.stdout
    )
    assert re.search(
        r'echo_wrong\.py:\d+: error: "Sampling" has no attribute "max_token"', failed.stdout
    )
    assert re.search(
        r'test_wrong\.py:\d+: error: "FakeProvider" has no attribute "request"', failed.stdout
    )


def test_the_guides_test_with_the_fake_provider_passes(tmp_path: Path) -> None:
    """The guide's test, run by pytest beside the guide's unit and analysis: its unit plans,
    runs against the fake and parses; then `analyze` of the store it leaves writes the
    analysis's table and section."""
    unit, analysis, _, test = _examples()
    (tmp_path / "colours.py").write_text(unit)
    (tmp_path / "colours_analysis.py").write_text(analysis)
    (tmp_path / "test_colours.py").write_text(test + ANALYZED)
    path = [str(tmp_path), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    command += ["--rootdir", str(tmp_path), "test_colours.py"]
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout


#: Appended to the guide's test: the analysis, through `ibias.analyze`.
ANALYZED = """

def test_the_analysis_writes_its_table_and_section(tmp_path: Path) -> None:
    test_each_trial_is_answered_and_parsed(tmp_path)
    ibias.register(UNIT)
    try:
        out = ibias.analyze(tmp_path / "colours.duckdb", tmp_path / "out", bootstrap=50)
    finally:
        ibias.unregister(NAME)
    rows = [line.split(",") for line in (out.out_dir / "colour_shares.csv").read_text().split()]
    assert rows[0] == ["model_id", "choice", "trials"]
    assert sum(int(trials) for model, _, trials in rows[1:] if model == "m") == 4
    page = out.report.read_text("utf-8")
    assert "<h2 id='colour'>Colour preference</h2>" in page
    assert all(f"<td>m</td><td>{c}</td><td>{n}</td>" in page for _, c, n in rows[1:])
"""

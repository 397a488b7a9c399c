"""A cross-experiment analysis from another package, registered through the
`ibias.cross_analyses` entry point: `ibias analyze` adds its section to the report when the
store has the kinds it reads, and a broken one stops `analyze` naming it in one line.

The plugins are real entry points: a folder on the subprocess's PYTHONPATH holds the packages
and the metadata pip writes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import IBIAS, model_block, write_config

MARGIN = '''
"""ibias_margin: a note across experiments, shown when the store has word associations."""

from ibias import CrossAnalysis, CrossEntry


def _section(ctx, tables):
    trials = ctx.views["word_association"].height
    return f"<p>The margin counted {trials} word-association trials.</p>"


ENTRY = CrossEntry(
    "margin",
    ("word_association",),
    CrossAnalysis(anchor="margin-note", title="A note in the margin", section=_section),
)
'''

BROKEN_LINE = (
    "ibias: warning: plugin 'inkblot' (ibias_inkblot:ENTRY) failed to load: "
    "RuntimeError: the ink ran dry"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("site")
    (root / "ibias_margin.py").write_text(MARGIN)
    (root / "ibias_inkblot.py").write_text('raise RuntimeError("the ink ran dry")\n')
    for name in ("margin", "inkblot"):
        info = root / f"ibias_{name}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: ibias-{name}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(
            f"[ibias.cross_analyses]\n{name} = ibias_{name}:ENTRY\n"
        )
    return root


def _ibias(site: Path, *args: str, plugins: str | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("IBIAS_PLUGINS", None)
    if plugins is not None:
        env["IBIAS_PLUGINS"] = plugins
    return subprocess.run([*IBIAS, *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def store(site: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("run")
    words = (
        '\n[experiments.word_association]\nlanguages = ["en"]\ncategories = ["risk"]\n'
        "trials_per_category = 2\nexplicit_per_category = 1\n"
    )
    config = write_config(folder, [model_block("m", provider="simulator")], n_prompts=1)
    config.write_text(config.read_text() + words)
    done = _ibias(site, "run", str(config), "--quiet", plugins="")
    assert done.returncode == 0, done.stderr
    return folder / "store.duckdb"


def test_an_entry_point_cross_analysis_adds_its_section(
    site: Path, store: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    done = _ibias(site, "analyze", "--store", str(store), "--out", str(out), plugins="margin")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    report = (out / "report.html").read_text("utf-8")
    assert "<a href='#margin-note'>A note in the margin</a>" in report
    assert "The margin counted 2 word-association trials." in report
    # Not chosen by IBIAS_PLUGINS: not loaded, no section.
    plain = tmp_path / "plain"
    done = _ibias(site, "analyze", "--store", str(store), "--out", str(plain), plugins="")
    assert done.returncode == 0, done.stderr
    assert "A note in the margin" not in (plain / "report.html").read_text("utf-8")


def test_a_broken_cross_analysis_stops_analyze_naming_it(
    site: Path, store: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    done = _ibias(site, "analyze", "--store", str(store), "--out", str(out), plugins="inkblot")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[0] == BROKEN_LINE and len(lines) == 2 and "Traceback" not in done.stderr
    assert "plugin 'inkblot' (ibias_inkblot:ENTRY) failed to load" in lines[1]

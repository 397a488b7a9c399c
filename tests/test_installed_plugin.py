"""An installed plugin cannot change the suite's results: tests/conftest.py pins `IBIAS_PLUGINS`
to none, so the registry, config and analysis tests pass the same with a plugin beside ibias.

The plugin is installed the way pip leaves one: a folder on the subprocess's PYTHONPATH with a
package and its `.dist-info` whose entry_points.txt adds an experiment (`ibias.experiments`),
a provider (`ibias.providers`) and a cross-experiment analysis (`ibias.cross_analyses`). A
subprocess first shows the plugin is visible (unpinned, each group lists it), then runs the test
files with it on the path. The files: the two registries' and the plugin-policy tests whole,
the config tests whole, and of the analysis tests the ones that list experiments and report
sections without a run of their own (the analysis files that run ibias end to end take minutes
each and read the same registries; `make torture` runs the whole analysis folder with the
plugin installed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The test files run with the plugin installed.
FILES = (
    "tests/prompts/test_registry.py",
    "tests/prompts/test_plugins.py",
    "tests/runner/providers/test_registry.py",
    "tests/runner/config/test_config.py",
    "tests/analysis/test_report_layout.py",
    "tests/analysis/test_only_unit.py",
)

PACKAGE = '''
"""ibias_intruder: one of each kind of plugin, all valid, as a user may have installed."""

from collections.abc import Sequence
from typing import Any, Self

from ibias import CrossEntry, ExperimentUnit, Item, Provider, Reply, TrialKind


class OrbitItem(Item, frozen=True, kw_only=True):
    orbit: str = ""


UNIT = ExperimentUnit(
    name="orbits",
    title="Orbits",
    build=lambda table, seed, base_dir: [],
    kinds=(TrialKind(name="orbits", title="Orbits", item=OrbitItem),),
)


class Relay(Provider):
    @classmethod
    def from_config(cls, model: Any, api_key: str | None, context: Any) -> Self:
        return cls()

    async def complete(self, messages: Sequence[Any], sampling: Any) -> Reply:
        return Reply("relayed", "stop", None, 1, 1, None, None, {})


CROSS = CrossEntry(name="intruder", kinds=("orbits",), analysis="ibias_intruder:nothing")
'''

ENTRY_POINTS = """[ibias.experiments]
orbits = ibias_intruder:UNIT

[ibias.providers]
relay = ibias_intruder:Relay

[ibias.cross_analyses]
intruder = ibias_intruder:CROSS
"""

LISTED = """
from ibias import plugins
print(*(",".join(plugins.names(group)) for group in plugins.GROUPS), sep=";")
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("site")
    (root / "ibias_intruder.py").write_text(PACKAGE)
    info = root / "ibias_intruder-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ibias-intruder\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


def _env(site: Path) -> dict[str, str]:
    # The tree under test stays importable (a worktree's PYTHONPATH), the plugin comes after
    # it, and `IBIAS_PLUGINS` is unset as on a user's machine: only the suite's pin may hide it.
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(site)])}
    env.pop("IBIAS_PLUGINS", None)
    # The analysis tests' own long variants (1,000 rosters) stay for their own `make torture`
    # lines: here each test file runs its ordinary size.
    env.pop("IBIAS_TORTURE", None)
    return env


def test_the_fixture_plugin_is_installed_in_every_group(site: Path) -> None:
    shown = subprocess.run(
        [sys.executable, "-c", LISTED],
        env=_env(site),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "orbits;relay;intruder"


def _passes_with_the_plugin(site: Path, files: tuple[str, ...], timeout: float) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *files],
        env=_env(site),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    tail = "\n".join(run.stdout.splitlines()[-30:])
    assert run.returncode == 0, tail
    assert " passed" in tail and "failed" not in tail


def test_registry_config_and_analysis_tests_pass_with_a_plugin_installed(site: Path) -> None:
    _passes_with_the_plugin(site, FILES, timeout=900)


@pytest.mark.skipif(
    not os.environ.get("IBIAS_TORTURE"),
    reason="every analysis test with the plugin installed (8 minutes on 2 cores): `make torture`",
)
def test_every_analysis_test_passes_with_a_plugin_installed(site: Path) -> None:
    """The whole analysis folder, end-to-end runs included, beside the registries and config."""
    _passes_with_the_plugin(site, (*FILES[:4], "tests/analysis"), timeout=3600)

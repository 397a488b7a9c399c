"""Experiment plugins that fail, plugins chosen by IBIAS_PLUGINS, and built-in units imported
only when needed.

The plugins are real entry points: a folder on the subprocess's PYTHONPATH holds two packages
and their installed metadata (what pip writes), one whose module raises on import
(`colours = ibias_broken:UNIT`) and one that gives a unit (`shapes = ibias_shapes:UNIT`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ibias import errors, plugins
from ibias.prompts import registry
from ibias.store.db import open_store
from tests.helpers import IBIAS, model_block, write_config

BROKEN_LINE = (
    "ibias: warning: plugin 'colours' (ibias_broken:UNIT) failed to load: "
    "RuntimeError: the colour tables are missing"
)

SHAPES = """
from ibias import ExperimentUnit, Item, TrialKind


class ShapeItem(Item, frozen=True, kw_only=True):
    shape: str = ""


UNIT = ExperimentUnit(
    name="shapes",
    title="Shapes",
    build=lambda table, seed, base_dir: [],
    kinds=(TrialKind(name="shapes", title="Shapes", item=ShapeItem),),
)
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("site")
    (root / "ibias_broken.py").write_text('raise RuntimeError("the colour tables are missing")\n')
    (root / "ibias_shapes.py").write_text(SHAPES)
    for name, entry in (("broken", "colours = ibias_broken:UNIT"), ("shapes", SHAPES_ENTRY)):
        info = root / f"ibias_{name}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: ibias-{name}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[ibias.experiments]\n{entry}\n")
    return root


SHAPES_ENTRY = "shapes = ibias_shapes:UNIT"


def _ibias(site: Path, *args: str, plugins: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("IBIAS_PLUGINS", None)
    if plugins is not None:
        env["IBIAS_PLUGINS"] = plugins
    return subprocess.run([*IBIAS, *args], env=env, capture_output=True, text=True, timeout=120)


def _config(tmp_path: Path, experiment: str) -> Path:
    config = write_config(tmp_path, [model_block("m", provider="simulator")], n_prompts=2)
    if experiment != "prompts":
        config.write_text(config.read_text() + f"\n[experiments.{experiment}]\n")
    return config


def test_a_broken_plugin_is_named_in_one_line_and_sql_and_status_still_work(
    site: Path, tmp_path: Path
) -> None:
    store = tmp_path / "s.duckdb"
    open_store(store, create=True).close()
    sql = _ibias(site, "sql", "--store", str(store), "SELECT count(*) AS n FROM trials")
    assert sql.returncode == 0, sql.stderr
    assert "0" in sql.stdout
    assert sql.stderr.strip() in ("", BROKEN_LINE)
    status = _ibias(site, "status", "--store", str(store))
    assert status.returncode == 0, status.stderr
    assert status.stderr.strip() in ("", BROKEN_LINE)

    # A command that consults the experiments warns, once, and goes on.
    plan = _ibias(site, "plan", str(_config(tmp_path, "prompts")), "--json")
    assert plan.returncode == 0, plan.stderr
    assert plan.stderr.strip() == BROKEN_LINE


def test_a_config_that_needs_the_broken_plugin_is_refused_naming_it(
    site: Path, tmp_path: Path
) -> None:
    plan = _ibias(site, "plan", str(_config(tmp_path, "colours")))
    assert plan.returncode == 2
    lines = plan.stderr.strip().splitlines()
    assert lines[0] == BROKEN_LINE
    assert len(lines) == 2 and "experiments.colours" in lines[1]
    assert "plugin 'colours' (ibias_broken:UNIT) failed to load" in lines[1]
    assert "Traceback" not in plan.stderr


def test_ibias_plugins_chooses_which_entry_points_load(site: Path, tmp_path: Path) -> None:
    shapes = _config(tmp_path, "shapes")
    chosen = _ibias(site, "plan", str(shapes), "--json", plugins="shapes")
    assert chosen.returncode == 0, chosen.stderr
    assert chosen.stderr == ""  # the broken one was not loaded
    none = _ibias(site, "plan", str(shapes), plugins="")
    assert none.returncode == 2
    assert "unknown experiment" in none.stderr and "failed to load" not in none.stderr
    missing = _ibias(site, "plan", str(_config(tmp_path, "prompts")), plugins="circles")
    assert missing.returncode == 0
    assert missing.stderr.strip() == (
        "ibias: warning: plugin 'circles' (not installed) failed to load: IBIAS_PLUGINS names it"
    )


def test_a_store_with_trials_no_loaded_unit_provides_is_refused_while_a_plugin_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry.require_kinds(["colours"])  # no plugin failed: a store of another process
    failed = plugins.FailedPlugin("colours", "ibias_broken:UNIT", "RuntimeError: boom")
    monkeypatch.setitem(plugins._FAILED, plugins.EXPERIMENTS, [failed])
    registry.require_kinds(["allocation", "prompts"])
    with pytest.raises(plugins.PluginError) as caught:
        registry.require_kinds(["allocation", "colours"])
    assert str(caught.value) == (
        "no loaded experiment unit provides the store's trials of kind 'colours', and plugin "
        "'colours' (ibias_broken:UNIT) failed to load: RuntimeError: boom"
    )
    assert isinstance(caught.value, errors.RegistryError)
    with pytest.raises(plugins.PluginError, match="experiment 'colours'"):
        registry.unit("colours")


def test_builtin_units_are_imported_only_when_needed_and_unregistering_prevents_it() -> None:
    code = (
        "import sys\n"
        "from ibias.prompts import registry\n"
        "registry.unregister('allocation')\n"
        "assert registry.unit('word_association').name == 'word_association'\n"
        "print([u.name for u in registry.units()])\n"
        "print(sorted(m for m in sys.modules if m.startswith(("
        "'ibias.prompts.allocation', 'ibias.runner'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['word_association', 'prompts']", "[]"]


def test_analyze_of_a_store_whose_kind_only_a_broken_plugin_could_give_is_refused(
    site: Path, tmp_path: Path
) -> None:
    store = tmp_path / "s.duckdb"
    replies = tmp_path / "shapes.jsonl"
    line = '{"experiment": "shapes", "model_id": "human", "language": "en", '
    replies.write_text(line + '"item": {"shape": "square"}, "content": "A square."}\n')
    imported = _ibias(site, "import", str(replies), "--store", str(store), plugins="shapes")
    assert imported.returncode == 0, imported.stderr
    # Only the broken plugin is chosen: nothing loaded provides the store's `shapes` trials.
    done = _ibias(site, "analyze", "--store", str(store), "--out", str(tmp_path / "out"),
                  plugins="colours")  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0] == BROKEN_LINE and len(lines) == 2 and "Traceback" not in done.stderr
    assert "the store's trials of kind 'shapes'" in lines[1]
    assert "plugin 'colours' (ibias_broken:UNIT) failed to load" in lines[1]

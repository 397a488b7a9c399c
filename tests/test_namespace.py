"""The package installs and imports only as `ibias.*`, and each module exists once per process."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import pytest


@pytest.mark.parametrize("name", ["runner", "prompts", "store", "analysis", "configs"])
def test_generic_top_level_modules_are_not_importable(name: str) -> None:
    assert importlib.util.find_spec(name) is None, f"{name!r} is importable as a top-level module"
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(name)


def test_every_module_file_is_loaded_under_one_name_only() -> None:
    # A file imported as both `runner.x` and `ibias.runner.x` would hold two registries. The
    # entry points of each room are imported here, so the test holds when it runs alone too.
    for entry in (
        "analysis.analyze",
        "runner.cli",
        "runner.execution.run",
        "store.db",
        "prompts.registry",
    ):
        importlib.import_module(f"ibias.{entry}")
    by_file: dict[str, list[str]] = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and name.split(".")[0] == "ibias":
            by_file.setdefault(os.path.realpath(path), []).append(name)
    twice = {f: names for f, names in by_file.items() if len(names) > 1}
    assert twice == {}
    assert len(by_file) > 20  # the imports above pulled in most of the package


def test_packaged_demo_config_is_reachable_as_package_data() -> None:
    from importlib import resources

    demo = resources.files("ibias") / "configs" / "demo.toml"
    assert "[experiments.word_association]" in demo.read_text("utf-8")

"""The error classes renamed in issue 36 (each reused its branch's name: `ConfigError`,
`StoreError`, `StimuliError`) are still importable under their old names for one release:
the same class, with a DeprecationWarning naming the new one, so a script written against
ibias 0.1 keeps catching what it caught. Other names of those modules still raise
AttributeError / ImportError as before."""

from __future__ import annotations

import importlib

import pytest

from ibias import errors

#: (module, old name, new name, branch).
RENAMED = [
    ("ibias.runner.config", "ConfigError", "ConfigFileError", errors.ConfigError),
    ("ibias.store.db", "StoreError", "StoreAccessError", errors.StoreError),
    ("ibias.prompts.stimuli.pack", "StimuliError", "StimuliFileError", errors.StimuliError),
    ("ibias.prompts.stimuli", "StimuliError", "StimuliFileError", errors.StimuliError),
]


@pytest.mark.parametrize(("module", "old", "new", "branch"), RENAMED)
def test_the_old_name_is_the_new_class_with_a_warning(
    module: str, old: str, new: str, branch: type[Exception]
) -> None:
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{old} is renamed {new}"):
        cls = getattr(mod, old)
    assert cls is getattr(mod, new)
    assert issubclass(cls, branch) and cls is not branch


@pytest.mark.parametrize(("module", "old", "new", "branch"), RENAMED)
def test_from_import_of_the_old_name_warns_at_the_importer(
    module: str, old: str, new: str, branch: type[Exception]
) -> None:
    with pytest.warns(DeprecationWarning) as caught:
        exec(f"from {module} import {old}", {})
    assert all(w.filename == "<string>" for w in caught)


def test_a_class_dropped_for_its_branch_warns_and_is_the_branch() -> None:
    """`ibias.prompts.registry.RegistryError` was a subclass named like its branch: the
    branch itself now, through the same warning (from the importer's line)."""
    mod = importlib.import_module("ibias.prompts.registry")
    with pytest.warns(DeprecationWarning, match=r"registry\.RegistryError is ibias\.RegistryError"):
        cls = mod.RegistryError
    assert cls is errors.RegistryError
    with pytest.warns(DeprecationWarning) as caught:
        exec("from ibias.prompts.registry import RegistryError", {})
    assert all(w.filename == "<string>" for w in caught)


@pytest.mark.parametrize(
    "module", sorted({m for m, _, _, _ in RENAMED} | {"ibias.prompts.registry"})
)
def test_an_unknown_name_is_still_an_attribute_error(module: str) -> None:
    mod = importlib.import_module(module)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchError'"):
        mod.NoSuchError  # noqa: B018
    with pytest.raises(ImportError):
        exec(f"from {module} import NoSuchError", {})


def test_a_caught_old_name_catches_what_the_new_one_raises(tmp_path) -> None:
    """A script's `except ibias.runner.config.ConfigError` still catches a refused config."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[run\n", "utf-8")
    from ibias.runner.config import load_config

    with pytest.warns(DeprecationWarning):
        from ibias.runner.config import ConfigError  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)

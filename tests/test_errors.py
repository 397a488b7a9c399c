"""The exception tree (ibias/errors.py) is pinned: its classes and bases, the branch of every
error class of the product, the built-in bases callers still catch, and what the command line
makes of each branch (one line; exit 2, or 1 for a provider's API)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import ibias
from ibias import errors
from ibias.runner import cli
from tests.helpers import model_block, write_config

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("analysis", "prompts", "runner", "store")

#: The tree: each class and its bases.
TREE: dict[type[Exception], tuple[type[BaseException], ...]] = {
    errors.Error: (Exception,),
    errors.UsageError: (errors.Error,),
    errors.ConfigError: (errors.Error,),
    errors.StoreError: (errors.Error,),
    errors.StimuliError: (errors.Error,),
    errors.RegistryError: (errors.Error,),
    errors.ProviderError: (errors.Error,),
}

#: The product's error classes: module, class, its branch, and the built-in base that code
#: catching it (`except ValueError`) relies on, if any.
PRECISE: list[tuple[str, str, type[Exception], type[Exception] | None]] = [
    ("ibias.configfile", "ConfigFileError", errors.ConfigError, None),
    ("ibias.prompts.base", "SettingsError", errors.ConfigError, ValueError),
    ("ibias.runner.simulator.profile", "ProfileError", errors.ConfigError, ValueError),
    ("ibias.prompts.word_association.data", "DataError", errors.ConfigError, ValueError),
    ("ibias.store.db", "StoreAccessError", errors.StoreError, None),
    ("ibias.store.lock", "StoreBusyError", errors.StoreError, None),
    ("ibias.store.lock", "StoreLockError", errors.StoreError, None),
    ("ibias.store.writer", "StoreWriteError", errors.StoreError, None),
    ("ibias.store.importer", "ImportFileError", errors.StoreError, ValueError),
    ("ibias.store.experiments", "ExperimentSchemaError", errors.StoreError, None),
    ("ibias.runner.show", "ShowError", errors.StoreError, None),
    ("ibias.analysis.experiment", "AnalysisDataError", errors.StoreError, ValueError),
    ("ibias.prompts.stimuli.pack", "StimuliFileError", errors.StimuliError, ValueError),
    ("ibias.plugins", "PluginError", errors.RegistryError, None),
    ("ibias.runner.providers.registry", "UnknownProviderError", errors.RegistryError, LookupError),
    ("ibias.runner.providers.base", "AttemptError", errors.ProviderError, None),
    ("ibias.runner.batch.api", "BatchAPIError", errors.ProviderError, None),
]


def test_the_tree_is_pinned() -> None:
    assert {cls: cls.__bases__ for cls in TREE} == TREE
    assert sorted(errors.__all__) == sorted(cls.__name__ for cls in TREE)
    for cls in TREE:
        assert getattr(ibias, cls.__name__) is cls, cls
        assert cls.__doc__, f"{cls.__name__} says what it is for"


@pytest.mark.parametrize(
    ("module", "name", "branch", "builtin"), PRECISE, ids=[f"{m}.{n}" for m, n, _, _ in PRECISE]
)
def test_each_error_class_is_in_its_branch(
    module: str, name: str, branch: type[Exception], builtin: type[Exception] | None
) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, branch)
    if builtin is not None:
        assert issubclass(cls, builtin), f"{name} is still caught as {builtin.__name__}"


def _error_classes() -> list[tuple[str, str]]:
    """(module, class) of every class of the product named `...Error`."""
    found = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            tree = ast.parse(path.read_text("utf-8"))
            module = "ibias." + ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found += _named_errors(module, tree)
    # The package's own low modules (ibias/plugins.py, ibias/configfile.py, ...).
    for path in sorted((ROOT / "ibias").glob("*.py")):
        found += _named_errors(f"ibias.{path.stem}", ast.parse(path.read_text("utf-8")))
    return found


def _named_errors(module: str, tree: ast.Module) -> list[tuple[str, str]]:
    return [
        (module, node.name)
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name.endswith("Error")
    ]


def test_every_error_class_of_the_product_is_an_ibias_error() -> None:
    """A new error class joins the tree, so `except ibias.Error` and the exit codes hold."""
    classes = _error_classes()
    assert len(classes) >= len(PRECISE)
    outside = [
        f"{module}.{name}"
        for module, name in classes
        if not issubclass(getattr(importlib.import_module(module), name), errors.Error)
    ]
    assert outside == []


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (errors.UsageError, 2),
        (errors.ConfigError, 2),
        (errors.StoreError, 2),
        (errors.StimuliError, 2),
        (errors.RegistryError, 2),
        (errors.ProviderError, 1),
    ],
)
def test_each_branch_is_one_line_and_its_exit_code(
    cls: type[Exception], code: int, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    def fails(args: object) -> int:
        raise cls("what is wrong, and where")

    monkeypatch.setattr(cli, "_dispatch", fails)
    assert cli.main(["status"]) == code
    assert capsys.readouterr().err == "error: what is wrong, and where\n"


def _one_line(capsys, *argv: str) -> str:
    assert cli.main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def test_the_documented_error_paths_give_exit_2_and_one_line(tmp_path: Path, capsys) -> None:
    """One command per branch a user meets: arguments, config, an experiment's settings, a
    store, an import file, a query, a stimuli pack, a simulator profile."""
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("[run\n", "utf-8")
    unknown = write_config(tmp_path, [model_block("m", provider="nope")])
    replies = tmp_path / "r.jsonl"
    replies.write_text('{"x": 1}\n', "utf-8")
    missing = str(tmp_path / "missing.duckdb")
    assert "the following arguments are required" in _one_line(capsys, "run")
    assert "not valid TOML" in _one_line(capsys, "plan", str(bad_toml))
    assert "no provider registered as 'nope'" in _one_line(capsys, "plan", str(unknown))
    assert "no store at" in _one_line(capsys, "show", "--store", missing)
    assert "line 1" in _one_line(capsys, "import", str(replies), "--store", missing)
    assert "refused" in _one_line(capsys, "sql", "DROP TABLE x", "--store", missing)
    assert "not found" in _one_line(capsys, "stimuli", "check", str(tmp_path / "no"))
    assert "not found" in _one_line(capsys, "simulate", "--profile", str(tmp_path / "no"))

"""The product's layers, read from its source (AST), so the next engineer finds the rooms as
the design draws them (runner above prompts and store; shared/DESIGN.md):

- no module imports another module's private names (`from ibias.x import _y`, or `_y` read
  off an imported ibias module): what a module shares, it names without an underscore;
- nothing under `prompts/` or `store/` imports `ibias.runner`: the experiments and the store
  sit below the runner (data flows config -> plan -> scheduler -> store -> analysis), and what
  both need (reading TOML files: `ibias.configfile`) lives below both;
- no module over 700 lines, except those listed in `PENDING_SPLIT` at their size today, which
  may only shrink.

The product is the top-level folders `runner/`, `prompts/`, `store/`, `analysis/` (installed as
`ibias.runner`, ...) and the modules of `ibias/` itself.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("runner", "prompts", "store", "analysis")

#: The most lines a product module may have.
MAX_LINES = 700

#: Modules over MAX_LINES today, at their size when this test was written: each may shrink but
#: not grow, and its entry goes once it is at most MAX_LINES (the test says so).
PENDING_SPLIT: dict[str, int] = {}

#: (importing module, imported module, private name) allowed for now.
ALLOWED_PRIVATE: frozenset[tuple[str, str, str]] = frozenset()


def product_files() -> dict[str, Path]:
    """Every product module by its dotted name (`ibias.store.db`; a package by its own)."""
    found: dict[str, Path] = {}
    paths = [p for room in ROOMS for p in sorted((ROOT / room).rglob("*.py"))]
    paths += sorted((ROOT / "ibias").glob("*.py"))  # the rooms there are symbolic links
    for path in paths:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[0] != "ibias":
            parts.insert(0, "ibias")
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    """The absolute module a `from ... import` reads from (a relative one resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def private_uses(
    module: str, source: str, modules: frozenset[str], is_package: bool = False
) -> list[tuple[int, str, str]]:
    """(line, imported module, private name) for each private name of another product module
    that `source` (the module `module`) imports or reads off an imported module."""
    tree = ast.parse(source)
    bound: dict[str, str] = {}  # a local name -> the product module it is bound to
    uses: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is not None:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            source_module = _absolute(module, node, is_package)
            for alias in node.names:
                if f"{source_module}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{source_module}.{alias.name}"
                if _private(alias.name) and source_module in modules and source_module != module:
                    uses.append((node.lineno, source_module, alias.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = _module_of(node.value, bound, modules)
            if owner is not None and owner != module:
                uses.append((node.lineno, owner, node.attr))
    return uses


def _module_of(node: ast.expr, bound: dict[str, str], modules: frozenset[str]) -> str | None:
    """The product module an expression such as `db` or `ibias.store.db` names, if any."""
    if isinstance(node, ast.Name):
        name = bound.get(node.id)
    elif isinstance(node, ast.Attribute):
        outer = _module_of(node.value, bound, modules)
        name = f"{outer}.{node.attr}" if outer is not None else None
    else:
        return None
    return name if name is not None and (name in modules or name == "ibias") else None


def _imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, module) of every import of the module's source, however deep in a function."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node, is_package)
            yield node.lineno, source
            yield from ((node.lineno, f"{source}.{alias.name}") for alias in node.names)


def test_no_module_imports_another_modules_private_names() -> None:
    files = product_files()
    modules = frozenset(files)
    found = [
        f"{files[module].relative_to(ROOT)}:{line}: {owner}.{name}"
        for module, path in files.items()
        for line, owner, name in private_uses(
            module, path.read_text("utf-8"), modules, path.name == "__init__.py"
        )
        if (module, owner, name) not in ALLOWED_PRIVATE
    ]
    assert found == [], "private names used from another module (make them public):\n" + (
        "\n".join(found)
    )


def test_the_allowed_private_imports_are_still_there() -> None:
    """An allowed exception that was fixed is taken off the list, so it cannot come back."""
    files = product_files()
    modules = frozenset(files)
    for module, owner, name in ALLOWED_PRIVATE:
        path = files[module]
        uses = private_uses(module, path.read_text("utf-8"), modules)
        assert any(u[1:] == (owner, name) for u in uses), (
            f"{module} no longer uses {owner}.{name}: remove it from ALLOWED_PRIVATE"
        )


def test_the_check_sees_private_imports_and_attributes() -> None:
    """The finder itself: both spellings are caught, a module's own and public names are not."""
    modules = frozenset({"ibias.store", "ibias.store.db", "ibias.runner.sql"})
    source = (
        "import ibias.store.db\n"
        "from ibias.store import db\n"
        "from ibias.store import db as store_db\n"
        "from ibias.store.db import _hidden, shown\n"
        "from ibias.runner.sql import _own\n"
        "def f():\n"
        "    return db._one, store_db._two, ibias.store.db._three, db.shown, shown._not_a_module\n"
    )
    uses = private_uses("ibias.runner.sql", source, modules)
    assert sorted(uses) == [
        (4, "ibias.store.db", "_hidden"),
        (7, "ibias.store.db", "_one"),
        (7, "ibias.store.db", "_three"),
        (7, "ibias.store.db", "_two"),
    ]


@pytest.mark.parametrize("room", ["prompts", "store"])
def test_prompts_and_store_do_not_import_the_runner(room: str) -> None:
    found = []
    for module, path in product_files().items():
        if not module.startswith(f"ibias.{room}"):
            continue
        tree = ast.parse(path.read_text("utf-8"))
        for line, imported in _imports(tree, module, path.name == "__init__.py"):
            if imported == "ibias.runner" or imported.startswith("ibias.runner."):
                found.append(f"{path.relative_to(ROOT)}:{line}: {imported}")
    assert found == [], f"{room}/ imports the runner, which sits above it:\n" + "\n".join(found)


def test_no_module_is_over_the_line_limit() -> None:
    over = []
    for path in product_files().values():
        name = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text("utf-8").splitlines())
        pending = PENDING_SPLIT.get(name)
        if pending is None and lines > MAX_LINES:
            over.append(f"{name}: {lines} lines, over {MAX_LINES}: split it by job")
        elif pending is not None and lines > pending:
            over.append(f"{name}: {lines} lines, grew from {pending} while pending a split")
        elif pending is not None and lines <= MAX_LINES:
            over.append(f"{name}: {lines} lines, under {MAX_LINES}: remove it from PENDING_SPLIT")
    gone = [name for name in PENDING_SPLIT if not (ROOT / name).is_file()]
    over += [f"{name}: no longer exists: remove it from PENDING_SPLIT" for name in gone]
    assert over == [], "\n".join(over)

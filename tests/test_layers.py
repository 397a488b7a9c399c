"""The product's layers, read from its source (AST), so the next engineer finds the rooms as
the design draws them (runner above prompts and store; shared/DESIGN.md):

- no module imports another module's private names (`from ibias.x import _y`, or `_y` read
  off an imported ibias module): what a module shares, it names without an underscore;
- no room imports a room it sits below (`FORBIDDEN`; docs/architecture.md draws them): nothing
  under `prompts/` or `store/` imports `ibias.runner` (data flows config -> plan -> scheduler
  -> store -> analysis, and what both need, reading TOML files, is `ibias.configfile`), the
  analysis never imports the runner, its general modules import no experiment's analysis
  (`analysis/units/`), and inside the runner the config, the providers, the simulator and the
  scheduling sit below what runs them;
- no module over 700 lines, except those listed in `PENDING_SPLIT` at their size today, which
  may only shrink.

The product is the top-level folders `runner/`, `prompts/`, `store/`, `analysis/` (installed as
`ibias.runner`, ...) and the modules of `ibias/` itself.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

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


#: What each room may not import, and why (docs/architecture.md draws the rooms). A module is
#: checked against every entry whose room contains it; imports inside functions count too.
_CLI = ("ibias.runner.commands", "ibias.runner.cli", "ibias.runner.startup")
_ABOVE_PROVIDERS = ("ibias.runner.scheduling", "ibias.runner.execution", "ibias.runner.batch")
FORBIDDEN: dict[str, tuple[tuple[str, ...], str]] = {
    "ibias.prompts": (
        ("ibias.runner", "ibias.store", "ibias.analysis"),
        "the experiments sit below the runner, the store and the analysis",
    ),
    "ibias.store": (("ibias.runner", "ibias.analysis"), "the store sits below the runner"),
    "ibias.analysis": (("ibias.runner",), "the analysis reads the store and needs no network"),
    "ibias.runner.config": (_ABOVE_PROVIDERS + _CLI, "the config sits below what runs it"),
    "ibias.runner.providers": (
        _ABOVE_PROVIDERS + _CLI + ("ibias.runner.simulator",),
        "a provider knows only the config and its reply",
    ),
    "ibias.runner.simulator": (
        _ABOVE_PROVIDERS + _CLI,
        "the simulator is a provider's other end, below what schedules its requests",
    ),
    "ibias.runner.scheduling": (
        ("ibias.runner.execution", "ibias.runner.batch", "ibias.runner.simulator", *_CLI),
        "the scheduler is composed by a run, and sends through the provider interface only",
    ),
}

#: The analysis's own rooms: its general modules (the driver, the statistics) name no
#: experiment; a unit's analysis does not reach into another unit's.
UNITS, CROSS = "ibias.analysis.units", "ibias.analysis.cross_analyses"


def _inside(module: str, room: str) -> bool:
    return module == room or module.startswith(room + ".")


def forbidden_for(module: str) -> list[tuple[tuple[str, ...], str]]:
    """The (forbidden rooms, why) entries that apply to `module`."""
    rules = [rule for room, rule in FORBIDDEN.items() if _inside(module, room)]
    if _inside(module, "ibias.analysis") and not (_inside(module, UNITS) or _inside(module, CROSS)):
        rules.append(((UNITS, CROSS), "the analysis's general modules name no experiment"))
    if _inside(module, UNITS) and module.count(".") >= 3:
        own = ".".join(module.split(".")[:4])
        others = tuple(m for m in unit_packages() if m != own)
        rules.append(((*others, CROSS), "a unit's analysis reads no other unit's"))
    return rules


@functools.cache
def unit_packages() -> tuple[str, ...]:
    """Each experiment's analysis package (`ibias.analysis.units.<name>`), read once."""
    return tuple(m for m in product_files() if _inside(m, UNITS) and m.count(".") == 3)


def test_no_room_imports_a_room_it_sits_below() -> None:
    found = []
    for module, path in product_files().items():
        rules = forbidden_for(module)
        if not rules:
            continue
        tree = ast.parse(path.read_text("utf-8"))
        for line, imported in _imports(tree, module, path.name == "__init__.py"):
            for rooms, why in rules:
                if any(_inside(imported, room) for room in rooms):
                    found.append(f"{path.relative_to(ROOT)}:{line}: {imported} ({why})")
    assert found == [], "imports against the layers (docs/architecture.md):\n" + "\n".join(
        sorted(set(found))
    )


def test_the_rules_apply_where_they_should() -> None:
    """The rule finder itself, on names that exist today."""
    assert not forbidden_for("ibias.runner.execution.run")
    unit = forbidden_for("ibias.analysis.units.allocation.shares")
    assert any("ibias.analysis.units.word_association" in rooms for rooms, _ in unit)
    assert not any("ibias.analysis.units.allocation" in rooms for rooms, _ in unit)
    general = forbidden_for("ibias.analysis.bootstrap")
    assert any(UNITS in rooms for rooms, _ in general)
    assert not any(UNITS in rooms for rooms, _ in forbidden_for(f"{CROSS}.implicit_decision"))
    scheduler = forbidden_for("ibias.runner.scheduling.scheduler")
    assert any("ibias.runner.execution" in rooms for rooms, _ in scheduler)


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

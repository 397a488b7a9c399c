"""`defer`: a library named by `import` statements is loaded only when one of its names is read."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ibias.runner.deferred_imports import defer

NAME = "ibias_deferred_probe"


@pytest.fixture
def library(tmp_path: Path) -> Iterator[Path]:
    """A module on the path that counts its own executions in a file beside it."""
    source = tmp_path / f"{NAME}.py"
    source.write_text(
        "from pathlib import Path\n"
        "_runs = Path(__file__).with_suffix('.runs')\n"
        "_runs.write_text(str(int(_runs.read_text() or 0) + 1) if _runs.exists() else '1')\n"
        "class Error(Exception):\n    pass\n"
        "VALUE = 42\n"
    )
    sys.path.insert(0, str(tmp_path))
    yield source.with_suffix(".runs")
    sys.path.remove(str(tmp_path))
    sys.modules.pop(NAME, None)


def test_imports_load_nothing_until_a_name_is_read(library: Path) -> None:
    defer(NAME)
    import ibias_deferred_probe  # type: ignore[import-not-found]
    import ibias_deferred_probe as again  # type: ignore[import-not-found]

    assert not library.exists()  # two import statements, no execution
    assert ibias_deferred_probe.VALUE == 42
    assert library.read_text() == "1"
    assert again.VALUE == 42 and sys.modules[NAME].VALUE == 42
    with pytest.raises(ibias_deferred_probe.Error):  # exception types match the real ones
        raise sys.modules[NAME].Error("x")
    from ibias_deferred_probe import VALUE  # type: ignore[import-not-found]

    assert VALUE == 42
    assert library.read_text() == "1"  # loaded once


def test_a_loaded_or_missing_module_is_left_alone(library: Path) -> None:
    import json

    defer("json")
    assert sys.modules["json"] is json
    defer("ibias_no_such_module")
    assert "ibias_no_such_module" not in sys.modules
    with pytest.raises(ModuleNotFoundError):
        import ibias_no_such_module  # type: ignore[import-not-found]  # noqa: F401


def test_a_failing_load_raises_and_can_be_tried_again(library: Path) -> None:
    source = library.with_suffix(".py")
    good = source.read_text()
    source.write_text("raise RuntimeError('broken')\n")
    defer(NAME)
    stand_in = sys.modules[NAME]
    with pytest.raises(RuntimeError, match="broken"):
        _ = stand_in.VALUE
    assert sys.modules[NAME] is stand_in
    source.write_text(good)
    sys.path_importer_cache.clear()
    import importlib

    importlib.invalidate_caches()
    assert stand_in.VALUE == 42

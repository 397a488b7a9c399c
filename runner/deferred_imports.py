"""Libraries a command may never need, loaded on first use instead of when a module names them.

`ibias status` during a run reads everything from the run's live server (store/live.py), yet
the store's modules import DuckDB at their top, for the file path and their exception types:
about 0.15 s of a command whose goal is half a second. `defer` puts a stand-in module in
`sys.modules`, so `import duckdb` anywhere gives the stand-in, and the library itself loads at
the first read of one of its names (on the file path, at the connect; on the live path, never,
unless an error is matched against a DuckDB exception type, which loads it then, correctly).

Not the standard library's `importlib.util.LazyLoader`: on this Python (3.11) every later
`import duckdb` statement reads the lazy module's `__spec__`, which loads it at once. The
stand-in carries the real spec, so an import statement finds it and loads nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any


class _Deferred(types.ModuleType):
    """A library not loaded yet: reading any of its names loads it and reads the real one."""

    def __getattr__(self, attr: str) -> Any:  # only for names the stand-in lacks
        return getattr(_load(self.__name__), attr)


def defer(name: str) -> None:
    """Make the top-level module `name` load on first use, unless it is loaded already (or
    cannot be found, which the real import then reports)."""
    if name in sys.modules or "." in name:
        return
    spec = importlib.util.find_spec(name)
    if spec is None:
        return
    stand_in = _Deferred(name)
    stand_in.__spec__ = spec
    sys.modules[name] = stand_in


def _load(name: str) -> types.ModuleType:
    """The real module, imported in the stand-in's place the first time."""
    current = sys.modules.get(name)
    if not isinstance(current, _Deferred):
        return importlib.import_module(name)
    del sys.modules[name]
    try:
        return importlib.import_module(name)
    except BaseException:
        sys.modules[name] = current
        raise

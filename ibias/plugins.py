"""How ibias finds what another package (or a built-in listed by path) adds: one lookup of a
"module:attribute" reference and one policy for entry points, shared by every registry.

Why one module: experiments (`prompts/registry.py`), providers (`runner/providers/registry.py`)
and cross-experiment analyses (`analysis/cross.py`) each let code name a thing without importing
it, and let an installed package add one. Written three times, the three drifted (a failed
experiment plugin was a warning, a failed provider plugin a traceback; `IBIAS_PLUGINS` chose
experiments only). Here, for every group alike:

- a reference "module:attribute" is resolved by `pkgutil.resolve_name` (`resolve`), and one
  that names the wrong kind of thing is a `RegistryError`;
- `IBIAS_PLUGINS` (comma-separated entry-point names; empty: none; unset: all) chooses which
  entry points load, in every group;
- a plugin that fails to load is recorded and named in one warning line on stderr; the
  commands that do not need it go on, and a lookup it might have answered raises
  `PluginError` naming it, so the command that needs it stops.

It sits at the package's root beside `ibias.errors`, below `prompts/`, `runner/` and
`analysis/`, and imports neither, so each registry uses it without an arrow upward. A batch
adapter has no group of its own: a provider declares it in its traits
(`ProviderTraits.batch`), resolved here by the same `resolve`.
"""

from __future__ import annotations

import os
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any, TypeVar

from ibias import errors

__all__ = [
    "CROSS_ANALYSES",
    "EXPERIMENTS",
    "GROUPS",
    "PLUGINS_ENV",
    "PROVIDERS",
    "FailedPlugin",
    "PluginError",
    "failed",
    "load",
    "missing",
    "names",
    "resolve",
]

#: The entry-point groups, one per registry (the first two are the names plugins already use).
EXPERIMENTS = "ibias.experiments"
PROVIDERS = "ibias.providers"
CROSS_ANALYSES = "ibias.cross_analyses"
GROUPS = (EXPERIMENTS, PROVIDERS, CROSS_ANALYSES)
PLUGINS_ENV = "IBIAS_PLUGINS"
"""Comma-separated names of the entry points to load, in every group; empty: none; unset:
all of them."""

T = TypeVar("T")


class PluginError(errors.RegistryError):
    """Something asked for what no loaded plugin provides while an installed plugin failed to
    load: the message names the plugin, since it may be the one."""


@dataclass(frozen=True)
class FailedPlugin:
    """An entry point that did not give what its group registers: its name, its value
    ("module:attribute") and the error in one line."""

    name: str
    value: str
    error: str

    @property
    def line(self) -> str:
        return f"plugin {self.name!r} ({self.value}) failed to load: {self.error}"


_FAILED: dict[str, list[FailedPlugin]] = {group: [] for group in GROUPS}
#: Names `IBIAS_PLUGINS` gives that no group has: each counts as failed in every group.
_ABSENT: list[FailedPlugin] = []
_CHECKED_ABSENT = False


def resolve(ref: object, kind: type[T], what: str) -> T:
    """`ref` itself, or the object the "module:attribute" string `ref` names (imported now),
    which must be a `kind`; a `RegistryError` names `what` otherwise."""
    found = pkgutil.resolve_name(ref) if isinstance(ref, str) else ref
    if not isinstance(found, kind):
        raise errors.RegistryError(f"{what}: {ref!r} is not a {kind.__name__}")
    return found


def chosen() -> frozenset[str] | None:
    """The entry-point names `IBIAS_PLUGINS` chooses, or None: all."""
    given = os.environ.get(PLUGINS_ENV)
    if given is None:
        return None
    return frozenset(filter(None, (n.strip() for n in given.split(","))))


def _installed(group: str, name: str | None = None) -> list[Any]:
    # Looked up on the module at call time, so a test may stand in for it.
    if name is None:
        return list(metadata.entry_points(group=group))
    return list(metadata.entry_points(group=group, name=name))


def names(group: str) -> tuple[str, ...]:
    """The names of the installed entry points of `group` that `IBIAS_PLUGINS` chooses."""
    wanted = chosen()
    return tuple(e.name for e in _installed(group) if wanted is None or e.name in wanted)


def load(group: str, accept: Callable[[str, Any], None], name: str | None = None) -> None:
    """Load the chosen entry points of `group` (only the one called `name` when given) and
    hand each loaded object to `accept(entry name, object)`, which registers it or raises.
    A failure is recorded and named in one warning line; loading goes on."""
    _check_absent()
    wanted = chosen()
    for entry in _installed(group, name):
        if wanted is not None and entry.name not in wanted:
            continue
        try:
            accept(entry.name, entry.load())
        except Exception as exc:
            _fail(group, FailedPlugin(entry.name, getattr(entry, "value", "?"), _one_line(exc)))


def failed(group: str) -> tuple[FailedPlugin, ...]:
    """The plugins of `group` that failed to load in this process (and the names
    `IBIAS_PLUGINS` gives that no group has)."""
    return (*_ABSENT, *_FAILED[group])


def missing(group: str, what: str) -> PluginError:
    """The error for `what` (e.g. "experiment 'x'") that no loaded plugin of `group`
    provides while `failed(group)` is not empty: it names those plugins."""
    lines = "; ".join(f.line for f in failed(group))
    return PluginError(f"no loaded {_NOUNS[group]} provides {what}, and {lines}")


_NOUNS = {
    EXPERIMENTS: "experiment unit",
    PROVIDERS: "provider",
    CROSS_ANALYSES: "cross-experiment analysis",
}


def _check_absent() -> None:
    """Once: warn about each name `IBIAS_PLUGINS` gives that no group has installed."""
    global _CHECKED_ABSENT
    if _CHECKED_ABSENT or not chosen():
        return
    _CHECKED_ABSENT = True
    installed = {e.name for group in GROUPS for e in _installed(group)}
    given = dict.fromkeys(n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(","))
    for name in filter(None, given):
        if name not in installed:
            plugin = FailedPlugin(name, "not installed", f"{PLUGINS_ENV} names it")
            _ABSENT.append(plugin)
            _warn(plugin)


def _fail(group: str, plugin: FailedPlugin) -> None:
    _FAILED[group].append(plugin)
    _warn(plugin)


def _warn(plugin: FailedPlugin) -> None:
    print(f"ibias: warning: {plugin.line}", file=sys.stderr)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

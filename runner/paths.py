"""The default store and how a store's path is made absolute, apart from
`runner/config/__init__.py`, so the commands that only read a store (`ibias status`) name it without
loading the config's validation, the experiment registry and the provider tables (about 0.2 s of
start-up)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEFAULT_STORE", "absolute_path"]

DEFAULT_STORE = "runs/ibias.duckdb"


def absolute_path(path: Path) -> Path:
    """`path` made absolute the way the system will open it: its folder's symlinks and `..`
    resolved (so `configs/../runs/x.duckdb` is `runs/x.duckdb` even when `configs` is a
    symlink), the file's own name kept (a symlinked store keeps its lock beside the link)."""
    if path.name in ("", ".", ".."):
        return path.resolve()
    return path.parent.resolve() / path.name

"""The default store, a rehearsal's store beside it and how a store's path is made absolute,
apart from `runner/config/`, so the commands that only read a store (`ibias status`) name it
without loading the config's validation, the experiment registry and the provider tables (about
0.2 s of start-up)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEFAULT_STORE", "absolute_path", "rehearsal_store"]

DEFAULT_STORE = "runs/ibias.duckdb"


def absolute_path(path: Path) -> Path:
    """`path` made absolute the way the system will open it: its folder's symlinks and `..`
    resolved (so `configs/../runs/x.duckdb` is `runs/x.duckdb` even when `configs` is a
    symlink), the file's own name kept (a symlinked store keeps its lock beside the link)."""
    if path.name in ("", ".", ".."):
        return path.resolve()
    return path.parent.resolve() / path.name


def rehearsal_store(store: Path) -> Path:
    """The rehearsal store beside `store`: `runs/paper.duckdb` -> `runs/paper.rehearsal.duckdb`
    (a name not ending in `.duckdb` gets `.rehearsal.duckdb` added). Here rather than with the
    rehearsal: the config names a rehearsal's store, and the config sits below a run."""
    name = store.name
    stem = name[: -len(".duckdb")] if name.endswith(".duckdb") else name
    return store.with_name(f"{stem}.rehearsal.duckdb")

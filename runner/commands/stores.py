"""Which store a command means, from --store, --config and a command's CONFIG argument."""

from __future__ import annotations

import argparse
from pathlib import Path

from ibias.errors import UsageError
from ibias.runner.paths import DEFAULT_STORE


def store_of(args: argparse.Namespace) -> Path:
    """The store a command means, its path checked (`check_store_path`: a regular file or
    absent, no NUL byte) before anything opens it or reads a file the command was given."""
    from ibias.store.lock import check_store_path

    store = _store_named(args)
    check_store_path(store)
    return store


def _store_named(args: argparse.Namespace) -> Path:
    """`_store_of_config`, with --rehearse: the rehearsal store beside the store a config or
    the default names (`runner/execution/rehearsal.py`); --store is taken as given."""
    store = _store_of_config(args)
    if getattr(args, "rehearse", False) and args.store is None:
        from ibias.runner.paths import rehearsal_store

        return rehearsal_store(store)
    return store


def _store_of_config(args: argparse.Namespace) -> Path:
    """The store a command means: --store (relative to the current directory), or the [run]
    store of --config (or of `status`'s CONFIG argument; relative to the config's folder,
    `config_store_path`), else the default.

    Naming it twice is allowed only when both agree: `--store a --config b.toml` whose
    `[run] store` is another file is refused (exit 2) rather than silently picking one, since
    reading the wrong store of an overnight sweep looks exactly like reading the right one.
    A config installed inside the package has no store of its own to agree with: its
    relative store means nothing, and --store alone decides.
    """
    configs = [c for c in (getattr(args, "config_file", None), args.config) if c is not None]
    if len(configs) == 2 and Path(configs[0]).resolve() != Path(configs[1]).resolve():
        raise UsageError(f"CONFIG {configs[0]} and --config {configs[1]} differ; give one")
    store: str | None = args.store
    if not configs:
        return Path(store or DEFAULT_STORE)
    # Only with a config: runner/config/__init__.py costs a command that names its store alone about
    # 0.1-0.2 s of imports (the experiment registry, the provider tables).
    from ibias.runner.config import config_store_path, is_installed_config, store_beside

    config = Path(configs[0])
    named = config_store(config)
    if store is None:
        return Path(DEFAULT_STORE) if named is None else config_store_path(config, named)
    if named is None or (not Path(named).is_absolute() and is_installed_config(config)):
        return Path(store)
    beside, which = store_beside(config, named), "[run] store"
    if getattr(args, "rehearse", False):
        from ibias.runner.paths import rehearsal_store

        beside, which = rehearsal_store(beside), "rehearsal store"
    if beside.resolve() != Path(store).resolve():
        raise UsageError(f"--store {store} differs from the {which} {beside} of {config}; give one")
    return Path(store)


def config_store(path: str | Path) -> str | None:
    """The `[run] store` of the config at `path` as written (only that key is read and checked,
    so a command that only reads a store starts fast and works with a config whose
    experiments' data files are elsewhere). The file gets the checks of every config read
    (`read_toml_file`, `loads_toml`: a regular file, its size, its depth); the path it names
    is resolved by `config_store_path`."""
    from ibias.configfile import ConfigFileError, loads_toml, read_toml_file

    file = Path(path)
    data = loads_toml(read_toml_file(file), file)
    run = data.get("run", {})
    store = run.get("store") if isinstance(run, dict) else None
    if store is None:
        return None
    if not isinstance(store, str) or not store.strip() or "\0" in store:  # as `RunTable.store`
        raise ConfigFileError(f"{path}: run.store: expected a path, got {store!r}")
    return store

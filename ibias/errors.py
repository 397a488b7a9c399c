"""The exceptions ibias raises on purpose: one tree under `ibias.Error`.

Every error a user can cause or fix (a bad config, a busy store, a broken stimuli pack, a
plugin that clashes, a provider's API that refuses) is an `Error`, phrased as the one line the
user sees. So a notebook or script writes `except ibias.Error` (or one branch of it) instead
of naming a dozen classes spread over the package, and the `ibias` command maps the branches
to exit codes (`runner/cli.py`) instead of keeping its own list. Anything else that escapes is
a bug.

    Error
    ├── UsageError       command-line arguments that cannot be followed
    ├── ConfigError      a config, an experiment's settings, a simulator profile, a data file
    ├── StoreError       a store: open, lock, write, schema, import, query, selection
    ├── StimuliError     a stimuli pack or the authors' release it is made from
    ├── RegistryError    experiment units, providers and the plugins that register them
    └── ProviderError    a provider's API that failed or refused (after retries)

The modules keep their own, more precise classes, each a subclass of its branch here and
each named for what it is, never for its branch; where callers catch a built-in such as
`ValueError`, the class keeps that base too. Among them:

    ConfigError   ConfigFileError (ibias.configfile: a config or a file it names, one line
                  naming the file), SettingsError (an experiment's or a provider's key),
                  ProfileError (a simulator profile), DataError (an experiment's data file)
    StoreError    StoreAccessError (ibias.store.db: a store cannot be opened or read as
                  asked), StoreBusyError, StoreLockError, StoreWriteError, ImportFileError,
                  ExperimentSchemaError, ShowError, AnalysisDataError
    StimuliError  StimuliFileError (ibias.prompts.stimuli.pack: names the pack's file)

This module imports nothing at load time, so the command line can tell a user's error from a
bug without loading the modules that define the precise classes.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "Error",
    "ProviderError",
    "RegistryError",
    "StimuliError",
    "StoreError",
    "UsageError",
]


class Error(Exception):
    """Raised by ibias on purpose, with a message that is the one line the user sees."""


class UsageError(Error):
    """Command-line arguments that cannot be followed (the `ibias` command: exit 2)."""


class ConfigError(Error):
    """A config file, an experiment's settings, a simulator profile or a data file a config
    names is wrong; the message names the file and the key where it can."""


class StoreError(Error):
    """A store cannot be used as asked: not there, held by a run, not writable, newer than
    this ibias, or what is asked of it (an import file, a query, a trial selection) is wrong."""


class StimuliError(Error):
    """A stimuli pack, or the authors' release it is converted from, cannot be used."""


class RegistryError(Error):
    """Experiment units and providers: two claim one name, a name is not registered, or a
    plugin that registers them fails."""


class ProviderError(Error):
    """A provider's API failed or refused a request in a way retrying does not mend (a batch
    that cannot be cancelled, a request that failed for good)."""


def renamed(module: str, name: str, old_names: dict[str, type[Error]]) -> type[Error]:
    """For a module's `__getattr__` (PEP 562): the class once called `name` in `module`
    (`old_names` maps each old name to its class), with a DeprecationWarning naming the new
    one, so code written against the old name keeps working for one release; any other name
    is an AttributeError, as without the hook."""
    new = old_names.get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    import warnings

    # A class dropped for its branch keeps its name: say where the name lives now.
    now = f"is ibias.{name}" if new.__name__ == name else f"is renamed {new.__name__}"
    warnings.warn(
        f"{module}.{name} {now}; the old name goes in the next release",
        DeprecationWarning,
        stacklevel=3,
    )
    return new

"""TOML config -> frozen, validated values.

Every key is checked here (or by the experiment that owns a table) so that a typo in an
overnight sweep's config fails in the first second with the file, the key path and what was
expected, instead of silently running the wrong grid. The file and `[run]` are msgspec schemas
(`ConfigFile`, `RunTable`); each `[[models]]` entry is checked by runner/config/model_table.py (its
`[models.sim]` table by the simulator's `SimModelTable`); each `[experiments.NAME]` table is
validated by its experiment's own schema when it is built. Every error, from a schema or from
a check that needs data, is one `ConfigFileError`:
`FILE: key.path[i].sub: what is wrong (expected ..., got ...)`.

Bounds: every integer within 2^53; `[run].seed` 0 to 2^53; `[run].grace_s` 0 to 3,600
(default 10); a model's keys: runner/config/model_table.py.

The file is read by `ibias.configfile` (a regular file of at most MAX_CONFIG_BYTES, 1 MiB,
nested at most MAX_CONFIG_DEPTH, 32, levels deep). Every relative path a config names,
`[run] store` included, is relative to the config's folder, so a config means the same
wherever it is run from; `--store` is relative to the current directory.

The names of the modules this one was split into (the file's reading, a model's table and its
value) stay importable from here, as before the split.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
from msgspec import Meta

from ibias.configfile import MAX_CONFIG_BYTES as MAX_CONFIG_BYTES
from ibias.configfile import MAX_CONFIG_DEPTH as MAX_CONFIG_DEPTH
from ibias.configfile import ConfigFileError as ConfigFileError
from ibias.configfile import loads_toml as loads_toml
from ibias.configfile import read_toml_file as read_toml_file
from ibias.errors import renamed
from ibias.prompts.base import Experiment, SettingsError
from ibias.prompts.registry import EXPERIMENT_BUILDERS
from ibias.prompts.schema import did_you_mean, join_key, one_line, render_path, validate
from ibias.runner.config.model_config import DEFAULT_MAX_BODY_BYTES as DEFAULT_MAX_BODY_BYTES
from ibias.runner.config.model_config import DEFAULT_OUTAGE_LIMIT_S as DEFAULT_OUTAGE_LIMIT_S
from ibias.runner.config.model_config import ModelConfig as ModelConfig
from ibias.runner.config.model_table import CREDENTIAL_PARAMS as CREDENTIAL_PARAMS
from ibias.runner.config.model_table import DEFAULT_TOP_LOGPROBS as DEFAULT_TOP_LOGPROBS
from ibias.runner.config.model_table import LOGPROBS_PROVIDERS as LOGPROBS_PROVIDERS
from ibias.runner.config.model_table import MAX_BODY_BYTES as MAX_BODY_BYTES
from ibias.runner.config.model_table import MAX_CONCURRENCY as MAX_CONCURRENCY
from ibias.runner.config.model_table import MAX_OUTAGE_LIMIT_S as MAX_OUTAGE_LIMIT_S
from ibias.runner.config.model_table import MAX_PRICE as MAX_PRICE
from ibias.runner.config.model_table import MAX_RATE as MAX_RATE
from ibias.runner.config.model_table import MAX_TIMEOUT_S as MAX_TIMEOUT_S
from ibias.runner.config.model_table import MAX_TOKENS as MAX_TOKENS
from ibias.runner.config.model_table import MAX_TOP_LOGPROBS as MAX_TOP_LOGPROBS
from ibias.runner.config.model_table import URL_EXPECTED as URL_EXPECTED
from ibias.runner.config.model_table import URL_PATTERN as URL_PATTERN
from ibias.runner.config.model_table import EnvName as EnvName
from ibias.runner.config.model_table import ModelId as ModelId
from ibias.runner.config.model_table import ModelTable as ModelTable
from ibias.runner.config.model_table import Price as Price
from ibias.runner.config.model_table import ProviderName as ProviderName
from ibias.runner.config.model_table import Seed as Seed
from ibias.runner.config.model_table import Text as Text
from ibias.runner.config.model_table import Url as Url
from ibias.runner.config.model_table import model_config, split_models
from ibias.runner.config.model_table import url_credentials as url_credentials
from ibias.runner.paths import DEFAULT_STORE as DEFAULT_STORE
from ibias.runner.paths import absolute_path as absolute_path
from ibias.runner.providers.names import BUILTIN


def implemented_providers() -> tuple[str, ...]:
    """The built-in providers (runner/providers/names.py lists them without importing them:
    checking a config loads no provider)."""
    return tuple(BUILTIN)


#: Bounds of `[run].grace_s`: seconds requests in flight may take after a stop.
MAX_GRACE_S = 3600.0
DEFAULT_GRACE_S = 10.0


class RunTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The schema of `[run]`."""

    name: Text | None = None
    seed: Seed = 0
    #: Not blank, and no NUL byte: the one byte a path cannot hold (`os.stat` raises on it).
    store: (
        Annotated[str, Meta(pattern=r"^[^\x00]*[^\s\x00][^\x00]*$", extra={"expected": "a path"})]
        | None
    ) = None
    #: Seconds requests in flight may take to finish after a stop (Ctrl-C, SIGTERM, SIGHUP).
    grace_s: Annotated[float, Meta(ge=0, le=MAX_GRACE_S, description="seconds")] = DEFAULT_GRACE_S


class ConfigFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The schema of the whole file; each experiment's table has its own (prompts/)."""

    run: RunTable = msgspec.field(default_factory=RunTable)
    models: Annotated[
        list[ModelTable], Meta(min_length=1, extra={"expected": "an array of [[models]] tables"})
    ]
    experiments: Annotated[
        dict[str, dict[str, Any]],
        Meta(extra={"expected": "an [experiments] table, e.g. [experiments.prompts]"}),
    ]


@dataclass(frozen=True)
class RunSettings:
    name: str
    seed: int
    store: str | None
    grace_s: float = DEFAULT_GRACE_S


@dataclass(frozen=True)
class Config:
    path: Path
    text: str
    run: RunSettings
    models: tuple[ModelConfig, ...]
    experiments: Mapping[str, Mapping[str, Any]]
    built: tuple[Experiment, ...] = ()
    #: A rehearsal of this config (`--rehearse`, runner/execution/rehearsal.py): every model
    #: answered by the in-process simulator, into the rehearsal store (`store_path`); the run then
    #: serves the simulator (runner/execution/event_loop.py). Never part of the plan or a trial key.
    rehearsal: bool = False

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def store_path(self, override: str | None = None) -> Path:
        """--store (relative to the current directory: it was typed there), else [run].store
        (relative to this config's folder, `config_store_path`), else the default (relative to
        the current directory, the same store every command finds without a config); a
        rehearsal's is the `.rehearsal.duckdb` beside the latter two (--store is taken as
        given). Checked before anything opens it (`check_store_path`: a regular file or
        absent, no NUL)."""
        from ibias.runner.paths import rehearsal_store
        from ibias.store.lock import check_store_path

        if override:
            store = Path(override)
        elif self.run.store is None:
            store = Path(DEFAULT_STORE)
        else:
            store = config_store_path(self.path, self.run.store)
        if self.rehearsal and not override:
            store = rehearsal_store(store)
        check_store_path(store)
        return store


def store_beside(config: Path, store: str) -> Path:
    """The `[run] store` of the config at `config` as an absolute path: as written if absolute,
    else in the config's folder, as `stimuli` and every data file a config names.

    The config's folder, not the current directory: a config run from another folder must
    find the store it already filled, or it starts a new one and pays for every trial again."""
    written = Path(store)
    return written if written.is_absolute() else absolute_path(config.parent / written)


def installed_configs() -> Path | None:
    """The `configs` folder of an installed `ibias` package (a wheel's), or None when the
    package is a source checkout (its folder's parent holds pyproject.toml), whose `configs/`
    is the repository's and whose relative stores point into the repository's `runs/`."""
    from importlib import resources

    folder = Path(str(resources.files("ibias") / "configs")).resolve()
    return None if (folder.parent / "pyproject.toml").is_file() else folder


def is_installed_config(config: Path) -> bool:
    """Whether the config at `config` lies in the installed package's `configs` folder."""
    folder = installed_configs()
    return folder is not None and config.parent.resolve().is_relative_to(folder)


def config_store_path(config: Path, store: str) -> Path:
    """`store_beside`, refused in one line (ConfigFileError) where it cannot be meant:
    - a relative store of a config installed inside the package: it would land among the
      package's files (read-only, or wiped by the next upgrade), so `--store` must say where;
    - a store that does not exist beside the config while the same relative path exists in
      the current directory, where relative stores were resolved before: that is this
      config's store at its old place, and starting a new one would re-send every trial."""
    written = Path(store)
    if written.is_absolute():
        return written
    if is_installed_config(config):
        raise ConfigFileError(
            f"{config}: its [run] store {store!r} is relative, and this config is installed "
            "inside the ibias package, where no store belongs; pass --store PATH (or copy the "
            "config to a folder of your own)"
        )
    resolved = store_beside(config, store)
    try:
        old = absolute_path(Path.cwd() / written)
    except OSError:  # the current directory was removed: there is no old place to look at
        return resolved
    if old != resolved and not os.path.lexists(resolved) and old.exists():
        raise ConfigFileError(
            f"{config}: its [run] store {store!r} means {resolved} (relative to the config's "
            f"folder), which does not exist, but {old} does (relative to the current directory, "
            f"where it was looked for before); move that store to {resolved} or pass --store {old}"
        )
    return resolved


def _experiments(
    tables: Mapping[str, Mapping[str, Any]], seed: int, base_dir: Path
) -> tuple[dict[str, Mapping[str, Any]], tuple[Experiment, ...]]:
    """Validate each experiment table by building it; the built experiments are kept so the
    planner does not read their data files again."""
    if not tables:
        raise SettingsError(
            "experiments", "no experiments configured; add e.g. [experiments.prompts]"
        )
    built: list[Experiment] = []
    for name, table in tables.items():
        where = render_path(["experiments", name])
        if name not in EXPERIMENT_BUILDERS:
            known = list(EXPERIMENT_BUILDERS)
            listed = "unknown experiment; expected one of " + ", ".join(known)
            raise SettingsError(where, listed + did_you_mean(name, known))
        try:
            built.extend(EXPERIMENT_BUILDERS[name](table, seed, base_dir))
        except SettingsError as exc:
            raise SettingsError(join_key(where, exc.key), exc.message) from None
    return dict(tables), tuple(built)


def parse_config(text: str, path: Path) -> Config:
    """Validate the TOML `text` of the config at `path`: ConfigFileError names the key path."""
    data = loads_toml(text, path)
    try:
        extras = split_models(data)
        file = validate(data, ConfigFile)
        run = RunSettings(
            name=file.run.name if file.run.name is not None else path.stem,
            seed=file.run.seed,
            store=file.run.store,
            grace_s=file.run.grace_s,
        )
        models = tuple(model_config(i, m, extras[i]) for i, m in enumerate(file.models))
        seen: dict[str, int] = {}
        for i, m in enumerate(models):
            if m.id in seen:
                raise SettingsError(
                    f"models[{i}].id", f"duplicate model id {m.id!r} (also models[{seen[m.id]}])"
                )
            seen[m.id] = i
        experiments, built = _experiments(file.experiments, run.seed, path.parent)
    except SettingsError as exc:
        where = f"{exc.key}: " if exc.key else ""
        raise ConfigFileError(f"{path}: {where}{one_line(exc.message)}") from None
    return Config(
        path=path, text=text, run=run, models=models, experiments=experiments, built=built
    )


def load_config(path: str | Path) -> Config:
    """Read (`read_toml_file`: a regular file of at most MAX_CONFIG_BYTES) and validate."""
    p = Path(path)
    return parse_config(read_toml_file(p), p)


if not TYPE_CHECKING:  # at run time only, so mypy holds the project to the new name

    def __getattr__(name: str) -> Any:
        """`ConfigError`, `ConfigFileError`'s name in ibias 0.1 (it reused its branch's name,
        `ibias.ConfigError`): importable for one more release, with a DeprecationWarning."""
        return renamed(__name__, name, {"ConfigError": ConfigFileError})

"""ibias: measure implicit bias of LLMs toward transgender people, at scale, reproducibly.

The Python API for notebooks and scripts (the `ibias` command is a thin layer over the same
calls). It installs no process signal handlers: only the command line does, so a notebook's
own Ctrl-C handling is left alone.

    import ibias
    config = ibias.load_config("configs/demo.toml")
    report = ibias.plan(config)                      # `plan --json`: report.by, report.models
    result = ibias.run(config, store="runs/demo.duckdb", models=["sim-gpt-4o"])
    out = ibias.analyze("runs/demo.duckdb", "out/demo")
    ibias.sql("runs/demo.duckdb", "SELECT model_id, avg(bias) FROM word_association_trials "
              "GROUP BY 1")                          # Polars; also while a run holds the store

The calls take what the commands take: `run(models=, experiments=)` is `ibias run --model
--experiment`, `plan(...).to_dict()` is `ibias plan --json`, `sql` is `ibias sql` (the same
sandbox, and served by the run while one holds the store). `connect` opens the file itself,
so it cannot while a run holds it, and says to use `sql`.

Authors of an experiment unit or a provider find every name they need here (docs/extending.md):
the unit interface (`ExperimentUnit`, `TrialKind`, `Item`, `Parser`, `Column`, the optional
capabilities `Capability`, `Roster`, `ExtraParsers`, `ReadsLogprobs`), planning (`Experiment`,
`TrialSpec`, `Message`, `rng_for`, `SettingsError`), the simulator's `Simulation`,
`Answering`, `NoParams` and `Persona`, registration (`register`, `unregister`, `PluginError`),
and the provider interface (`Provider`, `provider`, `ProviderContext`, `ModelConfig`,
`Sampling`, `Reply`, `Limits`, `AttemptError`, `Classification`, `Verdict`, `SendingOptions`,
`ProviderTraits`, and for a batch API `BatchSupport`, `BatchAPI`). Both test with
`FakeProvider` (scripted replies, `FakeFailure`s and announced limits, run by the real scheduler).
The package ships `py.typed`, so `mypy --strict` checks a plugin against these types.

The project's folders (`runner/`, `prompts/`, `store/`, `analysis/`, `configs/`) stay at the top
of the repository and install only as `ibias.runner`, `ibias.prompts`, ...: this package holds
symbolic links to them, so an editable install, a wheel, mypy and pytest all see one namespace
and no generic top-level module such as `runner` or `store`.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ibias.errors import (
    ConfigError,
    Error,
    ProviderError,
    RegistryError,
    StimuliError,
    StoreError,
    UsageError,
)

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from ibias.analysis.analyze import AnalysisResult
    from ibias.analysis.cross import (
        CrossAnalysis,
        CrossContext,
        CrossEntry,
        register_cross,
        unregister_cross,
    )
    from ibias.analysis.experiment import (
        ExperimentAnalysis,
        LoadContext,
        Overall,
        PlantedCheck,
        PlantedContext,
        PlantedCoverage,
        PlantedResult,
        Section,
        SectionContext,
        TableContext,
    )
    from ibias.plugins import PluginError
    from ibias.prompts.base import (
        Experiment,
        Message,
        Persona,
        SettingsError,
        TrialSpec,
        rng_for,
    )
    from ibias.prompts.registry import (
        Capability,
        Column,
        ExperimentUnit,
        ExtraParsers,
        Item,
        Parser,
        ReadsLogprobs,
        Roster,
        TrialKind,
        register,
        unregister,
    )
    from ibias.prompts.simulation import Answering, NoParams, Simulation
    from ibias.runner.batch.api import BatchAPI
    from ibias.runner.config import Config, ModelConfig
    from ibias.runner.execution.planning_report import PlanReport
    from ibias.runner.execution.run import RunResult
    from ibias.runner.providers.base import (
        AttemptError,
        Limits,
        Provider,
        ProviderContext,
        Reply,
        Sampling,
    )
    from ibias.runner.providers.fake import FakeFailure, FakeProvider
    from ibias.runner.providers.registry import ProviderFactory, provider
    from ibias.runner.providers.retries import Classification, Verdict
    from ibias.runner.providers.sending import SendingOptions
    from ibias.runner.providers.traits import BatchSupport, ProviderTraits
    from ibias.runner.scheduling.stop import Stop
    from ibias.store.importer import ImportResult

# Names re-exported lazily (PEP 562), so `import ibias` (and so the `ibias` command, whose
# modules live under this package) does not pay for Polars, DuckDB or matplotlib up front.
_LAZY: dict[str, str] = {
    "AnalysisResult": "ibias.analysis.analyze",
    "ExperimentAnalysis": "ibias.analysis.experiment",
    "LoadContext": "ibias.analysis.experiment",
    "Overall": "ibias.analysis.experiment",
    "PlantedCheck": "ibias.analysis.experiment",
    "PlantedContext": "ibias.analysis.experiment",
    "PlantedCoverage": "ibias.analysis.experiment",
    "PlantedResult": "ibias.analysis.experiment",
    "Section": "ibias.analysis.experiment",
    "CrossAnalysis": "ibias.analysis.cross",
    "CrossContext": "ibias.analysis.cross",
    "CrossEntry": "ibias.analysis.cross",
    "register_cross": "ibias.analysis.cross",
    "unregister_cross": "ibias.analysis.cross",
    "SectionContext": "ibias.analysis.experiment",
    "TableContext": "ibias.analysis.experiment",
    "Experiment": "ibias.prompts.base",
    "Message": "ibias.prompts.base",
    "Persona": "ibias.prompts.base",
    "SettingsError": "ibias.prompts.base",
    "TrialSpec": "ibias.prompts.base",
    "rng_for": "ibias.prompts.base",
    "Capability": "ibias.prompts.registry",
    "Column": "ibias.prompts.registry",
    "ExperimentUnit": "ibias.prompts.registry",
    "ExtraParsers": "ibias.prompts.registry",
    "Item": "ibias.prompts.registry",
    "Parser": "ibias.prompts.registry",
    "PluginError": "ibias.plugins",
    "ReadsLogprobs": "ibias.prompts.registry",
    "Roster": "ibias.prompts.registry",
    "TrialKind": "ibias.prompts.registry",
    "Simulation": "ibias.prompts.simulation",
    "Answering": "ibias.prompts.simulation",
    "NoParams": "ibias.prompts.simulation",
    "register": "ibias.prompts.registry",
    "unregister": "ibias.prompts.registry",
    "Config": "ibias.runner.config",
    "ModelConfig": "ibias.runner.config",
    "RunResult": "ibias.runner.execution.run",
    "PlanReport": "ibias.runner.execution.planning_report",
    "Stop": "ibias.runner.scheduling.stop",
    "Limits": "ibias.runner.providers.base",
    "Provider": "ibias.runner.providers.base",
    "ProviderContext": "ibias.runner.providers.base",
    "Reply": "ibias.runner.providers.base",
    "Sampling": "ibias.runner.providers.base",
    "AttemptError": "ibias.runner.providers.base",
    "provider": "ibias.runner.providers.registry",
    "FakeFailure": "ibias.runner.providers.fake",
    "FakeProvider": "ibias.runner.providers.fake",
    "ProviderTraits": "ibias.runner.providers.traits",
    "BatchSupport": "ibias.runner.providers.traits",
    "BatchAPI": "ibias.runner.batch.api",
    "SendingOptions": "ibias.runner.providers.sending",
    "Classification": "ibias.runner.providers.retries",
    "Verdict": "ibias.runner.providers.retries",
    "ImportResult": "ibias.store.importer",
}

__all__ = [
    "AnalysisResult",
    "Answering",
    "AttemptError",
    "BatchAPI",
    "BatchSupport",
    "Capability",
    "Classification",
    "Column",
    "Config",
    "ConfigError",
    "CrossAnalysis",
    "CrossContext",
    "CrossEntry",
    "Error",
    "Experiment",
    "ExperimentAnalysis",
    "ExperimentUnit",
    "ExtraParsers",
    "FakeFailure",
    "FakeProvider",
    "ImportResult",
    "Item",
    "Limits",
    "LoadContext",
    "Message",
    "ModelConfig",
    "NoParams",
    "Overall",
    "Parser",
    "Persona",
    "PlanReport",
    "PlantedCheck",
    "PlantedContext",
    "PlantedCoverage",
    "PlantedResult",
    "PluginError",
    "Provider",
    "ProviderContext",
    "ProviderError",
    "ProviderTraits",
    "ReadsLogprobs",
    "RegistryError",
    "Reply",
    "Roster",
    "RunResult",
    "Sampling",
    "Section",
    "SectionContext",
    "SendingOptions",
    "SettingsError",
    "Simulation",
    "StimuliError",
    "Stop",
    "StoreError",
    "TableContext",
    "TrialKind",
    "TrialSpec",
    "UsageError",
    "Verdict",
    "analyze",
    "arun",
    "connect",
    "import_replies",
    "load_config",
    "plan",
    "provider",
    "register",
    "register_cross",
    "rng_for",
    "run",
    "sql",
    "unregister",
    "unregister_cross",
]


def load_config(path: str | Path) -> Config:
    """Read and validate a TOML config (ConfigError names the file and key on a problem)."""
    from ibias.runner.config import load_config as _load

    return _load(path)


def _config(config: Config | str | Path) -> Config:
    from ibias.runner.config import Config

    return config if isinstance(config, Config) else load_config(config)


def _rehearsed(config: Config, rehearse: bool) -> Config:
    """`config`, as its rehearsal when `rehearse` (runner/execution/rehearsal.py)."""
    from dataclasses import replace

    return replace(config, rehearsal=True) if rehearse else config


def _store(store: str | Path, rehearse: bool) -> Path:
    """`store`, or with `rehearse` the rehearsal store beside it (`NAME.rehearsal.duckdb`)."""
    if not rehearse:
        return Path(store)
    from ibias.runner.paths import rehearsal_store

    return rehearsal_store(Path(store))


def plan(
    config: Config | str | Path,
    store: str | Path | None = None,
    *,
    models: Sequence[str] | None = None,
    experiments: Sequence[str] | None = None,
    batch: bool = False,
    rehearse: bool = False,
) -> PlanReport:
    """`ibias plan [--model ID]... [--experiment NAME]... [--batch] [--rehearse]`: trials per
    experiment, design, model and language and how many the store answered (`.by`, Polars),
    per model the tokens, cost (bound and typical), mode and least time of what is left
    (`.models`); `.to_dict()` is `plan --json`. `rehearse`: against the rehearsal store."""
    from ibias.runner.execution.planning_report import PlanReport, plan_json
    from ibias.runner.execution.selection import select

    cfg = _rehearsed(select(_config(config), models, experiments), rehearse)
    path = cfg.store_path(None if store is None else str(store))
    return PlanReport(plan_json(cfg, path, batch=batch))


async def arun(
    config: Config | str | Path,
    *,
    store: str | Path | None = None,
    models: Sequence[str] | None = None,
    experiments: Sequence[str] | None = None,
    max_cost: float | None = None,
    concurrency: int | None = None,
    quiet: bool = True,
    environ: Mapping[str, str] | None = None,
    provider_factory: ProviderFactory | None = None,
    stop: Stop | None = None,
    batch: bool = False,
    wait: bool = True,
    rehearse: bool = False,
    speed: float = 1.0,
) -> RunResult:
    """`ibias run` inside an already running event loop (a notebook's): resumable.

    No signal handlers are installed; to interrupt, pass a `Stop` and call `stop.request()`
    (the run then stores what was answered and returns exit code 130). `provider_factory`
    builds each model's provider (default: the registry by the config's `provider`), e.g. an
    in-process provider for tests. `models` and `experiments` run part of the config, as
    `ibias run --model ID --experiment NAME` do (only those models' keys are needed).
    `batch` and `wait` are `--batch` and `--no-wait` (docs/batches.md). `rehearse` and
    `speed` are `--rehearse --speed N` (docs/rehearsal.md): every model answered by the
    in-process simulator, into the rehearsal store unless `store` names one. Code that runs
    its own loop should run a rehearsal on asyncio's loop, not uvloop's (`ibias.run` does)."""
    from ibias.runner.batch.run import BatchOptions
    from ibias.runner.execution.run import RunOptions, execute
    from ibias.runner.execution.selection import select

    if speed != 1.0 and not rehearse:
        raise UsageError("speed applies only with rehearse=True")
    cfg = _rehearsed(select(_config(config), models, experiments), rehearse)
    rehearsal = None
    if rehearse:
        from ibias.runner.execution.rehearsal import MAX_SPEED, Rehearsal

        if not 0 < speed <= MAX_SPEED:
            raise UsageError(f"speed: expected a number above 0 and at most {MAX_SPEED:,g}")
        if not wait:
            raise UsageError("a rehearsal cannot leave its batches running: wait=False")
        rehearsal = Rehearsal(speed=speed)
    options = RunOptions(
        store=cfg.store_path(None if store is None else str(store)),
        max_cost=max_cost,
        concurrency=concurrency,
        quiet=quiet,
        batch=BatchOptions(forced=batch, wait=wait),
        rehearsal=rehearsal,
    )
    return await execute(
        cfg,
        options,
        environ=environ,
        say=lambda line: None,
        provider_factory=provider_factory,
        stop=stop,
    )


def run(
    config: Config | str | Path,
    *,
    store: str | Path | None = None,
    models: Sequence[str] | None = None,
    experiments: Sequence[str] | None = None,
    max_cost: float | None = None,
    concurrency: int | None = None,
    quiet: bool = True,
    environ: Mapping[str, str] | None = None,
    provider_factory: ProviderFactory | None = None,
    stop: Stop | None = None,
    batch: bool = False,
    wait: bool = True,
    rehearse: bool = False,
    speed: float = 1.0,
) -> RunResult:
    """`ibias run` from synchronous code; see `arun` for code already inside an event loop."""
    import anyio  # here, not at the top: the `ibias` command imports this package first

    from ibias.runner.execution.event_loop import event_loop_options

    cfg = _rehearsed(_config(config), rehearse)
    return anyio.run(
        functools.partial(
            arun,
            cfg,
            store=store,
            models=models,
            experiments=experiments,
            max_cost=max_cost,
            concurrency=concurrency,
            quiet=quiet,
            environ=environ,
            provider_factory=provider_factory,
            stop=stop,
            batch=batch,
            wait=wait,
            rehearse=rehearse,
            speed=speed,
        ),
        backend_options=event_loop_options(cfg),
    )


def import_replies(
    path: str | Path,
    store: str | Path,
    *,
    stimuli: str | Path | None = None,
    max_line_bytes: int | None = None,
) -> ImportResult:
    """`ibias import [--stimuli DIR] [--max-line-bytes N]`: replies collected elsewhere (a
    file, or a pipe: `"-"` is stdin), read once and validated whole, then stored and parsed;
    with `stimuli`, each paper-design reply's messages are checked against the paper's prompt
    from that pack (`ImportResult.checked`). A line longer than `max_line_bytes` (default
    64 MiB) refuses the file, as any bad line does: nothing of it is stored."""
    from ibias.store.db import open_store
    from ibias.store.importer import MAX_LINE_BYTES, read_file, store_replies
    from ibias.store.lock import StoreLock, check_store_path

    pack = None
    if stimuli is not None:
        from ibias.prompts.stimuli.pack import load_pack

        pack = load_pack(Path(stimuli))
    source, target = Path(path), Path(store)
    check_store_path(target)  # before the file: a pipe can be read only once
    replies = read_file(source, MAX_LINE_BYTES if max_line_bytes is None else max_line_bytes)
    with StoreLock(target):
        con = open_store(target, create=True)
        try:
            return store_replies(con, source, replies, pack)
        finally:
            con.close()


def analyze(
    store: str | Path,
    out: str | Path,
    *,
    bootstrap: int = 2000,
    ci: Literal["percentile", "bca"] = "percentile",
    seed: int = 0,
    by_reported_model: bool = False,
    population: bool = True,
    population_method: str = "two-way-cr2-satterthwaite",
    rehearse: bool = False,
) -> AnalysisResult:
    """`ibias analyze [--by-reported-model] [--no-population] [--population-method NAME]`:
    tables (CSV, Parquet), figures and report.html into `out`; `rehearse`: of the rehearsal
    store beside `store`."""
    from ibias.store.lock import check_store_path

    store = _store(store, rehearse)
    check_store_path(Path(store))  # a bad path is said before seconds of imports
    from ibias.analysis.analyze import analyze as _analyze

    # The store's lock is taken only to parse pending replies (analysis/load.py): while a run
    # holds the store, the run serves the reads.
    return _analyze(
        Path(store),
        Path(out),
        bootstrap=bootstrap,
        ci=ci,
        seed=seed,
        by_reported_model=by_reported_model,
        population=population,
        population_method=population_method,
    )


def connect(store: str | Path, *, rehearse: bool = False) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a closed store (its views are the query surface); close it
    after. While `ibias run` holds the store no other process can open the file: this raises
    a StoreError saying so and naming `ibias.sql`, which the run serves. `rehearse`: the
    rehearsal store beside `store`."""
    from ibias.store.db import StoreAccessError, open_store
    from ibias.store.lock import holder

    path = _store(store, rehearse)
    who = holder(path)
    if who is not None:
        raise StoreAccessError(
            f"store {path} is held by {who}; while it runs, query it with "
            "ibias.sql(store, query), which the run serves"
        )
    return open_store(path, read_only=True)


def sql(store: str | Path, query: str, *, rehearse: bool = False) -> pl.DataFrame:
    """`ibias sql`: one read-only statement over the store as a Polars frame, in the same
    sandbox (only the store is readable, no files are written); on a closed store or, while
    `ibias run` holds it, served by the run. A refused query raises StoreError in one line.
    `rehearse`: over the rehearsal store beside `store`."""
    from ibias.runner.sql import query_frame
    from ibias.store.sandbox import read_statement

    return query_frame(_store(store, rehearse), read_statement(query), "parquet")


def __dir__() -> list[str]:
    return sorted(__all__)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ibias' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

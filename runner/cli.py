"""The `ibias` command line, and the one place that turns exceptions into user-facing lines.

Exit codes (DESIGN.md): 0 done; 1 some trials failed for good or a budget stopped the run;
2 bad input (config, arguments, store) with one line and no traceback; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeVar

import orjson

from ibias.runner.config import (
    DEFAULT_STORE,
    MAX_CONCURRENCY,
    Config,
    absolute_path,
    load_config,
)
from ibias.store.lock import StoreLock

if TYPE_CHECKING:
    from ibias.runner.batch.run import BatchOptions
    from ibias.runner.stop import Stop

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
#: `show --random` at most (each trial is a screenful; runner/show.py).
MAX_SHOWN = 100
#: `analyze --bootstrap` at most: a cells x B table of replicates must fit in memory.
MAX_BOOTSTRAP = 100_000

#: Signals that stop a run gracefully. SIGHUP too: a closed terminal or ssh session should
#: leave a consistent, resumable store, exactly like SIGTERM. (SIGHUP only where it exists.)
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)

_T = TypeVar("_T")


class UsageError(Exception):
    """Bad command-line arguments."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _bounded_int(upper: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = _positive_int(text)
        if value > upper:
            raise argparse.ArgumentTypeError(f"expected at most {upper:,}, got {text!r}")
        return value

    return parse


def _version() -> str:
    """The installed package's version (package metadata; cheap, unlike importing the runner)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ibias")
    except PackageNotFoundError:
        return "0+unknown"


def _store_path(text: str) -> str:
    """A --store value; an empty one (an unset shell variable) must not mean "the default"."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a path, got an empty string")
    return text


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 0..65535, got {text!r}")
    return value


def _probability(text: str) -> float:
    value = _non_negative_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1], got {text!r}")
    return value


def _add_store(p: argparse.ArgumentParser, *, default: str | None = DEFAULT_STORE) -> None:
    """--store and --config: two ways to name the store (`store_of` resolves them)."""
    p.add_argument(
        "--store",
        type=_store_path,
        metavar="PATH",
        help=f"the DuckDB store (default: the config's [run] store, else {DEFAULT_STORE})",
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="a config whose [run] store is the store (default: none; --store must agree)",
    )


def _add_selection(p: argparse.ArgumentParser) -> None:
    """--model and --experiment: part of a config (runner/selection.py)."""
    p.add_argument(
        "--model",
        action="append",
        metavar="ID",
        help="only this model (repeatable; default: every model of the config)",
    )
    p.add_argument(
        "--experiment",
        action="append",
        metavar="NAME",
        help="only this [experiments.NAME] table (repeatable; default: every experiment)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ibias", description="Implicit-bias experiments on LLMs, at scale.")
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {_version()}", help="show the version"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _run_parser(sub)
    _plan_parser(sub)
    _models_parser(sub)
    _status_parser(sub)
    _batches_parser(sub)
    _show_parser(sub)
    _sql_parser(sub)
    _simulate_parser(sub)
    _analyze_parser(sub)
    _demo_parser(sub)
    _import_parser(sub)
    _stimuli_parser(sub)
    return parser


def _run_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    run = sub.add_parser("run", help="run (or resume) the trials of a config")
    run.add_argument("config", help="the TOML config to run")
    run.add_argument(
        "--store",
        type=_store_path,
        metavar="PATH",
        help=f"the DuckDB store (default: the config's [run] store, else {DEFAULT_STORE})",
    )
    _add_selection(run)
    run.add_argument(
        "--max-cost",
        type=_non_negative_float,
        metavar="USD",
        help=(
            "cap on everything the store has spent on this config's trials, this run and "
            "earlier ones (a resume at the same cap stops before its first request); a request "
            "starts only if its worst case fits (default: no limit)"
        ),
    )
    run.add_argument(
        "--concurrency",
        type=_bounded_int(MAX_CONCURRENCY),
        metavar="N",
        help="requests in flight per model, overriding max_concurrency (default: the config's)",
    )
    run.add_argument(
        "--quiet", action="store_true", help="no progress display (default: shown on stderr)"
    )
    run.add_argument(
        "--batch",
        action="store_true",
        help="send the trials of models with a batch API as provider batches, at the batch "
        "price (docs/batches.md); run again to collect them (default: each model's mode)",
    )
    run.add_argument(
        "--no-wait",
        action="store_true",
        help="with batches: submit them, run the online models, print the batch ids and exit 0 "
        "(default: wait for the batches)",
    )


def _plan_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    plan = sub.add_parser("plan", help="count planned and remaining trials (no requests)")
    plan.add_argument("config", help="the TOML config to plan")
    plan.add_argument(
        "--store",
        type=_store_path,
        metavar="PATH",
        help=f"the DuckDB store (default: the config's [run] store, else {DEFAULT_STORE})",
    )
    _add_selection(plan)
    plan.add_argument(
        "--json", action="store_true", help="print one JSON object (default: a table)"
    )
    plan.add_argument(
        "--batch",
        action="store_true",
        help="plan as `run --batch` would run: which models go as batches, at the batch price "
        "(default: each model's mode)",
    )


def _models_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    models = sub.add_parser(
        "models", help="one cheap request per model: key, model name, announced limits"
    )
    models.add_argument("config", help="the TOML config whose models to check")
    models.add_argument(
        "--json", action="store_true", help="print one JSON object (default: a table)"
    )


def _status_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    status = sub.add_parser("status", help="progress of a store, also during a run")
    status.add_argument(
        "config_file",
        nargs="?",
        metavar="CONFIG",
        help="a config whose [run] store to show (same as --config; default: none)",
    )
    _add_store(status)
    status.add_argument(
        "--json", action="store_true", help="print one JSON object (default: a table)"
    )
    status.add_argument(
        "--refresh",
        action="store_true",
        help="ask the providers for the state of CONFIG's running batches and record it "
        "first (needs their API keys; default: the store's view only)",
    )


def _batches_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    batches = sub.add_parser("batches", help="provider batches of a config (docs/batches.md)")
    batches_sub = batches.add_subparsers(dest="batches_command", required=True, metavar="ACTION")
    cancel = batches_sub.add_parser("cancel", help="cancel this config's live batches")
    cancel.add_argument("config", help="the TOML config whose batches to cancel")
    cancel.add_argument(
        "--store",
        type=_store_path,
        metavar="PATH",
        help=f"the DuckDB store (default: the config's [run] store, else {DEFAULT_STORE})",
    )


def _show_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    show = sub.add_parser("show", help="one trial as sent and answered, with its parse")
    show.add_argument(
        "key",
        nargs="?",
        metavar="TRIAL_KEY",
        help="a trial key, or a prefix of one that is unique (default: select with options)",
    )
    _add_store(show)
    show.add_argument(
        "--model", metavar="ID", help="only trials of this model (default: any model)"
    )
    show.add_argument(
        "--experiment",
        metavar="NAME",
        help="only trials of this experiment kind (trials.experiment; default: any)",
    )
    show.add_argument(
        "--where",
        metavar="SQL",
        help="a condition on the `replies` view, e.g. \"reply ILIKE '%%sorry%%'\" (default: none)",
    )
    show.add_argument(
        "--random",
        type=_bounded_int(MAX_SHOWN),
        metavar="N",
        help=(
            "show N matching trials at random, among those with a reply, instead of the first "
            "one (default: the first)"
        ),
    )
    show.add_argument(
        "--unanswered",
        action="store_true",
        help=(
            "only trials without a reply yet, the first or --random N of them "
            "(default: --random picks answered trials)"
        ),
    )
    show.add_argument(
        "--json",
        action="store_true",
        help="print a JSON array, one object per trial (default: text)",
    )


def _sql_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    sql = sub.add_parser("sql", help="one read-only SQL query over the store")
    sql.add_argument(
        "query", help="one read-only SQL statement (see README: What ibias sql allows)"
    )
    _add_store(sql)
    shape = sql.add_mutually_exclusive_group()
    shape.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="how to print the result (default: table)",
    )
    shape.add_argument(
        "--output",
        metavar="FILE.parquet|csv|json",
        help="write the result to a file, format by extension (default: print it)",
    )
    sql.add_argument(
        "--force", action="store_true", help="let --output overwrite a file (default: refuse)"
    )


def _simulate_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    sim = sub.add_parser("simulate", help="serve the provider simulator on loopback")
    sim.add_argument(
        "--port", type=_port, default=8000, help="loopback port, 0 for any free one (default: 8000)"
    )
    sim.add_argument(
        "--seed", type=int, default=0, help="seed of the simulated answers (default: 0)"
    )
    sim.add_argument(
        "--rpm", type=_positive_int, help="requests per minute before a 429 (default: no limit)"
    )
    sim.add_argument(
        "--tpm", type=_positive_int, help="tokens per minute before a 429 (default: no limit)"
    )
    sim.add_argument(
        "--latency-ms",
        type=_non_negative_float,
        default=0.0,
        help="added latency of each reply in milliseconds (default: 0)",
    )
    sim.add_argument(
        "--fault-rate",
        type=_probability,
        default=0.0,
        help="probability of a simulated fault per request, over all fault kinds (default: 0)",
    )
    sim.add_argument(
        "--hide-limits",
        action="store_true",
        help="enforce --rpm/--tpm but announce them nowhere (default: announced in headers)",
    )
    sim.add_argument(
        "--profile",
        metavar="FILE",
        help="a TOML simulator profile; replaces the options above (default: none)",
    )


def _analyze_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    analyze = sub.add_parser("analyze", help="tables, figures and report.html from a store")
    _add_store(analyze)
    analyze.add_argument(
        "--out", default="out/analysis", metavar="DIR", help="output folder (default: out/analysis)"
    )
    analyze.add_argument(
        "--bootstrap",
        type=_bounded_int(MAX_BOOTSTRAP),
        default=2000,
        metavar="B",
        help="bootstrap replicates for the intervals (default: 2000)",
    )
    analyze.add_argument(
        "--ci",
        choices=("percentile", "bca"),
        default="percentile",
        help="bootstrap interval method (default: percentile)",
    )
    analyze.add_argument(
        "--by-reported-model",
        action="store_true",
        help="group the tables by the model name/version the provider reported (default: by id)",
    )
    analyze.add_argument(
        "--no-population",
        action="store_true",
        help="skip the intervals and tests for people like these (the pigeonhole bootstrap "
        "over persons); the roster-conditional ones stay (default: computed)",
    )


def _demo_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    demo = sub.add_parser("demo", help="the paper's grid on simulated models, then analysis")
    demo.add_argument(
        "--out",
        default="out/demo",
        metavar="DIR",
        help="store and report folder (default: out/demo)",
    )


def _import_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    imp = sub.add_parser("import", help="ingest replies collected elsewhere (JSONL)")
    imp.add_argument("file", help="a JSONL file, one reply per line (README: Importing replies)")
    imp.add_argument(
        "--stimuli",
        metavar="DIR",
        help="a stimuli pack: check each paper-design reply's messages against the paper's "
        "prompt (default: none, not checked)",
    )
    _add_store(imp)


def _stimuli_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    stimuli = sub.add_parser("stimuli", help="stimuli packs: the paper's own texts")
    stimuli_sub = stimuli.add_subparsers(dest="stimuli_command", metavar="command", required=True)
    release = stimuli_sub.add_parser(
        "from-release",
        help="make a stimuli pack from the authors' repository (a clone, .zip or .tar.gz)",
    )
    release.add_argument(
        "repo_dir",
        metavar="RELEASE",
        help="a clone of the authors' repository, or the .zip / .tar.gz of it",
    )
    release.add_argument("--out", required=True, metavar="DIR", help="the pack's folder (required)")
    check = stimuli_sub.add_parser(
        "check", help="check a stimuli pack and count its pairs by who has the organ"
    )
    check.add_argument("pack_dir", metavar="DIR", help="a stimuli pack folder")


#: Errors shown as one line with exit code 2, by module. A command imports only what it uses
#: (so `ibias --help`, `status` and `sql` start fast); an error class whose module was never
#: imported cannot have been raised, so only loaded modules are asked.
_USER_ERRORS = (
    ("ibias.runner.config", "ConfigError"),
    ("ibias.store.db", "StoreError"),
    ("ibias.store.lock", "StoreBusyError"),
    ("ibias.store.lock", "StoreLockError"),
    ("ibias.store.writer", "StoreWriteError"),
    ("ibias.store.importer", "ImportFileError"),
    ("ibias.prompts.base", "SettingsError"),
    ("ibias.prompts.stimuli.pack", "StimuliError"),
    ("ibias.runner.show", "ShowError"),
)


def _user_error(exc: BaseException) -> bool:
    return any(
        (module := sys.modules.get(name)) is not None and isinstance(exc, getattr(module, cls))
        for name, cls in _USER_ERRORS
    )


#: Commands that open their own stop-signal receiver (`_with_stop_signals`): the start-up
#: handlers (runner/startup.py) hold until it is open.
_OWN_RECEIVER = frozenset({"run", "demo"})


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.command not in _OWN_RECEIVER:
            # Start-up is over: from here the command's own handling (KeyboardInterrupt on
            # Ctrl-C, below), as before runner/startup.py took the signals.
            from ibias.runner.startup import release

            release()
        return _dispatch(args)
    except UsageError as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except OSError as exc:  # the system refused a path: a read-only store, a full disk, ...
        return _fail(os_error_line(exc))
    except Exception as exc:  # a bug: one line, and the traceback only on request
        if _user_error(exc):
            return _fail(str(exc))
        if os.environ.get("IBIAS_DEBUG"):
            raise
        print(
            f"internal error: {type(exc).__name__}: {_without_secrets(str(exc))} "
            "(set IBIAS_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


def entry() -> None:
    """The `ibias` command (the console script and `python -m ibias`): `main`, then the
    process ends without finalising the interpreter.

    By the time `main` returns, every command has closed its store and written its output;
    tearing down the modules it imported (pyarrow, numpy, DuckDB, aiohttp, Polars) then took
    about 50 ms more, which a 20,000-request run paid in every end-to-end figure (issue 12,
    bench/BENCHMARKS.md). ibias registers no exit handlers. Should a thread that is not a
    daemon still run, the interpreter ends normally, so it is never cut short.

    The stop signals are handled from the start (runner/startup.py, where the console script
    begins): one arriving before `main` has caught it, or after, still ends the command with
    "interrupted" and exit 130, never a traceback."""
    from ibias.runner.startup import install, interrupted

    install()
    try:
        code: int = main()
    except SystemExit as exc:  # argparse's --help, --version and usage errors
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = EXIT_FAILED
    except KeyboardInterrupt:  # a Ctrl-C outside main's own handling
        interrupted()
    try:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a reader that went away (a closed pipe)
                stream.flush()
    except KeyboardInterrupt:  # the command is done; a late Ctrl-C changes nothing
        pass
    main_thread = threading.main_thread()
    if any(t.is_alive() and not t.daemon and t is not main_thread for t in threading.enumerate()):
        sys.exit(code)
    os._exit(code)


def _without_secrets(text: str) -> str:
    """An unexpected exception's text may quote a request or an answer holding a key; the run's
    redaction scope has ended by the time it reaches here, so every environment value named like
    a credential is removed, as well as what looks like one."""
    from ibias.runner.redact import redact, secrets_scope

    names = ("KEY", "TOKEN", "SECRET")
    values = [v for k, v in os.environ.items() if any(n in k.upper() for n in names)]
    with secrets_scope(values):
        return redact(text)


def os_error_line(exc: OSError) -> str:
    """An OSError as one line naming the path and the system's reason (no errno noise)."""
    if exc.filename is not None and exc.strerror:
        where = f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 is not None else "")
        return f"{where}: {exc.strerror}"
    return " ".join(str(exc).split()) or type(exc).__name__


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        return _cmd_run(args)
    if args.command == "plan":
        return _cmd_plan(args)
    if args.command == "batches":
        return _cmd_batches(args)
    if args.command == "status":
        return _cmd_status(args)
    if args.command == "models":
        return _cmd_models(args)
    if args.command == "show":
        return _cmd_show(args)
    if args.command == "sql":
        return _cmd_sql(args)
    if args.command == "simulate":
        return _cmd_simulate(args)
    if args.command == "analyze":
        return _cmd_analyze(args)
    if args.command == "demo":
        return _cmd_demo(args)
    if args.command == "import":
        return _cmd_import(args)
    if args.command == "stimuli":
        return _cmd_stimuli(args)
    raise UsageError(f"unknown command {args.command!r}")


def _with_stop_signals(job: Callable[[Stop], Awaitable[_T]]) -> _T:
    """Run `job` on an event loop whose stop signals are received before any of its work.

    The receiver is open before `job` loads or plans anything, so a signal at any point becomes
    a `Stop` request (never a KeyboardInterrupt traceback or a death by SIGTERM) and the job
    ends the way an interrupted run ends. Only the command line does this: the Python API
    leaves the process's signal handling alone. The receiver closes when `job` returns, so
    whatever follows (the demo's analysis) has the default handlers back.
    """
    import anyio

    from ibias.runner.stop import Stop

    stop = Stop()
    # The backstop: whatever is stuck (a thread the loop must wait for), the process ends
    # STOP_MARGIN_S after the grace period, as after kill -9 (runner/stop.py).
    stop.arm(_exit_overdue, STOP_MARGIN_S)

    async def main() -> _T:
        outcome: list[_T] = []  # empty until job returns
        error: Exception | None = None
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async with anyio.create_task_group() as tg:

                async def relay() -> None:
                    async for signum in signals:
                        stop.request(f"interrupted by {signal.Signals(signum).name}")

                tg.start_soon(relay)
                # Errors are carried out of the task group so they stay themselves (one line
                # in main()) rather than an ExceptionGroup.
                try:
                    outcome.append(await job(stop))
                except Exception as exc:
                    error = exc
                tg.cancel_scope.cancel()
        if error is not None:
            raise error
        return outcome[0]

    try:
        from ibias.runner.event_loop import event_loop_options

        return anyio.run(main, backend_options=event_loop_options())
    finally:
        stop.disarm()
        # The receiver gave back the start-up handlers (runner/startup.py); what follows
        # (the demo's analysis) gets the process's own.
        from ibias.runner.startup import release

        release()


#: Seconds after a stop's grace period (in-flight requests) for the final flush and closing;
#: past them the process exits 130 at once (`Stop.arm`).
STOP_MARGIN_S = 10.0


def _exit_overdue() -> None:
    print(
        f"interrupted: the run did not end within its grace period plus {STOP_MARGIN_S:g} s; "
        "exiting now (what was stored is kept; run again to resume)",
        file=sys.stderr,
        flush=True,
    )
    os._exit(EXIT_INTERRUPTED)


def store_of(args: argparse.Namespace) -> Path:
    """The store a command means: --store (relative to the current directory), or the [run]
    store of --config (or of `status`'s CONFIG argument; relative to the config's folder,
    `config_store_path`), else the default.

    Naming it twice is allowed only when both agree: `--store a --config b.toml` whose
    `[run] store` is another file is refused (exit 2) rather than silently picking one, since
    reading the wrong store of an overnight sweep looks exactly like reading the right one.
    A config installed inside the package has no store of its own to agree with: its
    relative store means nothing, and --store alone decides.
    """
    from ibias.runner.config import config_store_path, is_installed_config, store_beside

    configs = [c for c in (getattr(args, "config_file", None), args.config) if c is not None]
    if len(configs) == 2 and Path(configs[0]).resolve() != Path(configs[1]).resolve():
        raise UsageError(f"CONFIG {configs[0]} and --config {configs[1]} differ; give one")
    store: str | None = args.store
    if not configs:
        return Path(store or DEFAULT_STORE)
    config = Path(configs[0])
    named = config_store(config)
    if store is None:
        return Path(DEFAULT_STORE) if named is None else config_store_path(config, named)
    if named is None or (not Path(named).is_absolute() and is_installed_config(config)):
        return Path(store)
    if store_beside(config, named).resolve() != Path(store).resolve():
        raise UsageError(
            f"--store {store} differs from the [run] store {store_beside(config, named)} of "
            f"{config}; give one"
        )
    return Path(store)


def config_store(path: str | Path) -> str | None:
    """The `[run] store` of the config at `path` as written (only that key is read and checked,
    so a command that only reads a store starts fast and works with a config whose
    experiments' data files are elsewhere). The file gets the checks of every config read
    (`read_toml_file`, `loads_toml`: a regular file, its size, its depth); the path it names
    is resolved by `config_store_path`."""
    from ibias.runner.config import ConfigError, loads_toml, read_toml_file

    file = Path(path)
    data = loads_toml(read_toml_file(file), file)
    run = data.get("run", {})
    store = run.get("store") if isinstance(run, dict) else None
    if store is None:
        return None
    if not isinstance(store, str) or not store.strip():
        raise ConfigError(f"{path}: run.store: expected a path, got {store!r}")
    return store


def _selected_config(args: argparse.Namespace) -> Config:
    """The config of `run`/`plan`, restricted by --model and --experiment."""
    from ibias.runner.selection import select

    return select(load_config(args.config), args.model, args.experiment)


def _batch_options(args: argparse.Namespace) -> BatchOptions:
    """`--batch` and `--no-wait` (runner/batch/run.py)."""
    from ibias.runner.batch.run import BatchOptions

    return BatchOptions(forced=args.batch, wait=not args.no_wait)


def _cmd_run(args: argparse.Namespace) -> int:
    from ibias.runner.run import RunOptions, execute

    async def job(stop: Stop) -> int:
        config = _selected_config(args)
        options = RunOptions(
            store=config.store_path(args.store),
            max_cost=args.max_cost,
            concurrency=args.concurrency,
            quiet=args.quiet,
            batch=_batch_options(args),
        )
        result = await execute(config, options, stop=stop)
        # Which store the run filled, wherever it was started from: with the summary of a
        # run that ended by itself, so that a refused or interrupted run keeps its one line.
        if result.exit_code in (EXIT_OK, EXIT_FAILED):
            print(f"store: {absolute_path(options.store)}", file=sys.stderr)
        for line in result.lines:
            print(line, file=sys.stderr)
        return result.exit_code

    return _with_stop_signals(job)


def _cmd_plan(args: argparse.Namespace) -> int:
    from ibias.runner.planning_report import plan_json, render_plan

    config = _selected_config(args)
    report = plan_json(config, config.store_path(args.store), batch=args.batch)
    if args.json:
        sys.stdout.write(orjson.dumps(report).decode() + "\n")
    else:
        print(f"store: {report['store']}", flush=True)
        render_plan(report)
    return EXIT_OK


def _cmd_models(args: argparse.Namespace) -> int:
    import anyio

    from ibias.runner.models_check import check_models, render_checks

    config = load_config(args.config)
    checks = anyio.run(check_models, config, os.environ)
    if args.json:
        sys.stdout.write(orjson.dumps([c.to_json() for c in checks]).decode() + "\n")
    else:
        render_checks(checks)
    return EXIT_OK if all(c.ok for c in checks) else EXIT_FAILED


def _cmd_status(args: argparse.Namespace) -> int:
    from ibias.runner.status_report import render_status, status_report

    if args.refresh:
        _refresh_batches(args)
    # Absolute: the report names the store, and it must say which one wherever you stand.
    report = status_report(absolute_path(store_of(args)))
    from ibias.runner.batch.status import batch_lines, batches_report

    batches = batches_report(absolute_path(store_of(args)))
    if args.json:
        sys.stdout.write(orjson.dumps({**report, "batches": batches}).decode() + "\n")
    else:
        render_status(report)
        for line in batch_lines(batches):
            print(line)
    return EXIT_OK


def _refresh_batches(args: argparse.Namespace) -> None:
    """`status --refresh`: the providers' view of the config's running batches, recorded in
    the store before it is read (a run's poll, without the download)."""
    import anyio

    from ibias.runner.batch.status import refresh_batches

    config_file = getattr(args, "config_file", None) or args.config
    if config_file is None:
        raise UsageError(
            "ibias status --refresh: give the CONFIG whose batches to ask about (its models "
            "name the providers and their API keys)"
        )
    store = absolute_path(store_of(args))
    anyio.run(
        refresh_batches,
        load_config(config_file),
        store,
        os.environ,
        lambda line: print(line, file=sys.stderr),
    )


def _cmd_batches(args: argparse.Namespace) -> int:
    """`ibias batches cancel CONFIG`: cancel the config's live batches at their providers."""
    import anyio

    from ibias.runner.batch.status import cancel_batches

    config = load_config(args.config)
    store = config.store_path(args.store)
    cancelled = anyio.run(
        cancel_batches, config, store, os.environ, lambda line: print(line, file=sys.stderr)
    )
    print(f"{len(cancelled)} batches cancelled", file=sys.stderr)
    return EXIT_OK


def _cmd_show(args: argparse.Namespace) -> int:
    from ibias.runner.show import Selection, render_text, show

    if args.key is not None and (
        args.unanswered
        or any(v is not None for v in (args.model, args.experiment, args.where, args.random))
    ):
        raise UsageError(
            "ibias show: give a TRIAL_KEY or --model/--experiment/--where/--random/--unanswered"
        )
    # --random picks among answered trials: during a run most have no reply yet.
    answered = False if args.unanswered else (True if args.random is not None else None)
    selection = Selection(
        args.key, args.model, args.experiment, args.where, args.random, answered=answered
    )
    trials = show(store_of(args), selection)
    if args.json:
        sys.stdout.write(orjson.dumps([t.to_json() for t in trials]).decode() + "\n")
    else:
        sys.stdout.write("\n\n".join(render_text(t) for t in trials) + "\n")
    return EXIT_OK


def _cmd_sql(args: argparse.Namespace) -> int:
    from ibias.runner.sql import run_query

    if args.force and args.output is None:
        raise UsageError("ibias sql: --force only applies with --output")
    output = None if args.output is None else Path(args.output)
    return run_query(store_of(args), args.query, args.format, output, args.force)


def _cmd_simulate(args: argparse.Namespace) -> int:
    from ibias.runner.sim_profile import SimProfile, load_profile
    from ibias.runner.simulator import serve_forever

    if args.profile:
        profile = load_profile(args.profile)
    else:
        profile = SimProfile.from_args(
            seed=args.seed,
            rpm=args.rpm,
            tpm=args.tpm,
            latency_ms=args.latency_ms,
            fault_rate=args.fault_rate,
            hide_limits=args.hide_limits,
        )

    def ready(url: str) -> None:
        print(f"simulator listening on {url}", flush=True)

    try:
        asyncio.run(serve_forever(profile, "127.0.0.1", args.port, on_ready=ready))
    except OSError as exc:
        return _fail(f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror}")
    return EXIT_OK


def _analyze(
    store: Path,
    out: Path,
    bootstrap: int = 2000,
    ci: str = "percentile",
    by_reported_model: bool = False,
    population: bool = True,
) -> Path:
    """Analysis (it takes the store's lock only to parse, see analysis/load.py); data that
    breaks the pairing is bad input (exit 2)."""
    from ibias.analysis.analyze import analyze
    from ibias.analysis.experiment import AnalysisDataError
    from ibias.store.db import StoreError

    try:
        return analyze(
            store,
            out,
            bootstrap=bootstrap,
            ci=ci,  # type: ignore[arg-type]
            by_reported_model=by_reported_model,
            population=population,
        ).report
    except AnalysisDataError as exc:
        raise StoreError(f"store {store}: {exc}") from None


def _cmd_analyze(args: argparse.Namespace) -> int:
    report = _analyze(
        store_of(args),
        Path(args.out),
        args.bootstrap,
        args.ci,
        args.by_reported_model,
        population=not args.no_population,
    )
    print(f"report: {report}")
    return EXIT_OK


DEMO_CONFIG = Path(str(resources.files("ibias") / "configs" / "demo.toml"))


def _cmd_demo(args: argparse.Namespace) -> int:
    """The paper's whole grid on seven simulated models, then the analysis, into --out."""

    from ibias.runner.run import RunOptions, execute

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = load_config(DEMO_CONFIG)
    store = out / "demo.duckdb"
    result = _with_stop_signals(lambda stop: execute(config, RunOptions(store=store), stop=stop))
    for line in result.lines:
        print(line, file=sys.stderr)
    if result.exit_code not in (EXIT_OK, EXIT_FAILED):
        return result.exit_code
    print(f"report: {_analyze(store, out)}")
    for line in demo_next_steps(store):
        print(line)
    return result.exit_code


def demo_next_steps(store: Path, program: str | None = None) -> list[str]:
    """The demo's last lines: how to query its store. Plain `ibias status` would look for
    runs/ibias.duckdb, so each command names the store; `program` is how this `ibias` was
    called (`.venv/bin/ibias` from `make demo`), so the lines can be pasted as they are."""
    if program is None:
        called = Path(sys.argv[0])
        program = os.path.relpath(called) if called.name == "ibias" else "ibias"
    where = f"--store {store}"
    query = "SELECT model_id, language, avg(bias) FROM word_association_trials GROUP BY ALL"
    return [
        f"store: {store}; query it with",
        f"  {program} status {where}",
        f'  {program} sql {where} "{query}"',
        f"  {program} show {where} --random 1",
    ]


def _cmd_import(args: argparse.Namespace) -> int:
    from ibias.store.db import open_store
    from ibias.store.importer import import_file, read_file

    path = Path(args.file)
    pack = None
    if args.stimuli is not None:
        from ibias.prompts.stimuli.pack import load_pack

        pack = load_pack(Path(args.stimuli))
    read_file(path)  # validate before touching the store
    store = store_of(args)
    with StoreLock(store):
        con = open_store(store, create=True)
        try:
            result = import_file(con, path, pack)
        finally:
            con.close()
    print(
        f"imported {result.imported:,} replies from {path} "
        f"({result.already_present:,} already present)"
    )
    if pack is not None:
        counts = ", ".join(f"{status} {n:,}" for status, n in sorted(result.checked.items()))
        print(f"paper-design prompts checked against {pack.root}: {counts or 'none imported'}")
    return EXIT_OK


def _cmd_stimuli(args: argparse.Namespace) -> int:
    from ibias.prompts.stimuli.composition import pack_compositions
    from ibias.prompts.stimuli.pack import load_pack
    from ibias.prompts.stimuli.release import pack_from_release

    if args.stimuli_command == "check":
        pack = load_pack(Path(args.pack_dir))
        print(
            f"stimuli pack {args.pack_dir}: {len(pack.templates)} templates, "
            f"{len(pack.services)} services, {len(pack.people)} people, {len(pack.pairs)} pairs"
        )
    else:
        conversion = pack_from_release(Path(args.repo_dir), Path(args.out))
        print(conversion.summary())
        pack = load_pack(conversion.out)
    for found in pack_compositions(pack):
        print(found.line())
    return EXIT_OK

"""The `ibias` command line, and the one place that turns exceptions into user-facing lines.

Exit codes (DESIGN.md): 0 done; 1 some trials failed for good or a budget stopped the run;
2 bad input (config, arguments, store) with one line and no traceback; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeVar

import orjson

from ibias.runner.config import DEFAULT_STORE, MAX_CONCURRENCY, load_config
from ibias.store.lock import StoreLock

if TYPE_CHECKING:
    from ibias.runner.stop import Stop

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ibias", description="Implicit-bias experiments on LLMs, at scale.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run (or resume) the trials of a config")
    run.add_argument("config")
    run.add_argument("--store", type=_store_path)
    run.add_argument("--max-cost", type=_non_negative_float, metavar="USD")
    run.add_argument("--concurrency", type=_bounded_int(MAX_CONCURRENCY), metavar="N")
    run.add_argument("--quiet", action="store_true")

    plan = sub.add_parser("plan", help="count planned and remaining trials (no requests)")
    plan.add_argument("config")
    plan.add_argument("--store", type=_store_path)
    plan.add_argument("--json", action="store_true")

    status = sub.add_parser("status", help="progress of a store, also during a run")
    status.add_argument("--store", type=_store_path, default=DEFAULT_STORE)
    status.add_argument("--json", action="store_true")

    sql = sub.add_parser("sql", help="one read-only SQL query over the store")
    sql.add_argument("query")
    sql.add_argument("--store", type=_store_path, default=DEFAULT_STORE)
    shape = sql.add_mutually_exclusive_group()
    shape.add_argument("--format", choices=("table", "csv", "json"), default="table")
    shape.add_argument("--output", metavar="FILE.parquet|csv|json", help="write the result")
    sql.add_argument("--force", action="store_true", help="let --output overwrite a file")

    sim = sub.add_parser("simulate", help="serve the provider simulator on loopback")
    sim.add_argument("--port", type=_port, default=8000)
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--rpm", type=_positive_int)
    sim.add_argument("--tpm", type=_positive_int)
    sim.add_argument("--latency-ms", type=_non_negative_float, default=0.0)
    sim.add_argument("--fault-rate", type=_probability, default=0.0)
    sim.add_argument(
        "--hide-limits", action="store_true", help="enforce --rpm/--tpm but announce them nowhere"
    )
    sim.add_argument("--profile")

    analyze = sub.add_parser("analyze", help="tables, figures and report.html from a store")
    analyze.add_argument("--store", type=_store_path, default=DEFAULT_STORE)
    analyze.add_argument("--out", default="out/analysis")
    analyze.add_argument("--bootstrap", type=_bounded_int(MAX_BOOTSTRAP), default=2000, metavar="B")
    analyze.add_argument("--ci", choices=("percentile", "bca"), default="percentile")

    demo = sub.add_parser("demo", help="the paper's grid on simulated models, then analysis")
    demo.add_argument("--out", default="out/demo")

    imp = sub.add_parser("import", help="ingest replies collected elsewhere (JSONL)")
    imp.add_argument("file")
    imp.add_argument("--store", type=_store_path, default=DEFAULT_STORE)

    stimuli = sub.add_parser("stimuli", help="stimuli packs: the paper's own texts")
    stimuli_sub = stimuli.add_subparsers(dest="stimuli_command", metavar="command", required=True)
    release = stimuli_sub.add_parser(
        "from-release", help="make a stimuli pack from a clone of the authors' repository"
    )
    release.add_argument("repo_dir", metavar="REPO_DIR")
    release.add_argument("--out", required=True, metavar="DIR")
    return parser


#: Errors shown as one line with exit code 2, by module. A command imports only what it uses
#: (so `ibias --help`, `status` and `sql` start fast); an error class whose module was never
#: imported cannot have been raised, so only loaded modules are asked.
_USER_ERRORS = (
    ("ibias.runner.config", "ConfigError"),
    ("ibias.store.db", "StoreError"),
    ("ibias.store.lock", "StoreBusyError"),
    ("ibias.store.importer", "ImportFileError"),
    ("ibias.prompts.base", "SettingsError"),
    ("ibias.prompts.stimuli.pack", "StimuliError"),
)


def _user_error(exc: BaseException) -> bool:
    return any(
        (module := sys.modules.get(name)) is not None and isinstance(exc, getattr(module, cls))
        for name, cls in _USER_ERRORS
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
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
            f"internal error: {type(exc).__name__}: {exc} (set IBIAS_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


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
    if args.command == "status":
        return _cmd_status(args)
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

    async def main() -> _T:
        stop = Stop()
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

    return anyio.run(main)


def _cmd_run(args: argparse.Namespace) -> int:
    from ibias.runner.run import RunOptions, execute

    async def job(stop: Stop) -> int:
        config = load_config(args.config)
        options = RunOptions(
            store=config.store_path(args.store),
            max_cost=args.max_cost,
            concurrency=args.concurrency,
            quiet=args.quiet,
        )
        result = await execute(config, options, stop=stop)
        for line in result.lines:
            print(line, file=sys.stderr)
        return result.exit_code

    return _with_stop_signals(job)


def _cmd_plan(args: argparse.Namespace) -> int:
    from ibias.runner.planning_report import plan_report, render_plan

    config = load_config(args.config)
    report = plan_report(config, config.store_path(args.store))
    if args.json:
        sys.stdout.write(orjson.dumps(report).decode() + "\n")
    else:
        render_plan(report)
    return EXIT_OK


def _cmd_status(args: argparse.Namespace) -> int:
    from ibias.runner.status_report import render_status, status_report

    report = status_report(Path(args.store))
    if args.json:
        sys.stdout.write(orjson.dumps(report).decode() + "\n")
    else:
        render_status(report)
    return EXIT_OK


def _cmd_sql(args: argparse.Namespace) -> int:
    from ibias.runner.sql import run_query

    if args.force and args.output is None:
        raise UsageError("ibias sql: --force only applies with --output")
    output = None if args.output is None else Path(args.output)
    return run_query(Path(args.store), args.query, args.format, output, args.force)


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


def _analyze(store: Path, out: Path, bootstrap: int = 2000, ci: str = "percentile") -> Path:
    """Analysis under the store lock; data that breaks the pairing is bad input (exit 2)."""
    from ibias.analysis.analyze import analyze
    from ibias.analysis.experiment import AnalysisDataError
    from ibias.store.db import StoreError

    with StoreLock(store):
        try:
            return analyze(store, out, bootstrap=bootstrap, ci=ci).report  # type: ignore[arg-type]
        except AnalysisDataError as exc:
            raise StoreError(f"store {store}: {exc}") from None


def _cmd_analyze(args: argparse.Namespace) -> int:
    report = _analyze(Path(args.store), Path(args.out), args.bootstrap, args.ci)
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
    return result.exit_code


def _cmd_import(args: argparse.Namespace) -> int:
    from ibias.store.db import open_store
    from ibias.store.importer import import_file, read_file

    path = Path(args.file)
    read_file(path)  # validate before touching the store
    store = Path(args.store)
    with StoreLock(store):
        con = open_store(store, create=True)
        try:
            result = import_file(con, path)
        finally:
            con.close()
    print(
        f"imported {result.imported:,} replies from {path} "
        f"({result.already_present:,} already present)"
    )
    return EXIT_OK


def _cmd_stimuli(args: argparse.Namespace) -> int:
    from ibias.prompts.stimuli.release import pack_from_release

    print(pack_from_release(Path(args.repo_dir), Path(args.out)).summary())
    return EXIT_OK

"""`ibias run CONFIG`: run (or resume) the trials of a config."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ibias.errors import UsageError
from ibias.runner.commands import EXIT_FAILED, EXIT_OK
from ibias.runner.commands.options import (
    add_rehearse,
    add_selection,
    add_store_only,
    bounded_int,
    non_negative_float,
    speed,
)
from ibias.runner.config import MAX_CONCURRENCY, Config, absolute_path, load_config
from ibias.runner.console import literal

if TYPE_CHECKING:
    from ibias.runner.batch.run import BatchOptions
    from ibias.runner.scheduling.stop import Stop


def add_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("config", help="the TOML config to run")
    add_store_only(run)
    add_selection(run)
    run.add_argument(
        "--max-cost",
        type=non_negative_float,
        metavar="USD",
        help=(
            "cap on everything the store has spent on this config's trials, this run and "
            "earlier ones (a resume at the same cap stops before its first request); a request "
            "starts only if its worst case fits (default: no limit)"
        ),
    )
    run.add_argument(
        "--concurrency",
        type=bounded_int(MAX_CONCURRENCY),
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
    add_rehearse(run, run=True)
    run.add_argument(
        "--speed",
        type=speed,
        metavar="N",
        help="with --rehearse: compress time N-fold (limits x N, simulated latencies / N); "
        "progress says the real-time estimate too (default: 1, real time)",
    )


def selected_config(args: argparse.Namespace) -> Config:
    """The config of `run`/`plan`, restricted by --model and --experiment; with --rehearse,
    its rehearsal (whose store is the rehearsal store, runner/execution/rehearsal.py)."""
    from dataclasses import replace

    from ibias.runner.execution.selection import select

    config = select(load_config(args.config), args.model, args.experiment)
    return replace(config, rehearsal=True) if getattr(args, "rehearse", False) else config


def batch_options(args: argparse.Namespace) -> BatchOptions:
    """`--batch` and `--no-wait` (runner/batch/run.py)."""
    from ibias.runner.batch.run import BatchOptions

    return BatchOptions(forced=args.batch, wait=not args.no_wait)


def handle(args: argparse.Namespace) -> int:
    from ibias.runner.commands.stop_signals import with_stop_signals
    from ibias.runner.execution.run import RunOptions, execute

    if args.speed is not None and not args.rehearse:
        raise UsageError("ibias run: --speed applies only with --rehearse")
    if args.rehearse and args.no_wait:
        raise UsageError(
            "ibias run: --no-wait cannot rehearse (a rehearsal's batches live in its own "
            "simulator, which ends with the run); drop --no-wait"
        )
    # Loaded before the loop, which it chooses (runner/execution/event_loop.py); a stop signal while
    # it loads ends the command at once, as during start-up (runner/startup.py).
    config = selected_config(args)
    rehearsal = None
    if args.rehearse:
        from ibias.runner.execution.rehearsal import Rehearsal

        rehearsal = Rehearsal(speed=args.speed or 1.0)

    async def job(stop: Stop) -> int:
        options = RunOptions(
            store=config.store_path(args.store),
            max_cost=args.max_cost,
            concurrency=args.concurrency,
            quiet=args.quiet,
            batch=batch_options(args),
            rehearsal=rehearsal,
        )
        result = await execute(config, options, stop=stop)
        # Which store the run filled, wherever it was started from: with the summary of a
        # run that ended by itself, so that a refused or interrupted run keeps its one line.
        if result.exit_code in (EXIT_OK, EXIT_FAILED):
            print(literal(f"store: {absolute_path(options.store)}"), file=sys.stderr)
        for line in result.lines:
            print(literal(line), file=sys.stderr)
        return result.exit_code

    return with_stop_signals(job, config)

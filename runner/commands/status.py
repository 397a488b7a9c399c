"""`ibias status [CONFIG]`: the progress of a store, also during a run."""

from __future__ import annotations

import argparse
import os
import sys

from ibias.errors import UsageError
from ibias.runner.commands import EXIT_FAILED, EXIT_OK
from ibias.runner.commands.options import add_rehearse, add_store
from ibias.runner.commands.stores import store_of
from ibias.runner.paths import absolute_path


def add_arguments(status: argparse.ArgumentParser) -> None:
    status.add_argument(
        "config_file",
        nargs="?",
        metavar="CONFIG",
        help="a config whose [run] store to show (same as --config; default: none)",
    )
    add_store(status)
    add_rehearse(status)
    status.add_argument(
        "--json", action="store_true", help="print one JSON object (default: a table)"
    )
    status.add_argument(
        "--verify",
        action="store_true",
        help="recount the progress from the store's rows and compare it with the counts the "
        "store keeps: one line if they agree (exit 0), one per difference otherwise (exit 1) "
        "(default: show the progress)",
    )
    status.add_argument(
        "--refresh",
        action="store_true",
        help="ask the providers for the state of CONFIG's running batches and record it "
        "first (needs their API keys; default: the store's view only)",
    )


def handle(args: argparse.Namespace) -> int:
    if not (args.verify or args.refresh):
        # Read from a running store, status needs no DuckDB: it loads on first use, if ever
        # (the plain report runs on this thread alone; --refresh asks providers concurrently).
        from ibias.runner.deferred_imports import defer

        defer("duckdb")
    from ibias.runner.status_report import render_status, status_with_batches

    if args.refresh and args.rehearse:
        raise UsageError(
            "ibias status: --refresh asks the providers; a rehearsal's batches live in its "
            "run's own simulator: drop --refresh"
        )
    if args.verify:
        return _verify(args)
    if args.refresh:
        _refresh_batches(args)
    # Absolute: the report names the store, and it must say which one wherever you stand.
    report, batches = status_with_batches(absolute_path(store_of(args)))
    if args.json:
        import orjson

        sys.stdout.write(orjson.dumps({**report, "batches": batches}).decode() + "\n")
    else:
        from ibias.runner.batch.status import batch_lines

        render_status(report)
        line = rehearsal_line(report)
        if line is not None:
            from ibias.runner.console import literal

            print(literal(line, layout=False))
        for line in batch_lines(batches):
            print(line)
    return EXIT_OK


def _verify(args: argparse.Namespace) -> int:
    """`status --verify`: the kept progress counts against a recount from the rows (through
    the run serving the store while one holds it, else from the file)."""
    from ibias.runner.console import literal
    from ibias.runner.status_report import verify_counts

    if args.refresh or args.json:
        raise UsageError("ibias status --verify: give it alone (without --refresh or --json)")
    differences, trials = verify_counts(absolute_path(store_of(args)))
    if not differences:
        print(f"progress counts agree with the tables ({trials:,} trials)")
        return EXIT_OK
    for line in differences:
        print(literal(line, layout=False))
    return EXIT_FAILED


def rehearsal_line(report: dict[str, object]) -> str | None:
    """What a running rehearsal's ETAs mean in real time: the status file of a run with
    `--speed N` says N, and each model's real-time ETA is its shown ETA times N (None for a
    real run); after a rehearsal, a line saying its replies are simulated."""
    from ibias.runner.status import span

    if not report.get("running"):
        last = report.get("last_status")
        if isinstance(last, dict) and isinstance(last.get("rehearsal"), dict):
            return "a rehearsal's store: every reply in it is simulated"
        return None
    rehearsal = report.get("rehearsal")
    if not isinstance(rehearsal, dict):
        return None
    speed = float(rehearsal.get("speed") or 1)
    if speed == 1:
        return "rehearsal: simulated replies, in real time"
    models = report.get("models")
    etas = [
        f"{m['model_id']} {span(float(m['eta_s']) * speed)}"
        for m in (models if isinstance(models, list) else [])
        if isinstance(m, dict) and m.get("eta_s") and not m.get("fatal")
    ]
    return f"rehearsal at --speed {speed:g}: the ETAs above are compressed" + (
        f"; in real time: {', '.join(etas)}" if etas else ""
    )


def _refresh_batches(args: argparse.Namespace) -> None:
    """`status --refresh`: the providers' view of the config's running batches, recorded in
    the store before it is read (a run's poll, without the download)."""
    import anyio

    from ibias.runner.batch.status import refresh_batches
    from ibias.runner.config import load_config
    from ibias.runner.console import literal

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
        lambda line: print(literal(line, layout=False), file=sys.stderr),
    )

"""`ibias batches cancel CONFIG`: the provider batches of a config (docs/batches.md)."""

from __future__ import annotations

import argparse
import os
import sys

from ibias.runner.commands import EXIT_OK
from ibias.runner.commands.options import Parser, add_rehearse, add_store_only


def add_arguments(batches: argparse.ArgumentParser) -> None:
    batches_sub = batches.add_subparsers(
        dest="batches_command", required=True, metavar="ACTION", parser_class=Parser
    )
    cancel = batches_sub.add_parser("cancel", help="cancel this config's live batches")
    cancel.add_argument("config", help="the TOML config whose batches to cancel")
    add_store_only(cancel)
    add_rehearse(cancel)


def handle(args: argparse.Namespace) -> int:
    """Cancel the config's live batches at their providers."""
    import anyio

    from ibias.runner.batch.status import cancel_batches
    from ibias.runner.config import load_config
    from ibias.runner.console import literal

    config = load_config(args.config)
    if args.rehearse:
        # A rehearsal's batches lived in its run's own simulator, which ended with the run:
        # there is no provider to ask, and no real key may be spent on them.
        print("0 batches cancelled: a rehearsal's batches end with its run", file=sys.stderr)
        return EXIT_OK
    store = config.store_path(args.store)
    cancelled = anyio.run(
        cancel_batches,
        config,
        store,
        os.environ,
        lambda line: print(literal(line, layout=False), file=sys.stderr),
    )
    print(f"{len(cancelled)} batches cancelled", file=sys.stderr)
    return EXIT_OK

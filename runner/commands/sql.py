"""`ibias sql QUERY`: one read-only SQL query over the store (README: What ibias sql allows)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ibias.errors import UsageError
from ibias.runner.commands.options import add_rehearse, add_store, path_text
from ibias.runner.commands.stores import store_of


def add_arguments(sql: argparse.ArgumentParser) -> None:
    sql.add_argument(
        "query", help="one read-only SQL statement (see README: What ibias sql allows)"
    )
    add_store(sql)
    add_rehearse(sql)
    shape = sql.add_mutually_exclusive_group()
    shape.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="how to print the result (default: table)",
    )
    shape.add_argument(
        "--output",
        type=path_text,
        metavar="FILE.parquet|csv|json",
        help="write the result to a file, format by extension (default: print it)",
    )
    sql.add_argument(
        "--force", action="store_true", help="let --output overwrite a file (default: refuse)"
    )


def handle(args: argparse.Namespace) -> int:
    from ibias.runner.sql import run_query

    if args.force and args.output is None:
        raise UsageError("ibias sql: --force only applies with --output")
    output = None if args.output is None else Path(args.output)
    return run_query(store_of(args), args.query, args.format, output, args.force)

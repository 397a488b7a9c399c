"""`ibias plan CONFIG`: count planned and remaining trials, and what they cost (no requests)."""

from __future__ import annotations

import argparse
import sys

import orjson

from ibias.runner.commands import EXIT_OK
from ibias.runner.commands.options import add_rehearse, add_selection, add_store_only
from ibias.runner.commands.run import selected_config


def add_arguments(plan: argparse.ArgumentParser) -> None:
    plan.add_argument("config", help="the TOML config to plan")
    add_store_only(plan)
    add_rehearse(plan)
    add_selection(plan)
    plan.add_argument(
        "--json", action="store_true", help="print one JSON object (default: a table)"
    )
    plan.add_argument(
        "--batch",
        action="store_true",
        help="plan as `run --batch` would run: which models go as batches, at the batch price "
        "(default: each model's mode)",
    )


def handle(args: argparse.Namespace) -> int:
    from ibias.runner.execution.planning_report import plan_json, render_plan

    config = selected_config(args)
    report = plan_json(config, config.store_path(args.store), batch=args.batch)
    if args.json:
        sys.stdout.write(orjson.dumps(report).decode() + "\n")
    else:
        from ibias.runner.console import literal

        print(literal(f"store: {report['store']}", layout=False), flush=True)
        render_plan(report)
    return EXIT_OK

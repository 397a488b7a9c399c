"""`ibias models CONFIG`: one cheap request per model (key, model name, announced limits)."""

from __future__ import annotations

import argparse
import os
import sys

import orjson

from ibias.runner.commands import EXIT_FAILED, EXIT_OK


def add_arguments(models: argparse.ArgumentParser) -> None:
    models.add_argument("config", help="the TOML config whose models to check")
    models.add_argument(
        "--json", action="store_true", help="print one JSON object (default: a table)"
    )


def handle(args: argparse.Namespace) -> int:
    import anyio

    from ibias.runner.config import load_config
    from ibias.runner.execution.models_check import check_models, render_checks

    config = load_config(args.config)
    checks = anyio.run(check_models, config, os.environ)
    if args.json:
        sys.stdout.write(orjson.dumps([c.to_json() for c in checks]).decode() + "\n")
    else:
        render_checks(checks)
    return EXIT_OK if all(c.ok for c in checks) else EXIT_FAILED

"""`ibias demo`: our controlled design's whole grid on seven simulated models, then the
analysis (README: the demo runs our design, not the paper's, and needs no stimuli pack)."""

from __future__ import annotations

import argparse
import os
import sys
from importlib import resources
from pathlib import Path

from ibias.runner.commands import EXIT_FAILED, EXIT_OK
from ibias.runner.commands.analyze import analyze_store
from ibias.runner.commands.options import path_text
from ibias.runner.console import literal

DEMO_CONFIG = Path(str(resources.files("ibias") / "configs" / "demo.toml"))


#: What `ibias demo --help` says it does, in the README's words.
DESCRIPTION = (
    "Run our controlled design's whole grid (configs/demo.toml: the experiments of "
    "configs/controlled.toml, our texts, roster and conditions, 142,240 trials) on seven "
    "simulated models with planted biases, then analyze it into DIR/report.html. No keys, no "
    "network, no stimuli pack. The paper's own design is configs/paper.toml."
)


def add_arguments(demo: argparse.ArgumentParser) -> None:
    demo.description = DESCRIPTION
    demo.add_argument(
        "--out",
        type=path_text,
        default="out/demo",
        metavar="DIR",
        help="store and report folder (default: out/demo)",
    )


def handle(args: argparse.Namespace) -> int:
    """The grid into --out/demo.duckdb, then the report beside it."""
    from ibias.runner.commands.stop_signals import with_stop_signals
    from ibias.runner.config import load_config
    from ibias.runner.execution.run import RunOptions, execute

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = load_config(DEMO_CONFIG)
    store = out / "demo.duckdb"
    result = with_stop_signals(
        lambda stop: execute(config, RunOptions(store=store), stop=stop), config
    )
    for line in result.lines:
        print(literal(line), file=sys.stderr)
    if result.exit_code not in (EXIT_OK, EXIT_FAILED):
        return result.exit_code
    print(literal(f"report: {analyze_store(store, out)}"))
    for line in demo_next_steps(store):
        print(literal(line))
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

"""The `ibias` subcommands: one module each, and the table that names them.

Each module defines `add_arguments(parser)` (its flags) and `handle(args) -> int` (the exit
code). The table holds what `ibias --help` lists, so the help and the parsing of one command
import that command's module only: `ibias status` never loads the simulator, `ibias --help`
none of them. `runner/cli.py` parses, dispatches, and turns errors into exit codes.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    import argparse

#: Exit codes (DESIGN.md): done; some trials failed for good or a budget stopped the run; bad
#: input (config, arguments, store) with one line and no traceback; interrupted.
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def fail(message: str, code: int = EXIT_BAD_INPUT) -> int:
    """Say what is wrong in one line on stderr; the exit code to return. Control characters
    in it (a path or an id can hold any) are escaped, so it stays one line and sets nothing
    on the terminal (runner/console.py)."""
    from ibias.runner.console import literal

    print(literal(f"error: {message}", layout=False), file=sys.stderr)
    return code


class CommandModule(Protocol):
    """What a subcommand's module provides."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def handle(self, args: argparse.Namespace) -> int: ...


@dataclass(frozen=True)
class Command:
    """One subcommand: its module under `ibias.runner.commands`, the line `ibias --help`
    shows for it, and whether it opens its own stop-signal receiver (`stop_signals.py`), so
    that the start-up handlers (runner/startup.py) must hold until it is open."""

    module: str
    help: str
    own_stop_signals: bool = False

    def load(self) -> CommandModule:
        return cast(CommandModule, importlib.import_module(f"{__name__}.{self.module}"))


#: The subcommands in the order `ibias --help` lists them.
COMMANDS: dict[str, Command] = {
    "run": Command("run", "run (or resume) the trials of a config", own_stop_signals=True),
    "plan": Command("plan", "count planned and remaining trials (no requests)"),
    "models": Command("models", "one cheap request per model: key, model name, announced limits"),
    "status": Command("status", "progress of a store, also during a run"),
    "batches": Command("batches", "provider batches of a config (docs/batches.md)"),
    "show": Command("show", "one trial as sent and answered, with its parse"),
    "sql": Command("sql", "one read-only SQL query over the store"),
    "simulate": Command("simulate", "serve the provider simulator on loopback"),
    "analyze": Command("analyze", "tables, figures and report.html from a store"),
    "demo": Command(
        "demo",
        "our controlled design's grid on simulated models, then analysis",
        own_stop_signals=True,
    ),
    "import": Command("imports", "ingest replies collected elsewhere (JSONL)"),
    "stimuli": Command("stimuli", "stimuli packs: the paper's own texts"),
}

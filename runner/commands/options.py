"""What the subcommands' parsers share: the parser class, value types and common options.

Kept free of the runner's heavy modules: `ibias --help` builds the top parser from here.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn

from ibias.errors import UsageError


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are a `UsageError` (one line, exit 2; runner/cli.py)
    rather than argparse's usage block and exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def bounded_int(upper: int) -> Callable[[str], int]:
    """A positive integer at most `upper` (a cap that keeps memory or output in bounds)."""

    def parse(text: str) -> int:
        value = positive_int(text)
        if value > upper:
            raise argparse.ArgumentTypeError(f"expected at most {upper:,}, got {text!r}")
        return value

    return parse


def path_text(text: str) -> str:
    """A path argument: any bytes but NUL, the one a Linux path cannot hold (the system could
    not have passed it; a caller of `main` can, and `os.stat` would raise on it)."""
    if "\0" in text:
        raise argparse.ArgumentTypeError("a path cannot hold a NUL byte")
    return text


def store_path(text: str) -> str:
    """A --store value; an empty one (an unset shell variable) must not mean "the default"."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a path, got an empty string")
    return path_text(text)


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 0..65535, got {text!r}")
    return value


def probability(text: str) -> float:
    value = non_negative_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1], got {text!r}")
    return value


def add_store_only(p: argparse.ArgumentParser) -> None:
    """--store alone, for the commands whose config is their positional argument."""
    from ibias.runner.paths import DEFAULT_STORE

    p.add_argument(
        "--store",
        type=store_path,
        metavar="PATH",
        help=f"the DuckDB store (default: the config's [run] store, else {DEFAULT_STORE})",
    )


def add_store(p: argparse.ArgumentParser) -> None:
    """--store and --config: two ways to name the store (`stores.store_of` resolves them)."""
    add_store_only(p)
    p.add_argument(
        "--config",
        type=path_text,
        metavar="FILE",
        help="a config whose [run] store is the store (default: none; --store must agree)",
    )


def add_selection(p: argparse.ArgumentParser) -> None:
    """--model and --experiment: part of a config (runner/execution/selection.py)."""
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


#: `--speed` at most (runner/execution/rehearsal.py `MAX_SPEED`, kept here as a number so that
#: `--help` does not import the runner).
MAX_SPEED = 10_000.0


def speed(text: str) -> float:
    """A `--speed` factor: a number above 0, at most `MAX_SPEED`."""
    value = non_negative_float(text)
    if not 0 < value <= MAX_SPEED:
        raise argparse.ArgumentTypeError(
            f"expected a number above 0 and at most 10,000, got {text!r}"
        )
    return value


def add_rehearse(p: argparse.ArgumentParser, *, run: bool = False) -> None:
    """--rehearse: the config's rehearsal (runner/execution/rehearsal.py) and its store."""
    p.add_argument(
        "--rehearse",
        action="store_true",
        help=(
            "rehearse the config: every model answered by ibias's simulator on its own "
            "protocol (no keys, no network), into the rehearsal store beside the config's "
            "(NAME.rehearsal.duckdb; --store names another; default: a real run)"
            if run
            else "the rehearsal store (`ibias run CONFIG --rehearse`): NAME.rehearsal.duckdb "
            "beside the config's store, or the default's (--store is taken as given)"
        ),
    )


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object (default: a table)")

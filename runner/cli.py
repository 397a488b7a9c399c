"""The `ibias` command line: parse, dispatch to the subcommand's module, and turn what escapes
into the one line and exit code the user sees.

Exit codes (DESIGN.md): 0 done; 1 some trials failed for good or a budget stopped the run;
2 bad input (config, arguments, store) with one line and no traceback; 130 interrupted. Each
subcommand is a module of `runner/commands/`, named in its table and imported only when it is
the one chosen, so `ibias --help` loads none of them and each command only what it needs.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from collections.abc import Collection, Sequence
from typing import TextIO

from ibias.errors import Error, ProviderError
from ibias.runner.commands import (
    COMMANDS,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    fail,
)
from ibias.runner.commands.options import Parser

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_CODES",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "build_parser",
    "chosen_command",
    "entry",
    "exit_code",
    "main",
    "os_error_line",
]

#: The exit code of each branch of the error tree (ibias/errors.py), the first that matches:
#: a provider's API that failed is not the user's input (1); every other `ibias.Error` is (2).
#: Either way one line, no traceback.
EXIT_CODES: tuple[tuple[type[Error], int], ...] = (
    (ProviderError, EXIT_FAILED),
    (Error, EXIT_BAD_INPUT),
)


def exit_code(exc: Error) -> int:
    """The exit code of an error of the tree (`EXIT_CODES`)."""
    return next(code for cls, code in EXIT_CODES if isinstance(exc, cls))


def _version() -> str:
    """The installed package's version (package metadata; cheap, unlike importing the runner)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ibias")
    except PackageNotFoundError:
        return "0+unknown"


class _VersionAction(argparse._VersionAction):
    """`--version`, which reads the package metadata only when asked (importlib.metadata
    costs every other command about 20 ms of start-up)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(f"{parser.prog} {_version()}")
        parser.exit()


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The command line with the arguments of `commands` (default: every subcommand); the
    others are listed with their help line only, and their modules are not loaded."""
    parser = Parser(prog="ibias", description="Implicit-bias experiments on LLMs, at scale.")
    parser.add_argument("--version", action=_VersionAction, help="show the version")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, command in COMMANDS.items():
        subparser = sub.add_parser(name, help=command.help)
        if commands is None or name in commands:
            command.load().add_arguments(subparser)
    return parser


def chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` names, if any: its first argument that is not an option (no
    option of the top level takes a value)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    """The command for `argv` (default: the process's arguments); its exit code."""
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        chosen = chosen_command(words)
        args = build_parser(() if chosen is None else (chosen,)).parse_args(words)
        if not COMMANDS[args.command].own_stop_signals:
            # Start-up is over: from here the command's own handling (KeyboardInterrupt on
            # Ctrl-C, below), as before runner/startup.py took the signals.
            from ibias.runner.startup import release

            release()
        return _dispatch(args)
    except Error as exc:  # the user's to fix, one line (ibias/errors.py)
        return fail(str(exc), exit_code(exc))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except OSError as exc:  # the system refused a path: a read-only store, a full disk, ...
        return fail(os_error_line(exc))
    except Exception as exc:  # a bug: one line, and the traceback only on request
        if os.environ.get("IBIAS_DEBUG"):
            raise
        from ibias.runner.console import literal

        print(
            literal(
                f"internal error: {type(exc).__name__}: {_without_secrets(str(exc))} ", layout=False
            )
            + "(set IBIAS_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


def _dispatch(args: argparse.Namespace) -> int:
    """Run the chosen subcommand's handler (its module is loaded by now)."""
    return COMMANDS[args.command].load().handle(args)


def entry() -> None:
    """The `ibias` command (the console script and `python -m ibias`): `main`, then an
    ordinary exit, so the exit handlers of the libraries and plugins run.

    The stop signals are handled from the start (runner/startup.py, where the console script
    begins): one arriving before `main` has caught it, or after, while the interpreter ends,
    still ends the command with "interrupted" and exit 130, never a traceback."""
    from ibias.runner.startup import install, interrupted

    install()
    try:
        code: int = main()
    except SystemExit as exc:  # argparse's --help and --version
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = EXIT_FAILED
    except KeyboardInterrupt:  # a Ctrl-C outside main's own handling
        interrupted()
    # The command is done; a stop signal from here ends the process at once with 130, and
    # spares the interpreter's teardown (waiting for a thread, closing modules) its traceback.
    install()
    for stream in (sys.stdout, sys.stderr):
        _flush(stream)
    # What the command built is garbage now; collecting it at exit (the interpreter's last
    # garbage collections over every object pyarrow, numpy, DuckDB and Polars created) was
    # most of the exit's 50 ms or more. Frozen objects are left out of those collections and
    # their memory goes back with the process; exit handlers and module teardown still run.
    gc.freeze()
    sys.exit(code)


def _flush(stream: TextIO) -> None:
    """Write out what `stream` holds; if its reader went away (`ibias sql ... | head -1`), what
    is left goes nowhere, rather than into a complaint when the interpreter flushes it again
    at exit."""
    try:
        stream.flush()
    except Exception:
        with contextlib.suppress(Exception):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)


def _without_secrets(text: str) -> str:
    """An unexpected exception's text may quote a request or an answer holding a key; the run's
    redaction scope has ended by the time it reaches here, so every environment value named like
    a credential is removed, as well as what looks like one."""
    from ibias.runner.redact import redact, secrets_scope

    names = ("KEY", "TOKEN", "SECRET")
    values = [v for k, v in os.environ.items() if any(n in k.upper() for n in names)]
    with secrets_scope(values):
        return redact(text)


def os_error_line(exc: OSError) -> str:
    """An OSError as one line naming the path and the system's reason (no errno noise)."""
    if exc.filename is not None and exc.strerror:
        where = f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 is not None else "")
        return f"{where}: {exc.strerror}"
    return " ".join(str(exc).split()) or type(exc).__name__

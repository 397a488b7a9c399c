"""The command line dispatches through a table of subcommand modules (runner/commands/), and a
command imports only its own: `ibias --help` none of them, nor the config schema or DuckDB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ibias.runner.cli import build_parser, chosen_command
from ibias.runner.commands import COMMANDS

COMMANDS_DIR = Path(__file__).resolve().parents[2] / "runner" / "commands"

#: Modules of runner/commands/ that are not subcommands: what the subcommands share.
SHARED = {"__init__", "options", "stores", "stop_signals"}

PROBE = """
import json, sys
from ibias.runner import cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps(sorted(sys.modules)), flush=True)
"""


def loaded_after(*argv: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_the_table_names_one_module_per_subcommand() -> None:
    files = {p.stem for p in COMMANDS_DIR.glob("*.py")}
    assert {c.module for c in COMMANDS.values()} == files - SHARED
    for name, command in COMMANDS.items():
        module = command.load()
        assert callable(module.add_arguments) and callable(module.handle), name
    assert [n for n, c in COMMANDS.items() if c.own_stop_signals] == ["run", "demo"]


def test_help_lists_the_table_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser(()).parse_args(["--help"])
    text = capsys.readouterr().out
    places = [text.index(f"    {name} ") for name in COMMANDS]
    assert places == sorted(places)
    for command in COMMANDS.values():
        assert command.help in " ".join(text.split())


def test_the_chosen_command_is_the_first_word_that_is_not_an_option() -> None:
    assert chosen_command(["run", "c.toml", "--store", "plan"]) == "run"
    assert chosen_command(["--version"]) is None
    assert chosen_command(["nope", "run"]) is None


def test_help_imports_no_command_and_nothing_heavy() -> None:
    loaded = loaded_after("--help")
    commands = {m for m in loaded if m.startswith("ibias.runner.commands.")}
    assert commands == {"ibias.runner.commands.options"}
    heavy = {"ibias.runner.config", "duckdb", "msgspec", "anyio", "importlib.metadata"}
    assert loaded & heavy == set()


def test_a_command_imports_its_own_module_only(tmp_path: Path) -> None:
    loaded = loaded_after("status", "--store", str(tmp_path / "none.duckdb"))
    commands = {m.rsplit(".", 1)[1] for m in loaded if m.startswith("ibias.runner.commands.")}
    assert commands == {"status", "options", "stores"}
    assert "ibias.runner.simulator" not in loaded and "aiohttp" not in loaded

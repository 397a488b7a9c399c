"""`python -m ibias` is the `ibias` command (tests run the CLI in a subprocess this way)."""

from ibias.runner.cli import entry

entry()

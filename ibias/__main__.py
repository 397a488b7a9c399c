"""`python -m ibias` is the `ibias` command (tests run the CLI in a subprocess this way); like
the console script it starts in `runner/startup.py`, which handles the stop signals before the
command is loaded."""

from ibias.runner.startup import entry

entry()

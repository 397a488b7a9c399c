"""`python -m ibias` is the `ibias` command (tests run the CLI in a subprocess this way)."""

import sys

from ibias.runner.cli import main

sys.exit(main())

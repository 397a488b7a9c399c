"""`python -m runner` is `ibias` (used by tests to run the CLI in a subprocess)."""

import sys

from runner.cli import main

sys.exit(main())

"""Import and start-up time of two checkouts, interleaved in one run (min and median).

    python -m bench.import_time OLD_PYTHON OLD_CLI_MODULE NEW_PYTHON

e.g. an older tree in its own venv (`runner.cli`, before the `ibias.*` namespace) against this
one (`ibias.runner.cli`): `python -m bench.import_time /old/.venv/bin/python runner.cli
.venv/bin/python`. Each figure is the cumulative time `python -X importtime` reports for the
module, the minimum and median over 9 fresh interpreters, old and new alternating.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path


def cumulative_ms(python: str, module: str) -> int:
    err = subprocess.run(
        [python, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        cwd="/tmp",
        check=True,
    ).stderr
    line = [row for row in err.splitlines() if row.rstrip().endswith(module)][-1]
    return int(line.split("|")[1]) // 1000


def main() -> None:
    old_python, old_module = sys.argv[1:3]
    new_python = str(Path(sys.argv[3]).absolute())
    runs: dict[str, list[int]] = {"old": [], "new": [], "api": []}
    for _ in range(9):
        runs["old"].append(cumulative_ms(old_python, old_module))
        runs["new"].append(cumulative_ms(new_python, "ibias.runner.cli"))
        runs["api"].append(cumulative_ms(new_python, "ibias"))
    for name, label in (("old", old_module), ("new", "ibias.runner.cli"), ("api", "ibias")):
        values = runs[name]
        print(f"{label}: min {min(values)} ms, median {statistics.median(values):.0f} ms")


if __name__ == "__main__":
    main()

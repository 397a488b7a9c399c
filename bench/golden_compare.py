"""Compare two `ibias analyze` output folders table by table, as the golden test does.

    python bench/golden_compare.py REF_DIR NEW_DIR [--rel 1e-12]
    python -m bench.golden_compare REF_DIR NEW_DIR [--rel 1e-12]

For a store too big to commit (the demo store, the 10x grid): analyse it with the old code and
the new, same B and seed, and compare. Prints each difference (file, column, row, old -> new)
and exits 1, or prints "N tables identical within rel R" and exits 0; exit 2 when a folder is
missing. The rules and the files left out are those of tests/analysis/golden.py (one
implementation for the test and this command).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root holds `tests`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.analysis.golden import DEFAULT_REL, EXCLUDED, compare_tables, table_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="golden_compare",
        description="Compare the statistical tables of two analysis folders.",
        epilog="Left out: " + "; ".join(f"{k} ({v})" for k, v in EXCLUDED.items()),
    )
    parser.add_argument("reference", type=Path, metavar="REF_DIR")
    parser.add_argument("new", type=Path, metavar="NEW_DIR")
    parser.add_argument(
        "--rel", type=float, default=DEFAULT_REL, help="relative tolerance for floats"
    )
    args = parser.parse_args(argv)
    try:
        differences = compare_tables(args.reference, args.new, rel=args.rel)
    except NotADirectoryError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for line in differences:
        print(line)
    if differences:
        print(f"{len(differences)} differences", file=sys.stderr)
        return 1
    print(f"{len(table_files(args.reference))} tables identical within rel {args.rel:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

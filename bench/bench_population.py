"""Benchmark: the simulation study that chooses the population method (issue 32).

Runs `bench.population_study` over the whole grid (4 shapes x 1-2 trials per order x person sd
0 / 0.6 / 1.5 x no-choice 5% / 10% x identity effect 0 / 0.3 / 0.6 = 144 cells; the authors'
shapes need the stimuli pack and are skipped with the reason without it), every method of
`population.METHODS` on the same rosters of a cell, B = 1,000 for the bootstrap methods.
Writes the table (one row per cell and method) to `bench/population_grid.csv` (the committed
table; a run over part of the grid or fewer rosters writes only with --out), prints it as
markdown (cells x methods) and, per method, whether it meets the acceptance rule (coverage
0.93-0.97 in every cell, false positives <= 0.06 in every null cell, power >= 0.85 x the
oracle's in every effect cell) with the failing cells and by how much.

    python -m bench.bench_population [--rosters 1000] [--B 1000] [--cells PATTERN ...]
                                     [--methods NAME ...] [--out PATH] [--jobs 1]

Seeds are fixed per cell, so the figures do not depend on --jobs or on which cells run.
"""

from __future__ import annotations

import os

# One BLAS thread per process, set before numpy loads: OpenBLAS's threads on the small matrices
# of the Satterthwaite df spin against each other on a shared machine (16 s of CPU per 1,000
# rosters instead of 1 s on this 2-core machine under load). `--jobs` parallelises cells instead.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import csv
import resource
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench import population_study as ps

GRID_CSV = Path(__file__).resolve().parent / "population_grid.csv"
FIELDS = [
    "cell", "shape", "trials_per_order", "person_sd", "no_choice", "beta", "method", "rosters",
    "B", "population_value", "mean_estimate", "coverage", "coverage_se", "rejection",
    "rejection_se", "width", "width_se", "oracle_sd", "oracle_rejection", "oracle_rejection_se",
    "power_ratio", "power_ratio_se", "undefined", "seconds",
]  # fmt: skip


def _cell_rows(cell: ps.Cell, rosters: int, methods: Sequence[str], B: int) -> list[dict[str, Any]]:
    designs, _ = ps.load_designs([cell.shape])
    start = time.perf_counter()
    rows = ps.measure_cell(designs[cell.shape], cell, rosters, methods, B)
    seconds = time.perf_counter() - start
    for row in rows:
        row["B"] = B
        row["seconds"] = round(seconds, 2)
    return rows


def run(
    rosters: int = 1000,
    B: int = 1000,
    patterns: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
    jobs: int = 1,
    log: bool = True,
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The rows of every selected cell (grid order) and the skipped shapes with their reason."""
    names = tuple(methods) if methods else ps.methods()
    designs, skipped = ps.load_designs()
    cells = [c for c in ps.select(ps.grid(), patterns) if c.shape in designs]
    rows: list[dict[str, Any]] = []
    if jobs <= 1:
        for i, cell in enumerate(cells):
            rows.extend(_cell_rows(cell, rosters, names, B))
            if log:
                print(f"[{i + 1}/{len(cells)}] {cell.name} {rows[-1]['seconds']}s", flush=True)
    else:
        with ProcessPoolExecutor(jobs) as pool:
            futures = [pool.submit(_cell_rows, c, rosters, names, B) for c in cells]
            for i, (cell, fut) in enumerate(zip(cells, futures, strict=True)):
                rows.extend(fut.result())
                if log:
                    print(f"[{i + 1}/{len(cells)}] {cell.name}", flush=True)
    return rows, skipped


def write_csv(rows: Sequence[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _fmt(row[k]) for k in FIELDS})


def read_csv(path: Path = GRID_CSV) -> list[dict[str, Any]]:
    """The committed table, numbers as floats (ints for counts)."""
    return ps.read_grid(path)


def _fmt(value: Any) -> Any:
    return f"{value:.6g}" if isinstance(value, float) else value


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Cells x methods: per method 'coverage / false positives or power / width', and the
    oracle's rejection rate (its power in an effect cell)."""
    methods = list(dict.fromkeys(r["method"] for r in rows))
    by_cell: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_cell.setdefault(r["cell"], {})[r["method"]] = r
    head = ["cell", "value", "oracle"] + [f"{m}: cov / rej / width" for m in methods]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cell, found in by_cell.items():
        first = next(iter(found.values()))
        cols = [
            cell,
            f"{round(first['population_value'], 3) + 0.0:.3f}",  # no "-0.000"
            f"{first['oracle_rejection']:.3f}",
        ]
        for m in methods:
            got = found.get(m)
            cols.append(
                "" if got is None
                else f"{got['coverage']:.3f} / {got['rejection']:.3f} / {got['width']:.3f}"
            )  # fmt: skip
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines)


def verdicts(rows: Sequence[dict[str, Any]]) -> dict[str, list[ps.Failure]]:
    """Per method the acceptance rule's failures (empty: it meets the rule in every cell run)."""
    out: dict[str, list[ps.Failure]] = {}
    for r in rows:
        out.setdefault(r["method"], []).extend(ps.failures(r))
    return out


def summary(rows: Sequence[dict[str, Any]], listed: Sequence[str] = ()) -> str:
    """Per method whether it meets the rule; for a failing one the failing cells by metric with
    the worst figure, and every failure of the methods in `listed`."""
    lines = []
    for method, fails in verdicts(rows).items():
        n_cells = sum(1 for r in rows if r["method"] == method)
        if not fails:
            lines.append(f"- {method}: meets the rule in all {n_cells} cells")
            continue
        parts = []
        for metric in ("coverage", "rejection", "power_ratio"):
            got = [f for f in fails if f.metric == metric]
            if got:
                worst = max(got, key=lambda f: abs(f.value - f.bound))
                parts.append(f"{got[0].label} in {len(got)} (worst {worst.value:.3f})")
        cells = len({f.cell for f in fails})
        lines.append(f"- {method}: fails {cells} of {n_cells} cells: {'; '.join(parts)}")
        if method in listed:
            lines.extend(f"    - {f.describe()}" for f in fails)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rosters", type=int, default=1000)
    parser.add_argument("--B", type=int, default=1000)
    parser.add_argument("--cells", nargs="*", help="glob patterns (or substrings) of cell names")
    parser.add_argument("--methods", nargs="*", help="methods (default: population.METHODS)")
    parser.add_argument("--out", type=Path, help=f"the CSV to write (default {GRID_CSV.name} "
                        "when the whole grid runs at >= 1,000 rosters)")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1, help="cells measured in parallel")
    parser.add_argument(
        "--list", nargs="*", default=None,
        help="methods whose failing cells are listed one by one (default: the default method)",
    )  # fmt: skip
    parser.add_argument(
        "--documented-failures", type=Path, nargs="?", const=GRID_CSV, metavar="CSV",
        help="print the default method's failures in a table (default: the committed one) as "
        "the torture test's DOCUMENTED_FAILURES, and exit",
    )  # fmt: skip
    parser.add_argument(
        "--show", type=Path, nargs="?", const=GRID_CSV, metavar="CSV",
        help="print the table and the verdicts of a written CSV (default: the committed one) "
        "without running",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.show is not None:
        shown = read_csv(args.show)
        print(markdown(shown))
        print()
        print(summary(shown, [ps.default_method()] if args.list is None else args.list))
        return 0
    if args.documented_failures is not None:
        found = ps.documented_failures(read_csv(args.documented_failures), ps.default_method())
        print("DOCUMENTED_FAILURES: dict[str, dict[str, float]] = {")
        print("\n".join(f"    {cell!r}: {figures!r}," for cell, figures in found.items()))
        print("}")
        return 0
    start, cpu = time.perf_counter(), time.process_time()
    rows, skipped = run(args.rosters, args.B, args.cells, args.methods, args.jobs)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu += children.ru_utime + children.ru_stime
    peak = max(usage.ru_maxrss, children.ru_maxrss) / 1024
    for shape, reason in skipped.items():
        print(f"skipped {shape}: {reason}")
    print(markdown(rows))
    print()
    print(summary(rows, [ps.default_method()] if args.list is None else args.list))
    whole = not args.cells and not args.methods and not skipped and args.rosters >= 1000
    out = args.out or (GRID_CSV if whole else None)
    if out is not None:
        write_csv(rows, out)
        print(f"\nwrote {out}")
    else:
        print("\n(part of the grid or fewer rosters: no CSV written without --out)")
    print(
        f"{len(rows)} rows, rosters {args.rosters}, B {args.B}: wall {wall:.0f} s, "
        f"CPU {cpu:.0f} s, peak RSS {peak:.0f} MiB, jobs {args.jobs}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

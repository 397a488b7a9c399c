"""Benchmark: `analyze()` end to end on a paper-sized store (~142,000 responses), B = 2000.

The store comes from running `configs/demo.toml` through the simulator (about two minutes; pass
`--store PATH` to reuse one). A fresh copy has its parsed_* rows deleted, so the measured run
includes parsing every response, as `ibias analyze` does after `ibias import`. Each analysis
runs in its own subprocess, which reports its wall time and its peak resident memory
(`resource.getrusage(RUSAGE_SELF).ru_maxrss`). A second analysis of the now-parsed copy gives
the time without parsing, so the parse cost is the difference.

Run with `python -m bench.bench_analyze [--store PATH]`; `run()` returns the figures.
Not a test: it measures and prints, it asserts nothing. Goal: under 20 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 20.0

# Runs in the child: time analyze() itself (imports excluded) and report peak RSS.
_CHILD = """
import json, resource, sys, time
from pathlib import Path
from ibias.analysis.analyze import analyze
population = len(sys.argv) < 4 or sys.argv[3] != "--no-population"
usage = resource.getrusage(resource.RUSAGE_SELF)
start, cpu0 = time.perf_counter(), usage.ru_utime + usage.ru_stime
result = analyze(Path(sys.argv[1]), Path(sys.argv[2]), bootstrap=2000, population=population)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime - cpu0,
                  "peak_mb": usage.ru_maxrss / 1024, "figures": len(result.figures)}))
"""


def make_store(folder: Path) -> tuple[Path, float]:
    """Simulate configs/demo.toml into `folder`/demo.duckdb; returns (path, seconds)."""
    store = folder / "demo.duckdb"
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "ibias", "run", "configs/demo.toml", "--store", str(store),
         "--quiet"],
        cwd=ROOT, check=True,
    )  # fmt: skip
    return store, time.perf_counter() - start


def unparsed_copy(store: Path, folder: Path) -> tuple[Path, int]:
    """Copy the store and empty its derived tables; returns (copy, responses to parse)."""
    copy = folder / "unparsed.duckdb"
    shutil.copy(store, copy)
    con = duckdb.connect(str(copy))
    try:
        for table in ("parsed_word_association", "parsed_allocation", "parsed_explicit"):
            con.execute(f"DELETE FROM {table}").fetchall()
        con.execute("CHECKPOINT").fetchall()
        n = con.execute("SELECT count(*) FROM responses").fetchall()[0][0]
    finally:
        con.close()
    return copy, int(n)


def analyse_in_child(store: Path, out: Path, *flags: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(store), str(out), *flags],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )  # fmt: skip
    # DuckDB may draw its progress bar on stdout (slow queries): the figures end the output.
    last = done.stdout.strip().splitlines()[-1]
    figures: dict[str, float] = json.loads(last[last.rindex("{") :])
    return figures


def run(store: Path | None = None) -> dict[str, float]:
    """Figures: responses, simulate_s (0 when reusing), analyze_s (with parsing),
    analyze_parsed_s (store already parsed), parse_s (the difference), peak_mb."""
    with tempfile.TemporaryDirectory(prefix="ibias-bench-analyze-") as tmp:
        folder = Path(tmp)
        simulate_s = 0.0
        if store is None:
            store, simulate_s = make_store(folder)
        copy, responses = unparsed_copy(store, folder)
        first = analyse_in_child(copy, folder / "out1")
        second = analyse_in_child(copy, folder / "out2")
    return {
        "responses": float(responses),
        "simulate_s": simulate_s,
        "analyze_s": first["wall_s"],
        "analyze_parsed_s": second["wall_s"],
        "parse_s": first["wall_s"] - second["wall_s"],
        "peak_mb": first["peak_mb"],
        "peak_parsed_mb": second["peak_mb"],
    }


def compare_population(store: Path, repeats: int = 2) -> dict[str, list[dict[str, float]]]:
    """`analyze` of a parsed copy of `store` with the population intervals and with
    `--no-population`, alternating, `repeats` times each (wall and CPU time of each child)."""
    runs: dict[str, list[dict[str, float]]] = {"population": [], "no_population": []}
    with tempfile.TemporaryDirectory(prefix="ibias-bench-analyze-") as tmp:
        folder = Path(tmp)
        copy = folder / "parsed.duckdb"
        shutil.copy(store, copy)
        analyse_in_child(copy, folder / "warm")  # parses anything pending, once
        for i in range(repeats):
            runs["population"].append(analyse_in_child(copy, folder / f"p{i}"))
            runs["no_population"].append(
                analyse_in_child(copy, folder / f"n{i}", "--no-population")
            )
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, help="reuse a demo store instead of simulating")
    parser.add_argument(
        "--compare-population",
        action="store_true",
        help="with --store: analyze with and without --no-population (wall and CPU)",
    )
    args = parser.parse_args()
    if args.compare_population and args.store is not None:
        for name, rows in compare_population(args.store).items():
            for r in rows:
                print(f"{name}: wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s, "
                      f"peak {r['peak_mb']:.0f} MB")  # fmt: skip
        return
    figures = run(args.store)
    if figures["simulate_s"]:
        print(f"simulated configs/demo.toml in {figures['simulate_s']:.0f} s")
    print(
        f"analyze, {figures['responses']:,.0f} responses, B = 2000 for every cell:\n"
        f"  end to end with parsing: {figures['analyze_s']:.1f} s "
        f"(goal < {GOAL_S:.0f} s), peak RSS {figures['peak_mb']:.0f} MB\n"
        f"  store already parsed:    {figures['analyze_parsed_s']:.1f} s, "
        f"peak RSS {figures['peak_parsed_mb']:.0f} MB (parsing ~{figures['parse_s']:.1f} s)"
    )


if __name__ == "__main__":
    main()

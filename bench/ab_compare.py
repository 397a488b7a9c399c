"""A/B of two checkouts in one session: throughput, `analyze` and `ibias --help` start-up.

Why a harness: this shared machine's speed moves by 2-5x between hours, so a refactor's "within
5%" can only be read from runs interleaved in one session. Each checkout runs its own code from
its own venv (`CHECKOUT/.venv/bin/python`), including its own simulator; the order alternates
each round, and the medians of the rounds are printed beside the bare loop's own rate (the
calibration line).

    python -m bench.ab_compare BEFORE_CHECKOUT AFTER_CHECKOUT --store demo.duckdb [--rounds 5]

`--store` is a parsed demo store (`ibias demo`); each analysis runs on a fresh copy, parsed
first, so both sides time the same work. Not a test: it measures and prints.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

THROUGHPUT = (
    "import json; from bench.bench_runner import throughput; "
    "print('RESULT' + json.dumps(throughput(pairs=1)))"
)
PARSE = (
    "import sys; from pathlib import Path; from ibias.store.db import open_store; "
    "from ibias.store.derived import parse_pending\n"
    "con = open_store(Path(sys.argv[1])); parse_pending(con); con.close()"
)
ANALYZE = """
import json, resource, sys, time
from pathlib import Path
from ibias.analysis.analyze import analyze
u = resource.getrusage(resource.RUSAGE_SELF)
start, cpu0 = time.perf_counter(), u.ru_utime + u.ru_stime
analyze(Path(sys.argv[1]), Path(sys.argv[2]), bootstrap=2000)
wall = time.perf_counter() - start
u = resource.getrusage(resource.RUSAGE_SELF)
print("RESULT" + json.dumps({"wall_s": wall, "cpu_s": u.ru_utime + u.ru_stime - cpu0,
                             "peak_mb": u.ru_maxrss / 1024}))
"""


def _python(tree: Path) -> str:
    return str(tree / ".venv" / "bin" / "python")


def _result(tree: Path, code: str, *args: str) -> dict[str, float]:
    out = subprocess.run(
        [_python(tree), "-c", code, *args], cwd=tree, capture_output=True, text=True, check=True
    ).stdout
    figures: dict[str, float] = json.loads(out.split("RESULT", 1)[1])
    return figures


def _throughput(tree: Path) -> dict[str, float]:
    r = _result(tree, THROUGHPUT)
    keys = {
        "throughput_ratio": "throughput_ratio",
        "cpu_ratio": "cpu_per_request_ratio",
        "ibias_cpu_us": "ibias_cpu_us_per_request",
        "bare_cpu_us": "bare_cpu_us_per_request",
        "simulator_cpu_us": "simulator_cpu_us_per_request",
        "bare_loop_rps": "bare_rps_loop_only (calibration)",
    }
    return {short: float(r[long]["median"]) for short, long in keys.items()}  # type: ignore[index]


def _analyze(tree: Path, store: Path, tmp: Path) -> dict[str, float]:
    copy = tmp / f"{tree.name}.duckdb"
    shutil.copy(store, copy)
    subprocess.run([_python(tree), "-c", PARSE, str(copy)], cwd=tree, check=True)
    out = tmp / f"out-{tree.name}"
    shutil.rmtree(out, ignore_errors=True)
    return _result(tree, ANALYZE, str(copy), str(out))


def _help(tree: Path) -> dict[str, float]:
    start = time.perf_counter()
    subprocess.run(
        [str(tree / ".venv" / "bin" / "ibias"), "--help"], capture_output=True, check=True
    )
    return {"help_s": time.perf_counter() - start}


def _rounds(
    name: str, sides: dict[str, Path], rounds: int, measure: Callable[[Path], dict[str, float]]
) -> None:
    got: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for i in range(rounds):
        order = list(sides) if i % 2 == 0 else list(reversed(sides))
        for side in order:
            got[side].append(measure(sides[side]))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    for side, runs in got.items():
        medians = {k: round(statistics.median(r[k] for r in runs), 4) for k in runs[0]}
        print(json.dumps({"bench": name, "side": side, "rounds": rounds, **medians}))
    print(json.dumps({"bench": name, "load_after": load}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--store", type=Path, help="a parsed demo store, for the analyze rows")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    _rounds("throughput", sides, args.rounds, _throughput)
    if args.store is not None:
        with tempfile.TemporaryDirectory(prefix="ibias-ab-") as tmp:
            _rounds("analyze", sides, args.rounds, lambda t: _analyze(t, args.store, Path(tmp)))
    _rounds("help", sides, 3 * args.rounds, _help)


if __name__ == "__main__":
    main()

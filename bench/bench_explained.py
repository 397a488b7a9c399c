"""Benchmark: the analysis with issue 15's additions against the analysis before them, same store.

Issue 15 adds to `ibias analyze`: the interval / p-value description columns, the gap among
decided trials with its pair-bootstrap interval, the Holm-corrected and exact-where-small
sign-flip test, trial-key ordering before resampling, the planted values of simulated models
(reading each pair's people from the store) and the implicit-versus-decision association. This
script times both analyses of the same paper-sized store in one interleaved run:

- the baseline is the repository at `--baseline` (default 56ab842, main before issue 15) and
  the new analysis the one at `--new` (default HEAD), each exported with `git archive` into a
  temporary folder and imported from there (PYTHONPATH);
- each repetition analyses a fresh copy of the store whose parsed_* rows were deleted, so
  parsing every response is included, as in `bench.bench_analyze`; the order of the two
  alternates between repetitions;
- every analysis runs in its own subprocess, which reports its wall time and its CPU time
  (user + system of the process, DuckDB's threads included) from `resource.getrusage`.

The machine may be shared: CPU time is the figure that load does not inflate, wall time is
reported beside it. The ratio is new / baseline of the medians. Goal: at most 1.5x.

Run with `python -m bench.bench_explained --store PATH [--repeats N]` (a store from
`ibias run configs/demo.toml`, see `bench.bench_analyze.make_store`). Prints, asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from bench.bench_analyze import unparsed_copy

ROOT = Path(__file__).resolve().parent.parent
BASELINE = "56ab842"
GOAL = 1.5

_CHILD = """
import json, resource, sys, time
from pathlib import Path
import ibias
from ibias.analysis.analyze import analyze
start = time.perf_counter()
analyze(Path(sys.argv[1]), Path(sys.argv[2]), bootstrap=2000)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
                  "package": str(Path(ibias.__file__).resolve().parent)}))
"""


def export(commit: str, folder: Path, name: str) -> Path:
    """The tree of `commit` under `folder`/`name` (git archive: no worktree, no git metadata),
    so that editing the working tree during a run changes nothing measured."""
    target = folder / name
    target.mkdir()
    archive = folder / f"{name}.tar"
    subprocess.run(
        ["git", "archive", "--format=tar", "-o", str(archive), commit], cwd=ROOT, check=True
    )
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="tar")
    return target


def analyse(tree: Path, store: Path, out: Path) -> dict[str, object]:
    """One analysis in a child importing `ibias` from `tree`."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(store), str(out)],
        cwd=tree, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    figures: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    package = Path(str(figures["package"]))
    if not package.is_relative_to(tree):
        raise RuntimeError(f"the child imported ibias from {package}, not from {tree}")
    return figures


def run(
    store: Path, repeats: int = 3, baseline: str = BASELINE, new: str = "HEAD"
) -> dict[str, list[float]]:
    """Wall and CPU seconds of every analysis, per variant (baseline, new)."""
    times: dict[str, list[float]] = {
        k: [] for k in ("base_wall", "base_cpu", "new_wall", "new_cpu")
    }
    with tempfile.TemporaryDirectory(prefix="ibias-bench-explained-") as tmp:
        folder = Path(tmp)
        trees = {"base": export(baseline, folder, "base"), "new": export(new, folder, "new")}
        for i in range(repeats):
            order = ("base", "new") if i % 2 == 0 else ("new", "base")
            for variant in order:
                work = folder / f"{variant}-{i}"
                work.mkdir()
                copy, _ = unparsed_copy(store, work)
                figures = analyse(trees[variant], copy, work / "out")
                times[f"{variant}_wall"].append(float(str(figures["wall_s"])))
                times[f"{variant}_cpu"].append(float(str(figures["cpu_s"])))
                copy.unlink()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="a demo-sized store")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", default=BASELINE, help="the commit to compare with")
    parser.add_argument("--new", default="HEAD", help="the commit to measure")
    args = parser.parse_args()
    times = run(args.store, args.repeats, args.baseline, args.new)
    med = {k: statistics.median(v) for k, v in times.items()}
    for kind in ("cpu", "wall"):
        ratio = med[f"new_{kind}"] / med[f"base_{kind}"]
        print(
            f"{kind:>4}: baseline {med[f'base_{kind}']:.1f} s, new {med[f'new_{kind}']:.1f} s, "
            f"ratio {ratio:.2f}x (goal <= {GOAL}x); runs base "
            f"{', '.join(f'{t:.1f}' for t in times[f'base_{kind}'])}, new "
            f"{', '.join(f'{t:.1f}' for t in times[f'new_{kind}'])}"
        )


if __name__ == "__main__":
    main()

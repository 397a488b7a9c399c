"""Benchmark: `ibias import` throughput with and without `--stimuli` (issue 21).

The file: 12,000 reply lines of the paper design, made from the planned trials of a paper
config (both experiments, English and Spanish) read from the shared stimuli pack
(`shared/data/paper_stimuli` beside the checkout, or `--pack DIR`); each line carries its
messages, so with a pack every line is rendered and compared. Each measurement imports the same
file into a fresh store in its own subprocess (`import_file`, the command's work without
process start-up) and reports its wall time; the figure is the median of three.

Run with `python -m bench.bench_import [--pack DIR] [--lines N]`. Not a test: it measures and
prints, it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACK = ROOT.parent / "shared" / "data" / "paper_stimuli"

_CHILD = """
import json, sys, time
from pathlib import Path
from ibias.prompts.stimuli import load_pack
from ibias.store import db
from ibias.store.importer import import_file
pack = load_pack(Path(sys.argv[3])) if sys.argv[3] else None
con = db.open_store(Path(sys.argv[2]), create=True)
start = time.perf_counter()
result = import_file(con, Path(sys.argv[1]), pack)
wall = time.perf_counter() - start
con.close()
print(json.dumps({"wall_s": wall, "imported": result.imported, "checked": result.checked}))
"""


def write_lines(folder: Path, pack: Path, n: int) -> Path:
    """`n` reply lines of the paper design (the planned prompts, repeated with distinct ids)."""
    from ibias.runner.config import load_config
    from ibias.runner.execution.plan import build_experiments, trials_for

    config = folder / "paper.toml"
    config.write_text(
        f"""[run]
seed = 1
[[models]]
id = "m"
provider = "simulator"
[experiments.word_association]
design = "paper"
stimuli = "{pack}"
trials_per_category = 50
explicit_per_category = 0
[experiments.allocation]
design = "paper"
stimuli = "{pack}"
""",
        "utf-8",
    )
    cfg = load_config(config)
    trials = list(trials_for(build_experiments(cfg), cfg.models))
    path = folder / "replies.jsonl"
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            t = trials[i % len(trials)]
            line = {
                "experiment": t.experiment,
                "model_id": "imported",
                "language": t.language,
                "item": t.item,
                "messages": list(t.messages),
                "content": "<person>x</person>",
                "id": i,
            }
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
    return path


def measure(path: Path, pack: Path | None, folder: Path, runs: int = 3) -> list[float]:
    walls = []
    for i in range(runs):
        store = folder / f"{'with' if pack else 'without'}-{i}.duckdb"
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path), str(store), str(pack or "")],
            capture_output=True,
            text=True,
            check=True,
        )
        walls.append(json.loads(done.stdout)["wall_s"])
    return walls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pack", type=Path, default=PACK)
    parser.add_argument("--lines", type=int, default=12_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = write_lines(folder, args.pack, args.lines)
        for label, pack in (("without --stimuli", None), ("with --stimuli", args.pack)):
            walls = measure(path, pack, folder)
            median = statistics.median(walls)
            runs = ", ".join(f"{w:.2f}" for w in walls)
            print(
                f"{label}: {args.lines:,} lines, median {median:.2f} s "
                f"({args.lines / median:,.0f} rows/s; runs {runs} s)"
            )


if __name__ == "__main__":
    main()

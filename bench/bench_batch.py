"""Benchmark: the paper's grid for one model through the simulator's OpenAI Batch API (issue
25), and the cost estimate online versus batch of `configs/paper.toml`.

The grid is `configs/paper.toml`'s experiments (the paper design, read from the shared stimuli
pack, `shared/data/paper_stimuli` beside the checkout or `--pack DIR`) for one `openai` model at
the in-process simulator with `batch = true`. Three phases, each timed: `submit` (plan, build
the lines, upload and create the batches: `--no-wait`), then the simulator ends every batch at
once (its clock is the test's, so no waiting), then `ingest` (poll, download, store and parse
every result). Reports the batches, the ingestion rate (results stored per second of the
ingest phase) and the process's peak memory (ru_maxrss). Then `ibias plan --batch --json` of
the paper config: each model's estimated cost online and in batch mode.

Run with `python -m bench.bench_batch [--pack DIR]`. Not a test: it measures and prints.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACK = ROOT.parent / "shared" / "data" / "paper_stimuli"


def paper_text(pack: Path) -> str:
    return (
        (ROOT / "configs" / "paper.toml")
        .read_text()
        .replace('"../stimuli/paper"', json.dumps(str(pack)))
    )


def one_model(text: str, base_url: str, store: Path) -> str:
    """The paper config with its seven models replaced by one batch model at `base_url`,
    with gpt-4o-mini's tier-4 batch queue limit (1,000,000,000 enqueued tokens): the bench
    measures submission and ingestion, not waiting on the default's tier-1 queue."""
    head, _, rest = text.partition("[[models]]")
    experiments = rest[rest.index("\n[experiments") :]
    head = re.sub(r'store = ".*"', f"store = {json.dumps(str(store))}", head)
    model = (
        '[[models]]\nid = "sim-batch"\nprovider = "openai"\n'
        f'base_url = {json.dumps(base_url)}\nmodel = "sim-gpt"\nbatch = true\n'
        "max_tokens = 512\nprice_input = 0.15\nprice_output = 0.60\n"
        "batch_enqueued_tokens = 1000000000\n"
    )
    return head + model + experiments


async def grid(pack: Path) -> dict[str, float]:
    from ibias.runner.batch.run import BatchOptions
    from ibias.runner.config import load_config
    from ibias.runner.execution.run import RunOptions, execute
    from ibias.runner.simulator import Simulator
    from ibias.runner.simulator.profile import ModelProfile, SimProfile

    async def no_sleep(_: float) -> None:
        return None

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "batch.duckdb"
        async with Simulator(
            SimProfile(seed=1, default=ModelProfile()), count_prompts=False
        ) as sim:
            path = Path(tmp) / "paper-one.toml"
            path.write_text(one_model(paper_text(pack), sim.base_url, store))
            config = load_config(path)
            start = time.perf_counter()
            first = await execute(
                config,
                RunOptions(store=store, quiet=True, batch=BatchOptions(forced=True, wait=False)),
                environ={},
                say=lambda line: None,
            )
            submit = time.perf_counter() - start
            assert first.exit_code == 0, first.lines
            sim.batches.finish_all()
            start = time.perf_counter()
            second = await execute(
                config,
                RunOptions(
                    store=store, quiet=True, batch=BatchOptions(forced=True, sleep=no_sleep)
                ),
                environ={},
                say=lambda line: None,
            )
            ingest = time.perf_counter() - start
            assert second.exit_code == 0, second.lines
            batches = sim.batches.created
        import duckdb

        con = duckdb.connect(str(store), read_only=True)
        stored = con.execute("SELECT count(*) FROM responses").fetchone()
        con.close()
    n = int(stored[0]) if stored else 0
    return {
        "trials": n,
        "batches": batches,
        "submit_s": round(submit, 2),
        "ingest_s": round(ingest, 2),
        "ingest_per_s": round(n / ingest),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def costs(pack: Path) -> list[dict[str, object]]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "paper.toml"
        path.write_text(paper_text(pack))
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "ibias",
                "plan",
                str(path),
                "--store",
                f"{tmp}/p.duckdb",
                "--batch",
                "--json",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    report = json.loads(out.stdout)
    rows: list[dict[str, object]] = [
        {k: m[k] for k in ("model_id", "mode", "online_cost_usd", "estimated_cost_usd")}
        for m in report["models"]
    ]
    rows.append(
        {
            "model_id": "total",
            "mode": "",
            "online_cost_usd": report["online_cost_usd"],
            "estimated_cost_usd": report["estimated_cost_usd"],
        }
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pack", type=Path, default=PACK)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(grid(args.pack))))
    for row in costs(args.pack):
        print(json.dumps(row))


if __name__ == "__main__":
    main()

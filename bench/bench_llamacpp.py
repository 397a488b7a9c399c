"""The `llamacpp` provider on the bundled model (issue 26): server start time, trials and
completion tokens per second with 1 and 2 concurrent requests, and the share of replies the
parsers read, per experiment. Needs `make local`. Run: `.venv/bin/python -m bench.bench_llamacpp`.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import duckdb

from ibias.runner.providers.gguf import resolve_gguf
from ibias.runner.providers.llamacpp import ManagedServer, ServerSettings

CONFIG = Path(__file__).parents[1] / "configs" / "local-bundled.toml"

PARSED = {
    "word_association": "SELECT avg((p.bias IS NOT NULL)::INT) FROM parsed_word_association p",
    "allocation": "SELECT avg((p.none_reason IS NULL)::INT) FROM parsed_allocation p",
    "explicit": "SELECT avg((p.answer <> 'unparseable')::INT) FROM parsed_explicit p",
}


def start_times(n: int = 3) -> list[float]:
    times = []
    for _ in range(n):
        server = ManagedServer(ServerSettings(gguf=resolve_gguf("smollm2-135m"), n_threads=2), "m")
        began = time.monotonic()
        server.launch()
        try:
            anyio.run(server.wait_ready)
            times.append(time.monotonic() - began)
        finally:
            server.stop()
    return times


def run(concurrency: int, folder: Path) -> dict[str, float]:
    text = CONFIG.read_text().replace("max_concurrency = 1 ", f"max_concurrency = {concurrency} ")
    text = text.replace('store = "../runs/local-bundled.duckdb"', 'store = "store.duckdb"')
    config = folder / "local.toml"
    config.write_text(text)
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "ibias", "run", "--quiet", str(config)],
        capture_output=True,
        text=True,
        env=os.environ,
    )
    wall = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    with duckdb.connect(str(folder / "store.duckdb"), read_only=True) as con:
        query = "SELECT count(*), sum(completion_tokens) FROM responses"
        trials, tokens = con.execute(query).fetchone()  # type: ignore[misc]
        rows = {k: con.execute(q).fetchone() for k, q in PARSED.items()}
        shares = {k: float(row[0]) if row else 0.0 for k, row in rows.items()}
    began = time.monotonic()
    analyzed = subprocess.run(
        [
            sys.executable,
            "-m",
            "ibias",
            "analyze",
            "--config",
            str(config),
            "--out",
            str(folder / "out"),
        ],
        capture_output=True,
        text=True,
    )
    assert analyzed.returncode == 0, analyzed.stderr
    return {
        "wall_s": wall,
        "analyze_s": time.monotonic() - began,
        "trials": trials,
        "tokens": tokens,
        "trials_per_s": trials / wall,
        "tokens_per_s": tokens / wall,
        **shares,
    }


def main() -> None:
    starts = start_times()
    print(
        f"server start: median {statistics.median(starts):.2f} s of {[round(t, 2) for t in starts]}"
    )
    for concurrency in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            r = run(concurrency, Path(tmp))
        print(
            f"concurrency {concurrency}: {r['trials']:.0f} trials in {r['wall_s']:.1f} s "
            f"(run incl. server start), {r['trials_per_s']:.2f} trials/s, "
            f"{r['tokens']:.0f} completion tokens, {r['tokens_per_s']:.1f} tokens/s; "
            f"analyze {r['analyze_s']:.1f} s; parsed: word association "
            f"{r['word_association']:.0%}, allocation {r['allocation']:.0%}, "
            f"explicit {r['explicit']:.0%}",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Runner benchmarks (issue 2). Not tests: they measure and print, they assert nothing.

Each measurement starts one `ibias simulate` process and points both sides of a ratio at it,
so the comparison shares the simulator's cost. Run with `python -m bench.bench_runner [name]`
(names: throughput, latency, saturation, memory; default all).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import duckdb

from tests.helpers import IBIAS, sim_stats, start_simulator
from tests.helpers import stop_simulator as stop

ROOT = Path(__file__).resolve().parent.parent


def write_prompts(path: Path, n: int) -> None:
    with path.open("w") as fh:
        for i in range(n):
            fh.write(
                json.dumps(
                    {"id": i, "messages": [{"role": "user", "content": f"Benchmark prompt {i}."}]}
                )
                + "\n"
            )


def write_config(
    folder: Path,
    url: str,
    n: int,
    *,
    concurrency: int,
    rpm: int | None = None,
    timeout_s: float = 60,
) -> Path:
    write_prompts(folder / "prompts.jsonl", n)
    limits = f"rpm = {rpm}\n" if rpm else ""
    text = (
        f'[run]\nseed = 1\nstore = "{folder / "bench.duckdb"}"\n\n'
        f'[[models]]\nid = "bench"\nprovider = "openai"\nbase_url = "{url}"\nmodel = "bench"\n'
        f"max_concurrency = {concurrency}\ntimeout_s = {timeout_s}\nmax_tokens = 64\n{limits}\n"
        f'[experiments.prompts]\nfile = "prompts.jsonl"\n'
    )
    path = folder / "config.toml"
    path.write_text(text)
    return path


async def bare_loop(url: str, n: int, concurrency: int) -> float:
    """The floor: the same requests with the same concurrency, nothing planned or stored."""
    sem = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(i: int) -> None:
            body = {
                "model": "bench",
                "messages": [{"role": "user", "content": f"Benchmark prompt {i}."}],
                "temperature": 0,
                "max_tokens": 64,
            }
            async with sem, session.post(url + "/chat/completions", json=body) as resp:
                await resp.read()

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        return time.perf_counter() - t0


def run_ibias(config: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([*IBIAS, "run", str(config), "--quiet"], check=True, cwd=ROOT)
    return time.perf_counter() - t0


def throughput(n: int = 20_000, concurrency: int = 64) -> dict[str, float]:
    proc, url = start_simulator(cwd=ROOT)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            bare_s = asyncio.run(bare_loop(url, n, concurrency))
            cfg = write_config(Path(tmp), url, n, concurrency=concurrency)
            ibias_s = run_ibias(cfg)
    finally:
        stop(proc)
    return {
        "requests": n,
        "concurrency": concurrency,
        "bare_rps": n / bare_s,
        "ibias_rps": n / ibias_s,
        "ratio": bare_s / ibias_s,
    }


def latency(n: int = 10_000, concurrency: int = 1000, latency_ms: int = 2000) -> dict[str, float]:
    proc, url = start_simulator("--latency-ms", str(latency_ms), cwd=ROOT)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = write_config(Path(tmp), url, n, concurrency=concurrency)
            wall = run_ibias(cfg)
    finally:
        stop(proc)
    ideal = n / concurrency * latency_ms / 1000
    return {"trials": n, "wall_s": wall, "ideal_s": ideal, "ratio": wall / ideal}


def saturation(limit: int = 3000, seconds: int = 120) -> dict[str, float]:
    proc, url = start_simulator("--rpm", str(limit), cwd=ROOT)
    n = limit * seconds // 60
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = write_config(Path(tmp), url, n, concurrency=64, rpm=limit)
            wall = run_ibias(cfg)
            stats = sim_stats(url, prompts=False)
            con = duckdb.connect(str(Path(tmp) / "bench.duckdb"), read_only=True)
            first, last = con.execute(
                "SELECT min(started_at), max(started_at) FROM attempts"
            ).fetchall()[0]
            con.close()
    finally:
        stop(proc)
    span = (last - first).total_seconds()
    achieved_per_min = (n - 1) / span * 60
    return {
        "limit_rpm": limit,
        "requests": n,
        "wall_s": wall,
        "achieved_rpm": achieved_per_min,
        "ratio": achieved_per_min / limit,
        "http_429": float(stats["rate_limited"]),  # type: ignore[arg-type]
    }


def _rss_peak_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return float("nan")


def memory(n: int = 1_000_000, first: int = 1000) -> dict[str, float]:
    proc, url = start_simulator(cwd=ROOT)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = write_config(Path(tmp), url, n, concurrency=64)
            store = Path(tmp) / "bench.duckdb"
            status = store.with_name(store.name + ".status.json")
            t0 = time.perf_counter()
            run = subprocess.Popen([*IBIAS, "run", str(cfg), "--quiet"], cwd=ROOT)
            peak = 0.0
            planned_s = float("nan")
            while run.poll() is None:
                peak = max(peak, _rss_peak_mb(run.pid))
                if status.exists():
                    if planned_s != planned_s:
                        planned_s = time.perf_counter() - t0
                    data = json.loads(status.read_text() or "{}")
                    models = data.get("models") or [{}]
                    if models[0].get("done", 0) >= first + 1000:  # past the first flushes
                        break
                time.sleep(0.2)
            peak = max(peak, _rss_peak_mb(run.pid))
            run.send_signal(signal.SIGINT)
            run.wait(timeout=120)
            con = duckdb.connect(str(store), read_only=True)
            trials, responses = con.execute(
                "SELECT (SELECT count(*) FROM trials), (SELECT count(*) FROM responses)"
            ).fetchall()[0]
            con.close()
    finally:
        stop(proc)
    return {
        "trials_planned": float(trials),
        "responses_stored": float(responses),
        "planning_s": planned_s,
        "peak_rss_mb": peak,
    }


BENCHES = {
    "throughput": throughput,
    "latency": latency,
    "saturation": saturation,
    "memory": memory,
}


def main(names: list[str]) -> None:
    os.chdir(ROOT)
    for name in names or list(BENCHES):
        result = BENCHES[name]()
        print(
            json.dumps({"bench": name, **{k: round(v, 3) for k, v in result.items()}}), flush=True
        )


if __name__ == "__main__":
    main(sys.argv[1:])

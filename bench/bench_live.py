"""Live queries' cost to a run (issue 13). Not a test: it measures and prints, asserts nothing.

Interleaved pairs of `ibias run` at zero simulated latency against one `ibias simulate`
process: one run alone, one with a reader that opens a live session and issues one aggregate
query over the `replies` view (every answered trial, with its parse) every second while the
run writes. The ratio is the run's wall time alone over its wall time with the reader; the
run's CPU (user + system of its whole process tree, from wait4) includes every query it
served, since the run executes them. Run with `python -m bench.bench_live [requests] [pairs]`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.bench_runner import ROOT, _ibias_cmd, _load, _median_range, write_config
from ibias.store.db import StoreAccessError
from ibias.store.lock import holder
from ibias.store.reader import open_reader
from tests.helpers import start_simulator
from tests.helpers import stop_simulator as stop

#: What a researcher watching a sweep asks: per model, answers so far, length, finish reasons.
AGGREGATE = """
SELECT model_id, experiment, count(*) AS replies, sum(length(reply)) AS reply_chars,
       count(*) FILTER (WHERE finish_reason = 'stop') AS stopped
FROM replies
GROUP BY ALL
"""


def _reader(store: Path, done: threading.Event, latencies: list[float], rows: list[int]) -> None:
    """One aggregate query a second, each in a fresh live session, while the run holds the
    store."""
    while holder(store) is None and not done.is_set():
        time.sleep(0.02)
    next_at = time.monotonic()
    while not done.is_set():
        t0 = time.monotonic()
        try:
            with open_reader(store) as reader:
                if not reader.live:
                    return
                table = reader.table(AGGREGATE)
        except StoreAccessError:
            return  # the run ended between two queries
        latencies.append(time.monotonic() - t0)
        rows.append(sum(table.column("replies").to_pylist()))
        next_at += 1.0
        done.wait(max(0.0, next_at - time.monotonic()))


def _run(cfg: Path, store: Path, with_reader: bool) -> dict[str, object]:
    latencies: list[float] = []
    rows: list[int] = []
    done = threading.Event()
    t0 = time.perf_counter()
    proc = subprocess.Popen(_ibias_cmd(cfg), cwd=ROOT, stdout=subprocess.PIPE, text=True)
    thread = threading.Thread(target=_reader, args=(store, done, latencies, rows))
    if with_reader:
        thread.start()
    assert proc.stdout is not None
    proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    if with_reader:
        thread.join()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"ibias run exited with {os.waitstatus_to_exitcode(status)}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "queries": len(latencies),
        "query_s": latencies,
        "replies_seen": rows,
    }


def live(n: int = 60_000, concurrency: int = 64, pairs: int = 3) -> dict[str, object]:
    load_before = _load()
    sim, url = start_simulator(cwd=ROOT)
    runs: list[dict[str, dict[str, object]]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(pairs):
                pair: dict[str, dict[str, object]] = {}
                order = ("alone", "reader") if i % 2 == 0 else ("reader", "alone")
                for side in order:
                    folder = Path(tmp) / f"{side}{i}"
                    folder.mkdir()
                    cfg = write_config(folder, url, n, concurrency=concurrency)
                    pair[side] = _run(cfg, folder / "bench.duckdb", side == "reader")
                runs.append(pair)
    finally:
        stop(sim)

    def get(side: str, key: str) -> list[float]:
        values: list[float] = []
        for r in runs:
            value = r[side][key]
            assert isinstance(value, (int, float))
            values.append(float(value))
        return values

    latencies = [q for r in runs for q in r["reader"]["query_s"]]  # type: ignore[attr-defined]
    return {
        "requests": n,
        "concurrency": concurrency,
        "pairs": pairs,
        "load": f"{load_before} before, {_load()} after",
        "throughput_ratio (alone wall / with reader wall)": _median_range(
            [a / b for a, b in zip(get("alone", "wall_s"), get("reader", "wall_s"), strict=True)]
        ),
        "cpu_ratio (with reader / alone, run's process tree)": _median_range(
            [b / a for a, b in zip(get("alone", "cpu_s"), get("reader", "cpu_s"), strict=True)]
        ),
        "per_pair_throughput_ratio": [
            round(a / b, 3)
            for a, b in zip(get("alone", "wall_s"), get("reader", "wall_s"), strict=True)
        ],
        "per_pair_cpu_ratio": [
            round(b / a, 3)
            for a, b in zip(get("alone", "cpu_s"), get("reader", "cpu_s"), strict=True)
        ],
        "alone_wall_s": _median_range(get("alone", "wall_s")),
        "reader_wall_s": _median_range(get("reader", "wall_s")),
        "alone_cpu_s": _median_range(get("alone", "cpu_s")),
        "reader_cpu_s": _median_range(get("reader", "cpu_s")),
        "queries_per_run": get("reader", "queries"),
        "query_latency_s": {
            "median": statistics.median(latencies) if latencies else None,
            "max": max(latencies) if latencies else None,
        },
        "replies_seen_by_reader": [r["reader"]["replies_seen"] for r in runs],
    }


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    n = args[0] if args else 60_000
    pairs = args[1] if len(args) > 1 else 3
    print(json.dumps(live(n, pairs=pairs), indent=2, default=str))

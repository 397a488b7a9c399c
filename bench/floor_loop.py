"""The least any tool that keeps every reply must do, for `bench_runner floor` (issue 12).

The bare loop (`bench_runner.bare_loop`, kept unchanged) sends the requests and reads the
bodies. This loop sends the same requests the same way and then does only what storing every
reply needs at the minimum: decode each body, keep one attempt row and one response row
(content, tokens, the raw body), and append them every second from a worker thread, as Arrow
batches, to the store's own `attempts` and `responses` tables (created from the store's own
migration, so the same column types). No planning, no keys, no limiter, no retries, no parsing of
answers, no progress: a floor, not a design. Its CPU over the bare loop's bounds from below
what any design that stores in DuckDB can reach on the machine it runs on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import duckdb
import orjson
import pyarrow as pa

_CORE = Path(__file__).resolve().parent.parent / "store" / "migrations" / "001_core.sql"


def _create_tables(store: Path) -> duckdb.DuckDBPyConnection:
    """A fresh DuckDB file with the store's `attempts` and `responses` tables, as migration
    001 declares them (nothing else of a store: no other table, view or import)."""
    con = duckdb.connect(str(store))
    for statement in _CORE.read_text().split(";"):
        body = statement.strip()
        if body.startswith(("CREATE TABLE attempts", "CREATE TABLE responses")):
            con.execute(body)
    return con


_ATTEMPTS = pa.schema(
    [
        ("run_id", pa.string()),
        ("trial_key", pa.string()),
        ("model_id", pa.string()),
        ("attempt_no", pa.int32()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("latency_ms", pa.float64()),
        ("http_status", pa.int32()),
        ("outcome", pa.string()),
    ]
)
_RESPONSES = pa.schema(
    [
        ("trial_key", pa.string()),
        ("run_id", pa.string()),
        ("model_id", pa.string()),
        ("content", pa.string()),
        ("finish_reason", pa.string()),
        ("prompt_tokens", pa.int32()),
        ("completion_tokens", pa.int32()),
        ("received_at", pa.timestamp("us", tz="UTC")),
        ("raw", pa.string()),
    ]
)


class _Appender:
    """Rows buffered on the loop, appended by one thread once a second (and at the end)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.attempts: list[tuple[object, ...]] = []
        self.responses: list[tuple[object, ...]] = []
        self.lock = threading.Lock()

    def flush(self) -> None:
        with self.lock:
            attempts, self.attempts = self.attempts, []
            responses, self.responses = self.responses, []
        if not attempts:
            return
        con = self.con
        con.execute("BEGIN TRANSACTION")
        for table, schema, rows in (
            ("attempts", _ATTEMPTS, attempts),
            ("responses", _RESPONSES, responses),
        ):
            cols = list(zip(*rows, strict=True))
            batch = pa.table(
                [pa.array(c, type=f.type) for c, f in zip(cols, schema, strict=True)], schema=schema
            )
            con.register("_batch", batch)
            con.execute(f"INSERT INTO {table} ({', '.join(schema.names)}) SELECT * FROM _batch")
            con.unregister("_batch")
        con.execute("COMMIT")


async def floor_loop(url: str, n: int, concurrency: int, store: Path) -> float:
    """`bare_loop`'s requests, each reply decoded and kept; seconds from first request to
    the last row committed."""
    con = _create_tables(store)
    appender = _Appender(con)
    done = asyncio.Event()

    async def flusher() -> None:
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), 1.0)
            await asyncio.to_thread(appender.flush)

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
            started = time.time()
            async with sem, session.post(url + "/chat/completions", json=body) as resp:
                raw = await resp.read()
            received = datetime.now(UTC)
            reply = orjson.loads(raw)
            choice = reply["choices"][0]
            usage = reply.get("usage") or {}
            key = f"{i:064d}"
            appender.attempts.append(
                (
                    "floor",
                    key,
                    "bench",
                    1,
                    datetime.fromtimestamp(started, UTC),
                    (time.time() - started) * 1000,
                    resp.status,
                    "ok",
                )
            )
            appender.responses.append(
                (
                    key,
                    "floor",
                    "bench",
                    choice["message"].get("content"),
                    choice.get("finish_reason"),
                    usage.get("prompt_tokens"),
                    usage.get("completion_tokens"),
                    received,
                    raw.decode(),
                )
            )

        t0 = time.perf_counter()
        task = asyncio.create_task(flusher())
        await asyncio.gather(*(one(i) for i in range(n)))
        done.set()
        await task
        elapsed = time.perf_counter() - t0
    con.close()
    return elapsed


def main(url: str, n: int, concurrency: int, store: Path) -> None:
    print(json.dumps({"loop_s": asyncio.run(floor_loop(url, n, concurrency, store))}), flush=True)

"""Limits learnt while running (issue 14). Not a test: it measures and prints, asserting nothing.

The simulator enforces 600 RPM at 100 ms latency; ibias runs against it, in each protocol
(openai, anthropic, gemini, each through its own provider), with no rpm/tpm in the config, for
`seconds` per case, then is stopped. Two cases per protocol:

* `hidden` - the simulator announces its limit nowhere (no headers, 429s naming no limit): the
  run can only adapt its concurrency (runner/scheduling/adaptive.py). Goal: achieved rate at least
  0.85 of the limit, at most 2% of the answers 429.
* `headers` - the limit is announced only in the simulator's answers (headers; Gemini: the
  quota its first 429 names): the run learns and paces by it. Goal: at least 0.95 of the limit,
  and no 429 after the first 60 s.
* `configured` (not in the default set) - the limit is hidden as in `hidden`, and the config
  sets an rpm above it (`--configured-rpm`, default 300; issue 33: `rpm = 300` against a hidden
  120 earned a third of all requests 429s). Goal as `hidden`: after the first 60 s at least 0.9
  of the real limit and at most 5% 429s. Run as `python -m bench.bench_limits
  openai-configured --rpm 120 --seconds 300`.

Run with `python -m bench.bench_limits [case ...] [--seconds 180] [--rpm 600 ...]` (cases like
`openai-hidden`; default all six, each at every `--rpm`, default 600). `make bench` runs
`openai-hidden` at 60, 120, 600 and 6,000 RPM (issue 22: limits learnt at any rate; goal after
the first 60 s: at least 0.9 of the limit and at most 5% 429s). The simulator runs in the same
process on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from ibias.runner.config import load_config
from ibias.runner.execution.run import RunOptions, execute
from ibias.runner.scheduling.stop import Stop
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config

RPM = 600
LATENCY_MS = 100.0
PROTOCOLS = ("openai", "anthropic", "gemini")
MODES = ("hidden", "headers")
#: The client's cap: far above the 1 request in flight that 600 RPM at 100 ms needs.
CONCURRENCY = 32
WARMUP_S = 60.0


def _base_url(sim: Simulator, protocol: str) -> str:
    root = sim.base_url.removesuffix("/v1")
    return root + ("/v1beta" if protocol == "gemini" else "/v1")


async def run_case(
    protocol: str, mode: str, seconds: float, rpm: int = RPM, configured_rpm: int = 300
) -> dict[str, Any]:
    profile = SimProfile(
        seed=1,
        default=ModelProfile(latency_ms=LATENCY_MS, rpm=rpm, hide_limits=mode != "headers"),
    )
    configured: dict[str, Any] = {"rpm": configured_rpm} if mode == "configured" else {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        async with Simulator(profile) as sim:
            block = model_block(
                "bench",
                provider=protocol,
                base_url=_base_url(sim, protocol),
                model="bench",
                api_key_env="IBIAS_BENCH_KEY",
                max_concurrency=CONCURRENCY,
                timeout_s=30,
                max_tokens=64,
                **configured,
            )
            n = int(rpm / 60 * seconds * 1.5) + 200
            config = load_config(write_config(folder, [block], n_prompts=n))
            store = folder / "store.duckdb"
            stop = Stop()

            async def stop_later() -> None:
                await asyncio.sleep(seconds)
                stop.request("bench time is up")

            # Planning happens before the clock: the window starts at the first request.
            timer: asyncio.Task[None] | None = None

            async def watch() -> None:
                nonlocal timer
                while sim.stats().requests == 0:
                    await asyncio.sleep(0.005)
                timer = asyncio.ensure_future(stop_later())

            watcher = asyncio.ensure_future(watch())
            result = await execute(
                config,
                RunOptions(store=store, quiet=True),
                environ={"IBIAS_BENCH_KEY": "bench-key"},
                stop=stop,
            )
            watcher.cancel()
            if timer is not None:
                timer.cancel()
            stats = sim.stats()
        return {"exit": result.exit_code, **_measure(store, seconds, stats.rate_limited, rpm)}


def _measure(store: Path, seconds: float, enforced_429: int, rpm: int = RPM) -> dict[str, Any]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        (first,) = con.execute("SELECT min(started_at) FROM attempts").fetchone() or (None,)
        assert isinstance(first, datetime)
        first = first.astimezone(UTC)
        rows = con.execute(
            "SELECT started_at, latency_ms, http_status, outcome FROM attempts"
        ).fetchall()
    finally:
        con.close()
    end = first + timedelta(seconds=seconds)
    warm = first + timedelta(seconds=WARMUP_S)
    answers = [r for r in rows if r[0].astimezone(UTC) < end]
    ok = [r for r in answers if r[3] == "ok"]
    limited = [r for r in answers if r[2] == 429]
    late_429 = [r for r in limited if r[0].astimezone(UTC) >= warm]
    ok_after = [r for r in ok if r[0].astimezone(UTC) >= warm]
    limit_per_s = rpm / 60.0
    after = [r for r in answers if r[0].astimezone(UTC) >= warm]
    return {
        "answers": len(answers),
        "ok": len(ok),
        "rate_over_limit": round(len(ok) / seconds / limit_per_s, 3),
        "rate_over_limit_after_60s": round(
            len(ok_after) / max(seconds - WARMUP_S, 1e-9) / limit_per_s, 3
        )
        if seconds > WARMUP_S
        else None,
        "share_429": round(len(limited) / max(len(answers), 1), 4),
        "share_429_after_60s": round(len(late_429) / max(len(after), 1), 4),
        "n_429": len(limited),
        "n_429_after_60s": len(late_429),
        "simulator_enforced_429": enforced_429,
        "n_429_per_10s": _per_10s(first, [r[0].astimezone(UTC) for r in limited], seconds),
    }


def _per_10s(first: datetime, times: list[datetime], seconds: float) -> list[int]:
    """How many of `times` fall in each 10 s of the window: when the 429s came."""
    counts = [0] * max(1, int(-(-seconds // 10)))
    for t in times:
        counts[min(len(counts) - 1, int((t - first).total_seconds() // 10))] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--rpm", type=int, nargs="+", default=[RPM])
    parser.add_argument("--configured-rpm", type=int, default=300)
    parser.add_argument("cases", nargs="*")
    args = parser.parse_args()
    cases = args.cases or [f"{p}-{m}" for m in MODES for p in PROTOCOLS]
    for case in cases:
        protocol, mode = case.split("-", 1)
        for rpm in args.rpm:
            started = time.perf_counter()
            out = asyncio.run(run_case(protocol, mode, args.seconds, rpm, args.configured_rpm))
            out["wall_s"] = round(time.perf_counter() - started, 1)
            row = {"case": case, "rpm": rpm, "seconds": args.seconds, **out}
            if mode == "configured":
                row["configured_rpm"] = args.configured_rpm
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

"""Runner benchmarks (issues 2 and 12). Not tests: they measure and print, they assert nothing.

Each measurement starts one `ibias simulate` process and points both sides of a ratio at it,
so the comparison shares the simulator's cost. Run with `python -m bench.bench_runner [name]`
(names: throughput, latency, latency-ideal, resume, plan, saturation, memory, cpu-split;
default all but cpu-split, which is a profile rather than a goal).
Ratios are measured in one run: each side of a ratio against the same simulator process, and
the throughput and latency ratios as interleaved pairs (median and range).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
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


# ---------------------------------------------------------------------------- process trees


def _timed(cmd: list[str]) -> tuple[float, float, str]:
    """Run `cmd` to completion: wall seconds (start-up and shutdown included), CPU seconds of
    its whole process tree (user + system, from wait4), and its stdout."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:4]} exited with {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, out


def _cpu_s(pid: int) -> float:
    """CPU seconds a running process has used so far (the shared simulator's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _bare_cmd(url: str, n: int, concurrency: int) -> list[str]:
    return [sys.executable, "-m", "bench.bench_runner", "_bare", url, str(n), str(concurrency)]


def _ibias_cmd(config: Path) -> list[str]:
    return [*IBIAS, "run", str(config), "--quiet"]


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _median_range(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _pairs(
    url: str, sim_pid: int, n: int, concurrency: int, pairs: int, tmp: Path
) -> list[dict[str, float]]:
    """`pairs` interleaved runs of the bare loop and of `ibias run` (a fresh store each time)
    against one simulator; the order inside a pair alternates, so drift in the machine's load
    falls on both sides."""
    out = []
    for i in range(pairs):
        folder = tmp / f"pair{i}"
        folder.mkdir()
        cfg = write_config(folder, url, n, concurrency=concurrency)
        sides: dict[str, float] = {}
        order = ("bare", "ibias") if i % 2 == 0 else ("ibias", "bare")
        for side in order:
            sim0 = _cpu_s(sim_pid)
            if side == "bare":
                wall, cpu, text = _timed(_bare_cmd(url, n, concurrency))
                sides["bare_loop_s"] = float(json.loads(text)["loop_s"])
            else:
                wall, cpu, _ = _timed(_ibias_cmd(cfg))
            sides[f"{side}_wall_s"] = wall
            sides[f"{side}_cpu_s"] = cpu
            sides[f"{side}_sim_cpu_s"] = _cpu_s(sim_pid) - sim0
        out.append(sides)
    return out


def throughput(n: int = 20_000, concurrency: int = 64, pairs: int = 5) -> dict[str, object]:
    """ibias end to end (start-up, planning, requests, storing, shutdown) over the bare loop
    end to end, at zero latency; CPU per request of each side's process tree."""
    load_before = _load()
    proc, url = start_simulator(cwd=ROOT)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runs = _pairs(url, proc.pid, n, concurrency, pairs, Path(tmp))
    finally:
        stop(proc)
    ratios = [r["bare_wall_s"] / r["ibias_wall_s"] for r in runs]
    cpu_ratios = [r["ibias_cpu_s"] / r["bare_cpu_s"] for r in runs]
    return {
        "requests": n,
        "concurrency": concurrency,
        "pairs": pairs,
        "load": f"{load_before} before, {_load()} after",
        "throughput_ratio": _median_range(ratios),
        "cpu_per_request_ratio": _median_range(cpu_ratios),
        "ibias_rps": _median_range([n / r["ibias_wall_s"] for r in runs]),
        "bare_rps_end_to_end": _median_range([n / r["bare_wall_s"] for r in runs]),
        "bare_rps_loop_only (calibration)": _median_range([n / r["bare_loop_s"] for r in runs]),
        "ibias_cpu_us_per_request": _median_range([r["ibias_cpu_s"] / n * 1e6 for r in runs]),
        "bare_cpu_us_per_request": _median_range([r["bare_cpu_s"] / n * 1e6 for r in runs]),
        "simulator_cpu_us_per_request": _median_range(
            [r[f"{s}_sim_cpu_s"] / n * 1e6 for r in runs for s in ("bare", "ibias")]
        ),
    }


def floor(n: int = 20_000, concurrency: int = 64, rounds: int = 3) -> dict[str, object]:
    """How close any design that stores every reply in DuckDB can come to the bare loop on
    this machine: `rounds` interleaved rounds (the bare loop on asyncio's loop, the same code
    on uvloop, `bench.floor_loop`, `ibias run`; order rotating) against one simulator, each
    side a process of its own, end to end. The floor loop sends the bare loop's requests and
    only decodes each reply and appends an attempt row and a response row to a fresh store
    once a second (see its docstring). The bare loop on uvloop says how much of ibias's
    figure is the loop it runs on (ibias uses uvloop where installed)."""
    load_before = _load()
    proc, url = start_simulator(cwd=ROOT)
    runs: list[dict[str, float]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(rounds):
                folder = Path(tmp) / f"round{i}"
                folder.mkdir()
                cfg = write_config(folder, url, n, concurrency=concurrency)
                cmds = {
                    "bare": _bare_cmd(url, n, concurrency),
                    "bare_uvloop": [*_bare_cmd(url, n, concurrency), "uvloop"],
                    "floor": [
                        *_bare_cmd(url, n, concurrency)[:3],
                        "_floor",
                        url,
                        str(n),
                        str(concurrency),
                        str(folder / "floor.duckdb"),
                    ],
                    "ibias": _ibias_cmd(cfg),
                }
                order = list(cmds)[i % len(cmds) :] + list(cmds)[: i % len(cmds)]
                sides: dict[str, float] = {}
                for side in order:
                    wall, cpu, _ = _timed(cmds[side])
                    sides[f"{side}_wall_s"], sides[f"{side}_cpu_s"] = wall, cpu
                runs.append(sides)
    finally:
        stop(proc)
    return {
        "requests": n,
        "concurrency": concurrency,
        "rounds": rounds,
        "load": f"{load_before} before, {_load()} after",
        **{
            f"{side}_throughput_ratio": _median_range(
                [r["bare_wall_s"] / r[f"{side}_wall_s"] for r in runs]
            )
            for side in ("bare_uvloop", "floor", "ibias")
        },
        **{
            f"{side}_cpu_ratio": _median_range([r[f"{side}_cpu_s"] / r["bare_cpu_s"] for r in runs])
            for side in ("bare_uvloop", "floor", "ibias")
        },
        **{
            f"{side}_cpu_us_per_request": _median_range(
                [r[f"{side}_cpu_s"] / n * 1e6 for r in runs]
            )
            for side in ("bare", "bare_uvloop", "floor", "ibias")
        },
        "bare_rps_end_to_end (calibration)": _median_range([n / r["bare_wall_s"] for r in runs]),
    }


def latency(
    n: int = 5_000, concurrency: int = 256, latency_ms: int = 200, pairs: int = 3
) -> dict[str, object]:
    """Latency-bound: ibias's wall time over the bare loop's, both end to end, at the same
    simulated latency."""
    load_before = _load()
    proc, url = start_simulator("--latency-ms", str(latency_ms), cwd=ROOT)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            runs = _pairs(url, proc.pid, n, concurrency, pairs, Path(tmp))
    finally:
        stop(proc)
    ideal = n / concurrency * latency_ms / 1000
    return {
        "requests": n,
        "concurrency": concurrency,
        "latency_ms": latency_ms,
        "pairs": pairs,
        "load": f"{load_before} before, {_load()} after",
        "wall_ratio_ibias_over_bare": _median_range(
            [r["ibias_wall_s"] / r["bare_wall_s"] for r in runs]
        ),
        "ibias_wall_s": _median_range([r["ibias_wall_s"] for r in runs]),
        "bare_wall_s": _median_range([r["bare_wall_s"] for r in runs]),
        "bare_loop_s": _median_range([r["bare_loop_s"] for r in runs]),
        "ideal_s": ideal,
    }


def latency_ideal(
    n: int = 10_000, concurrency: int = 1000, latency_ms: int = 2000
) -> dict[str, float]:
    """10,000 trials at 2 s simulated latency, concurrency 1,000: wall time over the ideal."""
    proc, url = start_simulator("--latency-ms", str(latency_ms), cwd=ROOT)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = write_config(Path(tmp), url, n, concurrency=concurrency)
            wall = run_ibias(cfg)
    finally:
        stop(proc)
    ideal = n / concurrency * latency_ms / 1000
    return {"trials": n, "wall_s": wall, "ideal_s": ideal, "ratio": wall / ideal}


# ---------------------------------------------------------------------------- plan and resume


class _Instant:
    """An in-process provider that answers at once (no HTTP), except the prompts in `refuse`,
    which fail with a retryable error (with one attempt allowed they stay without a
    response). Used to fill stores fast; the request path is measured by `throughput`."""

    def __init__(self, refuse: frozenset[str]) -> None:
        self.refuse = refuse

    def __call__(self, model: object, key: object, context: object) -> object:
        from ibias.runner.providers.base import AttemptError, Provider, Reply
        from ibias.runner.providers.retries import Classification, Verdict

        refuse = self.refuse

        class Instant(Provider):
            async def complete(self, messages: object, sampling: object) -> Reply:
                text = messages[-1]["content"]  # type: ignore[index]
                if text in refuse:
                    raise AttemptError(Classification(Verdict.RETRY, "http_503", "HTTP 503"))
                return Reply("ok", "stop", None, 5, 1, "instant", None, {"ok": True})

        return Instant()


def _execute(config_path: Path, *, refuse: frozenset[str] = frozenset(), instant: bool = True):
    """`ibias.runner.execution.run.execute` in this process; returns its RunResult."""
    import anyio

    from ibias.runner.config import load_config
    from ibias.runner.execution.event_loop import event_loop_options
    from ibias.runner.execution.run import RunOptions, execute
    from ibias.runner.providers.retries import Backoff

    config = load_config(config_path)
    options = RunOptions(
        store=config_path.parent / "bench.duckdb",
        quiet=True,
        backoff=Backoff(base_s=0.001, cap_s=0.01, max_attempts=1),
    )
    factory = _Instant(refuse) if instant else None
    return anyio.run(
        lambda: execute(config, options, provider_factory=factory),  # type: ignore[arg-type]
        backend_options=event_loop_options(config),  # the loop `ibias run` runs on
    )


def resume(n: int = 100_000) -> dict[str, object]:
    """Resume of a finished store against the time it took to plan it (both in-process, from
    RunResult.timings; the command end to end beside them), and the planning share of a run
    that finishes a 90%-done store against the simulator."""
    load_before = _load()
    proc, url = start_simulator(cwd=ROOT)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "finished"
            folder.mkdir()
            cfg = write_config(folder, url, n, concurrency=64)
            first = _execute(cfg)
            planned_s = first.timings["inputs"] + first.timings["plan"]
            again = _execute(cfg)
            cli_wall, cli_cpu, _ = _timed(_ibias_cmd(cfg))
            # 90% done: one prompt in ten fails for good in the first run, then a run against
            # the simulator finishes the store.
            folder = Path(tmp) / "ninety"
            folder.mkdir()
            cfg = write_config(folder, url, n, concurrency=64)
            missing = frozenset(f"Benchmark prompt {i}." for i in range(0, n, 10))
            partial = _execute(cfg, refuse=missing)
            rest = _execute(cfg, instant=False)
    finally:
        stop(proc)
    t = rest.timings
    prepare = t["open"] + t["inputs"] + t["plan"] + t["totals"]
    return {
        "trials": n,
        "load": f"{load_before} before, {_load()} after",
        "plan_s (first run: inputs + plan)": planned_s,
        "resume_finished_s (in-process, whole run)": again.timings["total"],
        "resume_finished_ratio": again.timings["total"] / planned_s,
        "resume_finished_cli_wall_s (start-up included)": cli_wall,
        "resume_finished_cli_cpu_s": cli_cpu,
        "resume_finished_timings": dict(again.timings),
        "ninety_first_run": partial.lines[0],
        "ninety_resume_lines": list(rest.lines),
        "ninety_prepare_s": prepare,
        "ninety_run_s": t["total"],
        "ninety_planning_share": prepare / t["total"],
        "ninety_timings": dict(t),
    }


def plan(n: int = 100_000, runs: int = 3) -> dict[str, object]:
    """Planning (hashing the inputs, generating, keying and storing every trial on a fresh
    store) per trial over key generation alone (generating every trial with its key), for
    the ad-hoc prompts of the other benchmarks and for the paper's grid; `runs` times each,
    alternating the two, with the median and range of each figure (the machine is shared)."""
    import anyio

    from ibias.runner.config import load_config
    from ibias.runner.execution.plan import build_experiments, plan_inputs, trials_for
    from ibias.runner.execution.run import prepare_plan
    from ibias.store.db import open_store

    def measure(config_path: Path, store: Path) -> dict[str, float]:
        config = load_config(config_path)
        experiments = build_experiments(config)
        t0 = time.perf_counter()
        count = sum(1 for _ in trials_for(experiments, config.models))
        keygen = time.perf_counter() - t0
        con = open_store(store, create=True)
        try:
            t0 = time.perf_counter()
            inputs = plan_inputs(config, experiments)
            t1 = time.perf_counter()
            anyio.run(lambda: prepare_plan(con, config, "bench", experiments, inputs))
            t2 = time.perf_counter()
        finally:
            con.close()
        return {
            "trials": count,
            "keygen_us_per_trial": keygen / count * 1e6,
            "plan_us_per_trial": (t2 - t0) / count * 1e6,
            "inputs_s": t1 - t0,
            "ratio": (t2 - t0) / keygen,
            "store_mb": store.stat().st_size / 1e6,
        }

    load_before = _load()
    measured: dict[str, list[dict[str, float]]] = {"prompts": [], "paper": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            folder = Path(tmp) / str(i)
            folder.mkdir()
            measured["prompts"].append(
                measure(
                    write_config(folder, "http://127.0.0.1:9/v1", n, concurrency=64),
                    folder / "prompts.duckdb",
                )
            )
            measured["paper"].append(
                measure(ROOT / "configs" / "paper.toml", folder / "paper.duckdb")
            )
    return {
        "runs": runs,
        "load": f"{load_before} before, {_load()} after",
        **{
            design: {k: _median_range([r[k] for r in rows]) for k in rows[0]}
            for design, rows in measured.items()
        },
    }


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


def cpu_split(n: int = 20_000, concurrency: int = 64, runs: int = 3) -> dict[str, object]:
    """Where ibias's CPU goes, in process (no interpreter start-up), `runs` runs of `n`
    requests at zero latency against one simulator with the real OpenAI provider: the phases'
    wall time (RunResult.timings), CPU of the whole process, of the event loop's thread
    (`time.thread_time` on it) and of the writer's flushes (`thread_time` around each
    `Writer._write`, Arrow conversion and DuckDB's inserts as called from Python; DuckDB's
    own worker threads are the rest). Per request, median of the runs; a profile to read
    beside `throughput`, not a goal."""
    from ibias.store import writer as writer_module

    spent = {"write": 0.0, "to_arrow": 0.0}
    write, to_arrow = writer_module.Writer._write, writer_module.to_arrow

    def timed_write(self: object, *args: object) -> None:
        t0 = time.thread_time()
        try:
            write(self, *args)  # type: ignore[arg-type]
        finally:
            spent["write"] += time.thread_time() - t0

    def timed_arrow(*args: object) -> object:
        t0 = time.thread_time()
        try:
            return to_arrow(*args)  # type: ignore[arg-type]
        finally:
            spent["to_arrow"] += time.thread_time() - t0

    load_before = _load()
    proc, url = start_simulator(cwd=ROOT)
    rows: list[dict[str, float]] = []
    writer_module.Writer._write = timed_write  # type: ignore[method-assign]
    writer_module.to_arrow = timed_arrow  # type: ignore[assignment]
    try:
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as tmp:
                cfg = write_config(Path(tmp), url, n, concurrency=concurrency)
                spent.update(write=0.0, to_arrow=0.0)
                cpu0, main0, sim0 = time.process_time(), time.thread_time(), _cpu_s(proc.pid)
                result = _execute(cfg, instant=False)
                us = 1e6 / n
                rows.append(
                    {
                        **{f"{k}_s": v for k, v in result.timings.items() if k != "planned"},
                        "process_cpu_us": (time.process_time() - cpu0) * us,
                        "event_loop_thread_cpu_us": (time.thread_time() - main0) * us,
                        "writer_flush_cpu_us": spent["write"] * us,
                        "of_which_to_arrow_us": spent["to_arrow"] * us,
                        "simulator_cpu_us": (_cpu_s(proc.pid) - sim0) * us,
                    }
                )
    finally:
        writer_module.Writer._write = write  # type: ignore[method-assign]
        writer_module.to_arrow = to_arrow
        stop(proc)
    return {
        "requests": n,
        "concurrency": concurrency,
        "runs": runs,
        "load": f"{load_before} before, {_load()} after",
        **{k: _median_range([r[k] for r in rows]) for k in rows[0]},
    }


def _rss_peak_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return float("nan")


def memory(n: int = 1_000_000, first: int = 1000) -> dict[str, object]:
    """Peak memory (VmHWM) of `ibias run` on a 1,000,000-trial config until the whole plan
    is stored and more than the first `first` responses are; the time to the end of
    planning (the status file says "running") and the peak up to then."""
    load_before = _load()
    proc, url = start_simulator(cwd=ROOT)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = write_config(Path(tmp), url, n, concurrency=64)
            store = Path(tmp) / "bench.duckdb"
            status = store.with_name(store.name + ".status.json")
            t0 = time.perf_counter()
            run = subprocess.Popen([*IBIAS, "run", str(cfg), "--quiet"], cwd=ROOT)
            peak = 0.0
            planned_s = planning_peak = float("nan")
            while run.poll() is None:
                peak = max(peak, _rss_peak_mb(run.pid))
                try:
                    data = json.loads(status.read_text() or "{}")
                except (FileNotFoundError, json.JSONDecodeError):
                    data = {}
                if data.get("state") == "running":
                    if planned_s != planned_s:
                        planned_s, planning_peak = time.perf_counter() - t0, peak
                    models = data.get("models") or [{}]
                    if models[0].get("done", 0) >= first + 1000:  # past the first flushes
                        break
                time.sleep(0.05)
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
        "load": f"{load_before} before, {_load()} after",
        "trials_planned": float(trials),
        "responses_stored": float(responses),
        "seconds_to_end_of_planning (start-up and config included)": planned_s,
        "peak_rss_mb_while_planning": planning_peak,
        "peak_rss_mb": peak,
    }


BENCHES = {
    "throughput": throughput,
    "latency": latency,
    "latency-ideal": latency_ideal,
    "resume": resume,
    "plan": plan,
    "saturation": saturation,
    "memory": memory,
    "cpu-split": cpu_split,
    "floor": floor,
}
#: Profiles, run only when named.
PROFILES = frozenset({"cpu-split"})


def _rounded(value: object) -> object:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def main(names: list[str]) -> None:
    os.chdir(ROOT)
    if names and names[0] == "_bare":  # one side of a pair, in its own process
        url, n, concurrency = names[1], int(names[2]), int(names[3])
        if names[4:] == ["uvloop"]:  # the same code on the loop ibias runs on
            import uvloop

            loop_s = uvloop.run(bare_loop(url, n, concurrency))
        else:
            loop_s = asyncio.run(bare_loop(url, n, concurrency))
        print(json.dumps({"loop_s": loop_s}), flush=True)
        return
    if names and names[0] == "_floor":  # the floor loop of `floor`, in its own process
        from bench import floor_loop

        floor_loop.main(names[1], int(names[2]), int(names[3]), Path(names[4]))
        return
    for name in names or [b for b in BENCHES if b not in PROFILES]:
        result = BENCHES[name]()
        print(json.dumps({"bench": name, **_rounded(result)}, indent=1), flush=True)  # type: ignore[dict-item]


if __name__ == "__main__":
    main(sys.argv[1:])

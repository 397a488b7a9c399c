"""The paper-sized grid and ten times it (issue 20): peak RSS and wall time of planning, of a
first run interrupted a quarter of the way, of its resume to the end, and of a resume of the
finished store. Not a test: it measures and prints.

The grid is `configs/demo.toml` (7 simulated models, both experiments, every condition:
142,240 trials) as shipped, and scaled by 10 (`trials_per_category`, `pairs_per_service` and
`roster_size` times ten; the explicit checks are not scaled: 1,402,240 trials). The simulated
models answer at zero latency in the run's own process, so the run is bound by its own CPU:
these are the heaviest runs a machine can give ibias. Peak RSS is the process's VmHWM (the
simulator included, as `ibias demo` runs it), read every 50 ms while it runs (a high-water
mark: no peak is missed between readings, only the last 50 ms before exit may go unread).

Run with `python -m bench.bench_grid [1] [10]` (default both; the 10x grid takes about 20
minutes or more on 2 cores).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from ibias.runner.execution.run import DUCKDB_MEMORY_LIMIT
from tests.helpers import IBIAS

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "configs" / "demo.toml"
#: Where the first run is stopped: this share of the grid answered.
STOP_AT = 0.25


def grid_config(folder: Path, scale: int) -> Path:
    text = re.sub(r"^store = .*$", 'store = "grid.duckdb"', DEMO.read_text(), flags=re.M)
    # The roster grows with the pairs: 100 people allow only 156 same-band pairs for some
    # services, and the planner refuses a config asking for more.
    for key in ("trials_per_category", "pairs_per_service", "roster_size"):
        found = re.search(rf"^{key} = (\d+)$", text, flags=re.M)
        assert found is not None, key
        text = text.replace(found.group(0), f"{key} = {int(found.group(1)) * scale}")
    path = folder / "grid.toml"
    path.write_text(text)
    return path


def _peak_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0.0


def _status(store: Path) -> dict[str, object]:
    try:
        data = json.loads(store.with_name(store.name + ".status.json").read_text() or "{}")
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _done(data: dict[str, object]) -> tuple[int, int]:
    models = data.get("models") or []
    assert isinstance(models, list)
    return (
        sum(int(m.get("done", 0)) for m in models),
        sum(int(m.get("total", 0)) for m in models),
    )


def run_once(config: Path, store: Path, *, stop_at: float | None) -> dict[str, float]:
    """One `ibias run`: wall seconds, seconds to the end of planning (the status file says
    running), peak RSS while planning and in all, responses stored."""
    began = time.perf_counter()
    proc = subprocess.Popen([*IBIAS, "run", str(config), "--quiet"], cwd=ROOT)
    peak = planning_peak = 0.0
    planned_s = float("nan")
    stopped = False
    while proc.poll() is None:
        peak = max(peak, _peak_mb(proc.pid))
        data = _status(store)
        if data.get("state") == "running" and planned_s != planned_s:
            planned_s, planning_peak = time.perf_counter() - began, peak
        if stop_at is not None and not stopped and data.get("state") == "running":
            done, total = _done(data)
            if total and done >= stop_at * total:
                peak = max(peak, _peak_mb(proc.pid))
                proc.send_signal(signal.SIGINT)
                stopped = True
        time.sleep(0.05)
    wall = time.perf_counter() - began
    con = duckdb.connect(str(store), read_only=True)
    try:
        (responses,) = con.execute("SELECT count(*) FROM responses").fetchall()[0]
    finally:
        con.close()
    return {
        "exit": float(proc.returncode),
        "wall_s": wall,
        "planning_s": planned_s,
        "peak_rss_mb_planning": planning_peak,
        "peak_rss_mb": peak,
        "responses_after": float(responses),
    }


def grid(scale: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        config = grid_config(Path(tmp), scale)
        store = Path(tmp) / "grid.duckdb"
        first = run_once(config, store, stop_at=STOP_AT)
        resumed = run_once(config, store, stop_at=None)
        again = run_once(config, store, stop_at=None)
        con = duckdb.connect(str(store), read_only=True)
        try:
            trials, answered = con.execute(
                "SELECT (SELECT count(*) FROM trial_rows), "
                "(SELECT count(DISTINCT trial_key) FROM responses)"
            ).fetchall()[0]
        finally:
            con.close()
        size_mb = store.stat().st_size / 2**20
    new = resumed["responses_after"] - first["responses_after"]
    return {
        "scale": scale,
        "trials": trials,
        "answered_once": answered,
        "store_mb": size_mb,
        "duckdb": f"memory_limit {DUCKDB_MEMORY_LIMIT}, temp_directory STORE.tmp (spill), "
        f"threads {os.cpu_count()}",
        "first_run_stopped_at_25pct": first,
        "resume_to_the_end": {**resumed, "requests_per_s": new / resumed["wall_s"]},
        "resume_of_finished_store": again,
    }


def main(args: list[str]) -> None:
    os.chdir(ROOT)
    for scale in [int(a) for a in args] or [1, 10]:
        result = grid(scale)
        print(json.dumps({"bench": "grid", **result}, indent=1, default=float), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

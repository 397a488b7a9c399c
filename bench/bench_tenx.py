"""The commands a user runs on a store ten times the paper's grid (issue 35), at 1x and 10x side
by side: `analyze`, the start of a resume of an almost finished store, `status` on the closed
store and during a run, `ibias sql`, and the floors that bound them (Python's start-up, and the
same reads as bare DuckDB queries). Not a test: it measures and prints one table.

The stores are `configs/demo.toml` as shipped (1x, 142,240 trials) and scaled by ten with
`bench_grid.grid_config` (10x, 1,402,240 trials), run through `ibias run` on the simulated
models. They are built once into `--store-dir` (default `out/bench/tenx`, never committed) and
reused by later runs; a build that was stopped goes on from where it was, `--rebuild` starts
again. One build of a grid makes three stores, all by ordinary runs and signals, no SQL edits:

- `half.duckdb`: the first run stopped by SIGINT once half the grid is answered (for `status`
  during a run, which resumes a copy of it);
- `almost.duckdb`: the resume of that store stopped by SIGINT when a few hundred trials are
  left (the stop is aimed from the status file's counts and the rate between two of its
  writes; the trials actually left are counted in the store and printed). Only if that stop
  misses the end (nothing left) does the build fall back to deleting the last responses (and
  their parsed rows) from a copy with SQL, then rebuilding the progress counts where the code
  keeps them (`store/progress_counts.py`); it says so in the output and in `build.json`;
- `finished.duckdb`: that run resumed to the end.

Every measurement works on a copy, opened once writable first (migrated to this code's schema,
its write-ahead log folded in), so that the figures are of the current code on a store it has
already opened, as a user's would be. Each figure has the machine's load average (1 minute)
beside it, taken before and after, because the machine is shared: wall times move with load,
peak memory does not. Wall times are measured from outside (a subprocess per command, peak RSS
from GNU time); "start to first request" is the time from just before `ibias run` is started to
the earliest attempt of that run in the store (both wall clock).

Run with `python -m bench.bench_tenx [--scale 1] [--scale 10] [--store-dir DIR] [--rebuild]
[--code DIR] [--build-only]` (default both scales). `--code DIR` runs every ibias command with
another checkout's package (e.g. a worktree of the revision before a change) for before/after
figures. A resume starts with a whole planning when the store was planned by other code (the
plan hash covers the planner and the experiment units' code): the table then says "planned
again", and a like-for-like figure needs stores built by the measured code (their own
`--store-dir`). `analyze`, `status` and `sql` figures hold on stores built by older code: they
are migrated, untimed, before the measurements.

Building the 10x stores is a whole 10x run: about 15 to 40 minutes on a quiet 2-core machine,
hours on a shared one; measuring takes about 10 minutes more. The goals (issue 35, at 10x on 2
cores): analyze under 60 s and 1 GB (1x under 10 s), start to first request under 5 s, status
under 0.5 s, sql under 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import duckdb

from bench.bench_analyze import _CHILD as ANALYZE_CHILD
from bench.bench_grid import grid_config
from tests.helpers import IBIAS

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / "out" / "bench" / "tenx"
#: The checkout whose ibias every command runs (`--code`; the ibias commands run with it as
#: their working directory, so `python -m ibias` imports its package).
CODE = ROOT
#: The first run of a build is stopped once this share of the grid is answered.
HALF = 0.5
#: The stop of the second run aims at this many trials left (a few hundred).
AIM_LEFT = 600
#: A stop that leaves more than this is tried again (a resume of the stopped store).
MAX_LEFT = 3000
#: Trials the SQL fallback deletes when the run reached the end before it could be stopped.
FALLBACK_LEFT = 500
#: Exit codes of a run that stored what it could: done, some trials failed for good,
#: interrupted.
RUN_EXITS = (0, 1, 130)
#: Repetitions of the short commands (status, sql, the floors); the median is reported.
REPEATS = 5
SQL = "SELECT model_id, count(*) FROM replies GROUP BY 1"
BOOTSTRAP = 2000

# The floor, in a child with the store read-only: the `ibias sql` query as bare DuckDB, a scan
# of the responses' key column, and the allocation view's narrow columns read into Arrow.
_FLOOR = """
import json, sys, time
import duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
con.execute("SET enable_progress_bar = false")
queries = {
    "sql": sys.argv[3],
    "scan_responses": "SELECT count(*), sum(length(trial_key)) FROM responses",
    "allocation_arrow": "SELECT model_id, language, service, explanation, symptoms, pair_id, "
                        "first, chosen FROM allocation_decisions",
}
out = {}
for name, query in queries.items():
    walls = []
    for _ in range(int(sys.argv[2])):
        start = time.perf_counter()
        if name == "allocation_arrow":
            con.sql(query).to_arrow_table()
        else:
            con.execute(query).fetchall()
        walls.append(time.perf_counter() - start)
    walls.sort()
    out[name] = walls[len(walls) // 2]
print(json.dumps(out))
"""

# Opens a store writable once (migrates it, checks the experiments' schemas) and folds its
# write-ahead log in, so that read-only commands see this code's schema.
_PREPARE = """
import sys
from pathlib import Path
from ibias.store.db import open_store
con = open_store(Path(sys.argv[1]))
con.execute("CHECKPOINT").fetchall()
con.close()
"""

# The SQL fallback's last step: the measured code's progress counts recomputed from the rows,
# where that code keeps them (store/progress_counts.py, schema 16 on).
_REBUILD = """
import sys
import duckdb
try:
    from ibias.store import progress_counts
except ImportError:
    sys.exit(0)
con = duckdb.connect(sys.argv[1])
progress_counts.rebuild(con)
con.execute("CHECKPOINT").fetchall()
con.close()
"""


@dataclass(frozen=True)
class Timed:
    """One subprocess: wall seconds, peak RSS (kB), exit code, load average before/after."""

    wall_s: float
    peak_kb: int
    exit: int
    load: tuple[float, float]


@dataclass(frozen=True)
class Stores:
    """A grid's three stores and how the almost finished one was made."""

    config: Path
    finished: Path
    almost: Path
    half: Path
    almost_left: int
    almost_method: str
    built_now: bool


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _timed(cmd: Sequence[str], *, log: Path | None = None) -> Timed:
    """Run `cmd` to its end; its output goes to `log` (or nowhere). The peak RSS comes from
    GNU time where there is one: a child forked from this process would report at least this
    process's own size (Linux keeps the forked copy's high-water mark across `exec`), whereas
    `time`'s child is forked from `time`."""
    before = _load()
    rss_file = Path(tempfile.mkstemp(prefix="ibias-tenx-rss-")[1])
    gnu_time = Path("/usr/bin/time").exists()
    argv = ["/usr/bin/time", "-f", "%M", "-o", str(rss_file), *cmd] if gnu_time else list(cmd)
    out = log.open("w") if log is not None else subprocess.DEVNULL
    try:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=CODE, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        peak = int(usage.ru_maxrss)
        if gnu_time:  # its last line is the figure (after "Command exited with ..." if any)
            peak = int(rss_file.read_text().split()[-1])
    finally:
        rss_file.unlink(missing_ok=True)
        if log is not None and not isinstance(out, int):
            out.close()
    if proc.returncode and log is not None:  # the log goes with the temporary folder: say why
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        print(f"  {' '.join(cmd[:3])} ... exited {proc.returncode}: {' | '.join(tail)}", flush=True)
    return Timed(wall, peak, proc.returncode, (before, _load()))


def _files(path: Path) -> list[Path]:
    return [path, path.with_name(path.name + ".wal")]


def _remove(path: Path) -> None:
    for p in [*_files(path), path.with_name(path.name + ".status.json")]:
        p.unlink(missing_ok=True)
    shutil.rmtree(path.with_name(path.name + ".tmp"), ignore_errors=True)


def _copy(src: Path, dst: Path) -> Path:
    """Copy a closed store with its write-ahead log (a stopped run leaves one)."""
    _remove(dst)
    for s, d in zip(_files(src), _files(dst), strict=True):
        if s.exists():
            shutil.copyfile(s, d)
    return dst


def _prepare(path: Path) -> Path:
    subprocess.run([sys.executable, "-c", _PREPARE, str(path)], cwd=CODE, check=True)
    return path


def _left(path: Path) -> int:
    """Planned trials without a response, counted in the store."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        row = con.execute(
            "SELECT (SELECT count(*) FROM trial_rows) "
            "- (SELECT count(DISTINCT trial_key) FROM responses)"
        ).fetchone()
    finally:
        con.close()
    assert row is not None
    return int(row[0])


def _complete_plans(path: Path) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        row = con.execute("SELECT count(*) FROM plans WHERE state = 'complete'").fetchone()
    finally:
        con.close()
    assert row is not None
    return int(row[0])


def _status_file(store: Path) -> dict[str, object]:
    try:
        data = json.loads(store.with_name(store.name + ".status.json").read_text() or "{}")
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _counts(data: dict[str, object]) -> tuple[int, int, float]:
    """(done or failed, total, the snapshot's time as a Unix timestamp)."""
    models = data.get("models") or []
    assert isinstance(models, list)
    done = sum(int(m.get("done", 0)) + int(m.get("failed", 0)) for m in models)
    total = sum(int(m.get("total", 0)) for m in models)
    stamp = datetime.fromisoformat(str(data["updated_at"])).timestamp()
    return done, total, stamp


def _run(
    config: Path, store: Path, *, share: float | None = None, aim_left: int | None = None
) -> int:
    """`ibias run CONFIG --store STORE`, stopped by SIGINT once `share` of the grid is
    answered, or when about `aim_left` trials are left (estimated now from the last status
    snapshot and the rate between the last two); returns the exit code."""
    store.with_name(store.name + ".status.json").unlink(missing_ok=True)
    proc = subprocess.Popen(
        [*IBIAS, "run", str(config), "--store", str(store), "--quiet"], cwd=CODE
    )
    last: tuple[int, int, float] | None = None
    rate = 0.0
    while proc.poll() is None:
        time.sleep(0.02)
        data = _status_file(store)
        if data.get("state") != "running" or (share is None and aim_left is None):
            continue
        done, total, stamp = _counts(data)
        if last is not None and stamp > last[2]:
            rate = (done - last[0]) / (stamp - last[2])
        if last is None or stamp > last[2]:
            last = (done, total, stamp)
        if not total:
            continue
        left_now = total - done - rate * max(time.time() - stamp, 0.0)
        if (share is not None and done >= share * total) or (
            aim_left is not None and rate > 0 and left_now <= aim_left
        ):
            proc.send_signal(signal.SIGINT)
            break
    code = proc.wait()
    if code not in RUN_EXITS:  # e.g. 2: the store is locked by another run
        raise RuntimeError(f"ibias run on {store} ended with exit code {code}")
    return code


def _delete_some(path: Path, n: int) -> None:
    """The fallback: delete the last `n` responses (and their parsed rows), then rebuild the
    progress counts if this code keeps them."""
    con = duckdb.connect(str(path))
    try:
        con.execute(
            "CREATE TEMP TABLE gone AS SELECT trial_key FROM responses "
            "ORDER BY received_at DESC LIMIT ?",
            [n],
        ).fetchall()
        tables = [
            t
            for (t,) in con.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_name LIKE 'parsed_%' AND table_type = 'BASE TABLE'"
            ).fetchall()
        ]
        for table in [*tables, "responses"]:
            con.execute(
                f"DELETE FROM {table} WHERE trial_key IN (SELECT trial_key FROM gone)"
            ).fetchall()
        con.execute("CHECKPOINT").fetchall()
    finally:
        con.close()
    subprocess.run([sys.executable, "-c", _REBUILD, str(path)], cwd=CODE, check=True)


def build(scale: int, folder: Path, *, rebuild: bool) -> Stores:
    """The grid's three stores in `folder`, built unless all three are there (or `rebuild`)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = grid_config(folder, scale)
    finished, almost, half = (folder / f"{n}.duckdb" for n in ("finished", "almost", "half"))
    info_path = folder / "build.json"
    if not rebuild and info_path.exists() and all(p.exists() for p in (finished, almost, half)):
        info = json.loads(info_path.read_text())
        return Stores(
            config, finished, almost, half, info["almost_left"], info["almost_method"], False
        )
    info_path.unlink(missing_ok=True)
    work = folder / "work.duckdb"
    began = time.perf_counter()
    if rebuild or not half.exists():
        if rebuild:
            _remove(work)  # else a build stopped in its first run goes on from where it was
        print(
            f"[{scale}x] building the stores in {folder} (first run, stopped at half)", flush=True
        )
        _run(config, work, share=HALF)
        _copy(work, half)
    elif not work.exists():  # a build stopped after its first run goes on from there
        _copy(half, work)
    left, method = 0, "sigint"
    for attempt in range(3):
        print(f"[{scale}x] resuming, to stop about {AIM_LEFT} trials before the end", flush=True)
        _run(config, work, aim_left=AIM_LEFT)
        left = _left(work)
        print(f"[{scale}x] stopped with {left:,} trials left (try {attempt + 1})", flush=True)
        if left <= MAX_LEFT:
            break
    if left == 0:
        method = f"sql: the run ended before its stop; {FALLBACK_LEFT} responses deleted"
        _copy(work, almost)
        _delete_some(almost, FALLBACK_LEFT)
        left = _left(almost)
    else:
        _copy(work, almost)
    print(f"[{scale}x] resuming to the end", flush=True)
    _run(config, work)
    _copy(work, finished)
    _remove(work)
    info = {
        "scale": scale,
        "almost_left": left,
        "almost_method": method,
        "build_s": round(time.perf_counter() - began, 1),
        "code": _revision(),
        "built_at": datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    info_path.write_text(json.dumps(info, indent=1) + "\n")
    print(f"[{scale}x] built in {info['build_s']} s: {info}", flush=True)
    return Stores(config, finished, almost, half, left, method, True)


def _median(rows: list[Timed]) -> Timed:
    """The run with the median wall time (REPEATS is odd), its load the series' first and last."""
    mid = sorted(rows, key=lambda r: r.wall_s)[len(rows) // 2]
    return Timed(
        mid.wall_s, mid.peak_kb, max(r.exit for r in rows), (rows[0].load[0], rows[-1].load[1])
    )


def _first_request_s(store: Path, started: float) -> float:
    """Seconds from `started` (Unix time) to the first attempt of the store's latest run."""
    con = duckdb.connect(str(store), read_only=True)
    try:
        row = con.execute(
            "SELECT epoch(min(a.started_at)) FROM attempts a "
            "WHERE a.run_id = (SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1)"
        ).fetchone()
    finally:
        con.close()
    return float("nan") if row is None or row[0] is None else float(row[0]) - started


def _status_during(stores: Stores, tmp: Path) -> dict[str, object]:
    """`ibias status` REPEATS times while a resume of the half-answered store runs."""
    store = _prepare(_copy(stores.half, tmp / "during.duckdb"))
    proc = subprocess.Popen(
        [*IBIAS, "run", str(stores.config), "--store", str(store), "--quiet"], cwd=CODE
    )
    rows: list[Timed] = []
    try:
        while proc.poll() is None and _status_file(store).get("state") != "running":
            time.sleep(0.05)
        time.sleep(2.0)  # well into its requests
        while proc.poll() is None and len(rows) < REPEATS:
            rows.append(_timed([*IBIAS, "status", "--store", str(store)]))
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        proc.wait()
        _remove(store)
    return {
        "median": asdict(_median(rows)) if rows else None,
        "walls": [round(r.wall_s, 3) for r in rows],
        "exits": [r.exit for r in rows],
    }


def _analyze(closed: Path, tmp: Path) -> dict[str, object]:
    """`ibias analyze` as a user runs it, on a fresh copy of the closed store."""
    copy = _copy(closed, tmp / "analyze.duckdb")
    cmd = [*IBIAS, "analyze", "--store", str(copy), "--out", str(tmp / "an")]
    timed = _timed([*cmd, "--bootstrap", str(BOOTSTRAP)], log=tmp / "analyze.log")
    _remove(copy)
    return asdict(timed)


def _analyze_child(closed: Path, tmp: Path) -> dict[str, object]:
    """`analyze()` alone in a child, imports excluded (bench_analyze's measurement)."""
    copy = _copy(closed, tmp / "analyze.duckdb")
    load = _load()
    done = subprocess.run(
        [sys.executable, "-c", ANALYZE_CHILD, str(copy), str(tmp / "an_child")],
        cwd=CODE, check=True, capture_output=True, text=True,
    )  # fmt: skip
    last = done.stdout.strip().splitlines()[-1]
    child = json.loads(last[last.rindex("{") :])
    _remove(copy)
    return {**child, "load": (load, _load())}


def _resume(stores: Stores, tmp: Path) -> dict[str, object]:
    """Resume a copy of the almost finished store: start to first request, and the whole run."""
    copy = _prepare(_copy(stores.almost, tmp / "resume.duckdb"))
    plans = _complete_plans(copy)
    started = time.time()
    cmd = [*IBIAS, "run", str(stores.config), "--store", str(copy), "--quiet"]
    resumed = _timed(cmd, log=tmp / "resume.log")
    figures = {
        **asdict(resumed),
        "first_request_s": _first_request_s(copy, started),
        "left": stores.almost_left,
        "made_by": stores.almost_method,
        "left_after": _left(copy),
        # Planned again: the store was planned by other code (the plan hash covers the
        # planner and the experiment units' code), so the start includes a whole planning.
        "replanned": _complete_plans(copy) > plans,
    }
    _remove(copy)
    return figures


def _median_of(cmd: list[str]) -> dict[str, object]:
    rows = [_timed(cmd) for _ in range(REPEATS)]
    return {**asdict(_median(rows)), "walls": [round(r.wall_s, 3) for r in rows]}


def _floor(closed: Path) -> dict[str, object]:
    load = _load()
    done = subprocess.run(
        [sys.executable, "-c", _FLOOR, str(closed), str(REPEATS), SQL],
        cwd=CODE, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(done.stderr.strip().splitlines()[-1])
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "load": (load, _load())}


def measure(stores: Stores, tmp: Path) -> dict[str, object]:
    """Every figure of one grid (see the module's docstring). A step that fails is recorded
    with its error and the others still run."""
    closed = _prepare(_copy(stores.finished, tmp / "closed.duckdb"))
    fig: dict[str, object] = {"store_mb": round(stores.finished.stat().st_size / 2**20, 1)}
    steps: list[tuple[str, Callable[[], dict[str, object]]]] = [
        ("analyze", lambda: _analyze(closed, tmp)),
        ("analyze_child", lambda: _analyze_child(closed, tmp)),
        ("resume", lambda: _resume(stores, tmp)),
        ("help", lambda: _median_of([*IBIAS, "--help"])),
        ("import_cli", lambda: _median_of([sys.executable, "-c", "import ibias.runner.cli"])),
        ("status", lambda: _median_of([*IBIAS, "status", "--store", str(closed)])),
        ("sql", lambda: _median_of([*IBIAS, "sql", SQL, "--store", str(closed)])),
        ("floor", lambda: _floor(closed)),
        ("status_during_run", lambda: _status_during(stores, tmp)),
    ]
    for name, step in steps:
        try:
            fig[name] = step()
        except Exception as exc:  # one failed figure must not lose the others
            fig[name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"  {name}: {json.dumps(fig[name], default=str)}", flush=True)
    _remove(closed)
    return fig


def _cell(fig: dict[str, object] | None, key: str, field: str = "wall_s") -> str:
    if fig is None or key not in fig:
        return "-"
    value = fig[key]
    assert isinstance(value, dict)
    if key == "status_during_run" and "median" in value:
        value = value["median"]
        if value is None:
            return "-"
    assert isinstance(value, dict)
    if "error" in value:
        return "error"
    if key != "resume" and int(value.get("exit", 0)):  # a resume may end 1: trials failed
        return f"exit {value['exit']}"
    v = value[field]
    if field == "peak_kb":
        return f"{int(v) / 1024:,.0f} MB"
    if field == "peak_mb":
        return f"{float(v):,.0f} MB"
    if value.get("replanned"):
        return f"{float(v):.1f} s (planned again)"
    return f"{float(v):.2f} s" if float(v) < 10 else f"{float(v):.1f} s"


def _loads(figs: dict[int, dict[str, object]], key: str) -> str:
    out = []
    for scale, fig in sorted(figs.items()):
        value = fig.get(key)
        if isinstance(value, dict) and key == "status_during_run":
            value = value.get("median")
        if isinstance(value, dict) and "load" in value:
            a, b = value["load"]
            out.append(f"{scale}x {a:.1f}-{b:.1f}")
    return ", ".join(out) or "-"


def _met(value: str, goal: float) -> str:
    """'yes', or 'no' with the figure as a multiple of the goal."""
    if value == "-" or value == "error" or value.startswith("exit"):
        return "-"
    number = float(value.split()[0].replace(",", ""))
    if number < goal:
        return "yes"
    ratio = number / goal
    return f"no ({ratio:.1f} times the goal)" if ratio >= 2 else f"no ({ratio:.2f} times the goal)"


def table(figs: dict[int, dict[str, object]]) -> str:
    """One table: command, 1x, 10x, goal, met?, load (1-minute average, before-after)."""
    one, ten = figs.get(1), figs.get(10)
    # (label, key, field, goal checked at 10x as (number, unit) or None, goal text, 1x goal)
    rows: list[tuple[str, str, str, tuple[float, str] | None, str, float | None]] = [
        ("`ibias analyze` (B = 2,000, population on): wall", "analyze", "wall_s",
         (60.0, "s"), "10x < 60 s; 1x < 10 s", 10.0),
        ("`ibias analyze`: peak RSS", "analyze", "peak_kb", (1024.0, "MB"), "10x < 1 GB", None),
        ("analyze() in a child, imports excluded: wall", "analyze_child", "wall_s", None, "", None),
        ("analyze() in a child: peak RSS", "analyze_child", "peak_mb", None, "", None),
        ("resume of the almost finished store: start to first request", "resume",
         "first_request_s", (5.0, "s"), "< 5 s", None),
        ("resume of the almost finished store: whole run", "resume", "wall_s", None, "", None),
        ("`ibias status`, closed store (median of 5)", "status", "wall_s", (0.5, "s"),
         "< 0.5 s", None),
        ("`ibias status` during a run (median of 5)", "status_during_run", "wall_s",
         (0.5, "s"), "< 0.5 s", None),
        (f'`ibias sql "{SQL}"` (median of 5)', "sql", "wall_s", (2.0, "s"), "< 2 s", None),
        ("floor: `ibias --help` (Python + CLI start-up)", "help", "wall_s", None, "", None),
        ("floor: `python -c 'import ibias.runner.cli'`", "import_cli", "wall_s", None, "", None),
        ("floor: the same SQL, bare DuckDB (query only)", "floor", "sql", None, "", None),
        ("floor: bare scan of responses.trial_key", "floor", "scan_responses", None, "", None),
        ("floor: allocation_decisions' narrow columns to Arrow", "floor", "allocation_arrow",
         None, "", None),
    ]  # fmt: skip
    lines = ["| command | 1x | 10x | goal | met? | load |", "|---|---|---|---|---|---|"]
    for label, key, field, goal, text, goal_1x in rows:
        a, b = _cell(one, key, field), _cell(ten, key, field)
        met = []
        if goal is not None:  # a 1x figure over a goal that holds at 10x already misses it
            if a != "-":
                met.append("1x " + _met(a, goal_1x if goal_1x is not None else goal[0]))
            if b != "-":
                met.append("10x " + _met(b, goal[0]))
        lines.append(f"| {label} | {a} | {b} | {text} | {'; '.join(met) or '-'} | "
                     f"{_loads(figs, key)} |")  # fmt: skip
    return "\n".join(lines)


def _revision() -> str:
    """The measured checkout and its commit, "+edits" when its tree differs from it."""
    git = ["git", "-C", str(CODE)]
    rev = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True)
    edits = "+edits" if dirty.stdout.strip() else ""
    return f"{CODE} at {rev.stdout.strip() or '?'}{edits}"


def _versions() -> str:
    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    return (
        f"code {_revision()}; "
        f"Python {platform.python_version()}, duckdb {duckdb.__version__}, nproc {nproc}, "
        f"load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scale",
        type=int,
        action="append",
        choices=[1, 10],
        help="grid scale to measure (repeatable; default: 1 and 10)",
    )
    parser.add_argument(
        "--store-dir",
        type=Path,
        default=DEFAULT_DIR,
        help=f"where the stores are built and reused (default: {DEFAULT_DIR})",
    )
    parser.add_argument("--rebuild", action="store_true",
                        help="build the stores again even if they are there")  # fmt: skip
    parser.add_argument(
        "--code",
        type=Path,
        default=ROOT,
        help="run the ibias of this checkout (e.g. a worktree of the revision "
        "before a change), for before/after figures (default: this one)",
    )
    parser.add_argument(
        "--build-only",
        action="store_true",
        help="build (or finish building) the stores, measure nothing",
    )
    args = parser.parse_args(argv)
    global CODE
    CODE = args.code.resolve()
    args.store_dir = args.store_dir.resolve()
    if CODE != ROOT:  # another checkout is not ours to write in (its modules compile each time)
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    os.chdir(ROOT)
    print(_versions(), flush=True)
    figs: dict[int, dict[str, object]] = {}
    for scale in args.scale or [1, 10]:
        stores = build(scale, args.store_dir / f"x{scale}", rebuild=args.rebuild)
        if args.build_only:
            continue
        print(f"[{scale}x] almost finished store: {stores.almost_left:,} trials left "
              f"({stores.almost_method})", flush=True)  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="ibias-tenx-", dir=args.store_dir) as tmp:
            figs[scale] = measure(stores, Path(tmp))
        print(json.dumps({"bench": "tenx", "scale": scale, **figs[scale]}, default=str),
              flush=True)  # fmt: skip
    print()
    print(_versions())
    print(table(figs))


if __name__ == "__main__":
    main()

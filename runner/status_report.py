"""`ibias status`: progress from the store's `progress` view, served by the run while one holds
the store (with the run's rates and ETA from its status file), else read from the file.

Both states render as the same per-model table (model, done/total, failed, req/s, retries,
errors, cost, ETA), so a user watching a sweep sees the same thing before and after it ends;
the rate and ETA exist only during a run. The table fits 80 columns without cutting or
breaking a model id or a number: the id column is as wide as the longest id and the numbers
are compact; on a narrower terminal the droppable columns go, and ids still too long for the
numbers beside them are shown by a key with a legend below (runner/keyed_ids.py). The per
experiment x language breakdown is in `--json` (`by`) and in the store's `progress` view.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ibias.runner.console import literal, natural_width, terminal, text
from ibias.runner.paths import DEFAULT_STORE
from ibias.runner.status import read_status, span, status_path
from ibias.store import progress_counts
from ibias.store.db import StoreAccessError
from ibias.store.drift import model_drift
from ibias.store.lock import holder, shown_path
from ibias.store.reader import open_reader

if TYPE_CHECKING:
    import duckdb
    from rich.console import Console
    from rich.table import Table

#: The columns of the status table, during and after a run.
COLUMNS = ("model", "done/total", "failed", "req/s", "retries", "errors", "cost $", "ETA")


def status_report(store: Path) -> dict[str, Any]:
    """The status of `store`: progress, drift and, during a run, the run's live figures."""
    return _report(store, None)[0]


def status_with_batches(store: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`status_report` and the store's batches (runner/batch/status.py `batches_report`), read
    in one session: opening the store (or asking the run) once instead of twice is a good part
    of what `ibias status` costs. Should the store be held by a run that serves no reads yet,
    the batches are asked for apart, as `batches_report` alone would."""
    batches: list[dict[str, Any]] = []
    report, read = _report(store, batches)
    if not read:
        from ibias.runner.batch.status import batches_report

        return report, batches_report(store)
    return report, batches


def _report(store: Path, batches: list[dict[str, Any]] | None) -> tuple[dict[str, Any], bool]:
    """`status_report`, and whether the store's snapshot was read (False while a run holds
    the store and serves no reads yet); with `batches`, the store's batches are put in that
    list, from the same snapshot."""
    who = holder(store)
    live = read_status(status_path(store))
    if who is not None:
        report: dict[str, Any] = {"store": shown_path(store), "running": True, "holder": who}
        report.update(live if live is not None else {"models": []})
        report["drift"] = [
            f"model {m['model_id']} drifted this run: reported as "
            + ", ".join(m["reported_models"])
            for m in report.get("models", [])
            if len(m.get("reported_models", ())) > 1
        ]
        stored = _stored_progress(store, batches)
        if stored is not None:  # the committed snapshot, as after a run
            report.update({k: v for k, v in stored.items() if k not in report})
        return report, stored is not None
    if not store.exists():
        raise StoreAccessError(
            f"no store at {store} (run `ibias run CONFIG` first, or pass --store"
            + (f"; the demo's is {DEMO_STORE}: --store {DEMO_STORE})" if _demo_hint(store) else ")")
        )
    stored = _stored_progress(store, batches)
    assert stored is not None
    fatal = {
        m["model_id"]: m.get("fatal") for m in (live or {}).get("models", []) if m.get("fatal")
    }
    for m in stored["models"]:
        m["fatal"] = fatal.get(m["model_id"])
    return {"store": shown_path(store), "running": False, **stored, "last_status": live}, True


#: Where `make demo` (`ibias demo --out out/demo`) puts its store.
DEMO_STORE = Path("out/demo/demo.duckdb")


def _demo_hint(store: Path) -> bool:
    """Whether a missing default store is likely meant to be the demo's: after `make demo`,
    plain `ibias status` looks for runs/ibias.duckdb, and the demo's store is elsewhere. It is
    named, not silently read: a status of another store than the one asked for would mislead."""
    return store.resolve() == Path(DEFAULT_STORE).resolve() and DEMO_STORE.is_file()


def _stored_progress(
    store: Path, batches: list[dict[str, Any]] | None = None
) -> dict[str, Any] | None:
    """Progress per cell and per model, the last run and what the provider reported, in one
    snapshot through the store's read entry point (served by the run while one holds the
    store); None while a run holds the store but serves no reads yet. The counts are the
    store's kept ones (store/progress_counts.py), read in constant time. With `batches`, the
    store's batches are read in the same snapshot and put in that list."""
    try:
        with open_reader(store, internal=True) as reader:
            # The counts' helpers and model_drift only call execute().fetchall(), which the
            # reader provides.
            con = cast("duckdb.DuckDBPyConnection", reader)
            kept = progress_counts.current(con)  # else rows were edited by hand: recount
            rows = progress_counts.cells(con, kept=kept)
            last = reader.execute(
                "SELECT run_id, started_at FROM runs ORDER BY started_at DESC LIMIT 1"
            ).fetchone()
            attempts = progress_counts.model_attempts(con, kept=kept)
            costs = progress_counts.model_costs(con, kept=kept)
            reported = model_drift(con)
            if batches is not None:
                from ibias.runner.batch.status import batches_of

                batches.extend(batches_of(con))
    except StoreAccessError:
        if holder(store) is None:
            raise
        return None
    by = [
        {"experiment": e, "model_id": m, "language": lang, "planned": p, "done": d, "failed": f}
        for e, m, lang, p, d, f in rows
    ]
    return {
        "last_run_id": last[0] if last else None,
        "last_run_started_at": last[1].isoformat() if last else None,
        "planned": sum(r["planned"] for r in by),
        "done": sum(r["done"] for r in by),
        "failed": sum(r["failed"] for r in by),
        "models": _model_totals(by, attempts, costs),
        "by": by,
        "drift": [d.line() for d in reported if d.drifted],
        "reported_models": [d.to_json() for d in reported],
    }


def verify_counts(store: Path) -> tuple[list[str], int]:
    """The differences between the store's kept progress counts and a recount from its rows
    (store/progress_counts.py `verify`), and how many trials the counts hold. One snapshot,
    read from the file or, while a run holds the store, served by the run."""
    with open_reader(store, internal=True) as reader:
        con = cast("duckdb.DuckDBPyConnection", reader)
        return progress_counts.verify(con), progress_counts.trials_counted(con)


def _model_totals(
    by: list[dict[str, Any]],
    attempts: Mapping[str, tuple[int, int]],
    costs: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """Per model, in the order the cells name them: its cells' trials summed, its retries and
    errors (`attempts`: retries, and retries and give-ups) and what it cost. A stored status
    has no rate and no ETA (only a run's live status does)."""
    models: dict[str, dict[str, Any]] = {}
    for r in by:
        m = models.setdefault(
            r["model_id"], {"model_id": r["model_id"], "total": 0, "done": 0, "failed": 0}
        )
        m["total"] += r["planned"]
        m["done"] += r["done"]
        m["failed"] += r["failed"]
    for model_id, m in models.items():
        retries, errors = attempts.get(model_id, (0, 0))
        m.update(
            retries=retries,
            errors=errors,
            cost_usd=round(float(costs.get(model_id, 0.0)), 6),
            requests_per_s=None,
            eta_s=None,
        )
    return list(models.values())


def _count(n: int) -> str:
    """A count in at most 6 characters: 950, 20,320, 1.2M."""
    if n < 1_000_000:
        return f"{n:,}"
    return f"{n / 1e6:.1f}M" if n < 10**8 else f"{n / 1e6:.0f}M"


def _eta(seconds: float | None, m: dict[str, Any], running: bool) -> str:
    if m.get("fatal"):
        return "stopped"
    if not running:
        return "-"
    if seconds is None:
        return "?"
    return span(seconds)


#: Given up in this order when the terminal is too narrow; the rest always stay.
DROPPABLE = ("retries", "errors", "req/s")


def fitted(body: list[tuple[str, ...]], widest: int, width: int) -> list[str]:
    """The columns that fit `width`: each as wide as its widest cell or header (in terminal
    cells, where a CJK character takes two), 2 between."""
    from rich.cells import cell_len

    need = {col: max([len(col), *(cell_len(r[i]) for r in body)]) for i, col in enumerate(COLUMNS)}
    need["model"] = max(need["model"], widest)
    shown = list(COLUMNS)
    for col in DROPPABLE:
        if sum(need[c] for c in shown) + 2 * (len(shown) - 1) <= width:
            break
        shown.remove(col)
    return shown


def rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    """The table's rows, as text (one per model, in the run's model order)."""
    running = bool(report["running"])
    out: list[tuple[str, ...]] = []
    for m in report.get("models", []):
        rate = m.get("requests_per_s")
        out.append(
            (
                literal(m["model_id"], layout=False),
                f"{_count(m['done'])}/{_count(m['total'])}",
                _count(m["failed"]),
                "-" if rate is None else f"{rate:.1f}",
                _count(m["retries"]),
                _count(m["errors"]),
                f"{m['cost_usd']:.2f}",
                _eta(m.get("eta_s"), m, running),
            )
        )
    return out


def _header(report: dict[str, Any], width: int) -> list[str]:
    """Which store, whether a run holds it and since when: one line, or, when that is wider
    than the terminal, one line per part, so that a long store path is not followed by a
    timestamp broken across lines (`03:34:13` / `UTC`)."""
    from rich.cells import cell_len

    if report["running"]:
        state = report.get("state") or "starting"
        parts = [f"{report['store']}: run in progress", f"{state} ({report['holder']})"]
    else:
        last = report.get("last_run_started_at")
        parts = [f"{report['store']}: no run in progress"]
        if last:
            parts.append(f"last run started {last[:19].replace('T', ' ')} UTC")
    line = (", " if report["running"] else "; ").join(parts)
    return [line] if cell_len(literal(line, layout=False)) <= width else parts


def _table(body: list[tuple[str, ...]], shown: list[str], ids: Mapping[str, str]) -> Table:
    """The status table of `body`'s `shown` columns, each id shown as `ids` says."""
    from rich import box
    from rich.table import Table

    widest = widest_of(ids)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for col in shown:
        table.add_column(
            col,
            justify="left" if col == "model" else "right",
            no_wrap=True,
            min_width=widest if col == "model" else None,
        )
    for r in body:
        cells = (ids[r[0]], *r[1:])
        table.add_row(
            *(text(cell) for col, cell in zip(COLUMNS, cells, strict=True) if col in shown)
        )
    return table


def widest_of(ids: Mapping[str, str]) -> int:
    """The model column's width: its longest id as shown (5, the header's, with none)."""
    from rich.cells import cell_len

    return max((cell_len(v) for v in ids.values()), default=5)


def render_status(report: dict[str, Any], console: Console | None = None) -> None:
    """The status on `console` (default: stdout). Every id, path and message is printed as
    stored (runner/console.py): as `Text`, so even a caller's console with markup on reads no
    `[...]` in it, with control characters escaped and ids kept to one line."""
    from ibias.runner.keyed_ids import keyed, legend

    console = console or terminal()
    for line in _header(report, console.width):
        console.print(text(line, layout=False))
    body = rows(report)
    # Nothing wraps, so no id can spill onto a line that reads as another row
    # (`sim-gemini-2.0-flash` / `-lite`) and no number is cut: the id column is as wide as its
    # longest id, on a terminal too narrow for every column the droppable ones go (`fitted`),
    # and ids still too long for the rest to fit are shown by a key with a legend
    # (runner/keyed_ids.py).
    kept = [c for c in COLUMNS if c not in DROPPABLE]
    ids = keyed(
        [r[0] for r in body],
        lambda keys: natural_width(_table(body, kept, keys)) <= console.width,
    )
    shown = fitted([(ids[r[0]], *r[1:]) for r in body], widest_of(ids), console.width)
    console.print(_table(body, shown, ids))
    for line in legend(ids):
        console.print(text(line, layout=False))
    for line in report.get("drift", []):
        console.print(text(f"drift: {line}", layout=False))
    for m in report.get("models", []):  # a live status only (runner/status.py pacing_note)
        if m.get("pacing"):
            console.print(text(f"{m['model_id']}: {m['pacing']}", layout=False))
    if report["running"]:
        return
    console.print(
        f"planned {report['planned']:,}, done {report['done']:,}, failed {report['failed']:,}"
    )
    prints = [
        f"{m['model_id']} {m['n_fingerprints']}"
        for m in report.get("reported_models", [])
        if m["n_fingerprints"]
    ]
    if prints:  # listed, not alarmed on: they vary with the provider's backend
        console.print(
            text(
                "system fingerprints per model (vary by backend): " + ", ".join(prints),
                layout=False,
            )
        )
    last = report.get("last_status") or {}
    if last.get("state") == "failed" and last.get("error"):
        console.print(text(f"the last run failed: {last['error']}", layout=False))

"""`ibias status`: progress from the store's `progress` view, served by the run while one holds
the store (with the run's rates and ETA from its status file), else read from the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ibias.runner.status import read_status, status_path
from ibias.store.db import StoreError
from ibias.store.lock import holder
from ibias.store.reader import open_reader


def status_report(store: Path) -> dict[str, Any]:
    who = holder(store)
    live = read_status(status_path(store))
    if who is not None:
        report: dict[str, Any] = {"store": str(store), "running": True, "holder": who}
        report.update(live if live is not None else {"models": []})
        stored = _stored_progress(store)
        if stored is not None:  # the committed snapshot, as after a run
            report.update({k: v for k, v in stored.items() if k not in report})
        return report
    if not store.exists():
        raise StoreError(f"no store at {store} (run `ibias run CONFIG` first, or pass --store)")
    stored = _stored_progress(store)
    assert stored is not None
    return {"store": str(store), "running": False, **stored, "last_status": live}


def _stored_progress(store: Path) -> dict[str, Any] | None:
    """Progress per cell and the last run, in one snapshot through the store's read entry
    point (served by the run while one holds the store); None while a run holds the store
    but serves no reads yet."""
    try:
        with open_reader(store) as reader:
            rows = reader.execute(
                "SELECT experiment, model_id, language, planned, done, failed FROM progress"
            ).fetchall()
            last = reader.execute(
                "SELECT run_id, started_at FROM runs ORDER BY started_at DESC LIMIT 1"
            ).fetchone()
    except StoreError:
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
        "by": by,
    }


def render_status(report: dict[str, Any]) -> None:
    console = Console()
    if report["running"]:
        state = report.get("state") or "starting"
        console.print(f"{report['store']}: run in progress, {state} ({report['holder']})")
        table = Table()
        for col in (
            "model",
            "done/total",
            "failed",
            "req/s",
            "retries",
            "errors",
            "cost $",
            "ETA s",
        ):
            table.add_column(col)
        for m in report.get("models", []):
            table.add_row(
                m["model_id"] + (" (stopped)" if m.get("fatal") else ""),
                f"{m['done']:,}/{m['total']:,}",
                str(m["failed"]),
                f"{m['requests_per_s']:.1f}",
                str(m["retries"]),
                str(m["errors"]),
                f"{m['cost_usd']:.4f}",
                "?" if m["eta_s"] is None else f"{m['eta_s']:.0f}",
            )
        console.print(table)
        return
    table = Table(title=f"{report['store']} (no run in progress)")
    for col in ("experiment", "model", "language", "planned", "done", "failed"):
        table.add_column(col)
    for r in report["by"]:
        table.add_row(
            r["experiment"],
            r["model_id"],
            r["language"] or "-",
            f"{r['planned']:,}",
            f"{r['done']:,}",
            f"{r['failed']:,}",
        )
    console.print(table)
    console.print(
        f"planned {report['planned']:,}, done {report['done']:,}, failed {report['failed']:,}"
    )

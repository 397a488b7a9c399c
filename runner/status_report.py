"""`ibias status`: progress from the status file while a run holds the store, else from the
store's `progress` view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ibias.runner.status import read_status, status_path
from ibias.store.db import StoreError, open_store
from ibias.store.drift import model_drift
from ibias.store.lock import holder


def status_report(store: Path) -> dict[str, Any]:
    who = holder(store)
    live = read_status(status_path(store))
    if who is not None:
        if live is None:
            return {"store": str(store), "running": True, "holder": who, "models": []}
        drift = [
            f"model {m['model_id']} drifted this run: reported as "
            + ", ".join(m["reported_models"])
            for m in live.get("models", [])
            if len(m.get("reported_models", ())) > 1
        ]
        return {"store": str(store), "running": True, "holder": who, **live, "drift": drift}
    if not store.exists():
        raise StoreError(f"no store at {store} (run `ibias run CONFIG` first, or pass --store)")
    con = open_store(store, read_only=True)
    try:
        rows = con.execute(
            "SELECT experiment, model_id, language, planned, done, failed FROM progress"
        ).fetchall()
        last = con.execute(
            "SELECT run_id, started_at FROM runs ORDER BY started_at DESC LIMIT 1"
        ).fetchone()
        reported = model_drift(con)
    finally:
        con.close()
    by = [
        {"experiment": e, "model_id": m, "language": lang, "planned": p, "done": d, "failed": f}
        for e, m, lang, p, d, f in rows
    ]
    return {
        "store": str(store),
        "running": False,
        "last_run_id": last[0] if last else None,
        "last_run_started_at": last[1].isoformat() if last else None,
        "planned": sum(r["planned"] for r in by),
        "done": sum(r["done"] for r in by),
        "failed": sum(r["failed"] for r in by),
        "by": by,
        "last_status": live,
        "drift": [d.line() for d in reported if d.drifted],
        "reported_models": [d.to_json() for d in reported],
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
        for line in report.get("drift", []):
            console.print(f"[yellow]drift:[/yellow] {escape(line)}", highlight=False)
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
    for line in report.get("drift", []):
        console.print(f"[yellow]drift:[/yellow] {escape(line)}", highlight=False)
    prints = [
        f"{m['model_id']} {m['n_fingerprints']}"
        for m in report.get("reported_models", [])
        if m["n_fingerprints"]
    ]
    if prints:  # listed, not alarmed on: they vary with the provider's backend
        console.print("system fingerprints per model (vary by backend): " + ", ".join(prints))
    last = report.get("last_status") or {}
    if last.get("state") == "failed" and last.get("error"):
        console.print(f"the last run failed: {last['error']}", markup=False)

"""`ibias plan`: what a config will request, what is already done, and what it may cost.

Needs no keys and sends nothing. The cost estimate is an upper bound: prompt tokens estimated
at four characters a token plus the full `max_tokens` for every remaining completion.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ibias.runner.config import Config
from ibias.runner.plan import build_experiments, trials_for
from ibias.runner.scheduler import estimate_tokens
from ibias.store.db import open_store
from ibias.store.lock import holder


def _done_keys(store: Path) -> set[str]:
    if not store.exists():
        return set()
    who = holder(store)
    if who is not None:
        from ibias.store.db import StoreError

        raise StoreError(f"store {store} is busy: held by {who}; `ibias status` shows progress")
    con = open_store(store, read_only=True)
    try:
        return {r[0] for r in con.execute("SELECT DISTINCT trial_key FROM responses").fetchall()}
    finally:
        con.close()


def plan_report(config: Config, store: Path) -> dict[str, Any]:
    done = _done_keys(store)
    experiments = build_experiments(config)
    models = {m.id: m for m in config.models}
    cells: dict[tuple[str, str, str], list[int]] = {}
    cost = 0.0
    for trial in trials_for(experiments, config.models):
        cell = cells.setdefault((trial.experiment, trial.model_id, trial.language), [0, 0])
        cell[0] += 1
        if trial.trial_key in done:
            cell[1] += 1
            continue
        m = models[trial.model_id]
        est = estimate_tokens(trial, m.max_tokens)
        cost += m.cost(est - m.max_tokens, m.max_tokens)
    by: list[dict[str, Any]] = [
        {"experiment": e, "model_id": mid, "language": lang, "trials": n, "done": d}
        for (e, mid, lang), (n, d) in sorted(cells.items())
    ]
    total = sum(c["trials"] for c in by)
    done_n = sum(c["done"] for c in by)
    return {
        "total": total,
        "done": done_n,
        "remaining": total - done_n,
        "by": by,
        "estimated_cost_usd": round(cost, 4),
    }


def render_plan(report: dict[str, Any]) -> None:
    table = Table(title="ibias plan")
    for col in ("experiment", "model", "language", "trials", "done"):
        table.add_column(col, justify="right" if col in ("trials", "done") else "left")
    for c in report["by"]:
        table.add_row(
            c["experiment"],
            c["model_id"],
            c["language"] or "-",
            f"{c['trials']:,}",
            f"{c['done']:,}",
        )
    console = Console()
    console.print(table)
    console.print(
        f"total {report['total']:,}, done {report['done']:,}, remaining {report['remaining']:,}; "
        f"estimated cost at most ${report['estimated_cost_usd']:.2f}"
    )

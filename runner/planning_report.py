"""`ibias plan`: what a config will request, what is already done, and what it may cost.

Needs no keys and sends nothing. The cost estimate is an upper bound: prompt tokens estimated
at four characters a token plus the full `max_tokens` for every remaining completion.

When the store holds the completed plan of this config (same plan hash, see runner/plan.py),
the report is read from it with a few queries; otherwise the trials are generated (keys only
when the store has responses to compare them with).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ibias.runner.config import Config
from ibias.runner.plan import build_experiments, plan_hash, plan_inputs, store_files, trials_for
from ibias.store.reader import open_reader

if TYPE_CHECKING:
    import duckdb


def plan_report(config: Config, store: Path) -> dict[str, Any]:
    experiments = build_experiments(config)
    if not store.exists():
        return _generated(config, experiments, set())
    # One snapshot through the store's read entry point, served by the run if one holds it.
    # store/plans.py's helpers only call execute(...).fetchall()/fetchone(), which it offers.
    with open_reader(store) as reader:
        con = cast("duckdb.DuckDBPyConnection", reader)
        stored = _from_store(con, config, experiments, store)
        if stored is not None:
            return stored
        done = {r[0] for r in con.execute("SELECT DISTINCT trial_key FROM responses").fetchall()}
    return _generated(config, experiments, done)


def _from_store(
    con: duckdb.DuckDBPyConnection, config: Config, experiments: list[Any], store: Path
) -> dict[str, Any] | None:
    """The report from the store's copy of the plan, or None if it has no complete copy."""
    from ibias.store.plans import find_plan, plan_cells, remaining_prompt_chars

    inputs = plan_inputs(config, experiments, exclude=store_files(store))
    plan = find_plan(con, plan_hash(inputs))
    if plan is None or not plan.complete:
        return None
    by = [
        {
            "experiment": c.experiment,
            "model_id": c.model_id,
            "language": c.language,
            "trials": c.trials,
            "done": c.done,
        }
        for c in plan_cells(con, plan)
    ]
    left = remaining_prompt_chars(con, plan)
    cost = 0.0
    for m in config.models:
        n, prompt_tokens = left.get(m.id, (0, 0))
        cost += (prompt_tokens * m.price_input + n * m.max_tokens * m.price_output) / 1e6
    return _report(by, cost)


def _generated(config: Config, experiments: list[Any], done: set[str]) -> dict[str, Any]:
    """The report from generating the plan (and its keys, to tell what `done` holds)."""
    from ibias.runner.scheduler import estimate_tokens

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
    return _report(by, cost)


def _report(by: list[dict[str, Any]], cost: float) -> dict[str, Any]:
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
    from rich.console import Console
    from rich.table import Table

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

"""`ibias plan`: what a config will request, what is already done, what it may cost and how
long it must take at least.

Needs no keys and sends nothing. Per model, over the trials still to request:

- `estimated_tokens`: prompt tokens estimated at four characters a token (as the scheduler's
  pre-request estimate counts them) plus the full `max_tokens` of every completion, so it and
  `estimated_cost_usd` are upper bounds of what the model can be asked for;
- `min_seconds`: a lower bound of the wall-clock time the model's configured limits allow.
  At `rpm` R the limiter starts one request every 60/R s (runner/scheduling/limits.py: a bucket of
  one request), so n requests take at least (n - 1) * 60 / R s. At `tpm` T, the tokens that must
  pass take at least tokens * 60 / T s, less the one-second token bucket; the tokens counted
  are the prompt estimate plus one completion token per trial (the least a reply can use), so
  this part is as good as the four-characters estimate. Concurrency alone gives no bound
  without a latency, so it is reported as `min_seconds_per_latency_s`: n / concurrency, the
  seconds each second of reply latency adds at the least. With neither rpm nor tpm configured
  the time is unknown (None), and the report says so.

The total time is the slowest model's, since models run side by side.

Beside the bound, a typical cost: `typical_cost_usd`, the trials left of each kind priced at
the mean prompt and completion tokens the store's replies of that model and kind reported
(what a reply really uses, often a third of the bound: `max_tokens` is rarely all spent). A
model with trials left of a kind it has no reply of yet has `typical_cost_usd` None, and the
text says only the bound is known; the total is None unless every model's is known.

When the store holds the completed plan of this config (same plan hash, see
runner/execution/plan.py), the report is read from it with a few queries; otherwise the trials are
generated (keys only when the store has responses to compare them with).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ibias.prompts.registry import DEFAULT_DESIGN, kinds
from ibias.runner.config import Config, ModelConfig
from ibias.runner.console import literal, natural_width, terminal, text
from ibias.runner.execution.plan import (
    build_experiments,
    plan_hash,
    plan_inputs,
    store_files,
    trials_for,
)
from ibias.store.reader import open_reader

if TYPE_CHECKING:
    import duckdb
    import polars as pl
    from rich.console import Console
    from rich.table import Table

    from ibias.store.plans import StoredPlan


@dataclass(frozen=True)
class Remaining:
    """What is left of one model's plan: trials, and their estimated prompt tokens."""

    trials: int
    prompt_tokens: int


#: `.by`'s columns and types (Polars), in `plan --json`'s order.
BY_SCHEMA = {
    "experiment": "String",
    "design": "String",
    "model_id": "String",
    "language": "String",
    "trials": "Int64",
    "done": "Int64",
}
#: `.models`' columns and types.
MODELS_SCHEMA = {
    "model_id": "String",
    "remaining": "Int64",
    "estimated_tokens": "Int64",
    "estimated_cost_usd": "Float64",
    "typical_cost_usd": "Float64",
    "rpm": "Int64",
    "tpm": "Int64",
    "max_concurrency": "Int64",
    "min_seconds": "Float64",
    "limited_by": "String",
    "min_seconds_per_latency_s": "Float64",
}


@dataclass(frozen=True)
class PlanReport:
    """`ibias.plan()`'s answer: `plan --json` (`to_dict()`), with its two lists as Polars
    frames (`.by` per experiment x design x model x language, `.models` per model) and its
    totals as attributes, so a notebook gets what the command prints without parsing it."""

    report: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """Exactly `ibias plan --json`'s object (a copy)."""
        return copy.deepcopy(self.report)

    @property
    def by(self) -> pl.DataFrame:
        return _frame(self.report["by"], BY_SCHEMA)

    @property
    def models(self) -> pl.DataFrame:
        return _frame(self.report["models"], MODELS_SCHEMA)

    @property
    def store(self) -> str:
        return str(self.report["store"])

    @property
    def total(self) -> int:
        return int(self.report["total"])

    @property
    def done(self) -> int:
        return int(self.report["done"])

    @property
    def remaining(self) -> int:
        return int(self.report["remaining"])

    @property
    def estimated_cost_usd(self) -> float:
        return float(self.report["estimated_cost_usd"])

    @property
    def typical_cost_usd(self) -> float | None:
        value = self.report["typical_cost_usd"]
        return None if value is None else float(value)

    @property
    def min_seconds(self) -> float | None:
        value = self.report["min_seconds"]
        return None if value is None else float(value)

    def __repr__(self) -> str:
        typical = self.typical_cost_usd
        return (
            f"PlanReport(store={self.store!r}, total={self.total:,}, done={self.done:,}, "
            f"remaining={self.remaining:,}, cost at most ${self.estimated_cost_usd:,.2f}, "
            + ("typical unknown" if typical is None else f"typical ${typical:,.2f}")
            + ")"
        )


def _frame(rows: list[dict[str, Any]], schema: dict[str, str]) -> pl.DataFrame:
    import polars as pl

    types = {name: getattr(pl, kind) for name, kind in schema.items()}
    return pl.DataFrame([{k: r.get(k) for k in schema} for r in rows], schema=types)


@dataclass(frozen=True)
class MeanTokens:
    """What the store's replies of one model and trial kind used on average."""

    prompt: float
    completion: float
    replies: int


def plan_report(config: Config, store: Path) -> dict[str, Any]:
    experiments = build_experiments(config)
    if not store.exists():
        return _generated(config, experiments, set())
    # One snapshot through the store's read entry point, served by the run if one holds it.
    # store/plans.py's helpers only call execute(...).fetchall()/fetchone(), which it offers.
    with open_reader(store, internal=True) as reader:
        con = cast("duckdb.DuckDBPyConnection", reader)
        means = mean_tokens(con)
        stored = _from_store(con, config, experiments, store, means)
        if stored is not None:
            return stored
        done = {r[0] for r in con.execute("SELECT DISTINCT trial_key FROM responses").fetchall()}
    return _generated(config, experiments, done, means)


def plan_json(config: Config, store: Path, *, batch: bool = False) -> dict[str, Any]:
    """What `ibias plan --json` prints and `ibias.plan().to_dict()` returns: one builder, so
    the two cannot drift apart (the store's absolute path, the counts, each model's mode)."""
    from ibias.runner.batch.plan import with_modes
    from ibias.runner.config import absolute_path
    from ibias.store.lock import shown_path

    report = {"store": shown_path(absolute_path(store)), **plan_report(config, store)}
    return with_modes(config, report, forced=batch)


def mean_tokens(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], MeanTokens]:
    """Mean reported tokens per (model id, experiment) over the replies that reported both
    counts (a reply without usage says nothing about what one uses)."""
    rows = con.execute(
        "SELECT t.model_id, t.experiment, avg(r.prompt_tokens), avg(r.completion_tokens), "
        "count(*) FROM responses r JOIN trial_rows t ON t.trial_key = r.trial_key "
        "WHERE r.prompt_tokens IS NOT NULL AND r.completion_tokens IS NOT NULL GROUP BY ALL"
    ).fetchall()
    return {(m, e): MeanTokens(float(p), float(c), int(n)) for m, e, p, c, n in rows}


def _design_sql() -> str:
    """The design of a trial of experiment `t.experiment` whose spec's item names
    `s.design`, as the views show it: NULL for kinds without designs."""
    with_designs = [k.name.replace("'", "''") for k in kinds() if k.designs]
    if not with_designs:
        return "NULL"
    names = ", ".join(f"'{n}'" for n in with_designs)
    return f"CASE WHEN t.experiment IN ({names}) THEN coalesce(s.design, '{DEFAULT_DESIGN}') END"


def _cells(con: duckdb.DuckDBPyConnection, plan: StoredPlan) -> list[dict[str, Any]]:
    """Trials and those done per cell, from the trial rows; the item's design is read once
    per spec from `trial_specs` (the texts themselves never join the trial rows)."""
    where, params = plan.membership()
    rows = con.execute(
        f"SELECT t.experiment, {_design_sql()} AS design, t.model_id, t.language, count(*), "
        "count(*) FILTER (WHERE t.trial_key IN (SELECT trial_key FROM responses)) "
        "FROM trial_rows t JOIN (SELECT spec_key, item ->> 'design' AS design FROM trial_specs) s "
        f"ON s.spec_key = t.spec_key WHERE {where} GROUP BY ALL ORDER BY ALL",
        params,
    ).fetchall()
    return [
        {"experiment": e, "design": d, "model_id": m, "language": lang, "trials": n, "done": k}
        for e, d, m, lang, n, k in rows
    ]


def _from_store(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    experiments: list[Any],
    store: Path,
    means: dict[tuple[str, str], MeanTokens],
) -> dict[str, Any] | None:
    """The report from the store's copy of the plan, or None if it has no complete copy."""
    from ibias.store.plans import find_plan, remaining_prompt_chars

    inputs = plan_inputs(config, experiments, exclude=store_files(store))
    plan = find_plan(con, plan_hash(inputs))
    if plan is None or not plan.complete:
        return None
    left = {m: Remaining(n, tokens) for m, (n, tokens) in remaining_prompt_chars(con, plan).items()}
    return _report(config, _cells(con, plan), left, means)


def _generated(
    config: Config,
    experiments: list[Any],
    done: set[str],
    means: dict[tuple[str, str], MeanTokens] | None = None,
) -> dict[str, Any]:
    """The report from generating the plan (and its keys, to tell what `done` holds)."""
    from ibias.runner.scheduling.scheduler import estimate_tokens

    models = {m.id: m for m in config.models}
    designed = {k.name for k in kinds() if k.designs}
    cells: dict[tuple[str, str | None, str, str], list[int]] = {}
    left: dict[str, list[int]] = {}
    for trial in trials_for(experiments, config.models):
        design = (
            str(trial.item.get("design", DEFAULT_DESIGN)) if trial.experiment in designed else None
        )
        key = (trial.experiment, design, trial.model_id, trial.language)
        cell = cells.setdefault(key, [0, 0])
        cell[0] += 1
        if trial.trial_key in done:
            cell[1] += 1
            continue
        m = models[trial.model_id]
        n_tokens = left.setdefault(m.id, [0, 0])
        n_tokens[0] += 1
        n_tokens[1] += estimate_tokens(trial, m.max_tokens) - m.max_tokens
    by: list[dict[str, Any]] = [
        {"experiment": e, "design": d, "model_id": mid, "language": lang, "trials": n, "done": k}
        for (e, d, mid, lang), (n, k) in sorted(cells.items(), key=lambda kv: _sort_key(kv[0]))
    ]
    return _report(config, by, {m: Remaining(n, t) for m, (n, t) in left.items()}, means or {})


def _sort_key(key: tuple[str, str | None, str, str]) -> tuple[str, str, str, str]:
    e, d, m, lang = key
    return (e, d or "", m, lang)


def model_estimate(m: ModelConfig, left: Remaining) -> dict[str, Any]:
    """One model's tokens, cost and least time for the trials it has left (module docstring)."""
    n = left.trials
    tokens = left.prompt_tokens + n * m.max_tokens
    cost = m.cost(left.prompt_tokens, n * m.max_tokens)
    bounds: dict[str, float] = {}
    if m.rpm is not None:
        bounds["rpm"] = max(n - 1, 0) * 60.0 / m.rpm
    if m.tpm is not None:
        bounds["tpm"] = max((left.prompt_tokens + n) * 60.0 / m.tpm - 1.0, 0.0)
    limited_by = max(bounds, key=lambda k: bounds[k]) if bounds else None
    return {
        "model_id": m.id,
        "remaining": n,
        "estimated_tokens": tokens,
        "estimated_cost_usd": round(cost, 4),
        "rpm": m.rpm,
        "tpm": m.tpm,
        "max_concurrency": m.max_concurrency,
        "min_seconds": None if limited_by is None else round(bounds[limited_by], 1),
        "limited_by": limited_by,
        "min_seconds_per_latency_s": round(n / m.max_concurrency, 1),
    }


def typical_cost(
    m: ModelConfig, by: list[dict[str, Any]], means: dict[tuple[str, str], MeanTokens]
) -> float | None:
    """The trials `m` has left, each kind at its replies' mean tokens; None when a kind with
    trials left has no reply of `m` to take a mean from."""
    left: dict[str, int] = {}
    for c in by:
        if c["model_id"] == m.id and c["trials"] > c["done"]:
            left[c["experiment"]] = left.get(c["experiment"], 0) + c["trials"] - c["done"]
    cost = 0.0
    for experiment, n in left.items():
        mean = means.get((m.id, experiment))
        if mean is None:
            return None
        cost += m.cost(round(n * mean.prompt), round(n * mean.completion))
    return round(cost, 4)


def _report(
    config: Config,
    by: list[dict[str, Any]],
    left: dict[str, Remaining],
    means: dict[tuple[str, str], MeanTokens],
) -> dict[str, Any]:
    total = sum(c["trials"] for c in by)
    done_n = sum(c["done"] for c in by)
    models = [model_estimate(m, left.get(m.id, Remaining(0, 0))) for m in config.models]
    for m, estimate in zip(config.models, models, strict=True):
        estimate["typical_cost_usd"] = typical_cost(m, by, means)
    typical = [e["typical_cost_usd"] for e in models]
    timed = [m for m in models if m["min_seconds"] is not None]
    # Models with nothing left cannot make the run slower, known limits or not.
    unknown = [m["model_id"] for m in models if m["min_seconds"] is None and m["remaining"]]
    slowest = max(timed, key=lambda m: m["min_seconds"], default=None)
    return {
        "total": total,
        "done": done_n,
        "remaining": total - done_n,
        "by": by,
        "models": models,
        "estimated_tokens": sum(m["estimated_tokens"] for m in models),
        "estimated_cost_usd": round(sum(m["estimated_cost_usd"] for m in models), 4),
        "typical_cost_usd": (
            None if any(t is None for t in typical) else round(sum(t or 0.0 for t in typical), 4)
        ),
        "min_seconds": None if slowest is None else slowest["min_seconds"],
        "slowest_model": None if slowest is None else slowest["model_id"],
        "time_unknown_models": unknown,
    }


def duration(seconds: float) -> str:
    """Seconds as a person reads a duration: '11 h 06 min', '4 min 10 s', '12 s'."""
    s = math.ceil(seconds)
    if s >= 86_400:
        d, rem = divmod(s, 86_400)
        return f"{d} d {rem // 3600:02d} h"
    if s >= 3600:
        h, rem = divmod(s, 3600)
        return f"{h} h {rem // 60:02d} min"
    if s >= 60:
        mins, sec = divmod(s, 60)
        return f"{mins} min {sec:02d} s"
    return f"{s} s"


def time_sentence(m: dict[str, Any]) -> str:
    """The plain-words time of one model: 'at least 11 h 06 min (30 rpm)', or unknown."""
    if not m["remaining"]:
        return "nothing left"
    if m.get("mode") == "batch":
        return "within the provider's 24 h batch window"
    if m["min_seconds"] is None:
        return "unknown (no rpm or tpm configured)"
    which = m["limited_by"]
    return f"{duration(m['min_seconds'])} ({m[which]:,} {which})"


def render_plan(report: dict[str, Any], console: Console | None = None) -> None:
    """Print the plan report for a terminal: trials by cell, then per model what is left and
    its bounds, then the totals and the sentences that explain them. Ids, names and lines are
    printed as they are (runner/console.py): as `Text`, never markup, control characters
    escaped, ids on one line.

    Names are never cut (two Gemini models must stay apart) nor broken inside a word (issue
    34: at 80 columns `word_association_explicit` came out as `word_association_expli` /
    `cit`, doubling 14 rows). On a terminal too narrow for one row a cell, the cells are
    grouped under their experiment (`_grouped_cells`); the per-model table drops its tokens,
    then its count left; and ids still too long for the numbers beside them are shown in both
    tables by one key each, with a legend (runner/keyed_ids.py). Only a name wider than the
    terminal by itself is folded, as nothing else could show it."""
    from ibias.runner.keyed_ids import every_key, keyed, legend

    console = console or terminal()
    width = console.width
    per_model = _model_cells(report)
    columns = _model_columns(per_model, width)
    ids = [_id(m["model_id"]) for m in report["models"]]
    ids += [i for i in dict.fromkeys(_id(c["model_id"]) for c in report["by"]) if i not in ids]

    def models_fit(shown: Mapping[str, str]) -> bool:
        return natural_width(_models_drawn(per_model, columns, shown)) <= width

    def cells_fit(shown: Mapping[str, str]) -> bool:
        return _fitting_cells(report, shown, width) is not None

    # A table that no keying makes fit (its headings or numbers alone are too wide) does not
    # ask for keys: they would hide ids and gain nothing.
    narrowest = every_key(ids)
    asking = [f for f in (models_fit, cells_fit) if f(narrowest)]
    shown = keyed(ids, lambda shown: all(f(shown) for f in asking))

    console.print(_fitting_cells(report, shown, width) or _grouped_cells(report, shown, fold=True))
    console.print(_models_drawn(per_model, columns, shown))
    for line in legend(shown):
        console.print(text(line, layout=False))
    console.print(
        f"total {report['total']:,}, done {report['done']:,}, remaining {report['remaining']:,}; "
        f"estimated cost at most ${report['estimated_cost_usd']:,.2f}"
    )
    console.print(text(typical_sentence(report), layout=False))
    console.print(text(_total_time(report), layout=False))
    for line in report.get("batch_lines", ()):  # runner/batch/plan.py
        console.print(text(line, layout=False))


def _id(model_id: str) -> str:
    """A model id as its column shows it: one line, control characters escaped."""
    return literal(model_id, layout=False)


def _fitting_cells(report: dict[str, Any], shown: Mapping[str, str], width: int) -> Table | None:
    """The cells' table in the first layout that fits `width` without wrapping: one row a
    cell, else grouped by experiment; None if neither fits."""

    for table in (_flat_cells(report, shown), _grouped_cells(report, shown, fold=False)):
        if natural_width(table) <= width:
            return table
    return None


def _widest(shown: Mapping[str, str]) -> int:
    from rich.cells import cell_len

    return max((cell_len(v) for v in shown.values()), default=5)


def _cell_counts(c: dict[str, Any]) -> tuple[str, str]:
    return f"{c['trials']:,}", f"{c['done']:,}"


def _flat_cells(report: dict[str, Any], shown: Mapping[str, str]) -> Table:
    """One row per cell: experiment, design, model, language, trials, done."""
    from rich import box
    from rich.table import Table

    table = Table(title="ibias plan", box=box.SIMPLE_HEAD, show_edge=False)
    for col in ("experiment", "design", "model", "lang", "trials", "done"):
        table.add_column(
            col,
            justify="right" if col in ("trials", "done") else "left",
            no_wrap=True,
            min_width=_widest(shown) if col == "model" else None,
        )
    for c in report["by"]:
        table.add_row(
            text(c["experiment"], layout=False),
            text(c["design"] or "-", layout=False),
            text(shown[_id(c["model_id"])]),
            text(c["language"] or "-", layout=False),
            *_cell_counts(c),
        )
    return table


def _grouped_cells(report: dict[str, Any], shown: Mapping[str, str], *, fold: bool) -> Table:
    """The cells on a terminal too narrow for one row each: the experiment and its design as
    a heading row, its cells below it, indented, with model, language and counts. The first
    column needs only the longest of the names, not their sum, so every name stays whole at
    80 columns. With `fold` that column folds (for a name wider than the terminal)."""
    from rich import box
    from rich.table import Table

    groups: dict[str, list[dict[str, Any]]] = {}
    for c in report["by"]:
        groups.setdefault(_heading(c), []).append(c)
    table = Table(title="ibias plan", box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column(
        "experiment, design\n  model",
        no_wrap=not fold,
        overflow="fold",
        min_width=None if fold else _widest(shown) + 2,
    )
    table.add_column("lang", no_wrap=True)
    table.add_column("trials", justify="right", no_wrap=True)
    table.add_column("done", justify="right", no_wrap=True)
    for name, cells in groups.items():
        table.add_row(text(name, "bold", layout=False), "", "", "")
        for c in cells:
            table.add_row(
                text("  " + shown[_id(c["model_id"])]),
                text(c["language"] or "-", layout=False),
                *_cell_counts(c),
            )
    return table


def _heading(cell: dict[str, Any]) -> str:
    """A group's heading: the experiment, and its design when the kind has designs."""
    experiment = literal(cell["experiment"], layout=False)
    if cell["design"] is None:
        return experiment
    return f"{experiment}, design {literal(cell['design'], layout=False)}"


def _model_cells(report: dict[str, Any]) -> list[dict[str, str]]:
    """Per model, the per-model table's cells as text."""
    return [
        {
            "model": _id(m["model_id"]),
            "left": f"{m['remaining']:,}",
            "tokens": f"{m['estimated_tokens']:,}",
            "cost $": f"{m['estimated_cost_usd']:,.2f}",
            "typical $": "?" if m["typical_cost_usd"] is None else f"{m['typical_cost_usd']:,.2f}",
            # The reason for an unknown time is the total line's ("no rpm or tpm configured").
            "time": "unknown" if m["min_seconds"] is None and m["remaining"] else time_sentence(m),
        }
        for m in report["models"]
    ]


def _model_columns(cells: list[dict[str, str]], width: int) -> list[str]:
    """The per-model table's columns that fit `width`. Nothing wraps (a folded number or time
    reads wrongly): on a narrower terminal the tokens column (in --json, and the bound's
    basis) gives way first, then the count left."""
    from rich.cells import cell_len

    columns = ["model", "left", "tokens", "cost $", "typical $", "time"]
    for droppable in ("tokens", "left"):
        need = sum(max(len(col), *(cell_len(c[col]) for c in cells)) for col in columns)
        if need + 3 * (len(columns) - 1) <= width:
            break
        columns.remove(droppable)
    return columns


def _models_drawn(
    cells: list[dict[str, str]], columns: list[str], shown: Mapping[str, str]
) -> Table:
    """Per model, the trials left with their token, cost and time bounds: `cells`' `columns`,
    each id shown as `shown` says."""
    from rich import box
    from rich.table import Table

    models = Table(
        title="per model, for the trials left (tokens and cost at most, time at least)",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    for col in columns:
        models.add_column(
            col,
            justify="left" if col in ("model", "time") else "right",
            no_wrap=True,
            min_width=_widest(shown) if col == "model" else None,
        )
    for c in cells:
        models.add_row(*(text(shown[c[col]] if col == "model" else c[col]) for col in columns))
    return models


def typical_sentence(report: dict[str, Any]) -> str:
    """The typical cost beside the bound, or why there is none."""
    if report["typical_cost_usd"] is not None:
        return (
            f"typical cost about ${report['typical_cost_usd']:,.2f} (the trials left at the mean "
            "tokens the store's replies used, per model and kind)"
        )
    unknown = [m["model_id"] for m in report["models"] if m["typical_cost_usd"] is None]
    if len(unknown) == len(report["models"]):
        return "typical cost: only the bound is known (no stored replies to take mean tokens from)"
    return (
        "typical cost: only the bound is known (no stored replies to take mean tokens from for "
        + ", ".join(unknown)
        + ")"
    )


def _total_time(report: dict[str, Any]) -> str:
    unknown = report["time_unknown_models"]
    named = ", ".join(unknown)
    if report["min_seconds"] is None:
        if not unknown:
            return "time: nothing left to request"
        return f"time: unknown (no rpm or tpm configured for {named})"
    line = (
        f"time: at least {duration(report['min_seconds'])}, set by {report['slowest_model']} "
        "(models run side by side)"
    )
    if unknown:
        line += f"; unknown for {named} (no rpm or tpm configured)"
    return line

"""Which models of a store were answered by ibias's simulator, and how the report says so.

A simulated reply carries the biases the simulator planted, not any real model's: a table,
figure or sentence that shows its numbers without saying so invites the reader to take them for
a measurement (issue 34: a rehearsal of the paper's config was reported as "the paper's
model"). A store knows its simulated models three ways, strongest first:

- **rehearsal**: the store carries the mark `rehearsal` (`ibias run CONFIG --rehearse`,
  `ibias.store.marks.is_rehearsal`): every model in it was simulated, whatever its config says;
- **simulator provider**: a run's stored config (`runs.config`) gives the model
  `provider = "simulator"` (any run: one simulated reply is enough to mark the model);
- **simulator endpoint**: the model's stored replies say they come from ibias's simulator. The
  simulator reports every answer's model as a dated snapshot with the suffix `-sim-YYYY-MM`
  (runner/simulator/drift.py: the OpenAI and Anthropic `model`, Gemini's `modelVersion`, online
  and batch alike), which the providers store in `responses.provider_model`; no real provider
  names a snapshot so. It catches an `openai`, `anthropic` or `gemini` model pointed at
  `ibias simulate` by its `base_url`.

Only ibias's own queries run here, over `runs` and the distinct (model, reported model) pairs
of `responses`: cheap on a store of a million replies.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

REHEARSAL = "rehearsal"
SIMULATOR_PROVIDER = "simulator provider"
SIMULATOR_ENDPOINT = "simulator endpoint"

REHEARSAL_MARK = "rehearsal: simulated replies"
"""What the report writes beside a model of a rehearsal store."""
SIMULATED_MARK = "simulated"
"""... and beside any other simulated model."""

#: A model name as ibias's simulator reports it (runner/simulator/drift.py's suffixes).
SIMULATOR_REPORTED = re.compile(r"-sim-\d{4}-\d{2}$")

#: The separator of `analyze --by-reported-model`'s labels, "id @ reported model" (load.py).
_REPORTED_SEPARATOR = " @ "


class _Rows(Protocol):
    def fetchall(self) -> list[Any]: ...


class Queryable(Protocol):
    """A DuckDB connection, or a `StoreReader` (store/reader.py): both `execute(sql)` and
    return something with `fetchall()`."""

    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...


def _rehearsal(con: Queryable) -> bool:
    try:
        from ibias.store.marks import is_rehearsal
    except ImportError:  # a tree from before the store's marks (migration 015)
        return False
    return is_rehearsal(con)


def _configs(con: Queryable) -> list[str]:
    return [str(row[0]) for row in con.execute("SELECT config FROM runs").fetchall()]


def _reported(con: Queryable) -> list[tuple[str, str | None]]:
    rows = con.execute(
        "SELECT DISTINCT model_id, provider_model FROM responses ORDER BY ALL"
    ).fetchall()
    return [(str(m), None if r is None else str(r)) for m, r in rows]


def _present(con: Queryable) -> list[str]:
    rows = con.execute(
        "SELECT DISTINCT model_id FROM trials UNION SELECT DISTINCT model_id FROM responses"
    ).fetchall()
    return sorted(str(row[0]) for row in rows)


def simulated_models(con: Queryable) -> dict[str, str]:
    """model_id -> why it counts as simulated (`REHEARSAL`, `SIMULATOR_PROVIDER` or
    `SIMULATOR_ENDPOINT`), for every simulated model with trials or replies in the store
    behind `con` (a DuckDB connection or a `StoreReader`); models not simulated are absent."""
    return simulated_from(
        models=_present(con),
        configs=_configs(con),
        reported=_reported(con),
        rehearsal=_rehearsal(con),
    )


def simulator_models(config_text: str) -> set[str]:
    """The model ids a config gives `provider = "simulator"` (none if it does not parse)."""
    try:
        config = tomllib.loads(config_text)
    except tomllib.TOMLDecodeError:
        return set()
    blocks = config.get("models")
    if not isinstance(blocks, list):
        return set()
    return {
        str(b["id"])
        for b in blocks
        if isinstance(b, dict) and b.get("provider") == "simulator" and isinstance(b.get("id"), str)
    }


def simulated_from(
    *,
    models: Iterable[str],
    configs: Iterable[str],
    reported: Iterable[tuple[str, str | None]],
    rehearsal: bool,
) -> dict[str, str]:
    """`simulated_models` from what was read: the store's model ids, its runs' config texts,
    its (model_id, reported model) pairs and whether it carries the rehearsal mark."""
    present = list(dict.fromkeys(models))
    reported = list(reported)
    present += [m for m, _ in reported if m not in present]
    if rehearsal:
        return dict.fromkeys(present, REHEARSAL)
    out: dict[str, str] = {}
    by_provider: set[str] = set()
    for text in configs:
        by_provider |= simulator_models(text)
    for model_id in present:
        if model_id in by_provider:
            out[model_id] = SIMULATOR_PROVIDER
    for model_id, name in reported:
        if name is not None and SIMULATOR_REPORTED.search(name):
            out.setdefault(model_id, SIMULATOR_ENDPOINT)
    return out


def reason_for(model_id: str, simulated: Mapping[str, str]) -> str | None:
    """Why `model_id` is simulated, or None; also for `--by-reported-model` labels
    ("id @ reported model"), by their id or by the reported name."""
    if model_id in simulated:
        return simulated[model_id]
    base, sep, name = model_id.partition(_REPORTED_SEPARATOR)
    if sep:
        if base in simulated:
            return simulated[base]
        if SIMULATOR_REPORTED.search(name):
            return SIMULATOR_ENDPOINT
    return None


def mark(reason: str | None) -> str | None:
    """The words the report writes beside a model simulated for `reason` (None: not simulated)."""
    if reason is None:
        return None
    return REHEARSAL_MARK if reason == REHEARSAL else SIMULATED_MARK


def mark_of(model_id: str, simulated: Mapping[str, str]) -> str | None:
    """`mark(reason_for(model_id, simulated))`."""
    return mark(reason_for(model_id, simulated))


def shown(model_id: str, simulated: Mapping[str, str]) -> str:
    """`model_id` as a label that cannot be mistaken for a real model: "id (simulated)"."""
    found = mark_of(model_id, simulated)
    return model_id if found is None else f"{model_id} ({found})"


def title_mark(models: Iterable[str], simulated: Mapping[str, str]) -> str | None:
    """What a figure or table title adds for the simulated ones among `models`: the rehearsal
    mark when any is a rehearsal's, "simulated" when all are, "simulated: a, b" when some are;
    None when none is."""
    present = list(dict.fromkeys(models))
    reasons = {m: reason_for(m, simulated) for m in present}
    found = [m for m, r in reasons.items() if r is not None]
    if not found:
        return None
    if any(r == REHEARSAL for r in reasons.values()):
        return REHEARSAL_MARK
    if len(found) == len(present):
        return SIMULATED_MARK
    return f"{SIMULATED_MARK}: {', '.join(found)}"


def marked_title(title: str, models: Iterable[str], simulated: Mapping[str, str]) -> str:
    """`title` with `title_mark` after a dash, or as it is."""
    found = title_mark(models, simulated)
    return title if found is None else f"{title} — {found}"


def simulated_headline(simulated: Mapping[str, str], models: Sequence[str]) -> str | None:
    """The report's headline sentence about simulated replies (plain text, no HTML), or None
    when no model of the store is simulated. `models` are the store's models in report order."""
    found = [m for m in models if reason_for(m, simulated) is not None]
    found += sorted(m for m in simulated if m not in found and m not in models)
    if not found:
        return None
    if any(reason_for(m, simulated) == REHEARSAL for m in found):
        return (
            "Rehearsal: simulated replies. Every reply in this store was written by ibias's "
            "simulator (ibias run --rehearse), not by any real model: its numbers show what the "
            "analysis recovers from the biases the simulator planted, and measure no model."
        )
    n_all = len(dict.fromkeys([*models, *found]))
    which = "Every model" if len(found) == n_all else ", ".join(found)
    verb = "was" if len(found) == n_all or len(found) == 1 else "were"
    return (
        f"Simulated: {which} {verb} answered by ibias's simulator, not by a real model; "
        "their numbers show the biases the simulator planted and measure no model."
    )

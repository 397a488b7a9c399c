"""Parsed results: insert-only tables keyed by (trial_key, parser_version).

Parsing is Python (prompts/*/parse.py) and reads only stored responses and trial items, so a
better parser needs no new requests: bump its version and `parse_pending` fills the new rows;
the views pick the newest version. Each experiment registers how to turn (item, content) into a
row of its derived table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from ibias.store.writer import Landed


def reply_text(content: str | None, finish_reason: str | None, refusal: str | None) -> str | None:
    """What a parser sees: None when the provider withheld the answer (a content filter with
    no text, or an OpenAI `refusal` with no content), so parsers count it as refused rather
    than unparseable. `_REPLY_TEXT_SQL` is the same rule for stored rows."""
    if content:
        return content
    if finish_reason == "content_filter" or refusal:
        return None
    return content


_REPLY_TEXT_SQL = (
    "CASE WHEN coalesce(r.content, '') = '' AND (r.finish_reason = 'content_filter' "
    "OR r.refusal IS NOT NULL) THEN NULL ELSE r.content END"
)


@dataclass(frozen=True)
class DerivedParser:
    """How one experiment's responses become rows of one derived table."""

    experiment: str
    table: str
    version: int
    columns: Mapping[str, pa.DataType]
    parse: Callable[[Mapping[str, Any], str | None], Mapping[str, Any]]


def _registry() -> dict[str, DerivedParser]:
    """Parsers by experiment name; experiments without one (ad-hoc prompts) have no table."""
    out: dict[str, DerivedParser] = {}
    try:
        from ibias.store.parsers import PARSERS
    except ImportError:  # pragma: no cover - only while an experiment module is absent
        return out
    for p in PARSERS:
        out[p.experiment] = p
    return out


_PARSERS: dict[str, DerivedParser] | None = None


def parsers() -> dict[str, DerivedParser]:
    global _PARSERS
    if _PARSERS is None:
        _PARSERS = _registry()
    return _PARSERS


def _insert(con: duckdb.DuckDBPyConnection, p: DerivedParser, rows: list[dict[str, Any]]) -> int:
    if not rows:
        return 0
    names = ["trial_key", "parser_version", *p.columns]
    types = {"trial_key": pa.string(), "parser_version": pa.int32(), **p.columns}
    batch = pa.table({n: pa.array([r[n] for r in rows], type=types[n]) for n in names})
    cols = ", ".join(names)
    con.register("_derived_batch", batch)
    try:
        con.execute(
            f"INSERT INTO {p.table} ({cols}) SELECT {cols} FROM _derived_batch b WHERE NOT EXISTS "
            f"(SELECT 1 FROM {p.table} d WHERE d.trial_key = b.trial_key "
            f"AND d.parser_version = b.parser_version)"
        ).fetchall()
    finally:
        con.unregister("_derived_batch")
    return len(rows)


def _row(
    p: DerivedParser, trial_key: str, item: Mapping[str, Any], content: str | None
) -> dict[str, Any]:
    parsed = dict(p.parse(item, content))
    parsed["trial_key"] = trial_key
    parsed["parser_version"] = p.version
    return parsed


def parse_landed(con: duckdb.DuckDBPyConnection, landed: Sequence[Landed]) -> None:
    """Parse responses as they land (called by the writer inside its transaction)."""
    by_exp: dict[str, list[dict[str, Any]]] = {}
    registry = parsers()
    for item in landed:
        p = registry.get(item.experiment)
        if p is not None:
            by_exp.setdefault(item.experiment, []).append(
                _row(p, item.trial_key, item.item, item.content)
            )
    for exp, rows in by_exp.items():
        _insert(con, registry[exp], rows)


def parse_pending(con: duckdb.DuckDBPyConnection, batch_size: int = 20000) -> int:
    """Parse every stored response that lacks a row at its parser's current version."""
    total = 0
    for p in parsers().values():
        reader = con.sql(
            f"SELECT r.trial_key, t.item, {_REPLY_TEXT_SQL} AS content FROM responses r "
            f"JOIN (SELECT DISTINCT ON (trial_key) trial_key, item FROM trials "
            f"WHERE experiment = ?) t ON t.trial_key = r.trial_key "
            f"WHERE NOT EXISTS (SELECT 1 FROM {p.table} d WHERE d.trial_key = r.trial_key "
            f"AND d.parser_version = ?)",
            params=[p.experiment, p.version],
        ).to_arrow_reader(batch_size)
        pending: list[tuple[str, str, str | None]] = []
        for rb in reader:
            data = rb.to_pydict()
            pending.extend(zip(data["trial_key"], data["item"], data["content"], strict=True))
        for start in range(0, len(pending), batch_size):
            chunk = pending[start : start + batch_size]
            rows = [_row(p, k, orjson.loads(i), c) for k, i, c in chunk]
            total += _insert(con, p, rows)
    return total

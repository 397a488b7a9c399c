"""Parsed results: insert-only tables keyed by (trial_key, parser_version).

Parsing is Python (prompts/*/parse.py) and reads only stored responses and trial items, so a
better parser needs no new requests: bump its version and `parse_pending` fills the new rows;
the views pick the newest version. Each registered kind declares how to turn (item, content)
into a row of its derived table (prompts/registry.py). Parsers get the kind's typed item,
decoded once per reply straight from the stored JSON text by msgspec (no dict in between).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import duckdb
import msgspec
import orjson
import pyarrow as pa

from ibias.prompts.registry import (
    Item,
    Parser,
    ReadsLogprobs,
    TrialKind,
    failed_plugins,
    kinds,
    require_kinds,
)
from ibias.store.arrow_scan import registered
from ibias.store.experiments import arrow_schema, sql_identifier
from ibias.store.writer import Landed


def reply_text(content: str | None, finish_reason: str | None, refusal: str | None) -> str | None:
    """What a parser sees: None only when the provider withheld the answer (a content filter
    with no text, or a `refusal` with no content: store/outcome.py's "refused"), so parsers
    count it as refused; an empty reply (no text for any other reason, content NULL or "") is
    "", which parsers count as unparseable, never as refused. `_REPLY_TEXT_SQL` is the same
    rule for stored rows."""
    if content:
        return content
    if finish_reason == "content_filter" or refusal is not None:
        return None
    return ""


_REPLY_TEXT_SQL = (
    "CASE WHEN coalesce(r.content, '') = '' AND (r.finish_reason = 'content_filter' "
    "OR r.refusal IS NOT NULL) THEN NULL ELSE coalesce(r.content, '') END"
)


def parsed_kinds() -> dict[str, TrialKind]:
    """Registered kinds that have a parser, by `trials.experiment` value (ad-hoc prompts have
    none and so no derived table)."""
    return {k.name: k for k in kinds() if k.parser is not None}


def _insert(con: duckdb.DuckDBPyConnection, p: Parser, rows: list[dict[str, Any]]) -> int:
    if not rows:
        return 0
    types = arrow_schema(p)
    names = list(types)
    batch = pa.table({n: pa.array([r[n] for r in rows], type=types[n]) for n in names})
    cols = ", ".join(sql_identifier(n) for n in names)
    table = sql_identifier(p.table)
    with registered(con, "_derived_batch", batch):
        con.execute(
            f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _derived_batch b WHERE NOT EXISTS "
            f"(SELECT 1 FROM {table} d WHERE d.trial_key = b.trial_key "
            f"AND d.parser_version = b.parser_version)"
        ).fetchall()
    return len(rows)


def _row(
    p: Parser,
    trial_key: str,
    item: Item,
    content: str | None,
    logprobs: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    reads = p.capability(ReadsLogprobs)
    if reads is not None:
        assert logprobs is not None
        parsed = dict(reads.parse(item, content, logprobs))
    else:
        parsed = dict(p.parse(item, content))
    parsed["trial_key"] = trial_key
    parsed["parser_version"] = p.version
    return parsed


def parse_landed(con: duckdb.DuckDBPyConnection, landed: Sequence[Landed]) -> None:
    """Parse responses as they land (called by the writer inside its transaction)."""
    by_exp: dict[str, list[dict[str, Any]]] = {}
    registry = parsed_kinds()
    for reply in landed:
        k = registry.get(reply.experiment)
        if k is None:
            continue
        item = msgspec.convert(reply.item, k.item)
        for parser in k.parsers:
            if parser.reads_logprobs and reply.logprobs is None:
                continue  # the model did not ask for logprobs: no row
            by_exp.setdefault(parser.table, []).append(
                _row(parser, reply.trial_key, item, reply.content, reply.logprobs)
            )
    tables = {p.table: p for k in registry.values() for p in k.parsers}
    for table, rows in by_exp.items():
        _insert(con, tables[table], rows)


def parse_pending(con: duckdb.DuckDBPyConnection, batch_size: int = 20000) -> int:
    """Parse every stored response that lacks a row at its parsers' current versions; returns
    how many responses the main parsers parsed (extra parsers' rows are not counted).

    A store holding trials of a kind no loaded unit provides while a plugin failed to load is
    refused (`PluginError` naming the plugin): its replies would silently stay unparsed."""
    if failed_plugins():
        stored = con.execute("SELECT DISTINCT experiment FROM trials").fetchall()
        require_kinds([str(r[0]) for r in stored])
    total = 0
    for kind in parsed_kinds().values():
        for index, p in enumerate(kind.parsers):
            parsed = _parse_pending(con, kind, p, batch_size)
            total += parsed if index == 0 else 0
    return total


def _parse_pending(
    con: duckdb.DuckDBPyConnection, kind: TrialKind, p: Parser, batch_size: int
) -> int:
    if p.reads_logprobs:
        return _parse_pending_logprobs(con, kind, p)
    if not _any_pending(con, kind, p):
        return 0
    total = 0
    reader = con.sql(
        f"SELECT r.trial_key, t.item, {_REPLY_TEXT_SQL} AS content FROM responses r "
        f"JOIN (SELECT DISTINCT ON (trial_key) trial_key, item FROM trials "
        f"WHERE experiment = ?) t ON t.trial_key = r.trial_key "
        f"WHERE NOT EXISTS (SELECT 1 FROM {sql_identifier(p.table)} d "
        "WHERE d.trial_key = r.trial_key AND d.parser_version = ?)",
        params=[kind.name, p.version],
    ).to_arrow_reader(batch_size)
    pending: list[tuple[str, str, str | None]] = []
    for rb in reader:
        data = rb.to_pydict()
        pending.extend(zip(data["trial_key"], data["item"], data["content"], strict=True))
    decode = kind.item_decoder()
    for start in range(0, len(pending), batch_size):
        chunk = pending[start : start + batch_size]
        rows = [_row(p, key, decode(item), text) for key, item, text in chunk]
        total += _insert(con, p, rows)
    return total


def _any_pending(con: duckdb.DuckDBPyConnection, kind: TrialKind, p: Parser) -> bool:
    """Whether some response of the kind lacks a row at the parser's version, from the keys
    alone. Analysis asks before every analysis, and after a run nothing is pending: reading
    each trial's item to find that out held the whole store's items in DuckDB's memory (over
    400 MB at the paper's size, ten times that at ten times its grid)."""
    row = con.execute(
        "SELECT EXISTS (SELECT 1 FROM responses r WHERE r.trial_key IN "
        "(SELECT trial_key FROM trial_rows WHERE experiment = ?) "
        f"AND NOT EXISTS (SELECT 1 FROM {sql_identifier(p.table)} d "
        "WHERE d.trial_key = r.trial_key AND d.parser_version = ?))",
        [kind.name, p.version],
    ).fetchall()  # all: a result left open would be cancelled by the next statement's
    return bool(row and row[0][0])


#: Replies whose token logprobs are read at a time. One reply's logprobs may be ~100 KB of
#: JSON (20 alternatives for each of ~60 tokens), so the text parsers' way (read every pending
#: reply, then parse) would hold a whole store's logprobs in memory: these are read per batch.
LOGPROBS_BATCH = 500


def _parse_pending_logprobs(con: duckdb.DuckDBPyConnection, kind: TrialKind, p: Parser) -> int:
    """`_parse_pending` for a parser of token logprobs: the replies that have logprobs and no
    row yet, their keys first (small), then the replies `LOGPROBS_BATCH` at a time."""
    keys = [
        str(k)
        for (k,) in con.execute(
            f"SELECT r.trial_key FROM responses r WHERE r.logprobs IS NOT NULL "
            f"AND r.trial_key IN (SELECT trial_key FROM trials WHERE experiment = ?) "
            f"AND NOT EXISTS (SELECT 1 FROM {sql_identifier(p.table)} d "
            "WHERE d.trial_key = r.trial_key AND d.parser_version = ?) ORDER BY r.trial_key",
            [kind.name, p.version],
        ).fetchall()
    ]
    total = 0
    for start in range(0, len(keys), LOGPROBS_BATCH):
        batch = pa.table({"trial_key": keys[start : start + LOGPROBS_BATCH]})
        with registered(con, "_logprobs_keys", batch):
            fetched = con.execute(
                f"SELECT r.trial_key, t.item, {_REPLY_TEXT_SQL} AS content, "
                f"r.logprobs::VARCHAR FROM _logprobs_keys k "
                f"JOIN responses r ON r.trial_key = k.trial_key "
                f"JOIN (SELECT DISTINCT ON (t.trial_key) t.trial_key, t.item FROM trials t "
                f"JOIN _logprobs_keys k2 ON k2.trial_key = t.trial_key "
                f"WHERE t.experiment = ?) t ON t.trial_key = r.trial_key",
                [kind.name],
            ).fetchall()
        decode = kind.item_decoder()
        rows = [
            _row(p, key, decode(item), text, orjson.loads(tokens))
            for key, item, text, tokens in fetched
        ]
        total += _insert(con, p, rows)
    return total

"""The `replies` view: every answered trial with its prompt, its reply and what the parser
made of it, across experiments, for people who read results in SQL.

The parse of each kind lives in its own derived table with its own columns
(prompts/registry.py), so the view is generated from the registered kinds: each parser table
contributes its newest row per trial as one JSON object of its columns (`parsed`), and the
rest is the core tables. It is (re)created with the experiments' views when a store is opened
writable (store/experiments.py), so a store written by an ibias that knew other experiments
shows their parse as NULL, never an error.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ibias.prompts.registry import DEFAULT_DESIGN, TrialKind
from ibias.store.experiments import NEWEST_PARSE, sql_identifier, sql_literal

VIEW = "replies"


def replies_view_ddl(kinds: Sequence[TrialKind], present: Collection[str] | None = None) -> str:
    """`CREATE OR REPLACE VIEW replies` over the main parser tables of `kinds` (those in
    `present`, the store's tables, when given)."""
    tables: dict[str, tuple[str, ...]] = {}
    for kind in kinds:
        parser = kind.parser
        if parser is not None and (present is None or parser.table in present):
            tables.setdefault(parser.table, tuple(c.name for c in parser.columns))
    parts = []
    for table, columns in sorted(tables.items()):
        fields = ", ".join(f"{sql_literal(c)}, {sql_identifier(c)}" for c in columns)
        parts.append(
            f"SELECT trial_key, parser_version, json_object({fields}) AS parsed "
            f"FROM {sql_identifier(table)} {NEWEST_PARSE}"
        )
    if not parts:
        parts.append(
            "SELECT NULL::VARCHAR AS trial_key, NULL::INTEGER AS parser_version, "
            "NULL::JSON AS parsed WHERE false"
        )
    designed = sorted(k.name for k in kinds if k.designs)
    design = (
        f"CASE WHEN t.experiment IN ({', '.join(sql_literal(n) for n in designed)}) THEN "
        f"coalesce(t.item ->> 'design', {sql_literal(DEFAULT_DESIGN)}) END"
        if designed
        else "NULL::VARCHAR"
    )
    union = "\n    UNION ALL\n    ".join(parts)
    return (
        f"CREATE OR REPLACE VIEW {sql_identifier(VIEW)} AS\nWITH p AS (\n    {union}\n)\n"
        "SELECT\n    t.trial_key,\n    t.experiment,\n"
        f"    {design} AS design,\n"
        "    t.model_id,\n    t.language,\n    t.coords,\n    t.replicate,\n"
        "    t.messages ->> '$[#-1].content' AS prompt,\n"
        "    r.content AS reply,\n    r.finish_reason,\n    r.refusal,\n"
        "    p.parsed,\n    p.parser_version,\n    r.received_at\n"
        "FROM trials t\nJOIN responses r ON r.trial_key = t.trial_key\n"
        "LEFT JOIN p ON p.trial_key = t.trial_key"
    )


__all__ = ["VIEW", "replies_view_ddl"]

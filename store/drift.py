"""Drift: which model names and versions a provider reported for each configured model.

Providers update models behind a stable name (`gpt-4o` answered by one dated snapshot, then
another); a sweep that spans the change measures two models under one id. Each response records
what the provider said answered it (`responses.provider_model`: OpenAI's `model`, Gemini's
`modelVersion`, Anthropic's `model`), so a change within a store is found here and said by
`ibias status` and the report; `ibias analyze --by-reported-model` then splits the tables.

System fingerprints are listed, never alarmed on: OpenAI documents that they change with the
backend configuration serving a request, so several per model are normal.

What was reported is kept in `reported_counts` (migration 017): per model, reported name and
fingerprint, the responses and when the first and last arrived. The writer adds each batch of
new responses to it in the transaction that stores them (`responses_added`), so `status` reads
a few rows instead of grouping every response; counts found stale (rows edited by hand, seen by
`progress_counts.current`) are bypassed for a recount from the rows, and `rebuild_sql` and
`verify` rebuild and check them (store/progress_counts.py's `rebuild` and `verify` call them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "MAX_FINGERPRINTS",
    "RECOUNT_SQL",
    "ModelDrift",
    "Reported",
    "model_drift",
    "responses_added",
    "verify",
]

#: Fingerprints listed per model (the count is always complete).
MAX_FINGERPRINTS = 10


@dataclass(frozen=True)
class Reported:
    """One name a provider reported for a model, with when and how often."""

    name: str
    responses: int
    first: datetime
    last: datetime


@dataclass(frozen=True)
class ModelDrift:
    """What was reported for one configured model, in order of first appearance."""

    model_id: str
    reported: tuple[Reported, ...]
    n_fingerprints: int
    fingerprints: tuple[str, ...]

    @property
    def drifted(self) -> bool:
        """More than one reported name or version: the model changed within the store."""
        return len(self.reported) > 1

    def line(self) -> str:
        """One line saying what changed (for a drifted model)."""
        parts = [
            f"{r.name} ({r.responses:,} responses, {r.first.astimezone(UTC):%Y-%m-%d %H:%M}"
            f" to {r.last.astimezone(UTC):%Y-%m-%d %H:%M} UTC)"
            for r in self.reported
        ]
        return f"model {self.model_id} drifted: reported as " + ", then ".join(parts)

    def to_json(self) -> dict[str, object]:
        return {
            "model_id": self.model_id,
            "drifted": self.drifted,
            "reported": [
                {
                    "name": r.name,
                    "responses": r.responses,
                    "first": r.first.isoformat(),
                    "last": r.last.isoformat(),
                }
                for r in self.reported
            ],
            "n_fingerprints": self.n_fingerprints,
            "fingerprints": list(self.fingerprints),
        }


#: The columns of `reported_counts`: the group, then what is kept per group.
KEPT_GROUP = ("model_id", "provider_model", "system_fingerprint")
KEPT_MEASURES = ("responses", "first_at", "last_at")

#: `reported_counts` recounted from the responses `{rows}` (migration 017's backfill).
RECOUNT_SQL = """
SELECT model_id, provider_model, system_fingerprint, count(*) AS responses,
    min(received_at) AS first_at, max(received_at) AS last_at
FROM {rows}
WHERE provider_model IS NOT NULL OR system_fingerprint IS NOT NULL
GROUP BY ALL
"""

#: What was reported, from the kept counts and (`_ROWS`) from the rows: the same rows in the
#: same order (the counts' groups refine the names' and fingerprints' groups).
_REPORTED_SQL = """
SELECT model_id, provider_model, sum(responses), min(first_at), max(last_at)
FROM reported_counts WHERE provider_model IS NOT NULL
GROUP BY ALL ORDER BY model_id, min(first_at), provider_model
"""
_FINGERPRINTS_SQL = """
SELECT model_id, system_fingerprint, sum(responses) AS n
FROM reported_counts WHERE system_fingerprint IS NOT NULL
GROUP BY ALL ORDER BY model_id, n DESC, system_fingerprint
"""
_REPORTED_ROWS_SQL = """
SELECT model_id, provider_model, count(*), min(received_at), max(received_at)
FROM responses WHERE provider_model IS NOT NULL
GROUP BY ALL ORDER BY model_id, min(received_at), provider_model
"""
_FINGERPRINTS_ROWS_SQL = """
SELECT model_id, system_fingerprint, count(*) AS n
FROM responses WHERE system_fingerprint IS NOT NULL
GROUP BY ALL ORDER BY model_id, n DESC, system_fingerprint
"""


def model_drift(con: duckdb.DuckDBPyConnection, *, kept: bool | None = None) -> list[ModelDrift]:
    """Per model that has responses naming a model: what was reported, sorted by model id.
    `kept`: read the kept counts (True) or group the responses (False, for counts that are
    not current); None asks `progress_counts.current`. `con` may be a store reader
    (store/reader.py): only `execute(...).fetchall()` is called."""
    if kept is None:
        from ibias.store.progress_counts import current

        kept = current(con)
    reported_sql, prints_sql = (
        (_REPORTED_SQL, _FINGERPRINTS_SQL) if kept else (_REPORTED_ROWS_SQL, _FINGERPRINTS_ROWS_SQL)
    )
    reported: dict[str, list[Reported]] = {}
    for model_id, name, n, first, last in con.execute(reported_sql).fetchall():
        reported.setdefault(model_id, []).append(Reported(name, int(n), first, last))
    prints: dict[str, list[str]] = {}
    for model_id, fingerprint, _n in con.execute(prints_sql).fetchall():
        prints.setdefault(model_id, []).append(fingerprint)
    return [
        ModelDrift(
            model_id=m,
            reported=tuple(reported.get(m, ())),
            n_fingerprints=len(prints.get(m, ())),
            fingerprints=tuple(prints.get(m, ())[:MAX_FINGERPRINTS]),
        )
        for m in sorted(set(reported) | set(prints))
    ]


# ------------------------------------------------------------------ keeping the counts


def responses_added(con: duckdb.DuckDBPyConnection, relation: str) -> None:
    """Add the responses just inserted, visible to `con` as `relation` (with their model,
    reported name, fingerprint and time received), to `reported_counts`, in the caller's
    transaction. A batch names a handful of groups, so the merge touches a few rows."""
    on = " AND ".join(
        ["c.model_id = d.model_id"] + [f"c.{g} IS NOT DISTINCT FROM d.{g}" for g in KEPT_GROUP[1:]]
    )
    names = ", ".join(f"d.{c}" for c in (*KEPT_GROUP, *KEPT_MEASURES))
    con.execute(
        f"MERGE INTO reported_counts c USING ({RECOUNT_SQL.format(rows=relation)}) d ON {on} "
        "WHEN MATCHED THEN UPDATE SET responses = c.responses + d.responses, "
        "first_at = least(c.first_at, d.first_at), last_at = greatest(c.last_at, d.last_at) "
        f"WHEN NOT MATCHED THEN INSERT VALUES ({names})"
    ).fetchall()


def rebuild_sql() -> list[str]:
    """The statements that recount `reported_counts` from the responses (run inside
    `progress_counts.rebuild`'s transaction)."""
    return [
        "DELETE FROM reported_counts",
        f"INSERT INTO reported_counts {RECOUNT_SQL.format(rows='responses')}",
    ]


def verify(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The differences between `reported_counts` and a recount from the responses, one line
    each (empty when they agree)."""
    columns = ", ".join((*KEPT_GROUP, *KEPT_MEASURES))
    kept = _by_group(con.execute(f"SELECT {columns} FROM reported_counts").fetchall())
    recounted = _by_group(con.execute(RECOUNT_SQL.format(rows="responses")).fetchall())
    out: list[str] = []
    for key in sorted(
        set(kept) | set(recounted), key=lambda k: tuple((x is not None, x or "") for x in k)
    ):
        a, b = kept.get(key), recounted.get(key)
        if a != b:
            model_id, name, fingerprint = key
            out.append(
                f"model {model_id}, reported {name or '(none)'}, fingerprint "
                f"{fingerprint or '(none)'}: kept {_shown(a)}, counted {_shown(b)}"
            )
    return out


def _by_group(rows: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """`reported_counts` rows keyed by their group: responses, first and last (a group kept
    twice, which the merge never does, shows as such)."""
    out: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for row in rows:
        key = tuple(row[: len(KEPT_GROUP)])
        out[key] = (TWICE,) if key in out else (int(row[3]), row[4], row[5])
    return out


#: What `verify` shows for a group kept in two rows.
TWICE = "two rows"


def _shown(value: tuple[Any, ...] | None) -> str:
    """A group's kept or counted measures, as a difference line shows them."""
    if value is None:
        return "none"
    if value == (TWICE,):
        return TWICE
    n, first, last = value
    return f"{n} responses, {first} to {last}"

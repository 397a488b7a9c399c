"""Drift: which model names and versions a provider reported for each configured model.

Providers update models behind a stable name (`gpt-4o` answered by one dated snapshot, then
another); a sweep that spans the change measures two models under one id. Each response records
what the provider said answered it (`responses.provider_model`: OpenAI's `model`, Gemini's
`modelVersion`, Anthropic's `model`), so a change within a store is found here and said by
`ibias status` and the report; `ibias analyze --by-reported-model` then splits the tables.

System fingerprints are listed, never alarmed on: OpenAI documents that they change with the
backend configuration serving a request, so several per model are normal.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb

__all__ = ["MAX_FINGERPRINTS", "ModelDrift", "Reported", "model_drift"]

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


_REPORTED_SQL = """
SELECT model_id, provider_model, count(*), min(received_at), max(received_at)
FROM responses WHERE provider_model IS NOT NULL
GROUP BY ALL ORDER BY model_id, min(received_at), provider_model
"""
_FINGERPRINTS_SQL = """
SELECT model_id, system_fingerprint, count(*) AS n
FROM responses WHERE system_fingerprint IS NOT NULL
GROUP BY ALL ORDER BY model_id, n DESC, system_fingerprint
"""


def model_drift(con: duckdb.DuckDBPyConnection) -> list[ModelDrift]:
    """Per model that has responses naming a model: what was reported, sorted by model id."""
    reported: dict[str, list[Reported]] = {}
    for model_id, name, n, first, last in con.execute(_REPORTED_SQL).fetchall():
        reported.setdefault(model_id, []).append(Reported(name, int(n), first, last))
    prints: dict[str, list[str]] = {}
    for model_id, fingerprint, _n in con.execute(_FINGERPRINTS_SQL).fetchall():
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

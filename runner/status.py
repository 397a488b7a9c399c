"""The status file beside the store, so `ibias status` answers while a run holds the store.

DuckDB allows one writing process, so a second process cannot read the store mid-run; the
runner rewrites this small JSON file (atomically: temp file + rename) about once a second.
It holds counters only: never config text, prompts or keys.

Its `state` is `planning` or `running` while a run works and final when it ends: `finished`,
`interrupted`, or `failed` (the store could not be written; `error` says why). A final state is
written even when the run ends by an error, as far as the disk allows: on a full disk the
write itself may fail, and then the previous state is left.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson


@dataclass
class ModelStats:
    """Live counters for one model (mutable state read by progress and the status file)."""

    model_id: str
    total: int = 0
    done: int = 0
    done_before: int = 0
    requests: int = 0
    retries: int = 0
    errors: int = 0
    failed: int = 0
    rate_limited: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    fatal: str | None = None
    finished: bool = False
    first_done_at: float | None = None
    reported: set[str] = field(default_factory=set)
    """The model names and versions the provider reported in this run's replies (drift)."""


def status_path(store: Path) -> Path:
    return store.with_name(store.name + ".status.json")


def rate_and_eta(s: ModelStats, now: float) -> tuple[float, float | None]:
    """Requests completed per second since the first completion, and seconds left."""
    if s.first_done_at is None or s.done < 2:
        return 0.0, None
    elapsed = max(now - s.first_done_at, 1e-6)
    rate = (s.done - 1) / elapsed
    remaining = max(s.total - s.done_before - s.done - s.failed, 0)
    if s.fatal or s.finished:
        return rate, 0.0
    return rate, (remaining / rate if rate > 0 else None)


def snapshot(
    run_id: str,
    state: str,
    started_at: datetime,
    stats: Iterable[ModelStats],
    error: str | None = None,
) -> dict[str, Any]:
    now = time.monotonic()
    models = []
    for s in stats:
        rate, eta = rate_and_eta(s, now)
        models.append(
            {
                "model_id": s.model_id,
                "total": s.total,
                "done": s.done_before + s.done,
                "done_this_run": s.done,
                "failed": s.failed,
                "requests": s.requests,
                "retries": s.retries,
                "errors": s.errors,
                "rate_limited": s.rate_limited,
                "prompt_tokens": s.prompt_tokens,
                "completion_tokens": s.completion_tokens,
                "cost_usd": round(s.cost_usd, 6),
                "requests_per_s": round(rate, 3),
                "eta_s": None if eta is None else round(eta, 1),
                "fatal": s.fatal,
                "reported_models": sorted(s.reported),
            }
        )
    data: dict[str, Any] = {
        "run_id": run_id,
        "pid": os.getpid(),
        "state": state,
        "started_at": started_at.isoformat(),
        "updated_at": datetime.now(UTC).isoformat(),
        "models": models,
    }
    if error is not None:
        data["error"] = error
    return data


def write_status(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)


def try_write_status(path: Path, data: dict[str, Any]) -> bool:
    """`write_status`, best effort; False when the system refused it. The status file is a
    convenience: a full disk must be reported by the store's writer (which names the cause
    and stops the run), not end the run from the status ticker, nor replace the run's own
    error when the final status cannot be written."""
    try:
        write_status(path, data)
    except OSError:
        with contextlib.suppress(OSError):
            path.with_name(path.name + f".{os.getpid()}.tmp").unlink(missing_ok=True)
        return False
    return True


def read_status(path: Path) -> dict[str, Any] | None:
    try:
        data = orjson.loads(path.read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None

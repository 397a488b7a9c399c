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

#: Failed attempts in a row after which a model's last error kind and URL are shown (progress
#: and the status file): a few, so a lone retried error stays quiet but a dead endpoint says
#: why at once (not only a growing `errors` count).
SHOW_FAILING_AFTER = 3


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
    #: What earlier runs of the same plan used (tokens, cost), so the display is cumulative
    #: like done/total; `cost_usd` alone is this run's (what --max-cost limits).
    prompt_tokens_before: int = 0
    completion_tokens_before: int = 0
    cost_usd_before: float = 0.0
    #: Replies of this run whose cost is unknown (a usage count missing or invalid): not in
    #: `cost_usd`; the budget counts each at its request's upper bound
    #: (runner/scheduling/scheduler.py).
    cost_unknown: int = 0
    #: Attempts that failed in a row (reset by any reply), the last one's error kind, and the
    #: endpoint's URL (set at the first error): the progress display names the kind and the
    #: URL after a few failures in a row, so a dead endpoint says why at once.
    failing: int = 0
    last_error_kind: str | None = None
    endpoint: str | None = None
    fatal: str | None = None
    finished: bool = False
    first_done_at: float | None = None
    #: The latest reply's time: a model with nothing left has its rate frozen there while
    #: the others go on, instead of decaying over the rest of the run.
    last_done_at: float | None = None
    reported: set[str] = field(default_factory=set)
    """The model names and versions the provider reported in this run's replies (drift)."""
    #: When the model's work ended (monotonic clock): the rate and ETA freeze there, so an
    #: interrupted run shows the time it still needs instead of a zero.
    ended_at: float | None = None
    #: The model's configured rpm, and the rate it is paced at when that was learnt from 429s
    #: (runner/scheduling/limits.py): below the configured one, the account's real limit is lower.
    configured_rpm: int | None = None
    learnt_rpm: int | None = None

    @property
    def tokens(self) -> int:
        """Tokens used by the plan so far, over this run and earlier ones."""
        return (
            self.prompt_tokens_before
            + self.completion_tokens_before
            + self.prompt_tokens
            + self.completion_tokens
        )

    @property
    def cost(self) -> float:
        """Cost of the plan so far, over this run and earlier ones."""
        return self.cost_usd_before + self.cost_usd

    @property
    def remaining(self) -> int:
        return max(self.total - self.done_before - self.done - self.failed, 0)


def pacing_note(configured_rpm: int | None, learnt_rpm: int | None) -> str | None:
    """What a model paced below its configured rpm is paced at and why; None when it is not
    (no rpm configured, or paced at it). Plain text: shown by progress and `ibias status`."""
    if configured_rpm is None or learnt_rpm is None or learnt_rpm >= configured_rpm:
        return None
    return (
        f"paced at {learnt_rpm:,} rpm, below its configured rpm = {configured_rpm:,}: "
        "429s the configured limit does not explain (the account's real limit is lower)"
    )


def status_path(store: Path) -> Path:
    return store.with_name(store.name + ".status.json")


def span(seconds: float) -> str:
    """An ETA or a span as the progress table, `ibias status` and a run's last lines show it:
    `3h07m` from an hour up, else `4m05s` (whole seconds, cut, never rounded up)."""
    h, rem = divmod(int(seconds), 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"


def rate_and_eta(s: ModelStats, now: float) -> tuple[float, float | None]:
    """Requests completed per second since the first completion, and seconds left.

    Once the model's work has ended both are frozen: a model with nothing left at its last
    reply (its final rate, while other models go on), with an ETA of 0; otherwise at
    `ended_at`, an interrupted model with the time it still needs at its last rate (not a
    zero that would read as "done"), a model stopped by a fatal error with none.
    """
    if s.fatal:
        return _rate(s, s.ended_at if s.ended_at is not None else now), None
    if s.total and s.remaining == 0:  # finished, maybe long before the run: its final rate
        return _rate(s, s.last_done_at if s.last_done_at is not None else now), 0.0
    rate = _rate(s, s.ended_at if s.ended_at is not None else now)
    if rate <= 0:
        return rate, None
    return rate, s.remaining / rate


def _shown_eta(eta: float) -> float:
    """The ETA to a tenth of a second, and never 0 while trials remain: 0 reads as done, and a
    fast model stopped with a few hundred left can be due in a few milliseconds."""
    return round(eta, 1) if eta <= 0 else max(round(eta, 1), 0.1)


def _rate(s: ModelStats, now: float) -> float:
    if s.first_done_at is None or s.done < 2:
        return 0.0
    return (s.done - 1) / max(now - s.first_done_at, 1e-6)


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
                "prompt_tokens": s.prompt_tokens_before + s.prompt_tokens,
                "completion_tokens": s.completion_tokens_before + s.completion_tokens,
                "cost_usd": round(s.cost, 6),
                "cost_usd_this_run": round(s.cost_usd, 6),
                "requests_per_s": round(rate, 3),
                "eta_s": None if eta is None else _shown_eta(eta),
                "fatal": s.fatal,
                "reported_models": sorted(s.reported),
                "cost_unknown": s.cost_unknown,
                "configured_rpm": s.configured_rpm,
                "paced_rpm": s.learnt_rpm,
                "pacing": pacing_note(s.configured_rpm, s.learnt_rpm),
                "last_error": (
                    {"kind": s.last_error_kind, "endpoint": s.endpoint, "in_a_row": s.failing}
                    if s.failing >= SHOW_FAILING_AFTER
                    else None
                ),
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

"""What a run is asked to do (`RunOptions`), what every step of one run shares once its store
is open (`RunContext`), and where its time went (`Clock`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from ibias.runner.batch.run import BatchOptions
from ibias.runner.providers.registry import ProviderFactory
from ibias.runner.providers.retries import Backoff
from ibias.runner.scheduling.stop import Stop
from ibias.runner.status import ModelStats, snapshot, write_status
from ibias.store.memory import MemoryGuard

if TYPE_CHECKING:
    from ibias.runner.execution.rehearsal import Rehearsal


@dataclass(frozen=True)
class RunOptions:
    store: Path
    max_cost: float | None = None
    concurrency: int | None = None
    quiet: bool = False
    #: Seconds in-flight requests get after a stop; None: the config's `[run].grace_s`.
    grace_s: float | None = None
    backoff: Backoff = field(default_factory=Backoff)
    #: Provider batches (`--batch`, `--no-wait`; runner/batch/): None reads each model's
    #: `mode` only (a model with `mode = "batch"` still runs in batch mode).
    batch: BatchOptions | None = None
    #: `--rehearse` (and `--speed`): every model answered by the in-process simulator on its
    #: own protocol, into a store marked a rehearsal's (runner/execution/rehearsal.py); None: a real
    #: run.
    rehearsal: Rehearsal | None = None


@dataclass(frozen=True)
class RunContext:
    """What every step of one run shares, made once the store is open: the caller's options
    and hooks, the store and its memory guard, and the run's identity. Passed whole rather
    than as a dozen arguments, so each step's signature names only what varies between its
    calls (the models, the plan, the budget already spent)."""

    options: RunOptions
    keys: dict[str, str | None]
    say: Callable[[str], None]
    factory: ProviderFactory
    stop: Stop
    con: duckdb.DuckDBPyConnection
    guard: MemoryGuard
    run_id: str
    started_at: datetime
    status_file: Path

    def status(self, state: str, stats: Mapping[str, ModelStats]) -> None:
        """Write the run's status file (what `ibias status` reads) in `state`."""
        write_status(self.status_file, self.snapshot(state, stats))

    def snapshot(self, state: str, stats: Mapping[str, ModelStats]) -> dict[str, Any]:
        """The status file's content in `state`; a rehearsal's says so, with its speed (so
        `ibias status` gives the ETA in real time too)."""
        data = snapshot(self.run_id, state, self.started_at, stats.values())
        if self.options.rehearsal is not None:
            data["rehearsal"] = {"speed": self.options.rehearsal.speed}
        return data


class Clock:
    """Seconds spent in each phase of a run (RunResult.timings)."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = now - self.last
        self.last = now

    def timings(self, *, planned: bool) -> dict[str, float]:
        return {**self.laps, "total": self.last - self.start, "planned": float(planned)}

"""DuckDB's memory, shared by the run's own queries and the readers it serves: the run first.

A run caps DuckDB's memory (runner/execution/run.py) to bound its footprint, and every cursor of the
run's database draws on that one pool: the writer's flush, the model feeders reading what is
left, and the sandboxed queries served to `ibias sql` during the run (store/live.py). Two
things once failed a full run for want of memory:

- the seven feeders of the paper's grid, each running its window query at once on resume
  (each holds a few hash tables of its own, about 24 MB), and
- a reader's large query taking the pool while the writer flushed.

So the run's own reads take turns (`exclusive`, one at a time: each is short, a window of the
plan), and a query of the run that still finds the pool full first asks the readers to give
their memory back (`relieve`: the live server interrupts their queries, which fail alone with
one line) and tries again, a few times with a growing pause. Only a query that fails after that
(a pool too small for the run's own work) raises.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import duckdb

_T = TypeVar("_T")

#: Tries of a query of the run that failed for want of memory (the first included).
OOM_TRIES = 6
#: Pause after the first failure; doubled after each (0.05 ... 1.6 s, 3.15 s in all).
FIRST_PAUSE_S = 0.05


def is_out_of_memory(exc: BaseException) -> bool:
    """DuckDB ran out of its memory, raised as itself or inside another error (a commit whose
    checkpoint could not allocate reports it as a transaction error)."""
    return isinstance(exc, duckdb.OutOfMemoryException) or (
        isinstance(exc, duckdb.Error) and "Out of Memory Error" in str(exc)
    )


class MemoryGuard:
    """Runs the run's own queries: one heavy read at a time, retried after relief on OOM.

    `relieve(n)` is called (on the failing query's thread) before the n-th retry (1, 2, ...);
    it must not wait for the readers it interrupts, and may act harder as `n` grows. `sleep`
    is injectable so tests need no real pauses."""

    def __init__(
        self,
        relieve: Callable[[int], None] | None = None,
        *,
        tries: int = OOM_TRIES,
        first_pause_s: float = FIRST_PAUSE_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.relieve = relieve
        self.tries = tries
        self.first_pause_s = first_pause_s
        self.sleep = sleep
        self._turn = threading.Lock()
        #: How many times a query of the run found the pool full (for tests and the bench).
        self.pressure = 0

    def call(self, query: Callable[[], _T], *, tries: int | None = None) -> _T:
        """`query()`, retried while DuckDB is out of memory (after relief), `tries` times in
        all (default: the guard's)."""
        pause = self.first_pause_s
        tries = self.tries if tries is None else max(1, min(tries, self.tries))
        for attempt in range(1, tries + 1):
            try:
                return query()
            except duckdb.Error as exc:
                if not is_out_of_memory(exc):
                    raise
                self.pressure += 1
                if attempt == tries:
                    raise
                if self.relieve is not None:
                    self.relieve(attempt)
                self.sleep(pause)
                pause *= 2
        raise AssertionError("unreachable")

    def exclusive(self, query: Callable[[], _T]) -> _T:
        """`call(query)` while no other exclusive query of the run runs."""
        with self._turn:
            return self.call(query)

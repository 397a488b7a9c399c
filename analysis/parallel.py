"""Independent tables computed side by side on worker threads, results in the jobs' order.

Each table draws its bootstrap resamples from its own seeded generator (`TableContext.rng`),
so the order in which tables are computed never changes a number: running them at once gives
the same tables as running them one after another. The heavy parts (NumPy's random draws,
gathers and sums, Polars' group-bys and joins) release the GIL, so two threads use both cores
of a two-core machine; at ten times the paper's grid the allocation tables are most of
`analyze`'s time.

Threads, not processes: the tables read the same large frames, which threads share without a
copy. A plain `ThreadPoolExecutor` rather than anyio's threads: `analyze` is synchronous and is
called from notebooks, whose own running event loop `anyio.run` refuses.

Side by side only while it fits: each job may say how much memory it works in (`sizes`, in
bytes), and jobs start while those running together stay within `budget`; one job starts
whenever none runs, however large. A table over the allocation trials of ten times the paper's
grid works in some 300-400 MB, so two at once would take `analyze` past 1 GB: there they run
one after another, each beside the small ones, while at the paper's size they still run two at
a time.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ibias.analysis import memory

T = TypeVar("T")

#: More threads than cores only add contention; more than this gains little for a handful of
#: tables and multiplies the memory of the resamples drawn at once.
MAX_WORKERS = 4
#: The memory the jobs running at once may say they work in, together (`compute_all`).
BUDGET = 512 * 2**20


def workers() -> int:
    """Threads to use: the cores this process may run on, at most `MAX_WORKERS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores))


def compute_all(
    jobs: Mapping[str, Callable[[], T]],
    *,
    threads: int | None = None,
    sizes: Mapping[str, int] | None = None,
    budget: int = BUDGET,
) -> dict[str, T]:
    """Run every job and return its result under its name, in the order of `jobs`.

    Jobs start in their order, each as soon as a thread is free and it fits: the `sizes` (by
    job name, bytes; a job not named works in none) of the jobs running, its own included, at
    most `budget`, or no other job running. A thread whose next job does not fit takes the
    first later one that does. The first job to fail (in the jobs' order) raises its own
    exception, as it would have run alone; on threads the others still run, so no thread
    outlives the call."""
    count = min(workers() if threads is None else threads, len(jobs))
    if count <= 1:
        return {name: _released(job) for name, job in jobs.items()}
    admission = _Admission(list(jobs), dict(sizes or {}), budget)
    results: dict[str, T] = {}
    failures: dict[str, BaseException] = {}

    def work() -> None:
        while (name := admission.next()) is not None:
            try:
                results[name] = _released(jobs[name])
            except BaseException as exc:  # raised below, the first in the jobs' order
                failures[name] = exc
            finally:
                admission.done(name)

    with ThreadPoolExecutor(max_workers=count) as pool:
        for future in [pool.submit(work) for _ in range(count)]:
            future.result()
    for name in jobs:
        if name in failures:
            raise failures[name]
    return {name: results[name] for name in jobs}


def _released(job: Callable[[], T]) -> T:
    """The job's result, once the memory it freed is given back (analysis/memory.py), so the
    next job starts from where this one started."""
    try:
        return job()
    finally:
        memory.release()


class _Admission:
    """Which job a free thread runs next: the first waiting one that fits beside those
    running (`compute_all`); None once none is left."""

    def __init__(self, names: list[str], sizes: dict[str, int], budget: int) -> None:
        self._waiting = names
        self._sizes = sizes
        self._budget = budget
        self._running: dict[str, int] = {}
        self._changed = threading.Condition()

    def _fits(self, name: str) -> bool:
        size = self._sizes.get(name, 0)
        return not self._running or sum(self._running.values()) + size <= self._budget

    def next(self) -> str | None:
        with self._changed:
            while self._waiting:
                found = next((n for n in self._waiting if self._fits(n)), None)
                if found is not None:
                    self._waiting.remove(found)
                    self._running[found] = self._sizes.get(found, 0)
                    return found
                self._changed.wait()
            return None

    def done(self, name: str) -> None:
        with self._changed:
            del self._running[name]
            self._changed.notify_all()

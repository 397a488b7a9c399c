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
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

#: More threads than cores only add contention; more than this gains little for a handful of
#: tables and multiplies the memory of the resamples drawn at once.
MAX_WORKERS = 4


def workers() -> int:
    """Threads to use: the cores this process may run on, at most `MAX_WORKERS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores))


def compute_all(jobs: Mapping[str, Callable[[], T]], *, threads: int | None = None) -> dict[str, T]:
    """Run every job and return its result under its name, in the order of `jobs`.

    The first job to fail (in the jobs' order) raises its own exception, as it would have run
    alone; the others are still waited for, so no thread outlives the call.
    """
    count = workers() if threads is None else threads
    if count <= 1 or len(jobs) <= 1:
        return {name: job() for name, job in jobs.items()}
    with ThreadPoolExecutor(max_workers=min(count, len(jobs))) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        return {name: future.result() for name, future in futures.items()}

"""One model's trials on their way from its feeder (reading the store) to its workers
(requesting them), in plan order."""

from __future__ import annotations

from collections import deque

import anyio

from ibias.runner.scheduling.runtime import Trial


class TrialQueue:
    """One model's trials between its feeder and its workers: a deque the feeder refills a
    batch at a time whenever it falls below `low`. Waiting (workers for items, the feeder for
    space) is on an event made per wait, not per trial, so handing a trial over is one
    `popleft`."""

    def __init__(self, low: int) -> None:
        self.items: deque[Trial] = deque()
        self.low = low
        self.closed = False
        self._items: anyio.Event | None = None
        self._space: anyio.Event | None = None

    async def wait_for_items(self) -> None:
        if self._items is None:
            self._items = anyio.Event()
        await self._items.wait()

    async def wait_for_space(self) -> None:
        if self._space is None:
            self._space = anyio.Event()
        await self._space.wait()

    def wake_workers(self) -> None:
        if self._items is not None:
            self._items.set()
            self._items = None

    def wake_feeder(self) -> None:
        if self._space is not None:
            self._space.set()
            self._space = None

    def close(self) -> None:
        self.closed = True
        self.wake_workers()

"""The concurrency cap of one endpoint: slots for requests in flight, whose number can move
while requests hold them (adaptive concurrency lowers and raises it, runner/scheduling/adaptive.py).

A counter and a FIFO of waiters to which a freed slot is handed directly (no barging), so the
uncontended take is one comparison and no coroutine. A lowered cap is reached as requests
finish: while it is exceeded, the counter is negative and a slot given back is retired
instead of handed on.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib


class Slots:
    """`cap` slots, taken with `take` (or `try_take`) and given back with `give_back`."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        #: Free slots; negative while a lowered cap is still exceeded by the slots held.
        self._free = cap
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def cap(self) -> int:
        return self._cap

    def try_take(self) -> bool:
        """Take a slot if one is free and nobody waits for one (no waiting, no coroutine)."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def take(self) -> None:
        """Wait in FIFO order for a slot handed over by `give_back`. Cancel-safe: a slot
        handed over as the waiter was cancelled is given back."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.give_back()  # the slot was handed over as this task was cancelled
            else:
                waiter.cancel()
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def give_back(self) -> None:
        """Free a slot: retired while the cap is exceeded, else handed to the longest
        waiter, else counted free."""
        if self._free < 0:
            self._free += 1  # retired: the cap was lowered while this slot was held
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes straight to the longest waiter
                return
        self._free += 1

    def set_cap(self, n: int) -> None:
        """Move the cap to `n`: more slots are handed to waiters at once; fewer are retired
        as the slots held are given back."""
        delta, self._cap = n - self._cap, n
        if delta < 0:
            self._free += delta
        for _ in range(delta):
            self.give_back()

"""The gate of an endpoint's rate stage: requests pass the pause and the buckets one task at a
time, in FIFO order (runner/scheduling/limits.py says why). One task holds the gate; the others wait
behind it, each with its token estimate, until the holder admits them or hands the gate on.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

#: What a waiter is given: (tokens paid, admitted at) when the holder admitted it, or None
#: when the gate was handed to it.
Admitted = tuple[float, float] | None


class Gate:
    """Who holds the gate, and who waits for it (oldest first)."""

    def __init__(self) -> None:
        self.held = False
        self.waiters: collections.deque[tuple[asyncio.Future[Admitted], int]] = collections.deque()

    async def wait(self, est_tokens: int, unsent: Callable[[int], None]) -> Admitted:
        """Queue behind the holder: (tokens paid, admission time) when it admitted this
        request, None when the gate was handed to it. Cancel-safe: a cancelled waiter leaves
        the queue, hands on a gate it was just given, and, admitted but never sent, has its
        estimate credited back (`unsent(est_tokens)`)."""
        waiter: asyncio.Future[Admitted] = asyncio.get_running_loop().create_future()
        self.waiters.append((waiter, est_tokens))
        try:
            return await waiter
        except BaseException:
            if not waiter.done():
                waiter.cancel()
            elif not waiter.cancelled():
                given = waiter.result()
                if given is None:
                    self.hand_on()
                else:  # admitted but never sent: its estimate was not consumed
                    unsent(est_tokens)
            raise

    def hand_on(self) -> None:
        """Give the gate to the longest waiter still waiting, or free it."""
        while self.waiters:
            waiter, _ = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.held = False

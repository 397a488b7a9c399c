"""What the simulator's three batch services share: each checks the simulator's key the way its
protocol does online, and each can hold a reply until a test has killed the client (how the
crash tests reach "uploaded but not recorded" deterministically)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, ClassVar

from aiohttp import web

from ibias.runner.simulator.protocol import JSON, Dialect

if TYPE_CHECKING:
    from ibias.runner.simulator.server import Simulator

__all__ = ["Handler", "KeyedService"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class KeyedService:
    #: The protocol whose key check this service uses (its online protocol's).
    protocol: ClassVar[Dialect]

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        #: Set when a held reply is waiting (the test kills the client then).
        self.holding = asyncio.Event()

    def _guard(self, handler: Handler) -> Handler:
        async def checked(request: web.Request) -> web.StreamResponse:
            protocol = self.protocol
            key = self.sim._key
            if key is not None and not protocol.authorized(request, key):
                status, body = protocol.unauthorized()
                return web.Response(status=status, body=body, content_type=JSON)
            return await handler(request)

        return checked

    async def _hold(self, event: asyncio.Event | None) -> None:
        if event is not None:
            self.holding.set()
            await event.wait()

"""What every provider that speaks JSON over HTTP shares: one aiohttp session per endpoint
(keep-alive, a pool sized to the model's concurrency cap, the key only in the session's default
headers), and one POST that turns a transport failure into a classified `ProviderError`.

Each protocol keeps what differs: its URL, its authentication headers, its request body, and
how it classifies and parses the answer.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson

from ibias.runner.providers.base import Provider, ProviderError
from ibias.runner.redact import redact_body, secret_bytes


class HTTPProvider(Provider):
    """A `Provider` that POSTs JSON to `url` through its own session."""

    def __init__(
        self, *, url: str, model: str, api_key: str | None, timeout_s: float, max_connections: int
    ) -> None:
        self.url = url
        self.model = model
        self._api_key = api_key
        self._echoed = secret_bytes(api_key)  # removed from every answer (runner/redact.py)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:  # never show the key, even in a debugger or a log of objects
        return f"{type(self).__name__}(url={self.url!r}, model={self.model!r})"

    @abstractmethod
    def session_headers(self, api_key: str | None) -> dict[str, str]:
        """The headers every request carries, authentication included."""

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=self._max_connections, keepalive_timeout=30, enable_cleanup_closed=True
        )
        self._session = aiohttp.ClientSession(
            headers={"Content-Type": "application/json", **self.session_headers(self._api_key)},
            timeout=self._timeout,
            connector=connector,
            raise_for_status=False,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, payload: Mapping[str, Any]) -> tuple[int, Mapping[str, str], bytes]:
        """(status, headers, body) of one POST; a transport failure (timeout, dropped
        connection, truncated body) is raised as a classified `ProviderError`.

        The headers are aiohttp's own read-only, case-insensitive mapping, handed on as they
        are: most replies' headers are never looked at (limits are read at most once a second
        until a reply announces some), so copying them per request was work for nothing."""
        if self._session is None:
            raise RuntimeError("provider not started")
        try:
            async with self._session.post(self.url, data=orjson.dumps(payload)) as resp:
                body = redact_body(
                    await resp.read(), self._echoed
                )  # a key echoed back is never stored
                return resp.status, resp.headers, body
        except Exception as exc:
            raise ProviderError(self.classify_exception(exc)) from None

"""HTTP for batch APIs: one aiohttp session per model's batch API (the key only in its
default headers), JSON calls that turn failures into `BatchAPIError`s, and result files
streamed line by line, never read whole (a result file can be hundreds of MB)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from ibias.runner.batch.api import BatchAPIError
from ibias.runner.providers.http import display_url
from ibias.runner.providers.retries import loads_json
from ibias.runner.redact import redact_body, secret_bytes

__all__ = ["BatchClient", "Oversized"]

#: Bytes read per chunk of a result file.
_CHUNK = 256 * 1024
#: Bytes kept of each end of a line above the cap: enough for the key the line names (a
#: result line names its request at its start, OpenAI's and Anthropic's, or end, Gemini's).
_EDGE = 2048


@dataclass(frozen=True)
class Oversized:
    """A result line above the model's body cap: its length and its two ends (what names
    its request), never the whole line."""

    size: int
    head: bytes
    tail: bytes

    def key(self, field: str) -> str | None:
        """The top-level string `field` (`custom_id`, `key`) the line's ends name, or None.
        Inside a JSON string a quote is escaped, so reply text cannot pose as the field."""
        pattern = re.compile(rb'"' + re.escape(field.encode()) + rb'"\s*:\s*"([^"\\]{1,256})"')
        found = pattern.search(self.head)
        if found is None:
            matches = pattern.findall(self.tail)
            return matches[-1].decode() if matches else None
        return found.group(1).decode()


class BatchClient:
    """One base URL's batch API; `start()` before use, `close()` after. Paths are joined
    to the base URL; an absolute URL (a `results_url`) is used as it is."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str],
        *,
        timeout_s: float = 600.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = dict(headers)
        self._echoed = secret_bytes(api_key)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}({display_url(self.base_url)!r})"

    def url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else self.base_url + path

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("batch client not started")
        return self._session

    async def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """One JSON call; a failure is a `BatchAPIError` (`retry` when it may pass)."""
        return (await self.call_with_headers(method, path, **kwargs))[0]

    async def call_with_headers(
        self, method: str, path: str, **kwargs: Any
    ) -> tuple[dict[str, Any], Mapping[str, str]]:
        """`call`, with the reply's headers (Google's resumable upload names its URL there)."""
        url = self.url(path)
        try:
            async with self.session.request(method, url, allow_redirects=False, **kwargs) as resp:
                body = redact_body(await resp.read(), self._echoed)
                status = resp.status
                headers: Mapping[str, str] = resp.headers
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise BatchAPIError(
                f"{method} {display_url(url)}: {type(exc).__name__}: {exc}", retry=True
            ) from None
        if status != 200:
            retry = status in (408, 409, 429) or status >= 500
            text = body[:300].decode(errors="replace")
            raise BatchAPIError(
                f"{method} {display_url(url)}: HTTP {status}: {text}",
                status=status,
                retry=retry,
            )
        try:
            data = loads_json(body)  # numbers of any size (runner/providers/retries.py)
        except orjson.JSONDecodeError:
            raise BatchAPIError(
                f"{method} {display_url(url)}: body is not JSON", retry=True
            ) from None
        if not isinstance(data, dict):
            raise BatchAPIError(f"{method} {display_url(url)}: body is not an object", retry=True)
        return data, headers

    async def lines(self, path: str, max_line_bytes: int) -> AsyncIterator[bytes | Oversized]:
        """The lines of a result file, streamed in chunks; a line above `max_line_bytes` (the
        model's body cap) is yielded as `Oversized` (its size and ends), its bytes skipped,
        never held whole."""
        url = self.url(path)
        try:
            async with self.session.get(url, allow_redirects=False) as resp:
                if resp.status != 200:
                    raise BatchAPIError(
                        f"GET {display_url(url)}: HTTP {resp.status}",
                        status=resp.status,
                        retry=resp.status in (408, 409, 429) or resp.status >= 500,
                    )
                pending = bytearray()
                skipping = False
                head = b""
                tail = bytearray()
                size = 0
                async for chunk in resp.content.iter_chunked(_CHUNK):
                    start = 0
                    while True:
                        end = chunk.find(b"\n", start)
                        piece = chunk[start:] if end < 0 else chunk[start:end]
                        if not skipping:
                            pending += piece
                            if len(pending) > max_line_bytes:
                                head, size = bytes(pending[:_EDGE]), len(pending)
                                tail[:] = pending[-_EDGE:]
                                pending.clear()
                                skipping = True
                        else:
                            size += len(piece)
                            tail += piece
                            del tail[:-_EDGE]
                        if end < 0:
                            break
                        if skipping:
                            yield self._oversized(size, head, tail)
                        elif pending.strip():
                            yield redact_body(bytes(pending), self._echoed)
                        pending.clear()
                        skipping = False
                        start = end + 1
                if skipping:
                    yield self._oversized(size, head, tail)
                elif pending.strip():
                    yield redact_body(bytes(pending), self._echoed)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise BatchAPIError(
                f"GET {display_url(url)}: {type(exc).__name__}", retry=True
            ) from None

    def _oversized(self, size: int, head: bytes, tail: bytearray) -> Oversized:
        return Oversized(
            size, redact_body(head, self._echoed), redact_body(bytes(tail), self._echoed)
        )

"""What every provider that speaks JSON over HTTP shares: one aiohttp session per endpoint
(keep-alive, a pool sized to the model's concurrency cap, the key only in the session's default
headers), and one POST that turns a transport failure into a classified `AttemptError`.

Each protocol keeps what differs: its URL, its authentication headers, its request body, and
how it classifies and parses the answer.

Two things no answer may do, whatever the protocol:

* **be larger than the body cap** (`MAX_BODY_BYTES`, 16 MiB by default, per provider
  `max_body_bytes`): a reply read whole whatever its size could fail the writer's flush and
  with it the run. The cap is checked against `Content-Length` before reading, and the body
  is read in chunks that stop at one byte past the cap; a body above it is that attempt's
  error (`too_large`), and the trial fails for good, alone (`Verdict.GIVE_UP`): the same
  request would get the same body.
* **redirect the request**: redirects are never followed (`allow_redirects=False`), so a 3xx
  cannot make ibias store whatever another address returns as the model's answer. A 3xx from
  an API endpoint means a wrong `base_url`: fatal for the model, one line naming the status
  and the host the `Location` header points to.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from ibias.runner.config import DEFAULT_MAX_BODY_BYTES
from ibias.runner.providers.base import AttemptError, Provider
from ibias.runner.providers.retries import Classification, Verdict, redact
from ibias.runner.redact import redact_body, secret_bytes

__all__ = [
    "MAX_BODY_BYTES",
    "READ_CHUNK_BYTES",
    "HTTPProvider",
    "display_url",
    "max_body_bytes_of",
]

#: The largest reply body read, in bytes (16 MiB): far above any completion (a 16k-token reply
#: with logprobs is a few MB), far below what would strain the writer's memory. A body above it
#: is recorded as the attempt's error `too_large`. Read when a provider is built, so a test may
#: lower it.
MAX_BODY_BYTES = DEFAULT_MAX_BODY_BYTES
#: Bytes read per chunk of a body (the cap is checked after each).
READ_CHUNK_BYTES = 64 * 1024


def display_url(url: str) -> str:
    """`url` as shown to people (progress, stop lines): scheme, host, port and path, without
    user info or query, where a credential could hide."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def max_body_bytes_of(model: object) -> int | None:
    """A model config's `max_body_bytes` when it has one (None: the default cap). Read by name
    so the config can grow the key without every provider changing again."""
    value = getattr(model, "max_body_bytes", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):g} MiB" if n >= 1024 * 1024 else f"{n:,} bytes"


class HTTPProvider(Provider):
    """A `Provider` that POSTs JSON to `url` through its own session."""

    def __init__(
        self,
        *,
        url: str,
        model: str,
        api_key: str | None,
        timeout_s: float,
        max_connections: int,
        max_body_bytes: int | None = None,
    ) -> None:
        self.url = url
        #: Bodies above this many bytes are not read (None: `MAX_BODY_BYTES`).
        self.max_body_bytes = MAX_BODY_BYTES if max_body_bytes is None else max_body_bytes
        if self.max_body_bytes < 1:
            raise ValueError("max_body_bytes must be at least 1")
        self.model = model
        self._api_key = api_key
        self._echoed = secret_bytes(api_key)  # removed from every answer (runner/redact.py)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:  # never show the key, even in a debugger or a log of objects
        return f"{type(self).__name__}(url={self.url!r}, model={self.model!r})"

    @property
    def endpoint(self) -> str | None:
        return display_url(self.url)

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
        connection, truncated body) is raised as a classified `AttemptError`, and so are a
        redirect (never followed) and a body above the cap (never read whole).

        The headers are aiohttp's own read-only, case-insensitive mapping, handed on as they
        are: most replies' headers are never looked at (limits are read at most once a second
        until a reply announces some), so copying them per request was work for nothing."""
        if self._session is None:
            raise RuntimeError("provider not started")
        try:
            async with self._session.post(
                self.url, data=orjson.dumps(payload), allow_redirects=False
            ) as resp:
                status = resp.status
                if 300 <= status < 400:
                    raise AttemptError(
                        self._redirect(status, resp.headers), status=status, headers=resp.headers
                    )
                # A key echoed back is never stored.
                body = redact_body(await self._read_capped(resp), self._echoed)
                return status, resp.headers, body
        except AttemptError:
            raise
        except Exception as exc:
            raise AttemptError(self.classify_exception(exc)) from None

    async def _read_capped(self, resp: aiohttp.ClientResponse) -> bytes:
        """The body, read in chunks and never more than one byte past the cap; a body above
        it (by its `Content-Length`, or as read) is a `too_large` error."""
        cap = self.max_body_bytes
        length = resp.content_length
        if length is not None and length > cap:
            raise self._too_large(resp, f"Content-Length {length:,} bytes")
        if length is not None and "Content-Encoding" not in resp.headers:
            # Announced, within the cap and not compressed (a compressed body may inflate past
            # the cap, so it is read in chunks): one read, as before.
            body = await resp.read()
            if len(body) <= cap:
                return body
            raise self._too_large(resp, f"{len(body):,} bytes read")
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.content.iter_chunked(min(READ_CHUNK_BYTES, cap + 1)):
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                raise self._too_large(resp, "more than the cap read")
        return b"".join(chunks)

    def _too_large(self, resp: aiohttp.ClientResponse, seen: str) -> AttemptError:
        resp.close()  # the rest of the body is never read: drop the connection
        return AttemptError(
            Classification(
                Verdict.GIVE_UP,
                "too_large",
                f"HTTP {resp.status} body above the {_mib(self.max_body_bytes)} cap "
                f"(max_body_bytes; {seen}): not read, not stored",
            ),
            status=resp.status,
            headers=resp.headers,
        )

    def _redirect(self, status: int, headers: Mapping[str, str]) -> Classification:
        """A 3xx is never followed: it means the `base_url` is wrong (or moved), so the model
        stops with one line naming the status and where it pointed."""
        location = headers.get("Location") or headers.get("location")
        where = urlsplit(location).hostname if location else None
        if location and where is None:
            where = urlsplit(self.url).hostname  # a relative Location: the same host
        target = f" to host {where}" if where else " (no Location)"
        return Classification(
            Verdict.FATAL,
            "redirect",
            redact(
                f"HTTP {status} redirect{target} not followed: API calls are never "
                f"redirected; check base_url ({display_url(self.url)})"
            ),
        )

"""OpenAI's Files and Batch API, as the batch engine needs it: upload a JSONL file (purpose
`batch`), create a batch over it with metadata, read, list and cancel batches, and stream a
result file line by line (never read whole: a result file can be hundreds of MB).

Its own aiohttp session, not the online provider's: that one sends every request as JSON,
and the upload is multipart. The key is only in the session's default headers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import orjson

from ibias.runner.providers.http import display_url
from ibias.runner.redact import redact_body, secret_bytes
from ibias.runner.retries import redact

__all__ = ["BatchAPIError", "OpenAIBatchClient", "batch_line"]

#: Bytes read per chunk of a result file.
_CHUNK = 256 * 1024


class BatchAPIError(Exception):
    """A call of the batch API that failed: `retry` when asking again later may succeed
    (a connection error, 408, 409, 429, 5xx), else the model's batches stop (400s, 401, 404)."""

    def __init__(self, message: str, *, status: int | None = None, retry: bool = False) -> None:
        super().__init__(redact(message))
        self.status = status
        self.retry = retry


def batch_line(custom_id: str, body: Mapping[str, Any]) -> bytes:
    """One line of a batch input file: the trial key as `custom_id` and the chat-completions
    body the online request would post (`OpenAIProvider.request_body`)."""
    return orjson.dumps(
        {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
    )


class OpenAIBatchClient:
    """One base URL's batch API; `start()` before use, `close()` after."""

    def __init__(self, base_url: str, api_key: str | None, *, timeout_s: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._echoed = secret_bytes(api_key)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        return f"OpenAIBatchClient({display_url(self.base_url)!r})"

    async def start(self) -> None:
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        self._session = aiohttp.ClientSession(headers=headers, timeout=self._timeout)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("batch client not started")
        return self._session

    async def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        url = self.base_url + path
        try:
            async with self.session.request(method, url, allow_redirects=False, **kwargs) as resp:
                body = redact_body(await resp.read(), self._echoed)
                status = resp.status
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
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise BatchAPIError(
                f"{method} {display_url(url)}: body is not JSON", retry=True
            ) from None
        if not isinstance(data, dict):
            raise BatchAPIError(f"{method} {display_url(url)}: body is not an object", retry=True)
        return data

    async def upload(self, filename: str, data: bytes) -> str:
        """Upload a batch input file; returns its file id."""
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", data, filename=filename, content_type="application/jsonl")
        found = await self._call("POST", "/files", data=form)
        file_id = found.get("id")
        if not isinstance(file_id, str):
            raise BatchAPIError("POST /files: the reply names no file id", retry=True)
        return file_id

    async def create(self, input_file_id: str, metadata: Mapping[str, str]) -> dict[str, Any]:
        """Create a chat-completions batch over an uploaded file, with a 24 h window."""
        return await self._call(
            "POST",
            "/batches",
            json={
                "input_file_id": input_file_id,
                "endpoint": "/v1/chat/completions",
                "completion_window": "24h",
                "metadata": dict(metadata),
            },
        )

    async def get(self, batch_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/batches/{batch_id}")

    async def cancel(self, batch_id: str) -> dict[str, Any]:
        return await self._call("POST", f"/batches/{batch_id}/cancel")

    async def batches(self, *, page: int = 100) -> AsyncIterator[dict[str, Any]]:
        """Every batch of the account, newest first (`after` pagination)."""
        after: str | None = None
        while True:
            params = {"limit": str(page)} | ({"after": after} if after else {})
            found = await self._call("GET", "/batches", params=params)
            data = found.get("data")
            if not isinstance(data, list):
                return
            for batch in data:
                if isinstance(batch, dict):
                    yield batch
            last = found.get("last_id")
            if not found.get("has_more") or not isinstance(last, str):
                return
            after = last

    async def lines(self, file_id: str, max_line_bytes: int) -> AsyncIterator[bytes | None]:
        """The lines of a result file, streamed in chunks; a line above `max_line_bytes` (the
        model's body cap) is yielded as None, its bytes skipped, never held whole."""
        url = f"{self.base_url}/files/{file_id}/content"
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
                async for chunk in resp.content.iter_chunked(_CHUNK):
                    start = 0
                    while True:
                        end = chunk.find(b"\n", start)
                        piece = chunk[start:] if end < 0 else chunk[start:end]
                        if not skipping:
                            pending += piece
                            if len(pending) > max_line_bytes:
                                pending.clear()
                                skipping = True
                        if end < 0:
                            break
                        if skipping:
                            yield None
                        elif pending.strip():
                            yield redact_body(bytes(pending), self._echoed)
                        pending.clear()
                        skipping = False
                        start = end + 1
                if skipping:
                    yield None
                elif pending.strip():
                    yield redact_body(bytes(pending), self._echoed)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise BatchAPIError(
                f"GET {display_url(url)}: {type(exc).__name__}", retry=True
            ) from None

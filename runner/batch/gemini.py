"""Gemini's batch generation (`models/{model}:batchGenerateContent`), as the batch engine
needs it. A batch below the documented inline size is sent with its requests inline (each
with `metadata.key` = trial key); a larger one as a JSONL file (`{"key", "request"}` lines)
uploaded through the Files API's resumable upload. The batch's `displayName` is the intent
id: a crash between the create and its record is settled by listing the batches and adopting
the one with that display name. Results are read from the finished operation (inline
responses, matched by `metadata.key`) or streamed from its responses file (matched by `key`),
never by order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import orjson

from ibias.prompts.base import Message
from ibias.runner.batch.api import BatchAPI, BatchAPIError, BatchInfo, LineResult, oversized_line
from ibias.runner.batch.http import BatchClient, Oversized
from ibias.runner.batch.limits import (
    GEMINI_BATCH_BYTES,
    GEMINI_BATCH_REQUESTS,
    GEMINI_INLINE_BYTES,
    BatchLimits,
)
from ibias.runner.config import ModelConfig
from ibias.runner.providers.base import Provider, Sampling
from ibias.runner.providers.gemini import GeminiProvider, parse_generate_content
from ibias.runner.providers.retries import MalformedResponse, loads_json
from ibias.store.batches import BatchRow

__all__ = ["GeminiBatches"]

_STATES = {
    "BATCH_STATE_PENDING": "validating",
    "BATCH_STATE_RUNNING": "in_progress",
    "BATCH_STATE_SUCCEEDED": "completed",
    "BATCH_STATE_FAILED": "failed",
    "BATCH_STATE_CANCELLED": "cancelled",
    "BATCH_STATE_EXPIRED": "expired",
}


def _batch(operation: Mapping[str, Any]) -> Mapping[str, Any]:
    """The GenerateContentBatch of an operation (its `metadata`), or the batch itself."""
    meta = operation.get("metadata")
    return meta if isinstance(meta, dict) else operation


def _info(operation: Mapping[str, Any]) -> BatchInfo:
    batch = _batch(operation)
    stats = batch.get("batchStats")
    stats = stats if isinstance(stats, dict) else {}

    def count(name: str) -> int | None:
        value = stats.get(name)
        try:
            return None if value is None else int(value)  # int64 fields are JSON strings
        except (TypeError, ValueError):
            return None

    name = operation.get("name") or batch.get("name")
    return BatchInfo(
        batch_id=str(name),
        state=_STATES.get(str(batch.get("state")), "in_progress"),
        completed=count("successfulRequestCount"),
        failed=count("failedRequestCount"),
        input_file_id=_file_of(batch),
        raw=operation,
    )


def _file_of(batch: Mapping[str, Any]) -> str | None:
    config = batch.get("inputConfig")
    name = config.get("fileName") if isinstance(config, dict) else None
    return name if isinstance(name, str) else None


class GeminiBatches(BatchAPI):
    """Gemini's batch generation for one `gemini` model."""

    limits = BatchLimits(max_requests=GEMINI_BATCH_REQUESTS, max_bytes=GEMINI_BATCH_BYTES)

    @classmethod
    def for_model(
        cls, provider: Provider, model: ModelConfig, api_key: str | None, base_url: str
    ) -> GeminiBatches:
        assert isinstance(provider, GeminiProvider)
        return cls(provider, base_url, api_key)

    def __init__(
        self,
        provider: GeminiProvider,
        base_url: str,
        api_key: str | None,
        *,
        inline_bytes: int | None = None,
    ) -> None:
        self.online = provider
        self.base_url = base_url.rstrip("/")
        #: The API's root (the Files API uploads to {root}/upload/{version}/files).
        self.root, _, self.version = self.base_url.rpartition("/")
        #: Below this many bytes a batch goes inline, else as a file (read at construction).
        self.inline_bytes = GEMINI_INLINE_BYTES if inline_bytes is None else inline_bytes
        headers = {"x-goog-api-key": api_key} if api_key else {}
        self.client = BatchClient(self.base_url, api_key, headers)

    def line(self, key: str, messages: Sequence[Message], sampling: Sampling) -> bytes:
        return orjson.dumps({"key": key, "request": self.online.request_body(messages, sampling)})

    async def submit(
        self, intent_id: str, lines: Sequence[bytes], uploaded: Callable[[str], None]
    ) -> BatchInfo:
        size = sum(len(line) + 1 for line in lines)
        if size < self.inline_bytes:
            requests = []
            for line in lines:
                item = orjson.loads(line)
                requests.append({"request": item["request"], "metadata": {"key": item["key"]}})
            config: dict[str, Any] = {"requests": {"requests": requests}}
        else:
            file_name = await self._upload(intent_id, b"".join(line + b"\n" for line in lines))
            uploaded(file_name)
            config = {"fileName": file_name}
        model = quote(self.online.model.removeprefix("models/"), safe="")
        operation = await self.client.call(
            "POST",
            f"/models/{model}:batchGenerateContent",
            json={"batch": {"displayName": intent_id, "inputConfig": config}},
        )
        return _info(operation)

    async def _upload(self, intent_id: str, data: bytes) -> str:
        """The Files API's resumable upload: start (its URL comes back in a header), then
        upload and finalize in one call; returns the file's name (`files/...`)."""
        _, headers = await self.client.call_with_headers(
            "POST",
            f"{self.root}/upload/{self.version}/files",
            json={"file": {"displayName": intent_id}},
            headers={
                "X-Goog-Upload-Protocol": "resumable",
                "X-Goog-Upload-Command": "start",
                "X-Goog-Upload-Header-Content-Length": str(len(data)),
                "X-Goog-Upload-Header-Content-Type": "application/jsonl",
            },
        )
        url = headers.get("X-Goog-Upload-URL") or headers.get("x-goog-upload-url")
        if not url:
            raise BatchAPIError("Files API: the upload start named no upload URL", retry=True)
        found = await self.client.call(
            "POST",
            url,
            data=data,
            headers={"X-Goog-Upload-Command": "upload, finalize", "X-Goog-Upload-Offset": "0"},
        )
        file = found.get("file")
        name = file.get("name") if isinstance(file, dict) else None
        if not isinstance(name, str):
            raise BatchAPIError("Files API: the upload's reply names no file", retry=True)
        return name

    async def get(self, batch_id: str) -> BatchInfo:
        return _info(await self.client.call("GET", f"/{batch_id}"))

    async def cancel(self, batch_id: str) -> BatchInfo:
        await self.client.call("POST", f"/{batch_id}:cancel")
        return await self.get(batch_id)

    async def find(self, intent: BatchRow, taken: set[str]) -> BatchInfo | None:
        """The batch whose display name is the intent id."""
        token: str | None = None
        while True:
            params = {"pageSize": "100"} | ({"pageToken": token} if token else {})
            page = await self.client.call("GET", "/batches", params=params)
            for operation in page.get("operations") or []:
                if isinstance(operation, dict):
                    batch = _batch(operation)
                    if batch.get("displayName") == intent.intent_id:
                        return _info(operation)
            token = page.get("nextPageToken")
            if not isinstance(token, str) or not token:
                return None

    async def results(
        self, batch: BatchInfo, max_line_bytes: int
    ) -> AsyncIterator[LineResult | None]:
        output = batch.raw.get("response")
        if not isinstance(output, dict):
            meta = _batch(batch.raw).get("output")
            output = meta if isinstance(meta, dict) else {}
        inlined = output.get("inlinedResponses")
        if isinstance(inlined, dict):
            for item in inlined.get("inlinedResponses") or []:
                meta = item.get("metadata") if isinstance(item, dict) else None
                key = meta.get("key") if isinstance(meta, dict) else None
                yield None if not isinstance(key, str) else _result(key, item)
        file_name = output.get("responsesFile")
        if isinstance(file_name, str):
            path = f"{self.root}/download/{self.version}/{file_name}:download?alt=media"
            async for line in self.client.lines(path, max_line_bytes):
                if isinstance(line, Oversized):
                    yield oversized_line(line.key("key"), line.size, max_line_bytes)
                    continue
                try:
                    item = loads_json(line)  # numbers of any size (runner/providers/retries.py)
                except orjson.JSONDecodeError:
                    yield None
                    continue
                key = item.get("key") if isinstance(item, dict) else None
                yield None if not isinstance(key, str) else _result(key, item)


def _result(key: str, item: Mapping[str, Any]) -> LineResult:
    response = item.get("response")
    if isinstance(response, dict):
        try:
            reply = parse_generate_content(orjson.dumps(response), 200, {})
        except MalformedResponse as exc:
            return LineResult(key, None, item, 200, "malformed", str(exc))
        return LineResult(key, reply, item, 200)
    error = item.get("error")
    error = error if isinstance(error, dict) else {}
    code = error.get("code")
    return LineResult(
        key,
        None,
        item,
        code if isinstance(code, int) else None,
        f"batch_{str(error.get('status') or 'error').lower()}",
        str(error.get("message") or "no response"),
    )

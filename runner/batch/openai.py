"""OpenAI's Files and Batch API, as the batch engine needs it: upload a JSONL file (purpose
`batch`), create a batch over it with metadata, read, list and cancel batches, and stream a
result file line by line (never read whole: a result file can be hundreds of MB).

Its own aiohttp session, not the online provider's: that one sends every request as JSON,
and the upload is multipart. The key is only in the session's default headers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import aiohttp
import orjson

from ibias.prompts.base import Message
from ibias.runner.batch.api import BatchAPI, BatchAPIError, BatchInfo, LineResult, oversized_line
from ibias.runner.batch.http import BatchClient, Oversized
from ibias.runner.batch.limits import (
    OPENAI_BATCH_BYTES,
    OPENAI_BATCH_REQUESTS,
    OPENAI_ENQUEUED_TOKENS,
    BatchLimits,
)
from ibias.runner.config import ModelConfig
from ibias.runner.providers.base import Provider, Sampling
from ibias.runner.providers.openai import NullContent, OpenAIProvider, parse_chat_completion
from ibias.runner.providers.retries import MalformedResponse, loads_json
from ibias.store.batches import BatchRow

__all__ = ["OpenAIBatchClient", "OpenAIBatches", "batch_line"]


def batch_line(custom_id: str, body: Mapping[str, Any]) -> bytes:
    """One line of a batch input file: the trial key as `custom_id` and the chat-completions
    body the online request would post (`OpenAIProvider.request_body`)."""
    return orjson.dumps(
        {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
    )


class OpenAIBatchClient(BatchClient):
    """OpenAI's Files and Batch API at one base URL."""

    def __init__(self, base_url: str, api_key: str | None) -> None:
        super().__init__(
            base_url, api_key, {"Authorization": f"Bearer {api_key}"} if api_key else {}
        )

    async def upload(self, filename: str, data: bytes) -> str:
        """Upload a batch input file; returns its file id."""
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", data, filename=filename, content_type="application/jsonl")
        found = await self.call("POST", "/files", data=form)
        file_id = found.get("id")
        if not isinstance(file_id, str):
            raise BatchAPIError("POST /files: the reply names no file id", retry=True)
        return file_id

    async def create(self, input_file_id: str, metadata: Mapping[str, str]) -> dict[str, Any]:
        """Create a chat-completions batch over an uploaded file, with a 24 h window."""
        return await self.call(
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
        return await self.call("GET", f"/batches/{batch_id}")

    async def cancel(self, batch_id: str) -> dict[str, Any]:
        return await self.call("POST", f"/batches/{batch_id}/cancel")

    async def batches(self, *, page: int = 100) -> AsyncIterator[dict[str, Any]]:
        """Every batch of the account, newest first (`after` pagination)."""
        after: str | None = None
        while True:
            params = {"limit": str(page)} | ({"after": after} if after else {})
            found = await self.call("GET", "/batches", params=params)
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


#: OpenAI's batch states are the `batches` table's (its `cancelled` too).
_STATES = frozenset(
    {
        "validating",
        "in_progress",
        "finalizing",
        "cancelling",
        "completed",
        "expired",
        "cancelled",
        "failed",
    }
)


def _info(batch: Mapping[str, Any]) -> BatchInfo:
    counts = batch.get("request_counts") or {}
    status = str(batch.get("status"))
    errors = batch.get("errors")
    data = errors.get("data") if isinstance(errors, dict) else None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    return BatchInfo(
        batch_id=str(batch.get("id")),
        state=status if status in _STATES else "in_progress",
        completed=counts.get("completed"),
        failed=counts.get("failed"),
        input_file_id=batch.get("input_file_id"),
        raw=batch,
        error_code=str(first["code"]) if first.get("code") else None,
        error_message=str(first["message"]) if first.get("message") else None,
    )


class OpenAIBatches(BatchAPI):
    """OpenAI's Batch API for one `openai` model: JSONL upload, a batch carrying the intent
    id in its `metadata`, results from the output and error files."""

    limits = BatchLimits(max_requests=OPENAI_BATCH_REQUESTS, max_bytes=OPENAI_BATCH_BYTES)
    client: OpenAIBatchClient

    @classmethod
    def for_model(
        cls, provider: Provider, model: ModelConfig, api_key: str | None, base_url: str
    ) -> OpenAIBatches:
        """The model's `batch_enqueued_tokens` is its account's enqueued-token limit."""
        assert isinstance(provider, OpenAIProvider)
        enqueued = model.options.get("batch_enqueued_tokens")
        return cls(
            provider,
            OpenAIBatchClient(base_url, api_key),
            model.id,
            int(enqueued) if enqueued else OPENAI_ENQUEUED_TOKENS,
        )

    def __init__(
        self,
        provider: OpenAIProvider,
        client: OpenAIBatchClient,
        model_id: str,
        enqueued_tokens: int = OPENAI_ENQUEUED_TOKENS,
    ) -> None:
        self.online = provider
        self.client = client
        self.model_id = model_id
        self.enqueued_tokens = enqueued_tokens

    def line(self, key: str, messages: Sequence[Message], sampling: Sampling) -> bytes:
        return batch_line(key, self.online.request_body(messages, sampling))

    async def submit(
        self, intent_id: str, lines: Sequence[bytes], uploaded: Callable[[str], None]
    ) -> BatchInfo:
        data = b"".join(line + b"\n" for line in lines)
        file_id = await self.client.upload(f"{intent_id}.jsonl", data)
        uploaded(file_id)
        batch = await self.client.create(
            file_id, {"ibias_intent": intent_id, "ibias_model": self.model_id[:512]}
        )
        return _info(batch)

    async def get(self, batch_id: str) -> BatchInfo:
        return _info(await self.client.get(batch_id))

    async def cancel(self, batch_id: str) -> BatchInfo:
        return _info(await self.client.cancel(batch_id))

    async def find(self, intent: BatchRow, taken: set[str]) -> BatchInfo | None:
        """The batch whose metadata names the intent (and whose input file is the recorded
        one, when one was recorded)."""
        async for batch in self.client.batches():
            meta = batch.get("metadata")
            if not isinstance(meta, dict) or meta.get("ibias_intent") != intent.intent_id:
                continue
            if intent.input_file_id is None or batch.get("input_file_id") == intent.input_file_id:
                return _info(batch)
        return None

    async def results(
        self, batch: BatchInfo, max_line_bytes: int
    ) -> AsyncIterator[LineResult | None]:
        for field in ("output_file_id", "error_file_id"):
            file_id = batch.raw.get(field)
            if not isinstance(file_id, str):
                continue
            async for line in self.client.lines(f"/files/{file_id}/content", max_line_bytes):
                if isinstance(line, Oversized):
                    yield oversized_line(line.key("custom_id"), line.size, max_line_bytes)
                else:
                    yield self._result(line)

    def _result(self, line: bytes) -> LineResult | None:
        try:
            data = loads_json(line)  # numbers of any size (runner/providers/retries.py)
        except orjson.JSONDecodeError:
            return None
        key = data.get("custom_id") if isinstance(data, dict) else None
        if not isinstance(key, str):
            return None
        response = data.get("response")
        if isinstance(response, dict) and response.get("status_code") == 200:
            try:
                reply = parse_chat_completion(
                    orjson.dumps(response.get("body")),
                    200,
                    {},
                    reasoning_separate=self.online.rule.reasoning_tokens_separate,
                )
            except NullContent as exc:
                # Stored as the empty reply it is (`null_content`): online it is retried first,
                # but asking again here would cost another batch of up to a day.
                return LineResult(key, exc.reply, data, 200)
            except MalformedResponse as exc:
                return LineResult(key, None, data, 200, "malformed", str(exc))
            return LineResult(key, reply, data, 200)
        if isinstance(response, dict):
            status = response.get("status_code")
            body = response.get("body")
            err = body.get("error") if isinstance(body, dict) else None
            message = err.get("message") if isinstance(err, dict) else None
            return LineResult(
                key,
                None,
                data,
                status if isinstance(status, int) else None,
                f"batch_http_{status}",
                str(message or f"HTTP {status}"),
            )
        error = data.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        return LineResult(
            key, None, data, None, str(code or "batch_error"), str(message or "no reply")
        )

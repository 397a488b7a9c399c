"""Anthropic's Message Batches API, as the batch engine needs it: a batch is created with its
requests inline (`custom_id` = trial key, `params` = the Messages body the online request
sends), polled until `processing_status` is `ended`, and its results streamed from its
`results_url`.

Anthropic batches carry no metadata, so a crash between the create and its record is settled
by listing: the batch created after the recorded intent (allowing `CLOCK_SKEW_S` for the
provider's clock), not yet known to the store, whose request count is the intent's, is adopted;
once it ends, its results are confirmed by their custom ids (a line naming no trial of the
intent is never stored, and the engine says so).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import orjson

from ibias.prompts.base import Message
from ibias.runner.batch.api import BatchAPI, BatchInfo, LineResult, oversized_line
from ibias.runner.batch.http import BatchClient, Oversized
from ibias.runner.batch.limits import ANTHROPIC_BATCH_BYTES, ANTHROPIC_BATCH_REQUESTS, BatchLimits
from ibias.runner.config import ModelConfig
from ibias.runner.providers.anthropic import AnthropicProvider, parse_message
from ibias.runner.providers.base import Provider, Sampling
from ibias.runner.providers.retries import MalformedResponse, loads_json
from ibias.store.batches import BatchRow

__all__ = ["CLOCK_SKEW_S", "AnthropicBatches"]

#: Seconds a provider's `created_at` may be earlier than our clock's intent time.
CLOCK_SKEW_S = 300.0


def _counts(batch: Mapping[str, Any]) -> dict[str, int]:
    counts = batch.get("request_counts")
    if not isinstance(counts, dict):
        return {}
    return {k: int(v) for k, v in counts.items() if isinstance(v, int)}


def _info(batch: Mapping[str, Any]) -> BatchInfo:
    """`processing_status` in the store's states: an ended batch is `expired` when some of
    its requests expired, `cancelled` when some were canceled, else `completed`."""
    counts = _counts(batch)
    status = batch.get("processing_status")
    if status == "ended":
        state = (
            "expired"
            if counts.get("expired")
            else "cancelled"
            if counts.get("canceled")
            else "completed"
        )
    elif status == "canceling":
        state = "cancelling"
    else:
        state = "in_progress"
    return BatchInfo(
        batch_id=str(batch.get("id")),
        state=state,
        completed=counts.get("succeeded"),
        failed=counts.get("errored", 0) + counts.get("expired", 0) + counts.get("canceled", 0),
        raw=batch,
    )


def _created(batch: Mapping[str, Any]) -> datetime | None:
    value = batch.get("created_at")
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class AnthropicBatches(BatchAPI):
    """Anthropic's Message Batches for one `anthropic` model."""

    limits = BatchLimits(max_requests=ANTHROPIC_BATCH_REQUESTS, max_bytes=ANTHROPIC_BATCH_BYTES)

    @classmethod
    def for_model(
        cls, provider: Provider, model: ModelConfig, api_key: str | None, base_url: str
    ) -> AnthropicBatches:
        assert isinstance(provider, AnthropicProvider)
        return cls(provider, base_url, api_key)

    def __init__(self, provider: AnthropicProvider, base_url: str, api_key: str | None) -> None:
        self.online = provider
        # The online requests' version and key header (the model's `anthropic_version`).
        headers = {**provider.session_headers(api_key), "content-type": "application/json"}
        self.client = BatchClient(base_url, api_key, headers)

    def line(self, key: str, messages: Sequence[Message], sampling: Sampling) -> bytes:
        return orjson.dumps(
            {"custom_id": key, "params": self.online.request_body(messages, sampling)}
        )

    async def submit(
        self, intent_id: str, lines: Sequence[bytes], uploaded: Callable[[str], None]
    ) -> BatchInfo:
        body = b'{"requests":[' + b",".join(lines) + b"]}"
        return _info(await self.client.call("POST", "/messages/batches", data=body))

    async def get(self, batch_id: str) -> BatchInfo:
        return _info(await self.client.call("GET", f"/messages/batches/{batch_id}"))

    async def cancel(self, batch_id: str) -> BatchInfo:
        return _info(await self.client.call("POST", f"/messages/batches/{batch_id}/cancel"))

    async def find(self, intent: BatchRow, taken: set[str]) -> BatchInfo | None:
        """The oldest batch created after the intent (less `CLOCK_SKEW_S`), unknown to the
        store, whose request count is the intent's. Listing (newest first) stops at the
        first batch older than that."""
        since = intent.intended_at - timedelta(seconds=CLOCK_SKEW_S)
        match: BatchInfo | None = None
        after: str | None = None
        while True:
            params = {"limit": "100"} | ({"after_id": after} if after else {})
            page = await self.client.call("GET", "/messages/batches", params=params)
            data = page.get("data")
            if not isinstance(data, list):
                return match
            for batch in data:
                if not isinstance(batch, dict):
                    continue
                created = _created(batch)
                if created is not None and created < since:
                    return match
                if str(batch.get("id")) in taken:
                    continue
                if sum(_counts(batch).values()) == intent.requests:
                    match = _info(batch)  # newest first: the last one seen is the oldest
            last = page.get("last_id")
            if not page.get("has_more") or not isinstance(last, str):
                return match
            after = last

    async def results(
        self, batch: BatchInfo, max_line_bytes: int
    ) -> AsyncIterator[LineResult | None]:
        url = batch.raw.get("results_url")
        if not isinstance(url, str):
            url = f"/messages/batches/{batch.batch_id}/results"
        async for line in self.client.lines(url, max_line_bytes):
            if isinstance(line, Oversized):
                yield oversized_line(line.key("custom_id"), line.size, max_line_bytes)
            else:
                yield _result(line)


def _result(line: bytes) -> LineResult | None:
    try:
        data = loads_json(line)  # numbers of any size (runner/providers/retries.py)
    except orjson.JSONDecodeError:
        return None
    key = data.get("custom_id") if isinstance(data, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(key, str) or not isinstance(result, dict):
        return None
    kind = result.get("type")
    if kind == "succeeded":
        try:
            reply = parse_message(orjson.dumps(result.get("message")), 200, {})
        except MalformedResponse as exc:
            return LineResult(key, None, data, 200, "malformed", str(exc))
        return LineResult(key, reply, data, 200)
    if kind == "errored":
        outer = result.get("error")
        inner = outer.get("error") if isinstance(outer, dict) else None
        err = inner if isinstance(inner, dict) else outer if isinstance(outer, dict) else {}
        return LineResult(
            key,
            None,
            data,
            None,
            f"batch_{err.get('type') or 'errored'}",
            str(err.get("message") or "errored"),
        )
    # `canceled` is Anthropic's spelling; the store's kind is `batch_cancelled` whatever the
    # provider (OpenAI's and Gemini's spelling, and the batches table's state).
    spelled = "cancelled" if kind == "canceled" else kind
    return LineResult(key, None, data, None, f"batch_{spelled}", f"the request {spelled}")

"""Anthropic's Message Batches API in the simulator, on loopback: `POST /v1/messages/batches`
(the requests inline, `custom_id` + `params`), `GET /v1/messages/batches/{id}`, `GET
/v1/messages/batches` (newest first, `after_id`/`limit`), `GET .../{id}/results` (JSONL),
`POST .../{id}/cancel`, with the bodies Anthropic documents. Each request is answered by the
simulator's own Messages responders (`Simulator.answer_line`).

The same test clock and knobs as OpenAI's (batch_openai.py): a batch ends after `steps`
reads; `expire_after`, `error_every`, `shuffle`, `hold_create`, `hold_download`; `created`
counts batches made. Anthropic batches carry no metadata: a client finds its own by listing.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from ibias.runner.simulator.batch_keyed import KeyedService
from ibias.runner.simulator.protocol_anthropic import ANTHROPIC

if TYPE_CHECKING:
    from ibias.runner.simulator.server import Simulator

__all__ = ["MessageBatchService"]

_JSON = "application/json"
_CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
#: Anthropic: "Batches may contain up to 100,000 requests and be up to 256 MB in total size."
MAX_REQUESTS = 100_000


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _error(status: int, type_: str, message: str) -> web.Response:
    body = {"type": "error", "error": {"type": type_, "message": message}}
    return web.Response(status=status, body=orjson.dumps(body), content_type=_JSON)


class MessageBatchService(KeyedService):
    """The message batches one simulator holds, and the knobs tests turn."""

    protocol = ANTHROPIC

    def __init__(self, sim: Simulator) -> None:
        super().__init__(sim)
        self.batches: dict[str, dict[str, Any]] = {}
        self._requests: dict[str, list[dict[str, Any]]] = {}
        self._results: dict[str, bytes] = {}
        self._order: list[str] = []
        self._reads: dict[str, int] = {}
        self.created = 0
        self.steps = 1
        self.expire_after: int | None = None
        self.error_every: int | None = None
        self.shuffle = True
        self.hold_create: asyncio.Event | None = None
        self.hold_download: asyncio.Event | None = None
        #: The created_at of the next batch is moved by this many seconds (a provider clock
        #: that is not the client's).
        self.clock_skew_s = 0.0
        self._rng = random.Random(sim.profile.seed + 1)
        self._seq = 0

    def install(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages/batches", self._guard(self._create))
        app.router.add_get("/v1/messages/batches", self._guard(self._list))
        app.router.add_get("/v1/messages/batches/{id}", self._guard(self._get))
        app.router.add_get("/v1/messages/batches/{id}/results", self._guard(self._results_of))
        app.router.add_post("/v1/messages/batches/{id}/cancel", self._guard(self._cancel))

    def _public(self, batch: dict[str, Any]) -> web.Response:
        return web.Response(body=orjson.dumps(batch), content_type=_JSON)

    async def _create(self, request: web.Request) -> web.StreamResponse:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _error(400, "invalid_request_error", "There was an error parsing the body.")
        requests = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(requests, list) or not 1 <= len(requests) <= MAX_REQUESTS:
            return _error(400, "invalid_request_error", "requests: 1 to 100,000 items")
        seen: set[str] = set()
        for r in requests:
            cid = r.get("custom_id") if isinstance(r, dict) else None
            if not isinstance(cid, str) or not _CUSTOM_ID.match(cid):
                return _error(
                    400, "invalid_request_error", "custom_id: must match ^[a-zA-Z0-9_-]{1,64}$"
                )
            if cid in seen:
                return _error(400, "invalid_request_error", f"custom_id {cid} is not unique")
            if not isinstance(r.get("params"), dict):
                return _error(400, "invalid_request_error", "params: required")
            seen.add(cid)
        self._seq += 1
        now = time.time() + self.clock_skew_s
        batch_id = f"msgbatch_{self._rng.getrandbits(64):016x}{self._seq:06d}"
        batch: dict[str, Any] = {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": "in_progress",
            "request_counts": {
                "processing": len(requests),
                "succeeded": 0,
                "errored": 0,
                "canceled": 0,
                "expired": 0,
            },
            "ended_at": None,
            "created_at": _rfc3339(now),
            "expires_at": _rfc3339(now + 86_400),
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": None,
        }
        self.batches[batch_id] = batch
        self._requests[batch_id] = requests
        self._order.append(batch_id)
        self._reads[batch_id] = 0
        self.created += 1
        await self._hold(self.hold_create)
        return self._public(batch)

    async def _get(self, request: web.Request) -> web.StreamResponse:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _error(404, "not_found_error", "Message batch not found")
        self._advance(batch, str(request.url.origin()))
        return self._public(batch)

    async def _list(self, request: web.Request) -> web.StreamResponse:
        try:
            limit = max(1, min(1000, int(request.query.get("limit", "20"))))
        except ValueError:
            return _error(400, "invalid_request_error", "limit: must be an integer")
        newest = list(reversed(self._order))
        after = request.query.get("after_id")
        if after is not None:
            newest = newest[newest.index(after) + 1 :] if after in newest else []
        page = newest[:limit]
        body = {
            "data": [self.batches[i] for i in page],
            "has_more": len(newest) > limit,
            "first_id": page[0] if page else None,
            "last_id": page[-1] if page else None,
        }
        return web.Response(body=orjson.dumps(body), content_type=_JSON)

    async def _results_of(self, request: web.Request) -> web.StreamResponse:
        batch_id = request.match_info["id"]
        data = self._results.get(batch_id)
        if data is None:
            return _error(404, "not_found_error", "Results are not available yet")
        await self._hold(self.hold_download)
        return web.Response(body=data, content_type="application/binary")

    async def _cancel(self, request: web.Request) -> web.StreamResponse:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _error(404, "not_found_error", "Message batch not found")
        if batch["processing_status"] == "in_progress":
            batch["processing_status"] = "canceling"
            batch["cancel_initiated_at"] = _rfc3339(time.time())
        return self._public(batch)

    def finish_all(self, origin: str) -> None:
        """End every batch now; `origin` is the simulator's root URL (for `results_url`)."""
        for batch in self.batches.values():
            if batch["processing_status"] != "ended":
                self._end(batch, origin)

    def _advance(self, batch: dict[str, Any], origin: str) -> None:
        if batch["processing_status"] == "ended":
            return
        self._reads[batch["id"]] += 1
        if self._reads[batch["id"]] >= self.steps:
            self._end(batch, origin)

    def _end(self, batch: dict[str, Any], origin: str) -> None:
        """Answer the batch's requests with the Messages responders: the first
        `expire_after` run, the rest expire (or are canceled, for a canceling batch)."""
        requests = self._requests[batch["id"]]
        canceling = batch["processing_status"] == "canceling"
        answered = 0 if canceling else len(requests)
        if self.expire_after is not None and not canceling:
            answered = min(answered, self.expire_after)
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        lines: list[bytes] = []
        stub = SimpleNamespace(headers={"anthropic-version": "2023-06-01"})
        for n, r in enumerate(requests):
            result: dict[str, Any]
            if n >= answered:
                kind = "canceled" if canceling else "expired"
                result = {"type": kind}
                counts[kind] += 1
            elif self.error_every and (n + 1) % self.error_every == 0:
                result = {
                    "type": "errored",
                    "error": {
                        "type": "error",
                        "error": {"type": "api_error", "message": "Internal server error"},
                    },
                }
                counts["errored"] += 1
            else:
                status, raw = self.sim.answer_line(ANTHROPIC, orjson.dumps(r["params"]), stub)
                if status == 200:
                    result = {"type": "succeeded", "message": orjson.loads(raw)}
                    counts["succeeded"] += 1
                else:
                    result = {"type": "errored", "error": orjson.loads(raw)}
                    counts["errored"] += 1
            lines.append(orjson.dumps({"custom_id": r["custom_id"], "result": result}))
        if self.shuffle:
            self._rng.shuffle(lines)
        self._results[batch["id"]] = b"".join(line + b"\n" for line in lines)
        batch["request_counts"] = counts
        batch["processing_status"] = "ended"
        batch["ended_at"] = _rfc3339(time.time())
        batch["results_url"] = f"{origin}/v1/messages/batches/{batch['id']}/results"

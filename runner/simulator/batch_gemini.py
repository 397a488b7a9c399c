"""Gemini's batch generation in the simulator, on loopback: `POST
/v1beta/models/{model}:batchGenerateContent` (requests inline, or an input file), `GET
/v1beta/batches/{id}`, `GET /v1beta/batches` (`pageSize`/`pageToken`), `POST
/v1beta/batches/{id}:cancel`, and the Files API's resumable upload (`POST
/upload/v1beta/files`) and download (`GET /download/v1beta/files/{id}:download`), with the
bodies Google documents (an Operation whose `metadata` is the GenerateContentBatch). Each
request is answered by the simulator's own generateContent responders.

The same test clock and knobs as OpenAI's (batch_openai.py): a batch moves one state per
`steps` reads (PENDING -> RUNNING -> SUCCEEDED); `expire_after` (requests answered before the
batch expires), `error_every`, `shuffle` (inline responses in another order: a client must
match them by `metadata.key`), `hold_create`; `created` counts batches made.
"""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from ibias.runner.simulator.batch_keyed import KeyedService
from ibias.runner.simulator.protocol_gemini import GEMINI

if TYPE_CHECKING:
    from ibias.runner.simulator.server import Simulator

__all__ = ["GeminiBatchService"]

_JSON = "application/json"
_TYPE = "type.googleapis.com/google.ai.generativelanguage.v1main."
_ENDED = frozenset(
    {"BATCH_STATE_SUCCEEDED", "BATCH_STATE_FAILED", "BATCH_STATE_CANCELLED", "BATCH_STATE_EXPIRED"}
)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _error(code: int, status: str, message: str) -> web.Response:
    body = {"error": {"code": code, "message": message, "status": status}}
    return web.Response(status=code, body=orjson.dumps(body), content_type=_JSON)


class GeminiBatchService(KeyedService):
    """The batches and files one simulator holds for Gemini, and the knobs tests turn."""

    protocol = GEMINI

    def __init__(self, sim: Simulator) -> None:
        super().__init__(sim)
        self.batches: dict[str, dict[str, Any]] = {}
        self._inputs: dict[str, list[dict[str, Any]]] = {}
        self._order: list[str] = []
        self._reads: dict[str, int] = {}
        self.files: dict[str, bytes] = {}
        self._uploads: dict[str, str] = {}
        self.created = 0
        self.steps = 1
        self.expire_after: int | None = None
        self.error_every: int | None = None
        self.shuffle = True
        self.hold_create: asyncio.Event | None = None
        self._rng = random.Random(sim.profile.seed + 2)
        self._seq = 0

    def install(self, app: web.Application) -> None:
        app.router.add_post(
            "/v1beta/models/{model}:batchGenerateContent", self._guard(self._create)
        )
        app.router.add_get("/v1beta/batches", self._guard(self._list))
        app.router.add_post("/v1beta/batches/{id}:cancel", self._guard(self._cancel))
        app.router.add_get("/v1beta/batches/{id}", self._guard(self._get))
        app.router.add_post("/upload/v1beta/files", self._guard(self._upload_start))
        app.router.add_post("/upload/v1beta/files/{upload}", self._guard(self._upload_finish))
        app.router.add_get("/download/v1beta/files/{name}", self._guard(self._download))

    def _id(self) -> str:
        self._seq += 1
        return f"{self._rng.getrandbits(48):012x}{self._seq:06d}"

    # -- files -------------------------------------------------------------------------------

    async def _upload_start(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("X-Goog-Upload-Command") != "start":
            return _error(400, "INVALID_ARGUMENT", "X-Goog-Upload-Command must be start")
        upload = self._id()
        meta = await request.json()
        self._uploads[upload] = str((meta.get("file") or {}).get("displayName") or upload)
        url = f"{request.url.origin()}/upload/v1beta/files/{upload}"
        return web.Response(body=b"{}", content_type=_JSON, headers={"X-Goog-Upload-URL": url})

    async def _upload_finish(self, request: web.Request) -> web.StreamResponse:
        upload = request.match_info["upload"]
        if upload not in self._uploads:
            return _error(404, "NOT_FOUND", "no such upload")
        name = f"files/{self._id()}"
        self.files[name] = await request.read()
        body = {
            "file": {
                "name": name,
                "displayName": self._uploads.pop(upload),
                "mimeType": "application/jsonl",
                "sizeBytes": str(len(self.files[name])),
                "state": "ACTIVE",
            }
        }
        return web.Response(body=orjson.dumps(body), content_type=_JSON)

    async def _download(self, request: web.Request) -> web.StreamResponse:
        name = "files/" + request.match_info["name"].removesuffix(":download")
        data = self.files.get(name)
        if data is None:
            return _error(404, "NOT_FOUND", f"File {name} not found")
        return web.Response(body=data, content_type="application/octet-stream")

    # -- batches -----------------------------------------------------------------------------

    async def _create(self, request: web.Request) -> web.StreamResponse:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
        batch = body.get("batch") if isinstance(body, dict) else None
        if not isinstance(batch, dict) or not batch.get("displayName"):
            return _error(400, "INVALID_ARGUMENT", "batch.display_name is required")
        config = batch.get("inputConfig") or {}
        if "fileName" in config:
            data = self.files.get(config["fileName"])
            if data is None:
                return _error(404, "NOT_FOUND", f"File {config['fileName']} not found")
            items = [orjson.loads(line) for line in data.splitlines() if line.strip()]
            inputs = [{"key": i.get("key"), "request": i.get("request")} for i in items]
        else:
            inline = (config.get("requests") or {}).get("requests")
            if not isinstance(inline, list) or not inline:
                return _error(400, "INVALID_ARGUMENT", "input_config: requests are required")
            inputs = [
                {"key": (r.get("metadata") or {}).get("key"), "request": r.get("request")}
                for r in inline
            ]
        name = f"batches/{self._id()}"
        model = request.match_info["model"]
        meta: dict[str, Any] = {
            "@type": _TYPE + "GenerateContentBatch",
            "model": f"models/{model}",
            "name": name,
            "displayName": batch["displayName"],
            "inputConfig": config if "fileName" in config else {"requests": {}},
            "createTime": _now(),
            "updateTime": _now(),
            "batchStats": {
                "requestCount": str(len(inputs)),
                "pendingRequestCount": str(len(inputs)),
            },
            "state": "BATCH_STATE_PENDING",
        }
        operation = {"name": name, "metadata": meta}
        self.batches[name] = operation
        self._inputs[name] = [{**i, "model": model} for i in inputs]
        self._order.append(name)
        self._reads[name] = 0
        self.created += 1
        await self._hold(self.hold_create)
        return web.Response(body=orjson.dumps(operation), content_type=_JSON)

    async def _get(self, request: web.Request) -> web.StreamResponse:
        name = "batches/" + request.match_info["id"]
        operation = self.batches.get(name)
        if operation is None:
            return _error(404, "NOT_FOUND", f"Batch {name} not found")
        self._advance(operation)
        return web.Response(body=orjson.dumps(operation), content_type=_JSON)

    async def _list(self, request: web.Request) -> web.StreamResponse:
        size = max(1, min(1000, int(request.query.get("pageSize", "50"))))
        start = int(request.query.get("pageToken") or 0)
        newest = list(reversed(self._order))
        page = newest[start : start + size]
        body: dict[str, Any] = {"operations": [self.batches[n] for n in page]}
        if start + size < len(newest):
            body["nextPageToken"] = str(start + size)
        return web.Response(body=orjson.dumps(body), content_type=_JSON)

    async def _cancel(self, request: web.Request) -> web.StreamResponse:
        name = "batches/" + request.match_info["id"]
        operation = self.batches.get(name)
        if operation is None:
            return _error(404, "NOT_FOUND", f"Batch {name} not found")
        if operation["metadata"]["state"] not in _ENDED:
            self._end(operation, "BATCH_STATE_CANCELLED", answered=0)
        return web.Response(body=b"{}", content_type=_JSON)

    # -- the batch clock ---------------------------------------------------------------------

    def finish_all(self) -> None:
        for operation in self.batches.values():
            while operation["metadata"]["state"] not in _ENDED:
                self._reads[operation["name"]] = self.steps
                self._advance(operation)

    def _advance(self, operation: dict[str, Any]) -> None:
        meta = operation["metadata"]
        if meta["state"] in _ENDED:
            return
        self._reads[operation["name"]] += 1
        if self._reads[operation["name"]] < self.steps:
            return
        self._reads[operation["name"]] = 0
        if meta["state"] == "BATCH_STATE_PENDING":
            meta["state"] = "BATCH_STATE_RUNNING"
            return
        total = len(self._inputs[operation["name"]])
        if self.expire_after is not None and self.expire_after < total:
            self._end(operation, "BATCH_STATE_EXPIRED", answered=self.expire_after)
        else:
            self._end(operation, "BATCH_STATE_SUCCEEDED", answered=total)

    def _end(self, operation: dict[str, Any], state: str, *, answered: int) -> None:
        items: list[tuple[dict[str, Any], str]] = []
        ok = failed = 0
        for n, item in enumerate(self._inputs[operation["name"]][:answered]):
            out: dict[str, Any]
            if self.error_every and (n + 1) % self.error_every == 0:
                out = {"error": {"code": 500, "message": "Internal error", "status": "INTERNAL"}}
                failed += 1
            else:
                stub = SimpleNamespace(match_info={"model": item["model"]}, headers={})
                status, raw = self.sim.answer_line(GEMINI, orjson.dumps(item["request"]), stub)
                if status == 200:
                    out = {"response": orjson.loads(raw)}
                    ok += 1
                else:
                    out = {"error": orjson.loads(raw).get("error")}
                    failed += 1
            items.append((out, str(item["key"])))
        if self.shuffle:
            self._rng.shuffle(items)
        meta = operation["metadata"]
        from_file = "fileName" in meta["inputConfig"]
        if from_file:
            name = f"files/{self._id()}"
            self.files[name] = b"".join(
                orjson.dumps({"key": key, **out}) + b"\n" for out, key in items
            )
            output: dict[str, Any] = {"responsesFile": name}
        else:
            output = {
                "inlinedResponses": {
                    "inlinedResponses": [{**out, "metadata": {"key": key}} for out, key in items]
                }
            }
        total = len(self._inputs[operation["name"]])
        meta["state"] = state
        meta["updateTime"] = meta["endTime"] = _now()
        meta["batchStats"] = {
            "requestCount": str(total),
            "successfulRequestCount": str(ok),
            "failedRequestCount": str(failed),
            "pendingRequestCount": str(total - ok - failed),
        }
        meta["output"] = output
        operation["done"] = True
        operation["response"] = {"@type": _TYPE + "GenerateContentBatchOutput", **output}

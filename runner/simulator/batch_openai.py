"""OpenAI's Files and Batch API in the simulator, on loopback, for tests, the demo and benches.

What it serves, with the bodies OpenAI documents: `POST /v1/files` (multipart, purpose
`batch`), `GET /v1/files/{id}/content`, `POST /v1/batches` (input file, endpoint, 24 h window,
metadata), `GET /v1/batches/{id}`, `GET /v1/batches` (newest first, `after`/`limit`,
`has_more`), `POST /v1/batches/{id}/cancel`. Each line of a batch is answered by the
simulator's own online responders (`Simulator.answer_openai`), so a trial gets the same answer
whichever way it is sent.

The batch clock is the tests': a batch moves one state each time it is read (validating ->
in_progress -> finalizing -> completed; `steps` per move), never with wall time, so polling
logic is tested without sleeping. Knobs a test turns: `hold_upload`/`hold_create` (an event
the reply waits for after the work is done: kill the client in between), `expire_after`
(lines answered before a batch expires), `error_every` (every Nth line answers a 500), and
`shuffle` (output lines in another order than the input's), `hold_download` (the reply
with a result file), `finish_all()` (every batch ends now), `enqueued_token_limit` (OpenAI's
per-model limit on the prompt tokens of batches not ended: a create past it is accepted and
the batch fails at validation, `errors.data[0].code` = "token_limit_exceeded", as OpenAI does).
`long_reply_every` (every Nth line's reply made `long_reply_chars` long).
`created` counts batches made, `peak_live` the most batches live at once and
`token_limit_failures` the batches failed on the limit.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from ibias.runner.simulator.answer import estimate_tokens
from ibias.runner.simulator.batch_keyed import KeyedService
from ibias.runner.simulator.protocol_openai import OPENAI

if TYPE_CHECKING:
    from ibias.runner.simulator.server import Simulator

__all__ = ["BatchService"]

_JSON = "application/json"
#: OpenAI's message for a line its batch's window ended before (the error file's lines).
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."
_STEPS = ("validating", "in_progress", "finalizing", "completed")
_ENDED = frozenset({"completed", "expired", "cancelled", "failed"})


def _error(status: int, message: str, type_: str = "invalid_request_error") -> web.Response:
    body = {"error": {"message": message, "type": type_, "param": None, "code": None}}
    return web.Response(status=status, body=orjson.dumps(body), content_type=_JSON)


class BatchService(KeyedService):
    """The files and batches one simulator holds, and the knobs tests turn."""

    protocol = OPENAI

    def __init__(self, sim: Simulator) -> None:
        super().__init__(sim)
        self.files: dict[str, dict[str, Any]] = {}
        self.contents: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self._order: list[str] = []
        self._seq = 0
        #: Batches created (what "never submitted twice" is counted by).
        self.created = 0
        self.uploads = 0
        #: Reads of a batch before it moves one state on.
        self.steps = 1
        self.expire_after: int | None = None
        self.error_every: int | None = None
        self.shuffle = True
        self.hold_upload: asyncio.Event | None = None
        self.hold_create: asyncio.Event | None = None
        self.hold_download: asyncio.Event | None = None
        #: Prompt tokens a model's live batches may hold (None: no limit), the simulator's
        #: count (ceil(characters / 4) of each request's message contents).
        self.enqueued_token_limit: int | None = None
        self.token_limit_failures = 0
        self.peak_live = 0
        #: Every Nth answered line's reply text is `long_reply_chars` long (a line above a
        #: model's `max_body_bytes`), or None.
        self.long_reply_every: int | None = None
        self.long_reply_chars = 64_000
        self._rng = random.Random(sim.profile.seed)

    def install(self, app: web.Application) -> None:
        app.router.add_post("/v1/files", self._guard(self._upload))
        app.router.add_get("/v1/files/{id}/content", self._guard(self._content))
        app.router.add_post("/v1/batches", self._guard(self._create))
        app.router.add_get("/v1/batches", self._guard(self._list))
        app.router.add_get("/v1/batches/{id}", self._guard(self._get))
        app.router.add_post("/v1/batches/{id}/cancel", self._guard(self._cancel))

    def _id(self, prefix: str) -> str:
        self._seq += 1
        return f"{prefix}{self._rng.getrandbits(48):012x}{self._seq:06d}"

    # -- files -------------------------------------------------------------------------------

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        purpose = form.get("purpose")
        upload = form.get("file")
        if purpose != "batch":
            return _error(400, "purpose must be 'batch' here")
        if not isinstance(upload, web.FileField):
            return _error(400, "'file' is a required multipart field")
        data = upload.file.read()
        file_id = self._id("file-")
        meta = {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": upload.filename,
            "purpose": "batch",
        }
        self.files[file_id] = meta
        self.contents[file_id] = data
        self.uploads += 1
        await self._hold(self.hold_upload)
        return web.Response(body=orjson.dumps(meta), content_type=_JSON)

    async def _content(self, request: web.Request) -> web.StreamResponse:
        data = self.contents.get(request.match_info["id"])
        if data is None:
            return _error(404, f"No such File object: {request.match_info['id']}")
        if self.files[request.match_info["id"]].get("purpose") == "batch_output":
            await self._hold(self.hold_download)
        return web.Response(body=data, content_type="application/octet-stream")

    # -- batches -----------------------------------------------------------------------------

    async def _create(self, request: web.Request) -> web.StreamResponse:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _error(400, "We could not parse the JSON body of your request.")
        file_id = body.get("input_file_id") if isinstance(body, dict) else None
        if file_id not in self.files:
            return _error(400, f"No such File object: {file_id}")
        if body.get("endpoint") != "/v1/chat/completions":
            return _error(400, "endpoint must be /v1/chat/completions here")
        if body.get("completion_window") != "24h":
            return _error(400, "completion_window must be '24h'")
        metadata = body.get("metadata")
        if metadata is not None and (not isinstance(metadata, dict) or len(metadata) > 16):
            return _error(400, "metadata: at most 16 key-value pairs")
        now = int(time.time())
        lines = self.contents[file_id].count(b"\n")
        batch: dict[str, Any] = {
            "id": self._id("batch_"),
            "object": "batch",
            "endpoint": "/v1/chat/completions",
            "errors": None,
            "input_file_id": file_id,
            "completion_window": "24h",
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": now,
            "in_progress_at": None,
            "expires_at": now + 86_400,
            "finalizing_at": None,
            "completed_at": None,
            "failed_at": None,
            "expired_at": None,
            "cancelling_at": None,
            "cancelled_at": None,
            "request_counts": {"total": lines, "completed": 0, "failed": 0},
            "metadata": metadata,
        }
        model, tokens = self._prompt_tokens(self.contents[file_id])
        batch["_model"], batch["_tokens"] = model, tokens
        live = [b for b in self.batches.values() if b["status"] not in _ENDED]
        queued = sum(b["_tokens"] for b in live if b["_model"] == model)
        limit = self.enqueued_token_limit
        if limit is not None and queued + tokens > limit:
            batch["_tokens"] = 0  # never enqueued: it fails at validation
            batch["_over"] = (
                f"Enqueued token limit reached for {model} in organization org-simulator. "
                f"Limit: {limit:,} enqueued tokens. Please try again once some in_progress "
                "batches have been completed."
            )
        self.batches[batch["id"]] = batch
        self._order.append(batch["id"])
        self.created += 1
        self.peak_live = max(self.peak_live, len(live) + 1)
        batch["_reads"] = 0
        await self._hold(self.hold_create)
        return self._batch(batch)

    @staticmethod
    def _prompt_tokens(data: bytes) -> tuple[str, int]:
        """The model a batch file asks and its requests' prompt tokens, as the simulator
        counts them when it answers (`estimate_tokens` of the message contents)."""
        model, tokens = "", 0
        for line in data.splitlines():
            body = orjson.loads(line).get("body") or {}
            model = str(body.get("model", model))
            chars = sum(len(str(m.get("content", ""))) for m in body.get("messages") or [])
            tokens += estimate_tokens(chars)
        return model, tokens

    def _batch(self, batch: dict[str, Any]) -> web.Response:
        public = {k: v for k, v in batch.items() if not k.startswith("_")}
        return web.Response(body=orjson.dumps(public), content_type=_JSON)

    async def _get(self, request: web.Request) -> web.StreamResponse:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _error(404, f"No such Batch object: {request.match_info['id']}")
        self._advance(batch)
        return self._batch(batch)

    async def _list(self, request: web.Request) -> web.StreamResponse:
        try:
            limit = max(1, min(100, int(request.query.get("limit", "20"))))
        except ValueError:
            return _error(400, "limit must be an integer")
        newest = list(reversed(self._order))
        after = request.query.get("after")
        if after is not None:
            newest = newest[newest.index(after) + 1 :] if after in newest else []
        page = newest[:limit]
        data = [{k: v for k, v in self.batches[i].items() if not k.startswith("_")} for i in page]
        body = {
            "object": "list",
            "data": data,
            "first_id": page[0] if page else None,
            "last_id": page[-1] if page else None,
            "has_more": len(newest) > limit,
        }
        return web.Response(body=orjson.dumps(body), content_type=_JSON)

    async def _cancel(self, request: web.Request) -> web.StreamResponse:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _error(404, f"No such Batch object: {request.match_info['id']}")
        if batch["status"] in _ENDED:
            return _error(400, f"Cannot cancel a batch with status {batch['status']}.")
        batch["status"] = "cancelling"
        batch["cancelling_at"] = int(time.time())
        return self._batch(batch)

    # -- the batch clock ---------------------------------------------------------------------

    def finish_all(self) -> None:
        """Run every live batch to its end now (what a night at the provider does)."""
        for batch in self.batches.values():
            while batch["status"] not in _ENDED:
                batch["_reads"] = self.steps
                self._advance(batch)

    def _advance(self, batch: dict[str, Any]) -> None:
        """One read of a live batch: after `steps` reads it moves one state on."""
        if batch["status"] in _ENDED:
            return
        batch["_reads"] += 1
        if batch["_reads"] < self.steps:
            return
        batch["_reads"] = 0
        now = int(time.time())
        if batch.get("_over"):  # past the enqueued-token limit: failed at validation
            batch["status"] = "failed"
            batch["failed_at"] = now
            batch["errors"] = {
                "object": "list",
                "data": [
                    {
                        "code": "token_limit_exceeded",
                        "message": batch["_over"],
                        "param": None,
                        "line": None,
                    }
                ],
            }
            self.token_limit_failures += 1
            return
        if batch["status"] == "cancelling":
            self._finish(batch, "cancelled", answered=0)
            batch["cancelled_at"] = now
            return
        state = _STEPS[_STEPS.index(batch["status"]) + 1]
        if state == "completed":
            total = batch["request_counts"]["total"]
            if self.expire_after is not None and self.expire_after < total:
                self._finish(batch, "expired", answered=self.expire_after)
                batch["expired_at"] = now
                return
            self._finish(batch, "completed", answered=total)
            batch["completed_at"] = now
            return
        batch["status"] = state
        batch[f"{state}_at"] = now

    def _finish(self, batch: dict[str, Any], state: str, *, answered: int) -> None:
        """Answer the first `answered` lines with the online responders; the others are
        lines of an expired or cancelled batch (the error file, `batch_expired`/
        `batch_cancelled`). Output lines in a shuffled order when `shuffle` is on."""
        outputs: list[bytes] = []
        errors: list[bytes] = []
        lines = self.contents[batch["input_file_id"]].splitlines()
        for n, line in enumerate(lines):
            request = orjson.loads(line)
            req_id = self._id("batch_req_")
            if n >= answered:
                errors.append(_unrun(req_id, request.get("custom_id"), state))
                continue
            status, out = self._answer(n, request, req_id)
            (outputs if status == 200 else errors).append(out)
        if self.shuffle:
            self._rng.shuffle(outputs)
            self._rng.shuffle(errors)
        for name, found in (("output_file_id", outputs), ("error_file_id", errors)):
            if found:
                file_id = self._id("file-")
                data = b"".join(line + b"\n" for line in found)
                self.files[file_id] = {"id": file_id, "bytes": len(data), "purpose": "batch_output"}
                self.contents[file_id] = data
                batch[name] = file_id
        batch["request_counts"] = {
            "total": len(lines),
            "completed": len(outputs),
            "failed": len(errors),
        }
        batch["status"] = state

    def _answer(self, n: int, request: dict[str, Any], req_id: str) -> tuple[int, bytes]:
        """The `n`-th line's status and output line: the online answer, or a 500 on every
        `error_every`-th line; every `long_reply_every`-th reply made long."""
        if self.error_every and (n + 1) % self.error_every == 0:
            body: Any = {
                "error": {
                    "message": "The server had an error while processing your request.",
                    "type": "server_error",
                    "param": None,
                    "code": None,
                }
            }
            status = 500
        else:
            status, raw = self.sim.answer_openai(orjson.dumps(request.get("body")))
            body = orjson.loads(raw)
            if status == 200 and self.long_reply_every and (n + 1) % self.long_reply_every == 0:
                body["choices"][0]["message"]["content"] = "x" * self.long_reply_chars
        out = orjson.dumps(
            {
                "id": req_id,
                "custom_id": request.get("custom_id"),
                "response": {"status_code": status, "request_id": req_id, "body": body},
                "error": None,
            }
        )
        return status, out


def _unrun(req_id: str, custom_id: Any, state: str) -> bytes:
    """The error-file line of a line its batch ended before (`state`: expired or cancelled)."""
    code = "batch_expired" if state == "expired" else "batch_cancelled"
    message = EXPIRED_MESSAGE if state == "expired" else "The batch was cancelled."
    return orjson.dumps(
        {
            "id": req_id,
            "custom_id": custom_id,
            "response": None,
            "error": {"code": code, "message": message},
        }
    )

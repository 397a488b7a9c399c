"""Anthropic's Messages protocol (POST /v1/messages) as the simulator speaks it.

How a request is read (the service's field list, required `max_tokens` and
`anthropic-version`, a top-level `system`; refused where the real API refuses it: rules.py,
e.g. thinking with a temperature other than 1, a budget not below `max_tokens`, sampling
parameters from Claude Opus 4.7 on) and how answers and errors are worded: a `thinking` block
before the text when thinking is on (its tokens inside `output_tokens`), the
`invalid_request_error`, `authentication_error`, `billing_error`, `permission_error` and
`not_found_error` of a profile's `fatal_status`, a 400 "credit balance is too low" for
`insufficient_quota`, `anthropic-ratelimit-*` headers, the 503 fault as a 529
`overloaded_error`, and a `content_filter` answer as `stop_reason: refusal`.
"""

from __future__ import annotations

import base64
import hmac
import math
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from ibias.prompts.base import Message, stable_hash
from ibias.runner.simulator.answer import thought_text, thought_tokens
from ibias.runner.simulator.protocol import Ask, Dialect, Refusal
from ibias.runner.simulator.rules import (
    ANTHROPIC_FIELDS,
    anthropic_refusal,
    anthropic_thinking,
)

if TYPE_CHECKING:
    from ibias.runner.simulator.answer import Reply
    from ibias.runner.simulator.faults import Bucket, ModelState
    from ibias.runner.simulator.server import Simulator


def _anthropic_error(type_: str, message: str) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": type_, "message": message}})


def _bad(message: str) -> Refusal:
    return 400, _anthropic_error("invalid_request_error", message)


_ANTHROPIC_BAD_KEY = _anthropic_error("authentication_error", "invalid x-api-key")
_ANTHROPIC_LOW_CREDIT = _anthropic_error(
    "invalid_request_error",
    "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing "
    "to upgrade or purchase credits.",
)
_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "content_filter": "refusal"}
#: What a `stop_reason: refusal` answer explains (Anthropic adds `stop_details`).
ANTHROPIC_REFUSAL_EXPLANATION = "This request was declined by the safety classifiers."


def _anthropic_text(content: Any, where: str) -> str:
    """A Messages `content` (or `system`): a string or a list of text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for block in content:
            if not isinstance(block, Mapping) or block.get("type") != "text":
                raise ValueError(f"{where}: only text blocks are simulated")
            text = block.get("text")
            if not isinstance(text, str):
                raise ValueError(f"{where}: a text block needs a string 'text'")
            texts.append(text)
        return "".join(texts)
    raise ValueError(f"{where}: Input should be a valid string or a list of blocks")


def _anthropic_params(body: dict[str, Any]) -> tuple[str, int]:
    """The request's model and `max_tokens`, its other fields checked as the service checks
    them, in the service's order. Raises ValueError with the service's message."""
    for key in body:
        if key not in ANTHROPIC_FIELDS:
            raise ValueError(f"{key}: Extra inputs are not permitted")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ValueError("model: Field required")
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise ValueError("max_tokens: Field required")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ValueError("max_tokens: Input should be a positive integer")
    temperature = body.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not 0 <= temperature <= 1
    ):
        raise ValueError("temperature: range: 0..1")
    refused = anthropic_refusal(model, body, max_tokens)  # what the real API refuses
    if refused is not None:
        raise ValueError(refused)
    if body.get("stream"):
        raise ValueError("stream: the simulator does not stream")
    return model, max_tokens


def _anthropic_messages(body: dict[str, Any]) -> tuple[Message, ...]:
    """The chat a request holds (its `system` first, as a system message). Raises ValueError
    with the service's message."""
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise ValueError("messages: at least one message is required")
    messages: list[Message] = []
    if "system" in body:
        messages.append({"role": "system", "content": _anthropic_text(body["system"], "system")})
    for i, m in enumerate(raw_messages):
        if not isinstance(m, Mapping):
            raise ValueError(f"messages.{i}: Input should be an object")
        role = m.get("role")
        if role not in ("user", "assistant"):
            raise ValueError(
                f'messages.{i}.role: Unexpected role "{role}". The Messages API accepts '
                'a top-level `system` parameter, not "system" as an input message role.'
            )
        messages.append(
            {"role": role, "content": _anthropic_text(m.get("content"), f"messages.{i}")}
        )
    return tuple(messages)


def _signature(ask: Ask) -> str:
    """A thinking block's opaque `signature`: deterministic in the model and the chat."""
    digest = stable_hash(["anthropic-signature", ask.model, list(ask.messages)])
    return base64.b64encode(bytes.fromhex(digest)).decode()


def _rfc3339(epoch: float) -> str:
    """A reset time the way `anthropic-ratelimit-*-reset` writes it (whole seconds, UTC)."""
    return datetime.fromtimestamp(math.ceil(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class AnthropicProtocol(Dialect):
    """POST /v1/messages, Anthropic's Messages protocol."""

    def authorized(self, request: web.Request, key: str) -> bool:
        """`x-api-key`, or `Authorization: Bearer` (what the official SDK sends today)."""
        given = request.headers.get("x-api-key")
        if given is None:
            auth = request.headers.get("Authorization", "")
            given = auth[7:] if auth[:7].lower() == "bearer " else ""
        return hmac.compare_digest(given.encode(), key.encode())

    def unauthorized(self) -> Refusal:
        return 401, _ANTHROPIC_BAD_KEY

    def read(self, request: web.Request, raw: bytes) -> Ask | Refusal:
        if not request.headers.get("anthropic-version"):
            return _bad("anthropic-version: header is required")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return _bad("There was an error parsing the body of your request as JSON.")
        if not isinstance(body, dict):
            return _bad("The request body must be a JSON object.")
        try:
            model, max_tokens = _anthropic_params(body)
            messages = _anthropic_messages(body)
        except ValueError as exc:
            return _bad(str(exc))
        thinking, shown = anthropic_thinking(model, body)
        return Ask(model, messages, max_tokens, thinking, show_thoughts=shown)

    def fatal(self, status: int, model: str) -> Refusal:
        if status == 401:
            return 401, _ANTHROPIC_BAD_KEY
        if status == 402:
            return 402, _anthropic_error(
                "billing_error", "There is an issue with your billing or payment information."
            )
        if status == 403:
            return 403, _anthropic_error(
                "permission_error",
                "Your API key does not have permission to use the specified resource.",
            )
        if status == 404:
            return 404, _anthropic_error("not_found_error", f"model: {model}")
        return 400, _anthropic_error("invalid_request_error", "Invalid request.")

    def quota(self, state: ModelState) -> Refusal:
        return 400, _ANTHROPIC_LOW_CREDIT

    def headers(self, request_id: str) -> dict[str, str]:
        return {"request-id": request_id}

    def limit_headers(self, state: ModelState, headers: dict[str, str]) -> None:
        wall = time.time()
        for name, bucket in (("requests", state.requests), ("tokens", state.tokens)):
            if bucket is not None:
                headers[f"anthropic-ratelimit-{name}-limit"] = str(bucket.limit)
                headers[f"anthropic-ratelimit-{name}-remaining"] = str(bucket.remaining())
                headers[f"anthropic-ratelimit-{name}-reset"] = _rfc3339(wall + bucket.reset_s())

    def rate_limited(
        self,
        state: ModelState,
        kind: str,
        bucket: Bucket,
        wait: float,
        requested: float,
        headers: dict[str, str],
    ) -> bytes:
        unit = "requests" if kind == "requests" else "input and output tokens"
        headers["retry-after"] = str(max(1, math.ceil(wait)))
        return _anthropic_error(
            "rate_limit_error",
            f"This request would exceed your organization's rate limit of {bucket.limit} {unit} "
            f"per minute (model: {state.name}). For details, refer to: "
            "https://docs.claude.com/en/api/rate-limits. You can see the response headers for "
            "current usage. Please reduce the prompt length or the maximum tokens requested, "
            "or try again later.",
        )

    def burst(self, state: ModelState, wait: float, headers: dict[str, str]) -> bytes:
        headers["retry-after"] = str(max(1, math.ceil(wait)))
        return _anthropic_error(
            "rate_limit_error",
            "Your organization's usage increased sharply; please ramp up traffic gradually.",
        )

    def overloaded(self, headers: dict[str, str]) -> Refusal:
        headers["retry-after"] = "1"
        return 529, _anthropic_error("overloaded_error", "Overloaded")

    def server_error(self) -> bytes:
        return _anthropic_error("api_error", "Internal server error")

    def thoughts(self, ask: Ask, prompt_tokens: int) -> int:
        """Thinking tokens when thinking is on (rules.py `anthropic_thinking`)."""
        return thought_tokens(ask.thinking, prompt_tokens)

    def success(
        self,
        sim: Simulator,
        state: ModelState,
        ask: Ask,
        reply: Reply,
        latency: float,
        headers: dict[str, str],
    ) -> bytes:
        content, finish = reply.content, reply.finish
        blocks: list[dict[str, Any]] = []
        if ask.thinking is not None and finish != "content_filter":
            # The thinking block comes before the text and its tokens are inside
            # `output_tokens` (docs.claude.com/en/docs/build-with-claude/extended-thinking);
            # an omitted display leaves its text empty, its signature is always there.
            blocks.append(
                {
                    "type": "thinking",
                    "thinking": thought_text(ask.messages) if ask.show_thoughts else "",
                    "signature": _signature(ask),
                }
            )
        if content:
            blocks.append({"type": "text", "text": content})
        body: dict[str, Any] = {
            "id": f"msg_{sim.response_id()}",
            "type": "message",
            "role": "assistant",
            "model": state.reported,
            "content": blocks,
            "stop_reason": _ANTHROPIC_STOP.get(finish, finish),
            "stop_sequence": None,
            "usage": {
                "input_tokens": reply.prompt_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": reply.completion_tokens + reply.thoughts,
            },
        }
        if finish == "content_filter":
            body["stop_details"] = {
                "type": "refusal",
                "category": None,
                "explanation": ANTHROPIC_REFUSAL_EXPLANATION,
            }
        return orjson.dumps(body)


#: The one Anthropic protocol object (the batch services and tests use it too).
ANTHROPIC = AnthropicProtocol()

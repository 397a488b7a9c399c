"""OpenAI's chat-completions protocol (POST /v1/chat/completions) as the simulator speaks it.

How a request is read and refused when malformed or when the real API refuses it (unknown
fields, a reasoning model's `max_tokens`, `temperature` or logprobs: rules.py), and how answers,
errors and rate-limit hints are worded: OpenAI's error codes for a profile's `fatal_status`, a
429 `insufficient_quota`, `x-ratelimit-*` and `retry-after(-ms)` headers, the 503 fault as
OpenAI's overloaded answer, token logprobs on request with `top_logprobs` alternatives
(logprobs.py), a reasoning model's `completion_tokens_details.reasoning_tokens` and the
`system_fingerprint`.
"""

from __future__ import annotations

import hmac
import math
import time
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from ibias.runner.simulator.answer import normalize_messages, thought_tokens
from ibias.runner.simulator.logprobs import token_logprobs
from ibias.runner.simulator.protocol import Ask, Dialect, Refusal
from ibias.runner.simulator.rules import openai_refusal, openai_thinking

if TYPE_CHECKING:
    from ibias.runner.simulator.answer import Reply
    from ibias.runner.simulator.faults import Bucket, ModelState
    from ibias.runner.simulator.server import Simulator

_ORG = "org-simulator"


def format_duration(seconds: float) -> str:
    """A reset duration the way OpenAI's `x-ratelimit-reset-*` headers write it
    ("20ms", "1.5s", "6m0s")."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"
    minutes, rest = divmod(seconds, 60)
    rest_text = f"{rest:.3f}".rstrip("0").rstrip(".")
    return f"{int(minutes)}m{rest_text}s"


def _error(message: str, type_: str, code: str | None, param: str | None = None) -> bytes:
    return orjson.dumps(
        {"error": {"message": message, "type": type_, "param": param, "code": code}}
    )


_BODY_500 = _error(
    "The server had an error while processing your request. Sorry about that!", "server_error", None
)
_BODY_503 = _error("The server is overloaded or not ready yet.", "server_error", None)
_BODY_401 = _error(
    "Incorrect API key provided. You can find your API key at "
    "https://platform.openai.com/account/api-keys.",
    "invalid_request_error",
    "invalid_api_key",
)
_BODY_QUOTA = _error(
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, read the docs: "
    "https://platform.openai.com/docs/guides/error-codes/api-errors.",
    "insufficient_quota",
    "insufficient_quota",
)


def _fatal_body(status: int, model: str) -> bytes:
    if status == 401:
        return _BODY_401
    if status == 402:
        return _error(
            "Insufficient credits: your account balance cannot pay for this request.",
            "invalid_request_error",
            "payment_required",
        )
    if status == 403:
        return _error(
            f"You are not allowed to use the model `{model}`.",
            "invalid_request_error",
            "permission_denied",
        )
    if status == 404:
        return _error(
            f"The model `{model}` does not exist or you do not have access to it.",
            "invalid_request_error",
            "model_not_found",
        )
    return _error("Invalid request.", "invalid_request_error", None)


def openai_bad_request(
    message: str, param: str | None = None, code: str | None = None, status: int = 400
) -> Refusal:
    """OpenAI's `invalid_request_error` (a 400 unless said) naming the parameter at fault."""
    return status, _error(message, "invalid_request_error", code, param)


def _limit_headers(state: ModelState, headers: dict[str, str]) -> None:
    rb, tb = state.requests, state.tokens
    if rb is not None:
        headers["x-ratelimit-limit-requests"] = str(rb.limit)
        headers["x-ratelimit-remaining-requests"] = str(rb.remaining())
        headers["x-ratelimit-reset-requests"] = format_duration(rb.reset_s())
    if tb is not None:
        headers["x-ratelimit-limit-tokens"] = str(tb.limit)
        headers["x-ratelimit-remaining-tokens"] = str(tb.remaining())
        headers["x-ratelimit-reset-tokens"] = format_duration(tb.reset_s())


class OpenAIProtocol(Dialect):
    """POST /v1/chat/completions, OpenAI's chat-completions protocol."""

    def authorized(self, request: web.Request, key: str) -> bool:
        given = request.headers.get("Authorization", "").encode()
        return hmac.compare_digest(given, f"Bearer {key}".encode())

    def unauthorized(self) -> Refusal:
        return 401, _BODY_401

    def read(self, request: web.Request, raw: bytes) -> Ask | Refusal:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return openai_bad_request("We could not parse the JSON body of your request.")
        if not isinstance(body, dict):
            return openai_bad_request("The request body must be a JSON object.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return openai_bad_request("you must provide a model parameter", "model")
        refused = openai_refusal(model, body)  # what the real API refuses (rules.py)
        if refused is not None:
            return openai_bad_request(refused.message, refused.param, refused.code, refused.status)
        raw_messages = body.get("messages")
        if not isinstance(raw_messages, list) or not raw_messages:
            return openai_bad_request("'messages' must be a non-empty array", "messages")
        try:
            messages = normalize_messages(raw_messages)
        except ValueError as exc:
            return openai_bad_request(str(exc), "messages")
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            return openai_bad_request("max_tokens must be a positive integer", "max_tokens")
        if body.get("stream"):
            return openai_bad_request("the simulator does not stream", "stream")
        logprobs = body.get("logprobs")
        top = body.get("top_logprobs")
        if logprobs is not None and not isinstance(logprobs, bool):
            return openai_bad_request("logprobs must be a boolean", "logprobs")
        if top is not None:
            if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= 20:
                return openai_bad_request(
                    "top_logprobs must be an integer from 0 to 20", "top_logprobs"
                )
            if not logprobs:
                return openai_bad_request(
                    "logprobs must be set to true when top_logprobs is set", "top_logprobs"
                )
        asked = (top or 0) if logprobs else None
        return Ask(model, messages, max_tokens, openai_thinking(model, body), logprobs=asked)

    def fatal(self, status: int, model: str) -> Refusal:
        return status, _fatal_body(status, model)

    def quota(self, state: ModelState) -> Refusal:
        return 429, _BODY_QUOTA

    def headers(self, request_id: str) -> dict[str, str]:
        return {"x-request-id": request_id, "openai-version": "2020-10-01"}

    def limit_headers(self, state: ModelState, headers: dict[str, str]) -> None:
        _limit_headers(state, headers)

    def rate_limited(
        self,
        state: ModelState,
        kind: str,
        bucket: Bucket,
        wait: float,
        requested: float,
        headers: dict[str, str],
    ) -> bytes:
        unit = "requests per min (RPM)" if kind == "requests" else "tokens per min (TPM)"
        used = bucket.limit - bucket.remaining()
        wait_text = format_duration(wait)
        message = (
            f"Rate limit reached for {state.name} in organization {_ORG} on {unit}: "
            f"Limit {bucket.limit}, Used {used}, Requested {int(requested)}. "
            f"Please try again in {wait_text}. Visit "
            "https://platform.openai.com/account/rate-limits to learn more."
        )
        headers["retry-after"] = str(max(1, math.ceil(wait)))
        headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
        return _error(message, kind, "rate_limit_exceeded")

    def burst(self, state: ModelState, wait: float, headers: dict[str, str]) -> bytes:
        message = (
            f"Too many requests for {state.name} right now. "
            f"Please try again in {format_duration(wait)}."
        )
        headers["retry-after"] = str(max(1, math.ceil(wait)))
        headers["retry-after-ms"] = str(math.ceil(wait * 1000))
        return _error(message, "requests", "rate_limit_exceeded")

    def overloaded(self, headers: dict[str, str]) -> Refusal:
        headers["Retry-After"] = "1"
        return 503, _BODY_503

    def server_error(self) -> bytes:
        return _BODY_500

    def thoughts(self, ask: Ask, prompt_tokens: int) -> int:
        """A reasoning model's reasoning tokens (rules.py `openai_thinking`)."""
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
        content = reply.content
        prompt_tokens = reply.prompt_tokens
        # OpenAI counts the reasoning inside `completion_tokens` and tells it apart in
        # `completion_tokens_details` (platform.openai.com/docs/guides/reasoning).
        completion_tokens = reply.completion_tokens + reply.thoughts
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if ask.thinking is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": 0, "audio_tokens": 0}
            usage["completion_tokens_details"] = {
                "reasoning_tokens": reply.thoughts,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            }
        payload = orjson.dumps(
            {
                "id": f"chatcmpl-{sim.response_id()}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": state.reported,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": None},
                        "logprobs": None
                        if ask.logprobs is None
                        else {
                            "content": token_logprobs(
                                sim.profile.seed,
                                state.name,
                                ask.messages,
                                reply.persona,
                                content,
                                ask.logprobs,
                            ),
                            "refusal": None,
                        },
                        "finish_reason": reply.finish,
                    }
                ],
                "usage": usage,
                "system_fingerprint": state.fingerprint,
            }
        )
        headers["openai-processing-ms"] = str(round(latency * 1000))
        return payload


#: The one OpenAI protocol object (the batch services and tests use it too).
OPENAI = OpenAIProtocol()

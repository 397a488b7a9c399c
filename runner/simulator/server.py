"""A simulated LLM provider over loopback HTTP, speaking three protocols side by side:
OpenAI chat completions (POST /v1/chat/completions), Anthropic Messages (POST /v1/messages) and
Gemini generateContent (POST /v1beta/models/{model}:generateContent).

Tests, the demo and the benchmarks need a provider that misbehaves the way real ones do
(latency, 5xx, 429 bursts, hangs, dropped connections, broken bodies, RPM/TPM enforcement)
while answering deterministically, so that a retried or resumed trial gets the same answer.
Two sources of randomness keep those apart:

* the answer is a function of (model name, messages, profile seed) only:
  `rng_for(seed, "answer", model, messages)` drives refusals, the experiment responders of
  the registered experiments' responders and the filler text for prompts no responder knows;
* faults and latency come from one per-server request stream, so a retry can succeed.

The protocols differ only where the providers do: how a request is read (and refused when
malformed), and how answers, refusals, errors and rate-limit hints are worded (see `_Dialect`).
Everything else is one simulator: a chat gets the same answer in every protocol, a model's
limits, bursts and faults are the same whichever protocol reaches it, and the counts are shared.
A profile's keys read the same in every protocol, worded as each provider words them:

* `fatal_status` 400/401/402/403/404: OpenAI's error codes; Anthropic's `invalid_request_error`,
  `authentication_error`, `billing_error`, `permission_error`, `not_found_error`; Gemini's
  INVALID_ARGUMENT, a 400 with reason API_KEY_INVALID (how Gemini says "bad key"), a 400
  FAILED_PRECONDITION (billing not enabled), PERMISSION_DENIED, NOT_FOUND.
* `insufficient_quota`: OpenAI's 429 `insufficient_quota`; Anthropic's 400 "credit balance is
  too low"; Gemini's 429 naming a used-up `PerDay` quota (with the short RetryInfo Google sends
  anyway, which a client must not obey).
* RPM/TPM enforcement: OpenAI's `x-ratelimit-*` and `retry-after(-ms)`; Anthropic's
  `anthropic-ratelimit-{requests,tokens}-*` and `retry-after`; Gemini announces nothing in
  headers and answers RESOURCE_EXHAUSTED naming the per-minute quota, its value and a
  `RetryInfo.retryDelay`. `hide_limits` enforces the same limits but announces them nowhere:
  no rate-limit headers in any protocol, and its 429s are worded as a burst's (naming no limit;
  Gemini's names no quota).
* faults: the 503 fault is Anthropic's 529 `overloaded_error` and Gemini's 503 UNAVAILABLE; a
  429 burst is Gemini's bare RESOURCE_EXHAUSTED (no quota, no delay).
* a `content_filter` answer is Anthropic's `stop_reason: refusal` and, per prompt, Gemini's
  blocked candidate (`finishReason`) or blocked prompt (`promptFeedback.blockReason`, no
  candidates); see `gemini_block`. Gemini reports thought tokens when the request asks for
  thinking (`gemini_thoughts`).

Token logprobs (OpenAI's `logprobs: true` with `top_logprobs`) come back as
`choices[0].logprobs.content` (`token_logprobs`): the reply split into short tokens, and, where
a registered experiment says the reply chooses (`ExperimentUnit.choice_tokens`), the
alternatives with the probabilities the choice was drawn with. A model's `refuse_logprobs`
answers such a request with OpenAI's 400 naming the `logprobs` parameter.

A model's `drift_after = N` makes it report a newer version (`DRIFTED_VERSION_SUFFIX`) from its
N+1-th answer on, as a provider updating a model behind a stable name does (store/drift.py).

The server is built for throughput (thousands of requests per second at zero latency): no
per-request logging, orjson bodies, precomputed per-model constants, and sleeps that are
`asyncio.sleep`, never blocking.
"""

from __future__ import annotations

import asyncio
import hmac
import math
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, cast

import orjson
from aiohttp import web

from ibias.prompts import registry
from ibias.prompts.base import Message, Persona, rng_for, stable_hash
from ibias.runner.providers.params import rule_for
from ibias.runner.sim_profile import FAULT_KINDS, ModelProfile, SimProfile

REFUSAL_TEXT = "I'm sorry, but I can't help with that."
#: Share of refusals that come back as an empty `content_filter` completion.
CONTENT_FILTER_SHARE = 0.25
#: Suffix of the versioned model name reported in bodies (providers report dated snapshots).
MODEL_VERSION_SUFFIX = "-sim-2026-01"
#: ... and after a profile's `drift_after` answers, the newer snapshot it reports instead.
DRIFTED_VERSION_SUFFIX = "-sim-2026-02"
#: A triggered 429 burst lasts this long and refuses up to `BURST_EXTRA` further requests.
BURST_S = 0.5
BURST_EXTRA = 3
#: Rate-limit admission tolerates a request this early (scheduler jitter of a paced client).
JITTER_TOLERANCE_S = 0.05

_ORG = "org-simulator"
_FILLER_WORDS = (
    "the answer depends on context and on what you need most",
    "there are several ways to look at this question",
    "a careful reading of the details helps",
    "in practice the simplest option is often the best one",
    "it is worth checking the assumptions first",
    "each approach has trade-offs that matter in different situations",
    "the evidence points in more than one direction",
    "a short summary follows",
    "this is a general overview rather than specific advice",
    "more information would allow a more precise answer",
)

Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]


# --------------------------------------------------------------------------------------------
# Values


@dataclass(frozen=True)
class SimStats:
    """A snapshot of what the simulator has seen and sent.

    `served` counts completed answers actually sent (faults, refusals by rate limit and fatal
    rejections never count); `served_by_prompt` is keyed by (model, `prompt_hash(messages)`).
    `faults` has every kind of `FAULT_KINDS`; `rate_limited` counts 429s from RPM/TPM
    enforcement only (fault 429s are `faults["429"]`).
    """

    requests: int
    served: int
    faults: Mapping[str, int]
    rate_limited: int
    rate_limited_by: Mapping[str, int]
    rejected_by_status: Mapping[int, int]
    in_flight: int
    in_flight_peak: int
    served_by_model: Mapping[str, int]
    served_by_prompt: Mapping[tuple[str, str], int]

    @property
    def fault_total(self) -> int:
        return sum(self.faults.values())

    @property
    def rejected(self) -> int:
        return sum(self.rejected_by_status.values())

    def to_json(self, *, prompts: bool = True) -> dict[str, Any]:
        """JSON-able form (what `GET /stats` returns); per-prompt counts nest model -> hash."""
        by_prompt: dict[str, dict[str, int]] = {}
        if prompts:
            for (model, digest), n in self.served_by_prompt.items():
                by_prompt.setdefault(model, {})[digest] = n
        return {
            "requests": self.requests,
            "served": self.served,
            "faults": dict(self.faults),
            "rate_limited": self.rate_limited,
            "rate_limited_by": dict(self.rate_limited_by),
            "rejected_by_status": {str(k): v for k, v in self.rejected_by_status.items()},
            "in_flight": self.in_flight,
            "in_flight_peak": self.in_flight_peak,
            "served_by_model": dict(self.served_by_model),
            "served_by_prompt": by_prompt,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SimStats:
        """Inverse of `to_json`, for tests that read `/stats` from a simulator subprocess."""
        by_prompt = {
            (model, digest): int(n)
            for model, digests in data.get("served_by_prompt", {}).items()
            for digest, n in digests.items()
        }
        return cls(
            requests=int(data["requests"]),
            served=int(data["served"]),
            faults=MappingProxyType(dict(data["faults"])),
            rate_limited=int(data["rate_limited"]),
            rate_limited_by=MappingProxyType(dict(data["rate_limited_by"])),
            rejected_by_status=MappingProxyType(
                {int(k): int(v) for k, v in data["rejected_by_status"].items()}
            ),
            in_flight=int(data["in_flight"]),
            in_flight_peak=int(data["in_flight_peak"]),
            served_by_model=MappingProxyType(dict(data["served_by_model"])),
            served_by_prompt=MappingProxyType(by_prompt),
        )


def normalize_messages(messages: Sequence[Mapping[str, Any]]) -> tuple[Message, ...]:
    """Messages reduced to what a model sees: role and text content.

    OpenAI also accepts content as a list of parts; their text parts are joined. Raises
    ValueError on anything that is not a chat message.
    """
    out: list[Message] = []
    for m in messages:
        if not isinstance(m, Mapping):
            raise ValueError("each message must be an object")
        role = m.get("role")
        content = m.get("content")
        if not isinstance(role, str):
            raise ValueError("each message needs a string 'role'")
        if isinstance(content, list):
            content = "".join(
                str(part.get("text", ""))
                for part in content
                if isinstance(part, Mapping) and part.get("type") == "text"
            )
        elif content is None:
            content = ""
        elif not isinstance(content, str):
            raise ValueError("message 'content' must be a string or a list of parts")
        out.append({"role": role, "content": content})
    return tuple(out)


def prompt_hash(messages: Sequence[Mapping[str, Any]]) -> str:
    """SHA-256 of the canonical JSON of the normalized messages (the served-count key)."""
    return stable_hash(list(normalize_messages(messages)))


def estimate_tokens(text_chars: int) -> int:
    """Token estimate the simulator reports and charges: ceil(chars / 4)."""
    return (text_chars + 3) // 4


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


def answer_for(
    seed: int, model: str, messages: tuple[Message, ...], persona: Persona
) -> tuple[str, str]:
    """(content, finish_reason) of `model` for `messages`: deterministic in its arguments.

    The refusal draw always happens first, so raising a model's refusal rate refuses a superset
    of the prompts it refused before and leaves every other answer unchanged. Responders get a
    persona with refusal_rate 0: refusals are decided here, once, so the profile's rate is the
    rate a client observes; and answering as (seed, model), which keys the persona's person and
    name effects (`Persona.answering_as`).
    """
    rng = rng_for(seed, "answer", model, messages)
    if rng.random() < persona.refusal_rate:
        if rng.random() < CONTENT_FILTER_SHARE:
            return "", "content_filter"
        return REFUSAL_TEXT, "stop"
    answering = replace(persona.answering_as(seed, model), refusal_rate=0.0)
    for responder in registry.responders():
        text = responder(messages, answering, rng)
        if text is not None:
            return text, "stop"
    return _filler(rng), "stop"


#: The logprob of a token no experiment chooses at (the simulator is sure of it).
PLAIN_LOGPROB = -0.02
_PIECE = re.compile(r"\s+\S{1,4}|\S{1,4}|\s+")


def _token(text: str, logprob: float) -> dict[str, Any]:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode())}


def token_logprobs(
    seed: int,
    model: str,
    messages: tuple[Message, ...],
    persona: Persona,
    content: str,
    top: int,
) -> list[dict[str, Any]]:
    """`choices[0].logprobs.content` for `content`, `top` alternatives per token at most.

    The reply is cut into pieces of up to four characters with their leading space (a rough
    stand-in for a tokenizer); each is certain (`PLAIN_LOGPROB`, itself its only
    alternative) except at the token where a registered experiment says the reply chooses
    (`ExperimentUnit.choice_tokens`, asked with the persona the answer was drawn with), whose
    alternatives carry the choice's probabilities. Deterministic in its arguments."""
    answering = replace(persona.answering_as(seed, model), refusal_rate=0.0)
    choice = None
    for choose in registry.choice_tokens():
        choice = choose(messages, answering, content)
        if choice is not None:
            break
    spans = (
        [(content, None)]
        if choice is None
        else [
            (content[: choice.start], None),
            (content[choice.start : choice.end], choice.alternatives),
            (content[choice.end :], None),
        ]
    )
    out: list[dict[str, Any]] = []
    for text, alternatives in spans:
        if alternatives is None:
            for piece in _PIECE.findall(text):
                plain = _token(piece, PLAIN_LOGPROB)
                out.append({**plain, "top_logprobs": [plain] if top > 0 else []})
            continue
        tops = [_token(t, math.log(p)) for t, p in alternatives if p > 0.0]
        written = next((a for a in tops if a["token"] == text), None)
        logprob = written["logprob"] if written is not None else PLAIN_LOGPROB
        out.append({**_token(text, logprob), "top_logprobs": tops[:top]})
    return out


def _filler(rng: random.Random) -> str:
    """Text for a prompt no responder knows."""
    sentences = []
    for _ in range(rng.randint(2, 4)):
        clause = rng.choice(_FILLER_WORDS)
        if rng.random() < 0.5:
            clause = f"{clause}, and {rng.choice(_FILLER_WORDS)}"
        sentences.append(clause[0].upper() + clause[1:] + ".")
    return " ".join(sentences)


# --------------------------------------------------------------------------------------------
# Rate limiting


class _Bucket:
    """A provider-side token bucket holding about one second of a per-minute limit.

    Capacity is max(limit/60, 1) units and it refills continuously at limit/60 per second, so a
    burst of a minute's worth in the first second is mostly refused while a client pacing evenly
    at the limit always finds a unit. A request is admitted when the level reaches its cost
    (capped at capacity, so one request larger than a second's tokens is still servable) minus
    `JITTER_TOLERANCE_S` worth of refill: a paced client whose sends wobble by a few ms is never
    refused, and the level may dip below zero by at most that tolerance plus an oversize cost.
    """

    __slots__ = ("capacity", "level", "limit", "rate", "stamp", "tolerance")

    def __init__(self, per_minute: int, now: float) -> None:
        self.limit = per_minute
        self.rate = per_minute / 60.0
        self.capacity = max(self.rate, 1.0)
        self.tolerance = self.rate * JITTER_TOLERANCE_S
        self.level = self.capacity
        self.stamp = now

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
            self.stamp = now

    def shortfall(self, cost: float) -> float:
        """Seconds until `cost` would be admitted (0 = admit now)."""
        need = min(cost, self.capacity) - self.tolerance
        if self.level >= need:
            return 0.0
        return (need - self.level) / self.rate

    def remaining(self) -> int:
        """Remaining units in the per-minute terms of the limit headers."""
        if self.level <= 0:
            return 0
        return min(self.limit, int(self.level * self.limit / self.capacity))

    def reset_s(self) -> float:
        return max(0.0, (self.capacity - self.level) / self.rate)


class _ModelState:
    """Per-model constants and mutable limiter/burst state, created on first request."""

    __slots__ = (
        "burst_left",
        "burst_until",
        "fault_table",
        "fault_total",
        "fingerprint",
        "name",
        "profile",
        "reported",
        "requests",
        "tokens",
    )

    def __init__(self, name: str, profile: ModelProfile, seed: int, now: float) -> None:
        self.name = name
        self.profile = profile
        self.reported = f"{name}{MODEL_VERSION_SUFFIX}"
        self.fingerprint = "fp_" + stable_hash(["fingerprint", seed, name])[:10]
        self.requests = _Bucket(profile.rpm, now) if profile.rpm else None
        self.tokens = _Bucket(profile.tpm, now) if profile.tpm else None
        self.burst_until = 0.0
        self.burst_left = 0
        cumulative = 0.0
        table: list[tuple[float, str]] = []
        for kind in FAULT_KINDS:
            rate = profile.faults.get(kind, 0.0)
            if rate > 0:
                cumulative += rate
                table.append((cumulative, kind))
        self.fault_table = tuple(table)
        self.fault_total = cumulative


# --------------------------------------------------------------------------------------------
# Protocols: how a request is read and how each answer is worded


@dataclass(frozen=True)
class _Ask:
    """A completion request reduced to what the simulator answers from.

    `thinking` is the thinking the request asked for (Gemini's `thinkingConfig`): None for
    none, -1 for dynamic, else a token budget; it decides the thought tokens reported.
    """

    model: str
    messages: tuple[Message, ...]
    max_tokens: int | None
    thinking: int | None = None
    logprobs: int | None = None
    """Token logprobs asked for (OpenAI's `logprobs: true`): the `top_logprobs` count, 0 when
    not given; None when not asked."""


#: A request refused before it is served: status and body.
_Refusal = tuple[int, bytes]


class _Dialect:
    """One provider protocol. The simulator's behaviour (answers, limits, faults, latency) is
    the same in every protocol; only the reading of requests and the wording of answers,
    errors and rate-limit headers differ."""

    def authorized(self, request: web.Request, key: str) -> bool:
        raise NotImplementedError

    def unauthorized(self) -> _Refusal:
        raise NotImplementedError

    def read(self, request: web.Request, raw: bytes) -> _Ask | _Refusal:
        raise NotImplementedError

    def fatal(self, status: int, model: str) -> _Refusal:
        raise NotImplementedError

    def quota(self, state: _ModelState) -> _Refusal:
        """The answer of an account that cannot pay (`insufficient_quota` in a profile)."""
        raise NotImplementedError

    def headers(self, request_id: str) -> dict[str, str]:
        return {}

    def limit_headers(self, state: _ModelState, headers: dict[str, str]) -> None:
        """Announce the model's limits on an admitted or rate-limited answer."""

    def rate_limited(
        self,
        state: _ModelState,
        kind: str,
        bucket: _Bucket,
        wait: float,
        requested: float,
        headers: dict[str, str],
    ) -> bytes:
        """The body of a 429 from RPM/TPM enforcement (sets the protocol's hint headers)."""
        raise NotImplementedError

    def burst(self, state: _ModelState, wait: float, headers: dict[str, str]) -> bytes:
        """The body of a 429 from a transient burst."""
        raise NotImplementedError

    def overloaded(self, headers: dict[str, str]) -> _Refusal:
        """The `503` fault: the protocol's own overloaded answer."""
        raise NotImplementedError

    def server_error(self) -> bytes:
        """The body of the `500` fault."""
        raise NotImplementedError

    def thoughts(self, ask: _Ask, prompt_tokens: int) -> int:
        """Thinking tokens to report (and charge) for this request."""
        return 0

    def success(
        self,
        sim: Simulator,
        state: _ModelState,
        ask: _Ask,
        answer: tuple[str, str],
        usage: tuple[int, int, int],
        latency: float,
        headers: dict[str, str],
    ) -> bytes:
        """The body of a completed answer; `usage` is (prompt, completion, thought) tokens."""
        raise NotImplementedError


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
_BODY_MALFORMED = b"<html><head><title>502 Bad Gateway</title></head><body>upstream</body></html>"
_JSON = "application/json"


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


def _openai_bad_request(message: str, param: str | None = None) -> _Refusal:
    return 400, _error(message, "invalid_request_error", None, param)


class _OpenAI(_Dialect):
    """POST /v1/chat/completions, OpenAI's chat-completions protocol."""

    def authorized(self, request: web.Request, key: str) -> bool:
        given = request.headers.get("Authorization", "").encode()
        return hmac.compare_digest(given, f"Bearer {key}".encode())

    def unauthorized(self) -> _Refusal:
        return 401, _BODY_401

    def read(self, request: web.Request, raw: bytes) -> _Ask | _Refusal:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return _openai_bad_request("We could not parse the JSON body of your request.")
        if not isinstance(body, dict):
            return _openai_bad_request("The request body must be a JSON object.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return _openai_bad_request("you must provide a model parameter", "model")
        raw_messages = body.get("messages")
        if not isinstance(raw_messages, list) or not raw_messages:
            return _openai_bad_request("'messages' must be a non-empty array", "messages")
        try:
            messages = normalize_messages(raw_messages)
        except ValueError as exc:
            return _openai_bad_request(str(exc), "messages")
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            return _openai_bad_request("max_tokens must be a positive integer", "max_tokens")
        if body.get("stream"):
            return _openai_bad_request("the simulator does not stream", "stream")
        logprobs = body.get("logprobs")
        top = body.get("top_logprobs")
        if logprobs is not None and not isinstance(logprobs, bool):
            return _openai_bad_request("logprobs must be a boolean", "logprobs")
        if top is not None:
            if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= 20:
                return _openai_bad_request(
                    "top_logprobs must be an integer from 0 to 20", "top_logprobs"
                )
            if not logprobs:
                return _openai_bad_request(
                    "logprobs must be set to true when top_logprobs is set", "top_logprobs"
                )
        asked = (top or 0) if logprobs else None
        return _Ask(model, messages, max_tokens, logprobs=asked)

    def fatal(self, status: int, model: str) -> _Refusal:
        return status, _fatal_body(status, model)

    def quota(self, state: _ModelState) -> _Refusal:
        return 429, _BODY_QUOTA

    def headers(self, request_id: str) -> dict[str, str]:
        return {"x-request-id": request_id, "openai-version": "2020-10-01"}

    def limit_headers(self, state: _ModelState, headers: dict[str, str]) -> None:
        _limit_headers(state, headers)

    def rate_limited(
        self,
        state: _ModelState,
        kind: str,
        bucket: _Bucket,
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

    def burst(self, state: _ModelState, wait: float, headers: dict[str, str]) -> bytes:
        message = (
            f"Too many requests for {state.name} right now. "
            f"Please try again in {format_duration(wait)}."
        )
        headers["retry-after"] = str(max(1, math.ceil(wait)))
        headers["retry-after-ms"] = str(math.ceil(wait * 1000))
        return _error(message, "requests", "rate_limit_exceeded")

    def overloaded(self, headers: dict[str, str]) -> _Refusal:
        headers["Retry-After"] = "1"
        return 503, _BODY_503

    def server_error(self) -> bytes:
        return _BODY_500

    def success(
        self,
        sim: Simulator,
        state: _ModelState,
        ask: _Ask,
        answer: tuple[str, str],
        usage: tuple[int, int, int],
        latency: float,
        headers: dict[str, str],
    ) -> bytes:
        content, finish = answer
        prompt_tokens, completion_tokens, _ = usage
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
                                state.profile.persona,
                                content,
                                ask.logprobs,
                            ),
                            "refusal": None,
                        },
                        "finish_reason": finish,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
                "system_fingerprint": state.fingerprint,
            }
        )
        headers["openai-processing-ms"] = str(round(latency * 1000))
        return payload


# -- Anthropic Messages ------------------------------------------------------------------------


def _anthropic_error(type_: str, message: str) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": type_, "message": message}})


_ANTHROPIC_BAD_KEY = _anthropic_error("authentication_error", "invalid x-api-key")
_ANTHROPIC_LOW_CREDIT = _anthropic_error(
    "invalid_request_error",
    "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing "
    "to upgrade or purchase credits.",
)
_ANTHROPIC_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "stream",
        "metadata",
        "tools",
        "tool_choice",
        "thinking",
        "service_tier",
        # Optional fields the official SDK may send; accepted and ignored where they do not
        # apply to a text chat, as the service does.
        "output_config",
        "cache_control",
        "container",
        "context_management",
        "mcp_servers",
    }
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


def _rfc3339(epoch: float) -> str:
    """A reset time the way `anthropic-ratelimit-*-reset` writes it (whole seconds, UTC)."""
    return datetime.fromtimestamp(math.ceil(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Anthropic(_Dialect):
    """POST /v1/messages, Anthropic's Messages protocol."""

    def authorized(self, request: web.Request, key: str) -> bool:
        """`x-api-key`, or `Authorization: Bearer` (what the official SDK sends today)."""
        given = request.headers.get("x-api-key")
        if given is None:
            auth = request.headers.get("Authorization", "")
            given = auth[7:] if auth[:7].lower() == "bearer " else ""
        return hmac.compare_digest(given.encode(), key.encode())

    def unauthorized(self) -> _Refusal:
        return 401, _ANTHROPIC_BAD_KEY

    def read(self, request: web.Request, raw: bytes) -> _Ask | _Refusal:
        def bad(message: str) -> _Refusal:
            return 400, _anthropic_error("invalid_request_error", message)

        if not request.headers.get("anthropic-version"):
            return bad("anthropic-version: header is required")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return bad("There was an error parsing the body of your request as JSON.")
        if not isinstance(body, dict):
            return bad("The request body must be a JSON object.")
        for key in body:
            if key not in _ANTHROPIC_FIELDS:
                return bad(f"{key}: Extra inputs are not permitted")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return bad("model: Field required")
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            return bad("max_tokens: Field required")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            return bad("max_tokens: Input should be a positive integer")
        temperature = body.get("temperature")
        if temperature is not None and (
            isinstance(temperature, bool)
            or not isinstance(temperature, int | float)
            or not 0 <= temperature <= 1
        ):
            return bad("temperature: range: 0..1")
        if (
            temperature is not None
            and "temperature" in rule_for(None, model, provider="anthropic").rejects
        ):
            return bad("`temperature` is deprecated for this model.")
        if body.get("stream"):
            return bad("stream: the simulator does not stream")
        raw_messages = body.get("messages")
        if not isinstance(raw_messages, list) or not raw_messages:
            return bad("messages: at least one message is required")
        messages: list[Message] = []
        try:
            if "system" in body:
                messages.append(
                    {"role": "system", "content": _anthropic_text(body["system"], "system")}
                )
            for i, m in enumerate(raw_messages):
                if not isinstance(m, Mapping):
                    return bad(f"messages.{i}: Input should be an object")
                role = m.get("role")
                if role not in ("user", "assistant"):
                    return bad(
                        f'messages.{i}.role: Unexpected role "{role}". The Messages API accepts '
                        'a top-level `system` parameter, not "system" as an input message role.'
                    )
                messages.append(
                    {"role": role, "content": _anthropic_text(m.get("content"), f"messages.{i}")}
                )
        except ValueError as exc:
            return bad(str(exc))
        return _Ask(model, tuple(messages), max_tokens)

    def fatal(self, status: int, model: str) -> _Refusal:
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

    def quota(self, state: _ModelState) -> _Refusal:
        return 400, _ANTHROPIC_LOW_CREDIT

    def headers(self, request_id: str) -> dict[str, str]:
        return {"request-id": request_id}

    def limit_headers(self, state: _ModelState, headers: dict[str, str]) -> None:
        wall = time.time()
        for name, bucket in (("requests", state.requests), ("tokens", state.tokens)):
            if bucket is not None:
                headers[f"anthropic-ratelimit-{name}-limit"] = str(bucket.limit)
                headers[f"anthropic-ratelimit-{name}-remaining"] = str(bucket.remaining())
                headers[f"anthropic-ratelimit-{name}-reset"] = _rfc3339(wall + bucket.reset_s())

    def rate_limited(
        self,
        state: _ModelState,
        kind: str,
        bucket: _Bucket,
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

    def burst(self, state: _ModelState, wait: float, headers: dict[str, str]) -> bytes:
        headers["retry-after"] = str(max(1, math.ceil(wait)))
        return _anthropic_error(
            "rate_limit_error",
            "Your organization's usage increased sharply; please ramp up traffic gradually.",
        )

    def overloaded(self, headers: dict[str, str]) -> _Refusal:
        headers["retry-after"] = "1"
        return 529, _anthropic_error("overloaded_error", "Overloaded")

    def server_error(self) -> bytes:
        return _anthropic_error("api_error", "Internal server error")

    def success(
        self,
        sim: Simulator,
        state: _ModelState,
        ask: _Ask,
        answer: tuple[str, str],
        usage: tuple[int, int, int],
        latency: float,
        headers: dict[str, str],
    ) -> bytes:
        content, finish = answer
        prompt_tokens, completion_tokens, _ = usage
        body: dict[str, Any] = {
            "id": f"msg_{sim.response_id()}",
            "type": "message",
            "role": "assistant",
            "model": state.reported,
            "content": [{"type": "text", "text": content}] if content else [],
            "stop_reason": _ANTHROPIC_STOP.get(finish, finish),
            "stop_sequence": None,
            "usage": {
                "input_tokens": prompt_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": completion_tokens,
            },
        }
        if finish == "content_filter":
            body["stop_details"] = {
                "type": "refusal",
                "category": None,
                "explanation": ANTHROPIC_REFUSAL_EXPLANATION,
            }
        return orjson.dumps(body)


# -- Gemini generateContent --------------------------------------------------------------------


def _google_error(code: int, status: str, message: str, *details: Mapping[str, Any]) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = list(details)
    return orjson.dumps({"error": error})


_GOOGLE_HELP = {
    "@type": "type.googleapis.com/google.rpc.Help",
    "links": [
        {
            "description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
        }
    ],
}
_GEMINI_BAD_KEY = _google_error(
    400,
    "INVALID_ARGUMENT",
    "API key not valid. Please pass a valid API key.",
    {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "API_KEY_INVALID",
        "domain": "googleapis.com",
        "metadata": {"service": "generativelanguage.googleapis.com"},
    },
)
_GEMINI_FIELDS = frozenset(
    {
        "contents",
        "systemInstruction",
        "generationConfig",
        "safetySettings",
        "tools",
        "toolConfig",
        "cachedContent",
    }
)
_GEMINI_GENERATION_FIELDS = frozenset(
    {
        "temperature",
        "maxOutputTokens",
        "seed",
        "thinkingConfig",
        "topP",
        "topK",
        "candidateCount",
        "stopSequences",
        "responseMimeType",
        "presencePenalty",
        "frequencyPenalty",
    }
)
_GEMINI_THRESHOLDS = frozenset(
    {
        "HARM_BLOCK_THRESHOLD_UNSPECIFIED",
        "BLOCK_LOW_AND_ABOVE",
        "BLOCK_MEDIUM_AND_ABOVE",
        "BLOCK_ONLY_HIGH",
        "BLOCK_NONE",
        "OFF",
    }
)
_GEMINI_FINISH = {"stop": "STOP", "length": "MAX_TOKENS"}
_GEMINI_BLOCK_REASONS = ("SAFETY", "PROHIBITED_CONTENT", "BLOCKLIST")
#: The daily quota a Gemini-mode `insufficient_quota` model has used up.
GEMINI_DAILY_QUOTA_ID = "GenerateRequestsPerDayPerProjectPerModel-FreeTier"
GEMINI_DAILY_QUOTA_VALUE = 250
_GEMINI_QUOTAS = {
    "requests": (
        "GenerateRequestsPerMinutePerProjectPerModel",
        "generativelanguage.googleapis.com/generate_content_paid_tier_requests",
    ),
    "tokens": (
        "GenerateContentInputTokensPerModelPerMinute",
        "generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count",
    ),
}


def gemini_block(seed: int, model: str, messages: Sequence[Mapping[str, str]]) -> tuple[str, str]:
    """How Gemini mode withholds a `content_filter` answer, deterministically per prompt:
    ("candidate", finishReason) or ("prompt", promptFeedback.blockReason)."""
    h = int(stable_hash(["gemini-block", seed, model, list(normalize_messages(messages))])[:8], 16)
    where = "prompt" if h % 2 else "candidate"
    return where, _GEMINI_BLOCK_REASONS[(h // 2) % len(_GEMINI_BLOCK_REASONS)]


def gemini_thoughts(thinking: int | None, prompt_tokens: int) -> int:
    """Thought tokens Gemini mode reports: none unless thinking was asked for; then half the
    prompt plus 8, within a positive budget."""
    if thinking is None:
        return 0
    used = prompt_tokens // 2 + 8
    return used if thinking < 0 else min(thinking, used)


def _gemini_parts(content: Any, where: str) -> str:
    if not isinstance(content, Mapping):
        raise ValueError(f"{where}: expected an object with parts")
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts:
        raise ValueError(f"{where}.parts: must not be empty")
    texts = []
    for part in parts:
        if not isinstance(part, Mapping) or not isinstance(part.get("text"), str):
            raise ValueError(f"{where}.parts: only text parts are simulated")
        texts.append(part["text"])
    return "".join(texts)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _camel_keys(value: Any) -> Any:
    """`value` with every object key in camelCase (`generation_config` -> `generationConfig`);
    values (e.g. `HARM_CATEGORY_*` names) are left as they are."""
    if isinstance(value, dict):
        return {(_camel(k) if "_" in k else k): _camel_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_camel_keys(v) for v in value]
    return value


class _Gemini(_Dialect):
    """POST /v1beta/models/{model}:generateContent (and /v1, google-genai's default),
    Google's native Gemini protocol."""

    def authorized(self, request: web.Request, key: str) -> bool:
        given = request.headers.get("x-goog-api-key") or request.query.get("key", "")
        return hmac.compare_digest(given.encode(), key.encode())

    def unauthorized(self) -> _Refusal:
        return 400, _GEMINI_BAD_KEY

    def read(self, request: web.Request, raw: bytes) -> _Ask | _Refusal:
        def bad(message: str) -> _Refusal:
            return 400, _google_error(400, "INVALID_ARGUMENT", message)

        model = request.match_info.get("model", "")
        if not model:
            return bad("model is required")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return bad("Invalid JSON payload received.")
        if not isinstance(body, dict):
            return bad("Invalid JSON payload received. Expected an object.")
        # The REST API takes each field by its proto name (snake_case, what google-genai and
        # the docs' curl examples may send) or its JSON name (camelCase): read both.
        body = _camel_keys(body)
        for key in body:
            if key not in _GEMINI_FIELDS:
                return bad(
                    f'Invalid JSON payload received. Unknown name "{key}": Cannot find field.'
                )
        config = body.get("generationConfig", {})
        if not isinstance(config, dict):
            return bad("generationConfig: expected an object")
        for key in config:
            if key not in _GEMINI_GENERATION_FIELDS:
                return bad(
                    f'Invalid JSON payload received. Unknown name "{key}" at '
                    "'generation_config': Cannot find field."
                )
        max_tokens = config.get("maxOutputTokens")
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            return bad("generation_config.max_output_tokens: must be a positive integer")
        thinking: int | None = None
        think = config.get("thinkingConfig")
        if think is not None:
            if not isinstance(think, dict) or set(think) - {
                "thinkingBudget",
                "thinkingLevel",
                "includeThoughts",
            }:
                return bad("generation_config.thinking_config: unknown field")
            if "thinkingBudget" in think and "thinkingLevel" in think:
                return bad("thinking_budget and thinking_level are not supported together.")
            budget = think.get("thinkingBudget")
            if budget is not None:
                if not isinstance(budget, int) or isinstance(budget, bool) or budget < -1:
                    return bad("generation_config.thinking_config.thinking_budget: invalid")
                thinking = budget or None
            elif "thinkingLevel" in think:
                thinking = -1
        safety = body.get("safetySettings", [])
        if not isinstance(safety, list):
            return bad("safety_settings: expected a list")
        for setting in safety:
            if (
                not isinstance(setting, dict)
                or not str(setting.get("category", "")).startswith("HARM_CATEGORY_")
                or setting.get("threshold") not in _GEMINI_THRESHOLDS
            ):
                return bad(f"safety_settings: invalid setting {setting!r}")
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            return bad("* GenerateContentRequest.contents: contents is not specified")
        messages: list[Message] = []
        try:
            if "systemInstruction" in body:
                system = _gemini_parts(body["systemInstruction"], "system_instruction")
                messages.append({"role": "system", "content": system})
            for i, c in enumerate(contents):
                role = c.get("role", "user") if isinstance(c, Mapping) else None
                if role not in ("user", "model"):
                    return bad("Please use a valid role: user, model.")
                text = _gemini_parts(c, f"contents[{i}]")
                messages.append(
                    {"role": "assistant" if role == "model" else "user", "content": text}
                )
        except ValueError as exc:
            return bad(str(exc))
        return _Ask(model, tuple(messages), max_tokens, thinking)

    def fatal(self, status: int, model: str) -> _Refusal:
        if status == 401:  # Gemini says "bad key" with a 400 and a reason
            return 400, _GEMINI_BAD_KEY
        if status == 402:
            return 400, _google_error(
                400,
                "FAILED_PRECONDITION",
                "Gemini API free tier is not available in your country. Please enable billing "
                "on your project in Google AI Studio.",
            )
        if status == 403:
            return 403, _google_error(
                403, "PERMISSION_DENIED", "The caller does not have permission"
            )
        if status == 404:
            return 404, _google_error(
                404,
                "NOT_FOUND",
                f"models/{model} is not found for API version v1beta, or is not supported for "
                "generateContent. Call ListModels to see the list of available models and their "
                "supported methods.",
            )
        return 400, _google_error(400, "INVALID_ARGUMENT", "Request contains an invalid argument.")

    def quota(self, state: _ModelState) -> _Refusal:
        metric = "generativelanguage.googleapis.com/generate_content_free_tier_requests"
        return 429, _google_error(
            429,
            "RESOURCE_EXHAUSTED",
            "You exceeded your current quota, please check your plan and billing details. For "
            "more information on this error, head to: "
            "https://ai.google.dev/gemini-api/docs/rate-limits.\n"
            f"* Quota exceeded for metric: {metric}, limit: {GEMINI_DAILY_QUOTA_VALUE}, "
            f"model: {state.name}\nPlease retry in 23.5s.",
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": metric,
                        "quotaId": GEMINI_DAILY_QUOTA_ID,
                        "quotaDimensions": {"location": "global", "model": state.name},
                        "quotaValue": str(GEMINI_DAILY_QUOTA_VALUE),
                    }
                ],
            },
            _GOOGLE_HELP,
            # Google sends a short retry hint even for a daily quota: a client must not obey it.
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "23s"},
        )

    def rate_limited(
        self,
        state: _ModelState,
        kind: str,
        bucket: _Bucket,
        wait: float,
        requested: float,
        headers: dict[str, str],
    ) -> bytes:
        quota_id, metric = _GEMINI_QUOTAS[kind]
        return _google_error(
            429,
            "RESOURCE_EXHAUSTED",
            "You exceeded your current quota, please check your plan and billing details. For "
            "more information on this error, head to: "
            "https://ai.google.dev/gemini-api/docs/rate-limits.\n"
            f"* Quota exceeded for metric: {metric}, limit: {bucket.limit}, "
            f"model: {state.name}\nPlease retry in {wait:.6f}s.",
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": metric,
                        "quotaId": quota_id,
                        "quotaDimensions": {"location": "global", "model": state.name},
                        "quotaValue": str(bucket.limit),
                    }
                ],
            },
            _GOOGLE_HELP,
            {
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": f"{max(1, math.ceil(wait))}s",
            },
        )

    def burst(self, state: _ModelState, wait: float, headers: dict[str, str]) -> bytes:
        return _google_error(
            429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."
        )

    def overloaded(self, headers: dict[str, str]) -> _Refusal:
        return 503, _google_error(
            503, "UNAVAILABLE", "The model is overloaded. Please try again later."
        )

    def server_error(self) -> bytes:
        return _google_error(
            500,
            "INTERNAL",
            "An internal error has occurred. Please retry or report in "
            "https://developers.generativeai.google/guide/troubleshooting",
        )

    def thoughts(self, ask: _Ask, prompt_tokens: int) -> int:
        return gemini_thoughts(ask.thinking, prompt_tokens)

    def success(
        self,
        sim: Simulator,
        state: _ModelState,
        ask: _Ask,
        answer: tuple[str, str],
        usage: tuple[int, int, int],
        latency: float,
        headers: dict[str, str],
    ) -> bytes:
        content, finish = answer
        prompt_tokens, completion_tokens, thoughts = usage
        metadata: dict[str, Any] = {"promptTokenCount": prompt_tokens}
        body: dict[str, Any] = {}
        if finish == "content_filter":
            where, reason = gemini_block(sim.profile.seed, ask.model, ask.messages)
            ratings = [
                {"category": "HARM_CATEGORY_HATE_SPEECH", "probability": "HIGH", "blocked": True}
            ]
            if where == "prompt":
                body["promptFeedback"] = {"blockReason": reason, "safetyRatings": ratings}
            else:
                body["candidates"] = [
                    {"finishReason": reason, "index": 0, "safetyRatings": ratings}
                ]
        else:
            body["candidates"] = [
                {
                    "content": {"parts": [{"text": content}], "role": "model"},
                    "finishReason": _GEMINI_FINISH.get(finish, finish.upper()),
                    "index": 0,
                }
            ]
            metadata["candidatesTokenCount"] = completion_tokens
        metadata["totalTokenCount"] = prompt_tokens + metadata.get("candidatesTokenCount", 0)
        if thoughts:
            metadata["thoughtsTokenCount"] = thoughts
            metadata["totalTokenCount"] += thoughts
        metadata["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": prompt_tokens}]
        body["usageMetadata"] = metadata
        body["modelVersion"] = state.reported
        body["responseId"] = sim.response_id()
        return orjson.dumps(body)


OPENAI = _OpenAI()
ANTHROPIC = _Anthropic()
GEMINI = _Gemini()
#: The protocols served, by name (the route of each is in `Simulator.start`).
PROTOCOLS: Mapping[str, _Dialect] = MappingProxyType(
    {"openai": OPENAI, "anthropic": ANTHROPIC, "gemini": GEMINI}
)


# --------------------------------------------------------------------------------------------
# The server


class Simulator:
    """The simulated provider. Start it in the running loop; `start()` returns the base URL.

    `clock` (monotonic seconds) drives rate limits and bursts, `sleep` drives latency and hangs;
    tests inject fakes to avoid real waiting.
    """

    def __init__(
        self,
        profile: SimProfile,
        *,
        require_key: str | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        count_prompts: bool = True,
    ) -> None:
        self.profile = profile
        #: Count what was served per prompt (`served_by_prompt`): tests and `ibias simulate`
        #: read it; a run's own loopback simulator, which nobody asks, does not keep it (a
        #: key per prompt: about 250 bytes each, 350 MB on a 1.4-million-trial grid).
        self._count_prompts = count_prompts
        self._key = require_key
        self._clock = clock
        self._sleep = sleep
        self._request_rng = rng_for(profile.seed, "requests")
        self._id_prefix = f"{self._request_rng.getrandbits(32):08x}"
        self._models: dict[str, _ModelState] = {}
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        self._active: set[asyncio.Task[Any]] = set()
        self._seq = 0  # never reset: response and request ids stay unique
        from ibias.runner.simulator.batch_anthropic import MessageBatchService
        from ibias.runner.simulator.batch_openai import BatchService  # imports this module

        #: The batch protocols' state (files, batches) and the knobs tests turn: OpenAI's
        #: Batch API and Anthropic's Message Batches.
        self.batches = BatchService(self)
        self.message_batches = MessageBatchService(self)
        from ibias.runner.simulator.batch_gemini import GeminiBatchService

        self.gemini_batches = GeminiBatchService(self)
        self.reset_stats()

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on host:port (0 = ephemeral) and return the base URL ".../v1" (the OpenAI and
        Anthropic base URL; Gemini's is the same root with "/v1beta")."""
        if self._runner is not None:
            raise RuntimeError("simulator already started")
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handler(OPENAI))
        app.router.add_post("/v1/messages", self._handler(ANTHROPIC))
        app.router.add_post("/v1beta/models/{model}:generateContent", self._handler(GEMINI))
        app.router.add_post("/v1/models/{model}:generateContent", self._handler(GEMINI))
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_get("/stats", self._stats)
        self.batches.install(app)  # OpenAI's Files and Batch API (batch_openai.py)
        self.message_batches.install(app)  # Anthropic's (batch_anthropic.py)
        self.gemini_batches.install(app)  # Gemini's (batch_gemini.py)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.25)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        bound = runner.addresses[0]
        bound_host, bound_port = str(bound[0]), int(bound[1])
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        self._base_url = f"http://{shown}:{bound_port}/v1"
        return self._base_url

    async def stop(self) -> None:
        """Stop listening; handlers still sleeping (latency, hangs) are cancelled."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        current = asyncio.current_task()
        for task in list(self._active):
            if task is not current:
                task.cancel()
        await runner.cleanup()

    async def __aenter__(self) -> Simulator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("simulator not started")
        return self._base_url

    # -- counting ----------------------------------------------------------------------------

    def reset_stats(self) -> None:
        """Zero every counter (benchmarks measure phases separately)."""
        self._requests = 0
        self._served = 0
        self._faults = dict.fromkeys(FAULT_KINDS, 0)
        self._rate_limited_by = {"requests": 0, "tokens": 0}
        self._rejected: dict[int, int] = {}
        self._in_flight = 0
        self._peak = 0
        self._served_by_model: dict[str, int] = {}
        self._served_by_prompt: dict[tuple[str, str], int] = {}

    def stats(self) -> SimStats:
        return SimStats(
            requests=self._requests,
            served=self._served,
            faults=MappingProxyType(dict(self._faults)),
            rate_limited=sum(self._rate_limited_by.values()),
            rate_limited_by=MappingProxyType(dict(self._rate_limited_by)),
            rejected_by_status=MappingProxyType(dict(self._rejected)),
            in_flight=self._in_flight,
            in_flight_peak=self._peak,
            served_by_model=MappingProxyType(dict(self._served_by_model)),
            served_by_prompt=MappingProxyType(dict(self._served_by_prompt)),
        )

    def served_count(self, model: str, messages: Sequence[Mapping[str, str]]) -> int:
        """How many completed answers to exactly these messages were sent for `model`."""
        return self._served_by_prompt.get((model, prompt_hash(messages)), 0)

    def answer_openai(self, raw: bytes) -> tuple[int, bytes]:
        """One chat-completions body answered as online (see `answer_line`)."""
        return self.answer_line(OPENAI, raw)

    def answer_line(self, d: _Dialect, raw: bytes, request: Any = None) -> tuple[int, bytes]:
        """One request body of protocol `d` answered as an online request is (the same
        reading, responders and reply body) but without latency, faults or rate limits: what
        a line of a batch gets (batch_openai.py). `request` stands in for the HTTP request
        where the dialect reads one (headers, the path's model). Returns (status, body)."""
        ask = d.read(cast(web.Request, request), raw)
        if not isinstance(ask, _Ask):
            return ask
        state = self._state(ask.model)
        content, finish = answer_for(
            self.profile.seed, ask.model, ask.messages, state.profile.persona
        )
        prompt_tokens = estimate_tokens(sum(len(m["content"]) for m in ask.messages))
        completion_tokens = estimate_tokens(len(content))
        if ask.max_tokens is not None and completion_tokens > ask.max_tokens:
            content, completion_tokens, finish = (
                content[: ask.max_tokens * 4],
                ask.max_tokens,
                "length",
            )
        thoughts = 0 if finish == "content_filter" else d.thoughts(ask, prompt_tokens)
        payload = d.success(
            self,
            state,
            ask,
            (content, finish),
            (prompt_tokens, completion_tokens, thoughts),
            0.0,
            {},
        )
        self._served += 1
        self._served_by_model[ask.model] = self._served_by_model.get(ask.model, 0) + 1
        if self._count_prompts:
            key = (ask.model, stable_hash(list(ask.messages)))
            self._served_by_prompt[key] = self._served_by_prompt.get(key, 0) + 1
        return 200, payload

    # -- handlers ----------------------------------------------------------------------------

    async def _list_models(self, request: web.Request) -> web.Response:
        if self._key is not None and not OPENAI.authorized(request, self._key):
            return self._reject(*OPENAI.unauthorized())
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "ibias-simulator"}
            for name in self.profile.models
        ]
        return web.Response(body=orjson.dumps({"object": "list", "data": data}), content_type=_JSON)

    async def _stats(self, request: web.Request) -> web.Response:
        prompts = request.query.get("prompts", "1") not in ("0", "false", "no")
        body = orjson.dumps(self.stats().to_json(prompts=prompts))
        return web.Response(body=body, content_type=_JSON)

    def _handler(self, dialect: _Dialect) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            self._requests += 1
            self._in_flight += 1
            if self._in_flight > self._peak:
                self._peak = self._in_flight
            task = asyncio.current_task()
            if task is not None:
                self._active.add(task)
            try:
                return await self._complete(request, dialect)
            finally:
                self._in_flight -= 1
                if task is not None:
                    self._active.discard(task)

        return handle

    def response_id(self) -> str:
        """The id of the answer being written (unique per server: the request counter)."""
        return f"{self._id_prefix}{self._seq:016x}"

    def _reject(
        self, status: int, body: bytes, headers: dict[str, str] | None = None
    ) -> web.Response:
        self._rejected[status] = self._rejected.get(status, 0) + 1
        return web.Response(status=status, body=body, content_type=_JSON, headers=headers)

    def _state(self, model: str) -> _ModelState:
        state = self._models.get(model)
        if state is None:
            state = _ModelState(
                model, self.profile.for_model(model), self.profile.seed, self._clock()
            )
            self._models[model] = state
        return state

    async def _complete(self, request: web.Request, d: _Dialect) -> web.StreamResponse:
        if self._key is not None and not d.authorized(request, self._key):
            return self._reject(*d.unauthorized())
        ask = d.read(request, await request.read())
        if not isinstance(ask, _Ask):
            return self._reject(*ask)
        model, messages, max_tokens = ask.model, ask.messages, ask.max_tokens

        state = self._state(model)
        profile = state.profile
        if profile.fatal_status is not None:
            return self._reject(*d.fatal(profile.fatal_status, model))
        if profile.insufficient_quota:
            return self._reject(*d.quota(state))
        if ask.logprobs is not None and profile.refuse_logprobs:
            return self._reject(
                *_openai_bad_request("logprobs is not supported with this model.", "logprobs")
            )

        content, finish = answer_for(self.profile.seed, model, messages, profile.persona)
        prompt_tokens = estimate_tokens(sum(len(m["content"]) for m in messages))
        completion_tokens = estimate_tokens(len(content))
        if max_tokens is not None and completion_tokens > max_tokens:
            content = content[: max_tokens * 4]
            completion_tokens = max_tokens
            finish = "length"
        thoughts = 0 if finish == "content_filter" else d.thoughts(ask, prompt_tokens)
        total_tokens = prompt_tokens + completion_tokens + thoughts

        self._seq += 1
        request_id = f"req_{self._id_prefix}{self._seq:024x}"
        headers = d.headers(request_id)
        now = self._clock()
        if state.requests is not None or state.tokens is not None:
            limited = self._enforce_limits(d, state, total_tokens, now, headers)
            if limited is not None:
                return limited

        # Per-request draws (independent of the answer): fault, then latency.
        rng = self._request_rng
        fault: str | None = None
        if state.burst_left > 0 and now < state.burst_until:
            state.burst_left -= 1
            return self._fault_429(d, state, now, headers)
        if state.fault_total > 0:
            u = rng.random()
            if u < state.fault_total:
                for threshold, kind in state.fault_table:
                    if u < threshold:
                        fault = kind
                        break
                else:  # float rounding at the top edge
                    fault = state.fault_table[-1][1]
        latency = 0.0
        if profile.latency_ms > 0:
            if profile.latency_sigma > 0:
                latency = rng.lognormvariate(math.log(profile.latency_ms), profile.latency_sigma)
            else:
                latency = profile.latency_ms
            latency /= 1000.0

        if fault is not None:
            self._faults[fault] += 1
            if fault == "429":
                state.burst_until = now + BURST_S
                state.burst_left = BURST_EXTRA
                return self._fault_429(d, state, now, headers, count=False)
            if fault == "503":
                status, body = d.overloaded(headers)
                return web.Response(status=status, body=body, content_type=_JSON, headers=headers)
            if fault == "drop":
                _close(request)
                return web.Response(status=500)
            if fault == "hang":
                await self._sleep(profile.hang_s)
                _close(request)
                return web.Response(status=500)

        if latency > 0:
            await self._sleep(latency)
        if fault == "500":
            return web.Response(
                status=500, body=d.server_error(), content_type=_JSON, headers=headers
            )
        if fault == "malformed":
            return web.Response(
                status=200, body=_BODY_MALFORMED, content_type=_JSON, headers=headers
            )

        drift = profile.drift_after
        if drift is not None and self._served_by_model.get(model, 0) >= drift:
            state.reported = f"{model}{DRIFTED_VERSION_SUFFIX}"
        payload = d.success(
            self,
            state,
            ask,
            (content, finish),
            (prompt_tokens, completion_tokens, thoughts),
            latency,
            headers,
        )
        if fault == "truncated":
            cut = payload[: len(payload) // 2]
            return web.Response(status=200, body=cut, content_type=_JSON, headers=headers)
        transport = request.transport
        if transport is None or transport.is_closing():
            return web.Response(status=499)  # the client left during latency: nothing was sent
        self._served += 1
        self._served_by_model[model] = self._served_by_model.get(model, 0) + 1
        if self._count_prompts:
            key = (model, stable_hash(list(messages)))
            self._served_by_prompt[key] = self._served_by_prompt.get(key, 0) + 1
        return web.Response(status=200, body=payload, content_type=_JSON, headers=headers)

    def _enforce_limits(
        self, d: _Dialect, state: _ModelState, tokens: int, now: float, headers: dict[str, str]
    ) -> web.Response | None:
        """Admit the request against RPM and TPM or answer the provider's 429."""
        rb, tb = state.requests, state.tokens
        refused: tuple[str, _Bucket, float, float] | None = None
        if rb is not None:
            rb.refill(now)
            wait = rb.shortfall(1)
            if wait > 0:
                refused = ("requests", rb, wait, 1)
        if tb is not None and refused is None:
            tb.refill(now)
            wait = tb.shortfall(tokens)
            if wait > 0:
                refused = ("tokens", tb, wait, tokens)
        hidden = state.profile.hide_limits
        if refused is None:
            if rb is not None:
                rb.level -= 1
            if tb is not None:
                tb.level -= tokens
            if not hidden:
                d.limit_headers(state, headers)
            return None
        kind, bucket, wait, requested = refused
        self._rate_limited_by[kind] += 1
        if hidden:
            body = d.burst(state, wait, headers)  # a 429 that names no limit
        else:
            d.limit_headers(state, headers)
            body = d.rate_limited(state, kind, bucket, wait, requested, headers)
        return web.Response(status=429, body=body, content_type=_JSON, headers=headers)

    def _fault_429(
        self,
        d: _Dialect,
        state: _ModelState,
        now: float,
        headers: dict[str, str],
        *,
        count: bool = True,
    ) -> web.Response:
        """A transient 429 burst (shared capacity trouble), distinct from limit enforcement."""
        if count:
            self._faults["429"] += 1
        wait = max(0.001, state.burst_until - now)
        body = d.burst(state, wait, headers)
        return web.Response(status=429, body=body, content_type=_JSON, headers=headers)


def _limit_headers(state: _ModelState, headers: dict[str, str]) -> None:
    rb, tb = state.requests, state.tokens
    if rb is not None:
        headers["x-ratelimit-limit-requests"] = str(rb.limit)
        headers["x-ratelimit-remaining-requests"] = str(rb.remaining())
        headers["x-ratelimit-reset-requests"] = format_duration(rb.reset_s())
    if tb is not None:
        headers["x-ratelimit-limit-tokens"] = str(tb.limit)
        headers["x-ratelimit-remaining-tokens"] = str(tb.remaining())
        headers["x-ratelimit-reset-tokens"] = format_duration(tb.reset_s())


def _close(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.close()


async def serve_forever(
    profile: SimProfile,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    require_key: str | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Run a simulator until cancelled (what `ibias simulate` runs). Prints nothing itself;
    `on_ready(base_url)` is called once it listens, e.g. for the CLI to print the URL."""
    sim = Simulator(profile, require_key=require_key)
    url = await sim.start(host, port)
    try:
        if on_ready is not None:
            on_ready(url)
        await asyncio.Event().wait()
    finally:
        await sim.stop()

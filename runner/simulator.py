"""A simulated LLM provider speaking the OpenAI chat-completions protocol over loopback HTTP.

Tests, the demo and the benchmarks need a provider that misbehaves the way real ones do
(latency, 5xx, 429 bursts, hangs, dropped connections, broken bodies, RPM/TPM enforcement)
while answering deterministically, so that a retried or resumed trial gets the same answer.
Two sources of randomness keep those apart:

* the answer is a function of (model name, messages, profile seed) only:
  `rng_for(seed, "answer", model, messages)` drives refusals, the experiment responders of
  the registered experiments' responders and the filler text for prompts no responder knows;
* faults and latency come from one per-server request stream, so a retry can succeed.

The server is built for throughput (thousands of requests per second at zero latency): no
per-request logging, orjson bodies, precomputed per-model constants, and sleeps that are
`asyncio.sleep`, never blocking.
"""

from __future__ import annotations

import asyncio
import hmac
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

import orjson
from aiohttp import web

from ibias.prompts import registry
from ibias.prompts.base import Message, Persona, rng_for, stable_hash
from ibias.runner.sim_profile import FAULT_KINDS, ModelProfile, SimProfile

REFUSAL_TEXT = "I'm sorry, but I can't help with that."
#: Share of refusals that come back as an empty `content_filter` completion.
CONTENT_FILTER_SHARE = 0.25
#: Suffix of the versioned model name reported in bodies (providers report dated snapshots).
MODEL_VERSION_SUFFIX = "-sim-2026-01"
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
    rate a client observes.
    """
    rng = rng_for(seed, "answer", model, messages)
    if rng.random() < persona.refusal_rate:
        if rng.random() < CONTENT_FILTER_SHARE:
            return "", "content_filter"
        return REFUSAL_TEXT, "stop"
    answering = replace(persona, refusal_rate=0.0) if persona.refusal_rate else persona
    for responder in registry.responders():
        text = responder(messages, answering, rng)
        if text is not None:
            return text, "stop"
    sentences = []
    for _ in range(rng.randint(2, 4)):
        clause = rng.choice(_FILLER_WORDS)
        if rng.random() < 0.5:
            clause = f"{clause}, and {rng.choice(_FILLER_WORDS)}"
        sentences.append(clause[0].upper() + clause[1:] + ".")
    return " ".join(sentences), "stop"


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
# Error bodies


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
    ) -> None:
        self.profile = profile
        self._require = f"Bearer {require_key}".encode() if require_key is not None else None
        self._clock = clock
        self._sleep = sleep
        self._request_rng = rng_for(profile.seed, "requests")
        self._id_prefix = f"{self._request_rng.getrandbits(32):08x}"
        self._models: dict[str, _ModelState] = {}
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        self._active: set[asyncio.Task[Any]] = set()
        self._seq = 0  # never reset: response and request ids stay unique
        self.reset_stats()

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on host:port (0 = ephemeral) and return the base URL ".../v1"."""
        if self._runner is not None:
            raise RuntimeError("simulator already started")
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_get("/stats", self._stats)
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

    # -- handlers ----------------------------------------------------------------------------

    async def _list_models(self, request: web.Request) -> web.Response:
        if self._require is not None and not self._authorized(request):
            return self._reject(401, _BODY_401)
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "ibias-simulator"}
            for name in self.profile.models
        ]
        return web.Response(body=orjson.dumps({"object": "list", "data": data}), content_type=_JSON)

    async def _stats(self, request: web.Request) -> web.Response:
        prompts = request.query.get("prompts", "1") not in ("0", "false", "no")
        body = orjson.dumps(self.stats().to_json(prompts=prompts))
        return web.Response(body=body, content_type=_JSON)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self._requests += 1
        self._in_flight += 1
        if self._in_flight > self._peak:
            self._peak = self._in_flight
        task = asyncio.current_task()
        if task is not None:
            self._active.add(task)
        try:
            return await self._complete(request)
        finally:
            self._in_flight -= 1
            if task is not None:
                self._active.discard(task)

    def _authorized(self, request: web.Request) -> bool:
        given = request.headers.get("Authorization", "").encode()
        assert self._require is not None
        return hmac.compare_digest(given, self._require)

    def _reject(
        self, status: int, body: bytes, headers: dict[str, str] | None = None
    ) -> web.Response:
        self._rejected[status] = self._rejected.get(status, 0) + 1
        return web.Response(status=status, body=body, content_type=_JSON, headers=headers)

    def _bad_request(self, message: str, param: str | None = None) -> web.Response:
        return self._reject(400, _error(message, "invalid_request_error", None, param))

    def _state(self, model: str) -> _ModelState:
        state = self._models.get(model)
        if state is None:
            state = _ModelState(
                model, self.profile.for_model(model), self.profile.seed, self._clock()
            )
            self._models[model] = state
        return state

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        if self._require is not None and not self._authorized(request):
            return self._reject(401, _BODY_401)
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return self._bad_request("We could not parse the JSON body of your request.")
        if not isinstance(body, dict):
            return self._bad_request("The request body must be a JSON object.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return self._bad_request("you must provide a model parameter", "model")
        raw_messages = body.get("messages")
        if not isinstance(raw_messages, list) or not raw_messages:
            return self._bad_request("'messages' must be a non-empty array", "messages")
        try:
            messages = normalize_messages(raw_messages)
        except ValueError as exc:
            return self._bad_request(str(exc), "messages")
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            return self._bad_request("max_tokens must be a positive integer", "max_tokens")
        if body.get("stream"):
            return self._bad_request("the simulator does not stream", "stream")

        state = self._state(model)
        profile = state.profile
        if profile.fatal_status is not None:
            return self._reject(profile.fatal_status, _fatal_body(profile.fatal_status, model))
        if profile.insufficient_quota:
            return self._reject(429, _BODY_QUOTA)

        content, finish = answer_for(self.profile.seed, model, messages, profile.persona)
        prompt_tokens = estimate_tokens(sum(len(m["content"]) for m in messages))
        completion_tokens = estimate_tokens(len(content))
        if max_tokens is not None and completion_tokens > max_tokens:
            content = content[: max_tokens * 4]
            completion_tokens = max_tokens
            finish = "length"
        total_tokens = prompt_tokens + completion_tokens

        self._seq += 1
        request_id = f"req_{self._id_prefix}{self._seq:024x}"
        headers = {"x-request-id": request_id, "openai-version": "2020-10-01"}
        now = self._clock()
        if state.requests is not None or state.tokens is not None:
            limited = self._enforce_limits(state, total_tokens, now, headers)
            if limited is not None:
                return limited

        # Per-request draws (independent of the answer): fault, then latency.
        rng = self._request_rng
        fault: str | None = None
        if state.burst_left > 0 and now < state.burst_until:
            state.burst_left -= 1
            return self._fault_429(state, now, headers)
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
                return self._fault_429(state, now, headers, count=False)
            if fault == "503":
                headers["Retry-After"] = "1"
                return web.Response(status=503, body=_BODY_503, content_type=_JSON, headers=headers)
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
            return web.Response(status=500, body=_BODY_500, content_type=_JSON, headers=headers)
        if fault == "malformed":
            return web.Response(
                status=200, body=_BODY_MALFORMED, content_type=_JSON, headers=headers
            )

        payload = orjson.dumps(
            {
                "id": f"chatcmpl-{self._id_prefix}{self._seq:016x}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": state.reported,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": None},
                        "logprobs": None,
                        "finish_reason": finish,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": total_tokens,
                },
                "system_fingerprint": state.fingerprint,
            }
        )
        headers["openai-processing-ms"] = str(round(latency * 1000))
        if fault == "truncated":
            cut = payload[: len(payload) // 2]
            return web.Response(status=200, body=cut, content_type=_JSON, headers=headers)
        transport = request.transport
        if transport is None or transport.is_closing():
            return web.Response(status=499)  # the client left during latency: nothing was sent
        self._served += 1
        self._served_by_model[model] = self._served_by_model.get(model, 0) + 1
        key = (model, stable_hash(list(messages)))
        self._served_by_prompt[key] = self._served_by_prompt.get(key, 0) + 1
        return web.Response(status=200, body=payload, content_type=_JSON, headers=headers)

    def _enforce_limits(
        self, state: _ModelState, tokens: int, now: float, headers: dict[str, str]
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
        if refused is None:
            if rb is not None:
                rb.level -= 1
            if tb is not None:
                tb.level -= tokens
            _limit_headers(state, headers)
            return None
        kind, bucket, wait, requested = refused
        self._rate_limited_by[kind] += 1
        unit = "requests per min (RPM)" if kind == "requests" else "tokens per min (TPM)"
        used = bucket.limit - bucket.remaining()
        wait_text = format_duration(wait)
        message = (
            f"Rate limit reached for {state.name} in organization {_ORG} on {unit}: "
            f"Limit {bucket.limit}, Used {used}, Requested {int(requested)}. "
            f"Please try again in {wait_text}. Visit "
            "https://platform.openai.com/account/rate-limits to learn more."
        )
        _limit_headers(state, headers)
        headers["retry-after"] = str(max(1, math.ceil(wait)))
        headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
        body = _error(message, kind, "rate_limit_exceeded")
        return web.Response(status=429, body=body, content_type=_JSON, headers=headers)

    def _fault_429(
        self, state: _ModelState, now: float, headers: dict[str, str], *, count: bool = True
    ) -> web.Response:
        """A transient 429 burst (shared capacity trouble), distinct from limit enforcement."""
        if count:
            self._faults["429"] += 1
        wait = max(0.001, state.burst_until - now)
        message = (
            f"Too many requests for {state.name} right now. "
            f"Please try again in {format_duration(wait)}."
        )
        headers["retry-after"] = str(max(1, math.ceil(wait)))
        headers["retry-after-ms"] = str(math.ceil(wait * 1000))
        body = _error(message, "requests", "rate_limit_exceeded")
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

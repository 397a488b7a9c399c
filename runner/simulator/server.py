"""The simulator's server: one aiohttp application serving the three protocols side by side,
the batch services and `GET /stats`, and the path an online request takes through it.

A request is checked for its key, read by its protocol (protocol_*.py), refused when the
model's profile says so (a fatal status, no quota, no logprobs), answered (answer.py), then
admitted against the model's limits and met by its faults and latency (faults.py) before its
body is written. The counts are the server's and shared by all protocols (`SimStats`).

Built for throughput (thousands of requests per second at zero latency): no per-request
logging, orjson bodies, precomputed per-model constants, and sleeps that are `asyncio.sleep`,
never blocking.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, cast

import orjson
from aiohttp import web

from ibias.prompts.base import rng_for, stable_hash
from ibias.runner.simulator.answer import Reply, prompt_hash, reply_to
from ibias.runner.simulator.batch_anthropic import MessageBatchService
from ibias.runner.simulator.batch_gemini import GeminiBatchService
from ibias.runner.simulator.batch_openai import BatchService
from ibias.runner.simulator.drift import drift
from ibias.runner.simulator.faults import (
    BODY_MALFORMED,
    BURST_EXTRA,
    BURST_S,
    ModelState,
    admit,
    draw_fault,
    draw_latency,
)
from ibias.runner.simulator.profile import FAULT_KINDS, SimProfile
from ibias.runner.simulator.protocol import JSON, Ask, Dialect
from ibias.runner.simulator.protocol_anthropic import ANTHROPIC
from ibias.runner.simulator.protocol_gemini import GEMINI
from ibias.runner.simulator.protocol_openai import OPENAI, openai_bad_request
from ibias.runner.simulator.stats import SimStats

Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]
#: The protocols served, by name (the route of each is in `Simulator.start`).
#: Connections the listening socket queues before they are accepted. aiohttp's default, 128,
#: is below what one run opens at once (7 models x 64 connections in the demo grid): when the
#: loop is busy the kernel drops the overflow's handshakes, the client believes it is connected
#: and sends its request, and waits out its whole timeout for an answer that cannot come.
BACKLOG = 4096
PROTOCOLS: Mapping[str, Dialect] = MappingProxyType(
    {"openai": OPENAI, "anthropic": ANTHROPIC, "gemini": GEMINI}
)


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
        self._models: dict[str, ModelState] = {}
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None
        self._active: set[asyncio.Task[Any]] = set()
        self._seq = 0  # never reset: response and request ids stay unique
        #: The batch protocols' state (files, batches) and the knobs tests turn: OpenAI's
        #: Batch API, Anthropic's Message Batches and Gemini's batch generation.
        self.batches = BatchService(self)
        self.message_batches = MessageBatchService(self)
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
        site = web.TCPSite(runner, host, port, backlog=BACKLOG)
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

    def _count_served(self, ask: Ask) -> None:
        """Count one completed answer sent (online or in a batch)."""
        model = ask.model
        self._served += 1
        self._served_by_model[model] = self._served_by_model.get(model, 0) + 1
        if self._count_prompts:
            key = (model, stable_hash(list(ask.messages)))
            self._served_by_prompt[key] = self._served_by_prompt.get(key, 0) + 1

    # -- answers -----------------------------------------------------------------------------

    def answer_openai(self, raw: bytes) -> tuple[int, bytes]:
        """One chat-completions body answered as online (see `answer_line`)."""
        return self.answer_line(OPENAI, raw)

    def answer_line(self, d: Dialect, raw: bytes, request: Any = None) -> tuple[int, bytes]:
        """One request body of protocol `d` answered as an online request is (the same
        reading, responders and reply body) but without latency, faults or rate limits: what
        a line of a batch gets (batch_*.py). `request` stands in for the HTTP request where
        the dialect reads one (headers, the path's model). Returns (status, body)."""
        ask = d.read(cast(web.Request, request), raw)
        if not isinstance(ask, Ask):
            return ask
        state = self._state(ask.model)
        payload = d.success(self, state, ask, self._reply(d, state, ask), 0.0, {})
        self._count_served(ask)
        return 200, payload

    def _reply(self, d: Dialect, state: ModelState, ask: Ask) -> Reply:
        """The answer to `ask`, drawn with its model's persona: the one place the simulator
        takes a persona from the profile (online, in batches, and for token logprobs)."""
        return reply_to(d, self.profile.seed, ask, state.profile.persona)

    def response_id(self) -> str:
        """The id of the answer being written (unique per server: the request counter)."""
        return f"{self._id_prefix}{self._seq:016x}"

    def _state(self, model: str) -> ModelState:
        state = self._models.get(model)
        if state is None:
            state = ModelState(
                model, self.profile.for_model(model), self.profile.seed, self._clock()
            )
            self._models[model] = state
        return state

    # -- handlers ----------------------------------------------------------------------------

    async def _list_models(self, request: web.Request) -> web.Response:
        if self._key is not None and not OPENAI.authorized(request, self._key):
            return self._reject(*OPENAI.unauthorized())
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "ibias-simulator"}
            for name in self.profile.models
        ]
        return web.Response(body=orjson.dumps({"object": "list", "data": data}), content_type=JSON)

    async def _stats(self, request: web.Request) -> web.Response:
        prompts = request.query.get("prompts", "1") not in ("0", "false", "no")
        body = orjson.dumps(self.stats().to_json(prompts=prompts))
        return web.Response(body=body, content_type=JSON)

    def _handler(self, dialect: Dialect) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
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

    def _reject(
        self, status: int, body: bytes, headers: dict[str, str] | None = None
    ) -> web.Response:
        self._rejected[status] = self._rejected.get(status, 0) + 1
        return web.Response(status=status, body=body, content_type=JSON, headers=headers)

    async def _complete(self, request: web.Request, d: Dialect) -> web.StreamResponse:
        """One online request of protocol `d`: key, reading, the profile's refusals, the
        answer, limits, then the per-request draws (a fault, then latency) and the body."""
        if self._key is not None and not d.authorized(request, self._key):
            return self._reject(*d.unauthorized())
        ask = d.read(request, await request.read())
        if not isinstance(ask, Ask):
            return self._reject(*ask)
        state = self._state(ask.model)
        refused = self._refused(d, state, ask)
        if refused is not None:
            return self._reject(*refused)
        reply = self._reply(d, state, ask)

        self._seq += 1
        headers = d.headers(f"req_{self._id_prefix}{self._seq:024x}")
        now = self._clock()
        if state.requests is not None or state.tokens is not None:
            limited = admit(d, state, reply.total_tokens, now, headers)
            if limited is not None:
                kind, body = limited
                self._rate_limited_by[kind] += 1
                return web.Response(status=429, body=body, content_type=JSON, headers=headers)
        if state.burst_left > 0 and now < state.burst_until:
            state.burst_left -= 1
            return self._fault_429(d, state, now, headers)

        # Per-request draws (independent of the answer): fault, then latency.
        fault = draw_fault(state, self._request_rng)
        latency = draw_latency(state.profile, self._request_rng)
        if fault is not None:
            return await self._faulty(request, d, state, ask, reply, fault, now, latency, headers)
        if latency > 0:
            await self._sleep(latency)
        return self._send(request, d, state, ask, reply, latency, headers)

    def _refused(self, d: Dialect, state: ModelState, ask: Ask) -> tuple[int, bytes] | None:
        """What the profile answers this model whatever is asked (a fatal status, an empty
        quota, logprobs refused), or None."""
        profile = state.profile
        if profile.fatal_status is not None:
            return d.fatal(profile.fatal_status, ask.model)
        if profile.insufficient_quota:
            return d.quota(state)
        if ask.logprobs is not None and profile.refuse_logprobs:
            return openai_bad_request("logprobs is not supported with this model.", "logprobs")
        return None

    async def _faulty(
        self,
        request: web.Request,
        d: Dialect,
        state: ModelState,
        ask: Ask,
        reply: Reply,
        fault: str,
        now: float,
        latency: float,
        headers: dict[str, str],
    ) -> web.StreamResponse:
        """A request that meets `fault` (counted here): a 429 burst, a 503, a dropped or hung
        connection answer at once; a 500 or a malformed body after the latency; a truncated
        body is half the answer's."""
        self._faults[fault] += 1
        if fault == "429":
            state.burst_until = now + BURST_S
            state.burst_left = BURST_EXTRA
            return self._fault_429(d, state, now, headers, count=False)
        if fault == "503":
            status, body = d.overloaded(headers)
            return web.Response(status=status, body=body, content_type=JSON, headers=headers)
        if fault == "drop":
            _close(request)
            return web.Response(status=500)
        if fault == "hang":
            await self._sleep(state.profile.hang_s)
            _close(request)
            return web.Response(status=500)
        if latency > 0:
            await self._sleep(latency)
        if fault == "500":
            return web.Response(
                status=500, body=d.server_error(), content_type=JSON, headers=headers
            )
        if fault == "malformed":
            return web.Response(status=200, body=BODY_MALFORMED, content_type=JSON, headers=headers)
        if fault == "truncated":
            payload = self._body(d, state, ask, reply, latency, headers)
            cut = payload[: len(payload) // 2]
            return web.Response(status=200, body=cut, content_type=JSON, headers=headers)
        return self._send(request, d, state, ask, reply, latency, headers)

    def _body(
        self,
        d: Dialect,
        state: ModelState,
        ask: Ask,
        reply: Reply,
        latency: float,
        headers: dict[str, str],
    ) -> bytes:
        """The body of an online answer, in the model's version of the moment (drift.py)."""
        drift(state, self._served_by_model.get(ask.model, 0))
        return d.success(self, state, ask, reply, latency, headers)

    def _send(
        self,
        request: web.Request,
        d: Dialect,
        state: ModelState,
        ask: Ask,
        reply: Reply,
        latency: float,
        headers: dict[str, str],
    ) -> web.Response:
        """The answer, counted as served unless the client left during the latency."""
        payload = self._body(d, state, ask, reply, latency, headers)
        transport = request.transport
        if transport is None or transport.is_closing():
            return web.Response(status=499)  # the client left during latency: nothing was sent
        self._count_served(ask)
        return web.Response(status=200, body=payload, content_type=JSON, headers=headers)

    def _fault_429(
        self,
        d: Dialect,
        state: ModelState,
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
        return web.Response(status=429, body=body, content_type=JSON, headers=headers)


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

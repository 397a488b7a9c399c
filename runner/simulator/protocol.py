"""What a provider protocol is to the simulator (`Dialect`) and the request it reads (`Ask`).

The simulator's behaviour (answers, limits, faults, latency) is the same in every protocol;
only the reading of requests and the wording of answers, errors and rate-limit hints differ,
and those are a `Dialect`'s methods: protocol_openai.py, protocol_anthropic.py and
protocol_gemini.py each hold one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from ibias.prompts.base import Message

if TYPE_CHECKING:
    from ibias.runner.simulator.answer import Reply
    from ibias.runner.simulator.faults import Bucket, ModelState
    from ibias.runner.simulator.server import Simulator

#: The content type of every JSON body the simulator sends.
JSON = "application/json"


@dataclass(frozen=True)
class Ask:
    """A completion request reduced to what the simulator answers from.

    `thinking` is the thinking (reasoning) the request gets: None for none, -1 for as much as
    the model likes (dynamic, adaptive, a reasoning model's default), else a token budget; it
    decides the thought tokens reported (Gemini's `thinkingConfig`, Anthropic's `thinking`,
    an OpenAI reasoning model: runner/simulator/rules.py). `show_thoughts`: the answer carries
    the thinking's summary (Anthropic's `display`, Gemini's `includeThoughts`).
    """

    model: str
    messages: tuple[Message, ...]
    max_tokens: int | None
    thinking: int | None = None
    logprobs: int | None = None
    """Token logprobs asked for (OpenAI's `logprobs: true`): the `top_logprobs` count, 0 when
    not given; None when not asked."""
    show_thoughts: bool = False


#: A request refused before it is served: status and body.
Refusal = tuple[int, bytes]


class Dialect:
    """One provider protocol. The simulator's behaviour (answers, limits, faults, latency) is
    the same in every protocol; only the reading of requests and the wording of answers,
    errors and rate-limit headers differ."""

    def authorized(self, request: web.Request, key: str) -> bool:
        raise NotImplementedError

    def unauthorized(self) -> Refusal:
        raise NotImplementedError

    def read(self, request: web.Request, raw: bytes) -> Ask | Refusal:
        raise NotImplementedError

    def fatal(self, status: int, model: str) -> Refusal:
        raise NotImplementedError

    def quota(self, state: ModelState) -> Refusal:
        """The answer of an account that cannot pay (`insufficient_quota` in a profile)."""
        raise NotImplementedError

    def headers(self, request_id: str) -> dict[str, str]:
        return {}

    def limit_headers(self, state: ModelState, headers: dict[str, str]) -> None:
        """Announce the model's limits on an admitted or rate-limited answer."""

    def rate_limited(
        self,
        state: ModelState,
        kind: str,
        bucket: Bucket,
        wait: float,
        requested: float,
        headers: dict[str, str],
    ) -> bytes:
        """The body of a 429 from RPM/TPM enforcement (sets the protocol's hint headers)."""
        raise NotImplementedError

    def burst(self, state: ModelState, wait: float, headers: dict[str, str]) -> bytes:
        """The body of a 429 from a transient burst."""
        raise NotImplementedError

    def overloaded(self, headers: dict[str, str]) -> Refusal:
        """The `503` fault: the protocol's own overloaded answer."""
        raise NotImplementedError

    def server_error(self) -> bytes:
        """The body of the `500` fault."""
        raise NotImplementedError

    def thoughts(self, ask: Ask, prompt_tokens: int) -> int:
        """Thinking tokens to report (and charge) for this request."""
        return 0

    def success(
        self,
        sim: Simulator,
        state: ModelState,
        ask: Ask,
        reply: Reply,
        latency: float,
        headers: dict[str, str],
    ) -> bytes:
        """The body of a completed answer (`reply`: its text, finish reason and tokens)."""
        raise NotImplementedError

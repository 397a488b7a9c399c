"""A provider that answers from a script, in-process: what a plugin author (and ibias's own
tests) run a whole experiment with, through the real scheduler, without a server or a key.

Why in the public API: an experiment or an analysis is tested by running it, and running needs
a provider. Every test that wrote its own echo provider repeated the same forty lines (a
`Reply` with its nine fields, an `AttemptError` with its classification) and got them subtly
different; a plugin author had to learn the provider interface just to test something else.
Like httpx's `MockTransport`, `FakeProvider` is the real interface with a scripted other side:

- `answer` says what each request gets, from the text of its last message: a fixed string, a
  function of the text, or a per-text sequence of outcomes (one per attempt). An outcome is a
  string (the reply's content), a whole `Reply`, a `FakeFailure` (an HTTP error, classified
  exactly as the built-in HTTP providers classify that status), or an exception (raised as is:
  an `AttemptError` carries its own classification, anything else goes through
  `classify_exception`). The function may be async (to sleep, or to hang until cancelled).
- `limits` are announced after every reply (`limits_from_headers`), as a provider that reads
  rate-limit headers would, so the scheduler paces by them.
- what it was asked is kept: `requests` (the last message of each request, in order),
  `samplings`, `limits_asked`, `started`, `closed`.

It is handed to a run through `provider_factory` (`lambda model, key, context: fake`), or
registered under a name the way a plugin registers any provider (an `ibias.providers` entry
point naming `ibias.runner.providers.fake:FakeProvider`, or `ibias.provider("fake")`); built
from a config it echoes each prompt's last message. It is not a built-in provider: no config
can name it unless a test registers it.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

import orjson

from ibias.prompts.base import Message
from ibias.runner.config import ModelConfig
from ibias.runner.providers.base import (
    AttemptError,
    Limits,
    Provider,
    ProviderContext,
    Reply,
    Sampling,
)
from ibias.runner.providers.retries import Classification, classify_exception, classify_http
from ibias.runner.providers.traits import ProviderTraits

__all__ = ["Answer", "FakeFailure", "FakeProvider", "Outcome"]


@dataclass(frozen=True)
class FakeFailure:
    """An HTTP error the fake answers with: `status` (429, 503, 401, ...), the provider's
    `message` in its error body, and a `retry_after_s` header when given. Classified by the
    same rules as a real provider's response (runner/providers/retries.py `classify_http`): a 5xx or
    429 is retried (a 429 pauses the endpoint, a `retry_after_s` is the wait), a 4xx is fatal for
    the model, `code="insufficient_quota"` on a 429 too."""

    status: int
    message: str = ""
    retry_after_s: float | None = None
    code: str | None = None

    def classification(self) -> Classification:
        error: dict[str, str] = {"message": self.message}
        if self.code is not None:
            error["code"] = self.code
        headers = {} if self.retry_after_s is None else {"retry-after": f"{self.retry_after_s:g}"}
        return classify_http(self.status, headers, orjson.dumps({"error": error}))

    def error(self) -> AttemptError:
        return AttemptError(self.classification(), status=self.status)


#: What one request gets: the reply's content, a whole reply, an HTTP error, or an exception.
Outcome = str | Reply | FakeFailure | BaseException
#: How the fake answers: one outcome for every request, a function of the last message's text
#: (sync or async), or, per text, the outcomes of its successive attempts (the last repeats).
Answer = Outcome | Callable[[str], Outcome | Awaitable[Outcome]] | Mapping[str, Sequence[Outcome]]


def _echo(text: str) -> Outcome:
    return text


class FakeProvider(Provider):
    """A scripted provider (see the module's docstring): `answer` decides each request's
    outcome; a string reply gets `prompt_tokens`/`completion_tokens` (None: usage unknown),
    `model` as the provider's model name, and the `headers` given."""

    #: In-process: no URL; every sampling parameter is accepted (and recorded), logprobs too
    #: (a script returns them in a `Reply`).
    traits = ProviderTraits(api="Fake", needs_base_url=False, logprobs=True)

    def __init__(
        self,
        answer: Answer = _echo,
        *,
        limits: Limits | None = None,
        prompt_tokens: int | None = 1,
        completion_tokens: int | None = 1,
        model: str = "fake",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.answer = answer
        self.limits = limits
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.model = model
        self.headers: Mapping[str, str] = dict(headers or {})
        #: The last message of every request, in the order they came.
        self.requests: list[str] = []
        #: How many requests each text got (its attempts).
        self.attempts: Counter[str] = Counter()
        self.samplings: list[Sampling] = []
        self.limits_asked = 0
        self.started = False
        self.closed = False

    @classmethod
    def from_config(cls, model: ModelConfig, api_key: str | None, context: ProviderContext) -> Self:
        """Registered under a name and named by a config: echoes each prompt."""
        return cls(model=model.model)

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True

    def reply(self, content: str, **fields: Any) -> Reply:
        """A reply with `content` and this fake's defaults; `fields` override any of them."""
        values: dict[str, Any] = {
            "content": content,
            "finish_reason": "stop",
            "refusal": None,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "provider_model": self.model,
            "system_fingerprint": None,
            "raw": {"fake": True},
            "headers": self.headers,
        }
        return Reply(**{**values, **fields})

    async def complete(self, messages: Sequence[Message], sampling: Sampling) -> Reply:
        text = str(messages[-1]["content"]) if messages else ""
        self.requests.append(text)
        self.attempts[text] += 1
        self.samplings.append(sampling)
        outcome = await self._outcome(text)
        if isinstance(outcome, str):
            return self.reply(outcome)
        if isinstance(outcome, Reply):
            return outcome
        if isinstance(outcome, FakeFailure):
            raise outcome.error()
        raise outcome

    async def _outcome(self, text: str) -> Outcome:
        answer = self.answer
        if isinstance(answer, str | Reply | FakeFailure | BaseException):
            return answer
        if isinstance(answer, Mapping):
            script = answer.get(text)
            if not script:
                raise KeyError(f"the fake provider has no answer for {text!r}")
            return script[min(self.attempts[text], len(script)) - 1]
        outcome = answer(text)
        return await outcome if inspect.isawaitable(outcome) else outcome

    def classify_exception(self, exc: BaseException) -> Classification:
        return classify_exception(exc)

    def limits_from_headers(self, headers: Mapping[str, str]) -> Limits | None:
        self.limits_asked += 1
        return self.limits

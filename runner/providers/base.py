"""What every provider is: one class with one async call, its own error classification, its own
reading of rate-limit headers and its own names for the sampling parameters.

Why one class per provider: the scheduler must not know any provider's dialect. It hands a
provider the chat and the *neutral* sampling parameters stored in the trial (and hashed into its
key), and gets back a `Reply` or an `AttemptError` carrying the retry classification; after each
attempt it asks the provider what limits the response headers announce. Adding a provider is
then one registered class (runner/providers/registry.py), and a test can hand the run an
in-process provider with no HTTP at all.

Failures are raised as `AttemptError` carrying the retry classification
(runner/providers/retries.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self

import msgspec

from ibias import errors
from ibias.prompts.base import Message
from ibias.runner.config import ModelConfig
from ibias.runner.providers import retries
from ibias.runner.providers.names import BUILTIN_OPTIONS
from ibias.runner.providers.retries import Classification
from ibias.runner.providers.traits import ProviderTraits

__all__ = [
    "AttemptError",
    "Limits",
    "Provider",
    "ProviderContext",
    "Reply",
    "Sampling",
    "SimulatorEndpoint",
    "Window",
]


@dataclass(frozen=True)
class Reply:
    """A completed model answer. A refusal or content filter is a Reply, not an error."""

    content: str | None
    finish_reason: str | None
    refusal: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    provider_model: str | None
    system_fingerprint: str | None
    raw: Mapping[str, Any]
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    reasoning: str | None = None
    """The reasoning text a host sent beside the answer (`reasoning_content`, Gemini's thought
    summaries, Anthropic's thinking blocks). Never the reply: the parsers read `content`."""
    reasoning_tokens: int | None = None
    """Reasoning tokens the provider reported. Already included in `completion_tokens` (they
    are billed as output, so they count in the cost and the budget); kept apart for queries."""
    cache_read_tokens: int | None = None
    """Prompt tokens read from the provider's cache (Anthropic's `cache_read_input_tokens`,
    OpenAI's `prompt_tokens_details.cached_tokens`, Gemini's `cachedContentTokenCount`):
    already inside `prompt_tokens`; priced at `price_cache_read` when the config gives one."""
    cache_write_tokens: int | None = None
    """Prompt tokens written to the cache (Anthropic's `cache_creation_input_tokens`): inside
    `prompt_tokens`; priced at `price_cache_write` when the config gives one."""
    logprobs: tuple[Mapping[str, Any], ...] | None = None
    """The reply's token logprobs when they were asked for (OpenAI's
    `choices[0].logprobs.content`: `{token, logprob, top_logprobs: [{token, logprob}]}` per
    token, kept as sent), else None. Stored in `responses.logprobs`, not in `raw`."""


class AttemptError(errors.ProviderError):
    """An attempt that produced no Reply; `classification` says whether to retry.

    Public as `ibias.AttemptError`: a provider raises it, the scheduler reads its
    classification. It is a branch of `ibias.ProviderError` (the exception tree), so a library
    user's `except ibias.ProviderError` catches it."""

    def __init__(
        self,
        classification: Classification,
        status: int | None = None,
        headers: Mapping[str, str] | None = None,
        *,
        fallback: Reply | None = None,
    ) -> None:
        super().__init__(classification.message)
        self.classification = classification
        self.status = status
        self.headers: Mapping[str, str] = headers or {}
        #: The reply to store if this attempt is the trial's last (its retries run out): an
        #: answer that is retried because it is most likely a server fault, yet is what the
        #: provider said (OpenAI's null content with a `stop` finish, stored as empty with
        #: reason `null_content`). None: the trial fails with nothing stored, as ever.
        self.fallback = fallback


#: Seconds in the windows a provider announces its limits over.
MINUTE_S = 60.0
DAY_S = 86_400.0


@dataclass(frozen=True)
class Window:
    """Where one announced allowance stands after a response: what is left of it, and when.

    `what` is "requests" or a kind of tokens ("tokens", "input_tokens", "output_tokens");
    `limit` and `period_s` are the allowance (e.g. 600 over 60 s) when the provider says so;
    `reset_s` is how long until it is whole again, as the provider counts it. Kept per window
    because a provider can run out of one (output tokens) while the others still have room.
    """

    what: str
    remaining: int
    reset_s: float | None = None
    limit: int | None = None
    period_s: float = MINUTE_S

    def hold_s(self, est_tokens: int) -> float:
        """How long to hold new requests so the next one does not earn a 429: zero while
        something is left; when nothing is, the time this window takes to give back what one
        request needs (one request, or `est_tokens` tokens) at its announced pace, never more
        than its reset time. Waiting for the whole reset would be too cautious: OpenAI's
        reset is the time until the window is *full* again, not until it admits one more."""
        if self.remaining > 0:
            return 0.0
        reset = self.reset_s
        if self.limit is None or self.limit <= 0:
            return max(0.0, reset) if reset is not None else 0.0
        units = 1 if self.what == "requests" else max(1, est_tokens)
        refill = self.period_s * min(units, self.limit) / self.limit
        return max(0.0, refill if reset is None else min(refill, reset))


@dataclass(frozen=True)
class Limits:
    """Rate limits a provider announced, in the terms the endpoint limiter uses.

    `None` means "not announced". Per minute: requests (`rpm`), tokens in and out together
    (`tpm`, what the endpoint limiter paces), and input and output tokens apart where the
    provider limits them apart (`input_tpm`, `output_tpm`, Anthropic). Per day: requests
    (`rpd`) and tokens (`tpd`), which are never paced evenly (a day's allowance may be spent
    in an hour) but whose exhaustion holds requests like any other window. `windows` is where
    each allowance stood after the response that announced them (see `Window`).

    Providers spell these differently (OpenAI's `x-ratelimit-limit-requests`, Anthropic's
    `anthropic-ratelimit-requests-limit`, Groq's per-day request limit under OpenAI's name,
    ...); each provider class turns its own headers into this one value so the scheduler
    never reads a provider's headers itself.
    """

    rpm: int | None = None
    tpm: int | None = None
    input_tpm: int | None = None
    output_tpm: int | None = None
    rpd: int | None = None
    tpd: int | None = None
    windows: tuple[Window, ...] = ()

    def __post_init__(self) -> None:
        for name in ("rpm", "tpm", "input_tpm", "output_tpm", "rpd", "tpd"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value <= 0
            ):
                raise ValueError(f"Limits.{name} must be a positive integer or None")

    @property
    def empty(self) -> bool:
        """Nothing to pace by: no per-minute request or token rate announced."""
        return self.rpm is None and self.tpm is None

    def hold_s(self, est_tokens: int) -> float:
        """How long to hold new requests before the next one (estimated at `est_tokens`
        tokens) would find a window used up; 0 when every window has room."""
        return max((w.hold_s(est_tokens) for w in self.windows), default=0.0)


_SAMPLING_KEYS = frozenset({"temperature", "max_tokens", "seed", "logprobs", "top_logprobs"})
#: Provider options in a trial's params (present only when set, see `ModelConfig.params`):
#: in the key because they change the reply; the provider sends them from its model's config,
#: the config these params were made from.
_OPTION_KEYS = frozenset().union(*BUILTIN_OPTIONS.values())
#: What a trial records about parameters its model's rule newly stops sending (params.py).
_RECORD_KEYS = frozenset({"not_sent"})


@dataclass(frozen=True)
class Sampling:
    """The neutral sampling parameters of a trial: what the trial key hashes.

    They stay neutral on purpose: the trial key of a store made today hashes exactly
    `{"temperature", "max_tokens"[, "seed"]}`, so a provider that calls them differently
    (`max_output_tokens`, `generationConfig.temperature`, ...) maps them when it builds its
    request, never in the plan.
    """

    temperature: float
    max_tokens: int
    seed: int | None = None
    top_logprobs: int | None = None
    """Token logprobs with this many alternatives per position are asked for (params
    `logprobs: true, top_logprobs: N`, present only when the model opted in); None: not asked."""

    @classmethod
    def from_params(cls, params: Mapping[str, Any], option_keys: Collection[str] = ()) -> Sampling:
        """Read a trial's stored `params`; an unknown key is an error rather than silently
        not sent, because it is part of the trial key and so of what the trial promised.
        `option_keys`: the model's provider options (its provider sends them)."""
        unknown = sorted(
            set(params) - _SAMPLING_KEYS - _OPTION_KEYS - _RECORD_KEYS - set(option_keys)
        )
        if unknown:
            raise ValueError(f"unknown sampling parameter {unknown[0]!r} in trial params")
        seed = params.get("seed")
        top = params.get("top_logprobs") if params.get("logprobs") else None
        return cls(
            temperature=float(params["temperature"]),
            max_tokens=int(params["max_tokens"]),
            seed=None if seed is None else int(seed),
            top_logprobs=None if top is None else int(top),
        )


class SimulatorEndpoint(Protocol):
    """The run's in-process simulator, started on first use (see runner/simulator/provider.py)."""

    async def url(self) -> str: ...


@dataclass(frozen=True)
class ProviderContext:
    """What a provider may need from the run beyond its model's config and key.

    Kept separate from `ModelConfig` because these are things of the run, not of the config:
    the loopback simulator shared by all `simulator` models (started only if one of them is
    actually used, so an injected provider never starts a server).
    """

    simulator: SimulatorEndpoint | None = None


class Provider(ABC):
    """One endpoint's client. `complete` is the only way ibias talks to a model.

    A provider class is registered under its `name` (runner/providers/registry.py) and built
    by `from_config`. The scheduler calls, per attempt: `complete`; on an exception escaping
    `complete` that is not an `AttemptError`, `classify_exception`; and after every attempt,
    `limits_from_headers` with the response headers (when the config sets no rpm/tpm).
    """

    #: The registry name (the config's `provider`); set by the `@provider` decorator.
    name: ClassVar[str] = ""
    #: The provider's own config keys, as a msgspec Struct (`forbid_unknown_fields=True`,
    #: every field optional, defaulting to None): the config loader validates the keys of a
    #: `[[models]]` table that are not core keys with it, with the same one-line errors, and
    #: hands the keys given to the provider as `ModelConfig.options` (they are part of the
    #: trial key when set). None: the provider takes no options of its own.
    options_schema: ClassVar[type[msgspec.Struct] | None] = None
    #: What the provider accepts and needs in its model's table (default URL, logprobs, seed,
    #: temperature bound, ...: runner/providers/traits.py), validated by the config loader.
    #: The default is permissive but for logprobs; a built-in provider's is its entry of
    #: `BUILTIN_TRAITS`, read without importing its module.
    traits: ClassVar[ProviderTraits] = ProviderTraits()

    @classmethod  # noqa: B027  (optional hook: most providers check nothing more)
    def check_options(cls, options: Any) -> None:
        """Checks across the options (an `options_schema` instance) that a schema cannot
        express; raise `ibias.prompts.base.SettingsError(key, message)`. Default: none."""

    @classmethod
    def reserved_tokens(cls, options: Mapping[str, Any]) -> int:
        """Tokens a request of a model with these options (`ModelConfig.options`) needs in
        its `max_tokens` beyond the answer: `ibias models` asks its one short check for that
        many more, so the check is a request the API accepts. Default: none."""
        del options
        return 0

    @classmethod
    def rehearsal_path(cls, model: ModelConfig) -> str | None:
        """The path ibias's simulator serves this provider's protocol under ("/v1"), for a
        model as configured: a rehearsal (`ibias run --rehearse`) moves the model's requests,
        and its batch API's, there, keeping the path below the configured base URL. None
        (the default): the simulator does not speak the protocol, and a rehearsal refuses the
        model in one line. A subclass of a built-in provider inherits its answer."""
        del model
        return None

    @classmethod
    def from_config(cls, model: ModelConfig, api_key: str | None, context: ProviderContext) -> Self:
        """Build the provider for one configured model (what the default factory calls).

        `model.max_concurrency` already includes any `--concurrency` override.
        """
        raise NotImplementedError(
            f"{cls.__name__} cannot be built from a config; pass it through a provider factory"
        )

    @property
    def endpoint(self) -> str | None:
        """The URL requests go to, as shown to people (without user info or query): named by
        the progress display and by the line that stops a model whose endpoint never
        answered. None for a provider with no URL (an in-process one)."""
        return None

    async def start(self) -> None:  # noqa: B027  (optional hook: most providers need none)
        """Open connections (called once before the first `complete`)."""

    async def close(self) -> None:  # noqa: B027  (optional hook)
        """Release connections (called once at the end of the run, also after errors)."""

    @abstractmethod
    async def complete(self, messages: Sequence[Message], sampling: Sampling) -> Reply:
        """One request. Returns the reply or raises `AttemptError` with its classification;
        maps the neutral `sampling` to the provider's own request fields."""

    def classify_exception(self, exc: BaseException) -> Classification:
        """Classify an exception that escaped `complete` (timeouts, dropped connections,
        malformed bodies, a bug). The default is the common policy of
        runner/providers/retries.py."""
        return retries.classify_exception(exc)

    def limits_from_headers(self, headers: Mapping[str, str]) -> Limits | None:
        """The rate limits these response headers announce, and where each window stands
        (`Limits.windows`), or None. Default: none. Once a reply reports windows, the
        scheduler asks after every reply, so this must stay cheap."""
        return None

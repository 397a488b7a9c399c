"""One model of a config, validated: `ModelConfig`, the value every layer after the config
reads (the planner its trial key's parameters, the scheduler its limits, the store its cost).

Apart from the table it is parsed from (`runner/config/model_table.py`) so that the many modules
that take a model import a small value, not the config's schema and checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ibias.runner.providers.names import SENDING_OPTIONS

#: How long a model's endpoint may stay unreachable before the model stops, by default.
DEFAULT_OUTAGE_LIMIT_S = 600.0
#: A reply body's size cap (16 MiB), by default.
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class ModelConfig:
    id: str
    provider: str
    base_url: str | None
    model: str
    api_key_env: str | None
    rpm: int | None
    tpm: int | None
    max_concurrency: int
    timeout_s: float
    temperature: float
    max_tokens: int
    sampling_seed: int | None
    price_input: float
    price_output: float
    sim: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    """The provider's own options (its `options_schema`, runner/providers/base.py), as set in
    the model's table: only the keys given (e.g. Gemini's `safety_settings`,
    `thinking_budget`, `thinking_level`)."""
    outage_limit_s: float = DEFAULT_OUTAGE_LIMIT_S
    """Seconds the endpoint may stay unreachable before the model stops for this run."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Bytes of a reply body read at most; a larger one fails its trial alone."""
    top_logprobs: int | None = None
    """Alternatives per token asked for with the reply's token logprobs (`logprobs = true`);
    None when the model does not ask for logprobs."""
    reasoning: bool | None = None
    """OpenAI-compatible only: `true` applies the OpenAI reasoning rule to a name the table
    cannot know (`max_completion_tokens`, no temperature), `false` no rule; None: the table."""
    send_temperature: bool | None = None
    """`false`: never send `temperature` to this model; None: the rule table decides."""
    price_cache_read: float | None = None
    """USD per million prompt tokens read from the cache; None: priced as `price_input`."""
    price_cache_write: float | None = None
    """USD per million prompt tokens written to the cache; None: priced as `price_input`."""
    not_sent: tuple[str, ...] = ()
    """Neutral parameters this model's rule newly stops sending (params.not_sent): recorded in
    the trial's params so its key says what was sent; empty for every config that ran before."""

    def params(self) -> dict[str, Any]:
        """Sampling parameters sent with every request (part of the trial key).

        Every option that changes the reply is here, but an optional one only when it is set,
        so the keys of trials planned before it existed stay what they were: the sampling seed,
        the provider's own options (Gemini's `safety_settings`, `thinking_budget` and
        `thinking_level`; an empty table is not set; the providers read these from the
        model's config, the same config these params come from), and
        `logprobs`/`top_logprobs` when the model asks for token logprobs (sent as they are
        stored, so the key says what was asked)."""
        out: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.sampling_seed is not None:
            out["seed"] = self.sampling_seed
        for name, value in self.options.items():
            if name in SENDING_OPTIONS:
                continue  # how the trial is sent, not what: never in its key
            if isinstance(value, Mapping):
                if value:
                    out[name] = dict(sorted(value.items()))
            elif value is not None:
                out[name] = value
        if self.top_logprobs is not None:
            out["logprobs"] = True
            out["top_logprobs"] = self.top_logprobs
        if self.not_sent:
            out["not_sent"] = list(self.not_sent)
        return out

    def cost(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
    ) -> float:
        """USD for these tokens. Cache tokens are inside `prompt_tokens`; those with a cache
        price given are priced at it instead of `price_input`."""
        prompt = prompt_tokens * self.price_input
        for tokens, price in (
            (cache_read_tokens, self.price_cache_read),
            (cache_write_tokens, self.price_cache_write),
        ):
            if tokens and price is not None:
                prompt += tokens * (price - self.price_input)
        return (prompt + completion_tokens * self.price_output) / 1e6

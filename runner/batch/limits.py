"""Each provider's documented per-batch limits, and which models may run in batch mode.

Batches are split below these (a batch above a limit is refused whole by the provider), each
its own row in the `batches` table. Whether a model may run in batch mode is its provider's
declared `ProviderTraits.batch` (runner/providers/traits.py), read here by the same code for
the built-in providers and any other: no provider is named here.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from ibias.runner.config import ModelConfig

__all__ = [
    "ANTHROPIC_BATCH_BYTES",
    "ANTHROPIC_BATCH_REQUESTS",
    "GEMINI_BATCH_BYTES",
    "GEMINI_BATCH_REQUESTS",
    "GEMINI_INLINE_BYTES",
    "OPENAI_BATCH_BYTES",
    "OPENAI_BATCH_REQUESTS",
    "OPENAI_ENQUEUED_TOKENS",
    "BatchLimits",
    "batch_discount",
    "batch_refusal",
    "wants_batch",
]

#: OpenAI: "The file can contain up to 50,000 requests, and can be up to 200 MB in size"
#: (API reference, Batch > Create batch, `input_file_id`).
OPENAI_BATCH_REQUESTS = 50_000
OPENAI_BATCH_BYTES = 200 * 1000 * 1000
#: OpenAI also caps the prompt tokens a model may have enqueued in batches not yet ended
#: ("Enqueued prompt tokens per model: Each model has a maximum number of enqueued prompt
#: tokens allowed for batch processing", Batch API guide, Rate limits; the numbers are each
#: model's "Batch queue limit" per usage tier, platform.openai.com/docs/models and Settings >
#: Limits). They vary by tier and model: gpt-4o 90,000 at tier 1 and 1,350,000 at tier 2,
#: gpt-4o-mini 2,000,000 at tier 1, 20,000,000 at tier 2, 15,000,000,000 at tier 5. A create
#: past it is accepted and the batch then fails (`errors.data[].code` =
#: "token_limit_exceeded", "Enqueued token limit reached for gpt-4o-mini in organization ...
#: Limit: 2,000,000 enqueued tokens. Please try again once some in_progress batches have been
#: completed.", openai/openai-python#2084). The default is the lowest tier-1 number of a chat
#: model (gpt-4o's): conservative, so a first run never fails a batch on it; a model's
#: `batch_enqueued_tokens` gives the account's own number.
OPENAI_ENQUEUED_TOKENS = 90_000
#: Anthropic: "Batches may contain up to 100,000 requests and be up to 256 MB in total size"
#: (API reference, Create a Message Batch).
ANTHROPIC_BATCH_REQUESTS = 100_000
ANTHROPIC_BATCH_BYTES = 256 * 1000 * 1000
#: Gemini: inline requests "for smaller batches that keep the total request size under
#: 20MB"; above it, an input file, which the Files API takes up to 2 GB ("Batch API" guide;
#: Files API). The guide names no per-batch request count: batches are cut by bytes only.
GEMINI_INLINE_BYTES = 20 * 1000 * 1000
GEMINI_BATCH_BYTES = 2 * 1000 * 1000 * 1000
GEMINI_BATCH_REQUESTS = 2**31 - 1
#: OpenAI's Batch API costs half the online price ("50% lower costs", Batch API guide), and
#: so does Anthropic's ("reducing costs by 50%", Message Batches guide) and Gemini's ("50% of
#: the standard cost", Batch API guide); used when a model
#: gives no `batch_price_input`/`batch_price_output`.
OPENAI_BATCH_DISCOUNT = 0.5


@dataclass(frozen=True)
class BatchLimits:
    """How large one batch may be, and how often a trial is tried (defaults: OpenAI's
    documented limits above; tests make them small). `max_attempts` counts every attempt of a
    trial, as `Backoff.max_attempts` does online."""

    max_requests: int = OPENAI_BATCH_REQUESTS
    max_bytes: int = OPENAI_BATCH_BYTES
    max_attempts: int = 8


def wants_batch(model: ModelConfig, forced: bool) -> bool:
    """Whether the run asks for this model in batch mode (`--batch`, or `mode = "batch"`)."""
    return forced or model.options.get("mode") == "batch"


def batch_refusal(model: ModelConfig) -> str | None:
    """Why this model cannot run in batch mode (it then runs online), or None when it can: its
    provider declares a batch API (`ProviderTraits.batch`), and the model is at that
    provider's own host, or at another with `batch = true`."""
    from ibias.runner.providers.registry import traits_for

    support = traits_for(model.provider).batch
    if support is None:
        return f"provider {model.provider!r} has no batch mode in ibias"
    own = support.host
    if own is None:
        return None
    host = (urlsplit(model.base_url).hostname or "") if model.base_url else own
    if host != own and not model.options.get("batch"):
        return f"host {host} is not {own} (set batch = true if it has the provider's batch API)"
    return None


def batch_discount(model: ModelConfig) -> ModelConfig:
    """The model priced at its batch prices: `batch_price_input`/`batch_price_output` when
    given, else OpenAI's documented discount on the online prices."""
    from dataclasses import replace

    given_in = model.options.get("batch_price_input")
    given_out = model.options.get("batch_price_output")
    return replace(
        model,
        price_input=float(given_in)
        if given_in is not None
        else model.price_input * OPENAI_BATCH_DISCOUNT,
        price_output=float(given_out)
        if given_out is not None
        else model.price_output * OPENAI_BATCH_DISCOUNT,
        price_cache_read=None
        if model.price_cache_read is None
        else model.price_cache_read * OPENAI_BATCH_DISCOUNT,
        price_cache_write=None
        if model.price_cache_write is None
        else model.price_cache_write * OPENAI_BATCH_DISCOUNT,
    )

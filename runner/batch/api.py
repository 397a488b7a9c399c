"""What the batch engine needs from a provider's batch API, whatever its dialect.

One adapter per provider (runner/batch/openai.py, runner/batch/anthropic.py, ...; a provider
declares its own in `ProviderTraits.batch`, built by `BatchAPI.for_model`) turns its API
into these values, so the engine (runner/batch/engine.py) never reads a provider's bodies:
the lines it submits are built from the provider's own online request body, the batch it gets
back is a `BatchInfo` in the `batches` table's vocabulary, and each result line is a
`LineResult` keyed by the trial key.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ibias import errors
from ibias.prompts.base import Message
from ibias.runner.batch.limits import BatchLimits
from ibias.runner.config import ModelConfig
from ibias.runner.providers.base import Provider, Reply, Sampling
from ibias.store.batches import BatchRow

if TYPE_CHECKING:
    from ibias.runner.batch.http import BatchClient

__all__ = ["TOO_LARGE", "BatchAPI", "BatchAPIError", "BatchInfo", "LineResult", "oversized_line"]

#: The error of a result line above the model's body cap: online's for a body above it
#: (runner/providers/http.py), and as online the trial fails for good in this run, alone.
TOO_LARGE = "too_large"


class BatchAPIError(errors.ProviderError):
    """A call of a batch API that failed: `retry` when asking again later may succeed
    (a connection error, 408, 409, 429, 5xx), else the model's batches stop (400s, 401, 404)."""

    def __init__(self, message: str, *, status: int | None = None, retry: bool = False) -> None:
        from ibias.runner.providers.retries import redact

        super().__init__(redact(message))
        self.status = status
        self.retry = retry


@dataclass(frozen=True)
class BatchInfo:
    """A provider's batch as the store names it: `state` is one of store/batches.py's
    (`validating`, `in_progress`, `finalizing`, `cancelling`, `completed`, `expired`,
    `cancelled`, `failed`); `completed`/`failed` count its requests so far."""

    batch_id: str
    state: str
    completed: int | None = None
    failed: int | None = None
    input_file_id: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)
    #: Why the provider failed the batch as a whole (its first error's code and message,
    #: e.g. OpenAI's `token_limit_exceeded`), or None.
    error_code: str | None = None
    error_message: str | None = None


@dataclass(frozen=True)
class LineResult:
    """One result line: the reply (a succeeded request) or why there is none."""

    key: str
    reply: Reply | None
    raw: Mapping[str, Any]
    status: int | None = None
    kind: str | None = None
    message: str | None = None


def oversized_line(key: str | None, size: int, cap: int) -> LineResult | None:
    """The result of a line above the body cap that names `key` (None: it names none, and
    its trial is treated as one the batch never ran)."""
    if key is None:
        return None
    return LineResult(
        key,
        None,
        {"oversized_line_bytes": size},
        None,
        TOO_LARGE,
        f"result line above the {cap:,}-byte cap (max_body_bytes; {size:,} bytes): "
        "not read, not stored",
    )


class BatchAPI(ABC):
    """One model's batch API (its provider's dialect, its base URL and key)."""

    #: The provider's documented per-batch limits (runner/batch/limits.py).
    limits: ClassVar[BatchLimits] = BatchLimits()
    #: Prompt tokens (estimated) the model's live batches may hold at once (OpenAI's
    #: enqueued-token limit per model), or None for a provider without such a limit.
    enqueued_tokens: int | None = None

    @classmethod
    def for_model(
        cls, provider: Provider, model: ModelConfig, api_key: str | None, base_url: str
    ) -> BatchAPI:
        """The adapter of one model that runs in batch mode: `provider` is its online
        provider (built from its config, whose request bodies the lines reuse), `base_url`
        the URL to call (a rehearsal's simulator, the model's own, or its provider's
        default). What a provider's declared `BatchSupport.adapter` must define."""
        raise NotImplementedError(f"{cls.__name__} does not define for_model")

    @abstractmethod
    def line(self, key: str, messages: Sequence[Message], sampling: Sampling) -> bytes:
        """One request of a batch, as submitted: the trial key and the body the online
        request would send (built by the provider's own code)."""

    #: The HTTP client every adapter talks through (runner/batch/http.py): it owns the
    #: connections, so opening and closing an adapter is opening and closing it.
    client: BatchClient

    async def start(self) -> None:
        await self.client.start()

    async def close(self) -> None:
        await self.client.close()

    @abstractmethod
    async def submit(
        self, intent_id: str, lines: Sequence[bytes], uploaded: Callable[[str], None]
    ) -> BatchInfo:
        """Make one batch of `lines` named by `intent_id` where the API can carry a name;
        `uploaded(file_id)` is called (to be recorded) between an upload and the create."""

    @abstractmethod
    async def get(self, batch_id: str) -> BatchInfo:
        """The batch as the provider has it now."""

    @abstractmethod
    async def find(self, intent: BatchRow, taken: set[str]) -> BatchInfo | None:
        """The provider's batch a crash left unrecorded for `intent`, or None when the
        provider never made one (`taken`: batch ids the store already knows)."""

    @abstractmethod
    def results(self, batch: BatchInfo, max_line_bytes: int) -> AsyncIterator[LineResult | None]:
        """The ended batch's result lines, streamed (None for a line above the cap)."""

    @abstractmethod
    async def cancel(self, batch_id: str) -> BatchInfo:
        """Ask the provider to cancel the batch."""

"""The one provider interface: a single method that calls a model.

Failures are raised as `ProviderError` carrying the retry classification (runner/retries.py),
so the scheduler never needs to know a provider's dialect of errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ibias.runner.retries import Classification


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


class ProviderError(Exception):
    """An attempt that produced no Reply; `classification` says whether to retry."""

    def __init__(
        self,
        classification: Classification,
        status: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(classification.message)
        self.classification = classification
        self.status = status
        self.headers: Mapping[str, str] = headers or {}


class Provider(Protocol):
    """One endpoint's client. `complete` is the only way ibias talks to a model."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def complete(
        self, messages: Sequence[Mapping[str, str]], params: Mapping[str, Any]
    ) -> Reply: ...

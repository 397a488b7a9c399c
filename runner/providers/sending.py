"""The provider options that say how a model's trials are sent, never what.

Declared by each provider with a batch API (`openai`, `anthropic`) as its `options_schema`;
none of them is part of a trial key (`names.SENDING_OPTIONS`), because a trial is the same
trial online and in a batch (runner/batch/).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

__all__ = ["SendingOptions"]


class SendingOptions(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """* `mode`: "online" (default) or "batch": the model's trials go out through its
      provider's batch API (runner/batch/), at the batch price.
    * `batch`: a host other than the provider's own that implements its batch API (Azure, a
      proxy, ibias's simulator) is sent batches only with `batch = true`.
    * `batch_price_input`, `batch_price_output`: USD per million tokens in batch mode; absent:
      half the online price (the providers' documented batch discount).
    """

    mode: Literal["online", "batch"] | None = None
    batch: bool | None = None
    batch_price_input: Annotated[float, Meta(ge=0, le=100_000)] | None = None
    batch_price_output: Annotated[float, Meta(ge=0, le=100_000)] | None = None

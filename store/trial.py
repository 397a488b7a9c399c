"""A planned trial as the store records it (produced by the planner and by `ibias import`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ibias.prompts.base import Message


@dataclass(frozen=True)
class Trial:
    """One request: a spec sent to one model with its sampling parameters."""

    trial_key: str
    experiment: str
    model_id: str
    language: str
    coords: Mapping[str, Any]
    item: Mapping[str, Any]
    messages: tuple[Message, ...]
    params: Mapping[str, Any]
    replicate: int

"""The simulator's counters as a value: what it has seen and sent (`GET /stats`).

Tests, `ibias simulate` and the benchmarks read them to check what a run did at the provider's
side: answers served (per model and per prompt), faults, rate-limit refusals and rejections.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class SimStats:
    """A snapshot of what the simulator has seen and sent.

    `served` counts completed answers actually sent (faults, refusals by rate limit and fatal
    rejections never count); `served_by_prompt` is keyed by (model, `prompt_hash(messages)`).
    `faults` has every kind of `FAULT_KINDS`; `rate_limited` counts 429s from RPM/TPM
    enforcement only (fault 429s are `faults["429"]`).
    """

    requests: int
    served: int
    faults: Mapping[str, int]
    rate_limited: int
    rate_limited_by: Mapping[str, int]
    rejected_by_status: Mapping[int, int]
    in_flight: int
    in_flight_peak: int
    served_by_model: Mapping[str, int]
    served_by_prompt: Mapping[tuple[str, str], int]

    @property
    def fault_total(self) -> int:
        return sum(self.faults.values())

    @property
    def rejected(self) -> int:
        return sum(self.rejected_by_status.values())

    def to_json(self, *, prompts: bool = True) -> dict[str, Any]:
        """JSON-able form (what `GET /stats` returns); per-prompt counts nest model -> hash."""
        by_prompt: dict[str, dict[str, int]] = {}
        if prompts:
            for (model, digest), n in self.served_by_prompt.items():
                by_prompt.setdefault(model, {})[digest] = n
        return {
            "requests": self.requests,
            "served": self.served,
            "faults": dict(self.faults),
            "rate_limited": self.rate_limited,
            "rate_limited_by": dict(self.rate_limited_by),
            "rejected_by_status": {str(k): v for k, v in self.rejected_by_status.items()},
            "in_flight": self.in_flight,
            "in_flight_peak": self.in_flight_peak,
            "served_by_model": dict(self.served_by_model),
            "served_by_prompt": by_prompt,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SimStats:
        """Inverse of `to_json`, for tests that read `/stats` from a simulator subprocess."""
        by_prompt = {
            (model, digest): int(n)
            for model, digests in data.get("served_by_prompt", {}).items()
            for digest, n in digests.items()
        }
        return cls(
            requests=int(data["requests"]),
            served=int(data["served"]),
            faults=MappingProxyType(dict(data["faults"])),
            rate_limited=int(data["rate_limited"]),
            rate_limited_by=MappingProxyType(dict(data["rate_limited_by"])),
            rejected_by_status=MappingProxyType(
                {int(k): int(v) for k, v in data["rejected_by_status"].items()}
            ),
            in_flight=int(data["in_flight"]),
            in_flight_peak=int(data["in_flight_peak"]),
            served_by_model=MappingProxyType(dict(data["served_by_model"])),
            served_by_prompt=MappingProxyType(by_prompt),
        )

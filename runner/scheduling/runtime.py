"""One model's state for the length of a run, and what the scheduler needs of a trial.

Kept apart from the scheduler so the modules it composes (the budget, the adoption of a
provider's limits, the recording of attempts) can name a model's runtime and a trial without
importing the scheduler itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ibias.runner.config import ModelConfig
from ibias.runner.providers.base import Provider, Sampling
from ibias.runner.scheduling.breaker import Breaker
from ibias.runner.scheduling.limits import EndpointLimiter
from ibias.runner.status import ModelStats


class Trial(Protocol):
    """What the scheduler needs of a trial (a stored `Trial`, or a `store.plans.Pending`)."""

    @property
    def trial_key(self) -> str: ...
    @property
    def experiment(self) -> str: ...
    @property
    def model_id(self) -> str: ...
    @property
    def item(self) -> Mapping[str, Any]: ...
    @property
    def messages(self) -> Sequence[Mapping[str, str]]: ...
    @property
    def params(self) -> Mapping[str, Any]: ...


@dataclass
class ModelRuntime:
    """One model's provider, limiter and counters for the length of a run."""

    config: ModelConfig
    provider: Provider
    limiter: EndpointLimiter
    stats: ModelStats
    learnt_limits: bool = False
    #: The provider reports where its limits stand (remaining, reset) on its replies: read
    #: every reply then, so a used-up window holds requests before it earns a 429.
    reads_limits: bool = False
    #: When a successful reply's headers are next read for limits (loop time, see
    #: runner/scheduling/limit_adoption.py `limits_due`).
    next_limits_check: float = 0.0
    #: The last trial params seen and their Sampling (a model's trials share one params).
    _sampling: tuple[Mapping[str, Any], Sampling] | None = None
    #: The endpoint's circuit breaker (runner/scheduling/breaker.py), from the model's
    #: `outage_limit_s`.
    breaker: Breaker = field(init=False)
    #: Why the last trial that failed for good failed (named in the run's final summary).
    last_failure: str | None = None

    def __post_init__(self) -> None:
        # The model's first request goes alone (runner/scheduling/breaker.py `first_alone`): a
        # request every trial shares that the model refuses (a 400 naming a parameter, a bad key)
        # stops it after one attempt, not one per worker.
        self.breaker = Breaker(outage_limit_s=self.config.outage_limit_s, first_alone=True)
        self.stats.configured_rpm = self.config.rpm

    def sampling(self, params: Mapping[str, Any]) -> Sampling:
        cached = self._sampling
        if cached is not None and (cached[0] is params or cached[0] == params):
            return cached[1]
        sampling = Sampling.from_params(params, self.config.options)
        self._sampling = (params, sampling)
        return sampling

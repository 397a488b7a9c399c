"""`simulator`: ibias's own simulator, started in-process and spoken to over loopback HTTP.

The protocol is OpenAI's, so the provider is the OpenAI one pointed at a URL known only once
the simulator listens. All `simulator` models of a run share one `LoopbackSimulator`, built
from their `[models.sim]` tables and the run's seed, and started on first use: a run whose
providers are injected (tests) never starts a server it does not talk to.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Self

import anyio

from ibias.runner.config import ModelConfig
from ibias.runner.providers.base import ProviderContext, SimulatorEndpoint
from ibias.runner.providers.http import max_body_bytes_of
from ibias.runner.providers.openai import OpenAIProvider
from ibias.runner.providers.registry import provider
from ibias.runner.providers.traits import BUILTIN_TRAITS
from ibias.runner.simulator.profile import SimProfile, model_profile_from_dict

if TYPE_CHECKING:
    from ibias.runner.simulator import Simulator

__all__ = ["LoopbackSimulator", "SimulatorProvider"]


class LoopbackSimulator:
    """One in-process simulator on 127.0.0.1 for a run, started by the first `url()` call. A
    rehearsal (runner/execution/rehearsal.py) makes one for all its models, from its own profile,
    and sends every provider's requests to it on that provider's protocol."""

    def __init__(self, profile: SimProfile) -> None:
        self.profile = profile
        self._sim: Simulator | None = None
        self._url: str | None = None
        self._lock: anyio.Lock | None = None

    @classmethod
    def for_models(cls, seed: int, models: Iterable[ModelConfig]) -> LoopbackSimulator:
        """A simulator answering for every `simulator` model among `models` (answers are a
        function of the run seed, the model name and the prompt)."""
        sims = [m for m in models if m.provider == "simulator"]
        return cls(
            SimProfile(
                seed=seed,
                default=model_profile_from_dict({}),
                models={m.model: model_profile_from_dict(m.sim) for m in sims},
            )
        )

    @property
    def started(self) -> bool:
        return self._sim is not None

    async def url(self) -> str:
        if self._lock is None:  # created here, inside the running loop
            self._lock = anyio.Lock()
        async with self._lock:
            if self._url is None:
                # Imported here: the server side (aiohttp.web) is loaded only by runs that
                # actually talk to a simulated model.
                from ibias.runner.simulator import Simulator

                sim = Simulator(self.profile, count_prompts=False)
                self._url = await sim.start("127.0.0.1", 0)
                self._sim = sim
            return self._url

    async def stop(self) -> None:
        sim, self._sim, self._url = self._sim, None, None
        if sim is not None:
            await sim.stop()


@provider("simulator")
class SimulatorProvider(OpenAIProvider):
    """The OpenAI provider against the run's loopback simulator."""

    #: No provider options: no reasoning to spend effort on, and online only (batch mode
    #: needs a simulator that outlives the run: `ibias simulate`, at an `openai` model's
    #: base_url with `batch = true`).
    options_schema = None
    #: What its models accept and need: declared once, in `BUILTIN_TRAITS`.
    traits = BUILTIN_TRAITS["simulator"]

    def __init__(
        self,
        *,
        endpoint: SimulatorEndpoint,
        model: str,
        timeout_s: float,
        max_connections: int,
        max_body_bytes: int | None = None,
    ) -> None:
        super().__init__(
            base_url="http://127.0.0.1",  # replaced in start(), once the simulator listens
            model=model,
            api_key=None,
            timeout_s=timeout_s,
            max_connections=max_connections,
            max_body_bytes=max_body_bytes,
        )
        self._endpoint = endpoint

    @classmethod
    def from_config(cls, model: ModelConfig, api_key: str | None, context: ProviderContext) -> Self:
        if context.simulator is None:
            raise ValueError(f"model {model.id!r}: no in-process simulator in this run")
        return cls(
            endpoint=context.simulator,
            model=model.model,
            timeout_s=model.timeout_s,
            max_connections=model.max_concurrency,
            max_body_bytes=max_body_bytes_of(model),
        )

    async def start(self) -> None:
        self.url = self._chat_url(await self._endpoint.url())
        await super().start()

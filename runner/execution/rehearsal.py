"""`ibias run CONFIG --rehearse`: the real config, every model answered by the built-in simulator.

A dress rehearsal is worth having only if it runs the code the real run will: the same config,
limits, `max_tokens` and provider options, the same provider classes building the same request
bodies, the same scheduler, store and analysis. So a rehearsal changes one thing, where each
model's requests are *sent*: every provider is built as the real run builds it (from its
configured `base_url`, which still decides the request rules and so the trial keys), then its
request URL is pointed at the run's loopback simulator, on the same protocol (OpenAI's chat
completions, Anthropic's Messages, Gemini's generateContent; their batch APIs with `--batch`).
The trial keys are the real run's, so `plan` of the real config and the rehearsal store agree
key for key. No key is needed: each model that names an `api_key_env` gets a dummy key, held
only in its session's headers (never in the store, whose config text is the file's).

The simulator's profile of a model is its `[models.sim]` table over `REHEARSAL_DEFAULTS` (a
latency like a hosted model's; for a model whose config sets no rpm or tpm, a limit the
simulator announces and enforces, as a real provider would). `--speed N` compresses time:
limits (the config's and the simulator's) multiplied by N, latencies divided by N; an ETA in
real time is the compressed one times N.

A rehearsal writes into its own store (`runner.paths.rehearsal_store`), and the store records
that it is a rehearsal's (`ibias.store.marks`): `check_store` refuses a rehearsal into a real
store and a real run into a rehearsal store, whatever the file is called.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from ibias.runner.config import Config, ModelConfig
from ibias.runner.paths import rehearsal_store

if TYPE_CHECKING:
    from ibias.runner.providers.base import Provider, ProviderContext
    from ibias.runner.providers.registry import ProviderFactory
    from ibias.runner.simulator.profile import ModelProfile, SimProfile

__all__ = [
    "DUMMY_KEY",
    "MAX_SPEED",
    "REHEARSAL_DEFAULTS",
    "REHEARSAL_DEFAULT_RPM",
    "Rehearsal",
    "check_store",
    "rehearsal_store",
    "sim_table_note",
]

#: What a rehearsal's models send as their API key: the simulator takes any.
DUMMY_KEY = "ibias-rehearsal-no-key"
#: `--speed` at most: a limit times N must stay a count the limiter and simulator handle.
MAX_SPEED = 10_000.0
#: The simulator's profile of a rehearsed model whose `[models.sim]` does not say otherwise
#: (`simulator.profile.SimModelTable` keys): a median latency of a second, log-normal around it,
#: like a hosted model answering a short prompt; no faults, no refusals, no bias.
REHEARSAL_DEFAULTS: Mapping[str, Any] = {"latency_ms": 1000.0, "latency_sigma": 0.3}
#: The requests per minute the simulator announces (rate-limit headers) and enforces for a
#: rehearsed model whose config sets neither rpm nor tpm: the client then learns its pace from
#: the replies, as it would from Anthropic's and OpenAI's headers or Gemini's 429s.
REHEARSAL_DEFAULT_RPM = 500


def sim_table_note(config: Config) -> str | None:
    """The one line a real run says about `[models.sim]` tables it ignores (those of models
    the simulator does not answer in a real run), or None."""
    from ibias.runner.providers.traits import SIM_TABLE

    ignored = [m.id for m in config.models if m.sim and m.provider not in SIM_TABLE]
    if not ignored:
        return None
    return (
        f"[models.sim] of {', '.join(ignored)}: used only by rehearsals (--rehearse); "
        "ignored by this run"
    )


def check_store(con: duckdb.DuckDBPyConnection, path: Path, *, rehearse: bool) -> None:
    """Refuse a rehearsal into a real store, and a real run into a rehearsal store (one line,
    exit 2); mark a store a rehearsal first writes into. The mark in the store decides, not
    its name: `--store` can name any file."""
    from ibias.store.db import StoreAccessError
    from ibias.store.marks import is_empty, is_rehearsal, mark_rehearsal

    marked = is_rehearsal(con)
    if rehearse and not marked:
        if not is_empty(con):
            raise StoreAccessError(
                f"store {path} holds a run that was not a rehearsal; a rehearsal writes only "
                f"into a rehearsal store (default: {rehearsal_store(path).name} beside it)"
            )
        mark_rehearsal(con)
    elif marked and not rehearse:
        raise StoreAccessError(
            f"store {path} is a rehearsal store (simulated replies); a real run never writes "
            "into it: add --rehearse, or name the real store"
        )


@dataclass(frozen=True)
class Rehearsal:
    """How a run rehearses: `speed` is `--speed N` (1: real time)."""

    speed: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.speed <= MAX_SPEED:
            raise ValueError(f"speed must be in (0, {MAX_SPEED:g}], got {self.speed}")

    # -- what the run changes -------------------------------------------------------------

    def keys(self, config: Config) -> dict[str, str | None]:
        """The API key of each model: a dummy one where the config names a variable."""
        return {m.id: (None if m.api_key_env is None else DUMMY_KEY) for m in config.models}

    def config(self, config: Config) -> Config:
        """`config` with its limits multiplied by the speed (what the client paces at). The
        config's text, stored with the run, stays the file's; rpm and tpm are no input of the
        plan nor of a trial key, so the plan is the real one."""
        if self.speed == 1:
            return config
        return replace(config, models=tuple(self._scaled(m) for m in config.models))

    def _scaled(self, m: ModelConfig) -> ModelConfig:
        return replace(m, rpm=self._rate(m.rpm), tpm=self._rate(m.tpm))

    def _rate(self, rate: int | None) -> int | None:
        return None if rate is None else max(1, round(rate * self.speed))

    def profile(self, config: Config) -> SimProfile:
        """The simulator's profile: each model (by the name its requests carry) from its
        `[models.sim]` table over `REHEARSAL_DEFAULTS` (a `simulator` model: over the
        simulator's own defaults, as in a real run), sped up. Two models with one name share
        the first one's profile (the simulator tells models apart by name only)."""
        from ibias.runner.simulator.profile import SimProfile, model_profile_from_dict

        models: dict[str, ModelProfile] = {}
        for m in config.models:
            if m.model in models:
                continue
            if m.provider == "simulator":
                base: Mapping[str, Any] | None = None
            else:
                base = dict(REHEARSAL_DEFAULTS)
                if m.rpm is None and m.tpm is None:
                    base["rpm"] = REHEARSAL_DEFAULT_RPM
            profile = model_profile_from_dict(m.sim, base=base, key=f"model {m.id}: sim")
            models[m.model] = self._sped_up(profile)
        default = self._sped_up(model_profile_from_dict(dict(REHEARSAL_DEFAULTS)))
        return SimProfile(seed=config.run.seed, default=default, models=models)

    def _sped_up(self, p: ModelProfile) -> ModelProfile:
        n = self.speed
        return replace(
            p,
            latency_ms=p.latency_ms / n,
            hang_s=p.hang_s / n,
            rpm=self._rate(p.rpm),
            tpm=self._rate(p.tpm),
        )

    def factory(self, inner: ProviderFactory, simulator_url: str) -> ProviderFactory:
        """`inner` (the registry, or a test's factory) with each provider it builds sending to
        the simulator at `simulator_url` (its ".../v1" base) instead of the configured host."""

        def build(model: ModelConfig, api_key: str | None, context: ProviderContext) -> Provider:
            if model.provider == "llamacpp":  # a local server: the simulator stands in for it
                return _llamacpp_standin(model, simulator_url)
            return redirect(inner(model, api_key, context), model, simulator_url)

        return build

    def batch_base(self, simulator_url: str) -> Callable[[ModelConfig], str]:
        """The base URL a batch model's batch API is called at in the rehearsal: the
        simulator's, under the path its provider's protocol is served at (`rehearsal_path`:
        Gemini's names the version its configured base does)."""
        from ibias.runner.providers.registry import provider_class

        def base(model: ModelConfig) -> str:
            # "/v1" for a provider the simulator does not speak: its online provider, built
            # first, is refused by `redirect`.
            path = provider_class(model.provider).rehearsal_path(model) or "/v1"
            return _root(simulator_url) + path

        return base

    def sleep(self, seconds: float) -> float:
        """A wait of `seconds` in real time, as the rehearsal waits it."""
        return seconds / self.speed


def _root(simulator_url: str) -> str:
    return simulator_url.rstrip("/").removesuffix("/v1")


def redirect(provider: Provider, model: ModelConfig, simulator_url: str) -> Provider:
    """`provider` (built as a real run builds it) with its request URL moved to the simulator:
    the path below the configured base URL is kept, under the simulator's path for that
    protocol (the provider's `rehearsal_path`). A provider whose protocol the simulator does
    not speak is refused (one line)."""
    from ibias.runner.config import ConfigFileError
    from ibias.runner.providers.http import HTTPProvider
    from ibias.runner.providers.names import DEFAULT_BASE_URLS
    from ibias.runner.simulator.provider import SimulatorProvider

    if isinstance(provider, SimulatorProvider):
        return provider  # already the run's loopback simulator
    prefix = type(provider).rehearsal_path(model)
    if prefix is None or not isinstance(provider, HTTPProvider):  # an HTTP provider has a URL
        raise ConfigFileError(
            f"model {model.id!r}: provider {model.provider!r} cannot be rehearsed (the "
            "simulator speaks OpenAI's, Anthropic's and Gemini's protocols); leave it out "
            "with --model"
        )
    base = (model.base_url or DEFAULT_BASE_URLS.get(model.provider, "")).rstrip("/")
    url = provider.url
    tail = url[len(base) :] if base and url.startswith(base) else "/" + url.split("/", 3)[-1]
    provider.url = _root(simulator_url) + prefix + tail
    return provider


def _llamacpp_standin(model: ModelConfig, simulator_url: str) -> Provider:
    """A `llamacpp` model's stand-in: its server speaks OpenAI's protocol, so the OpenAI
    provider (which `llamacpp` is built on) at the simulator."""
    from ibias.runner.providers.http import max_body_bytes_of
    from ibias.runner.providers.openai import OpenAIProvider

    return OpenAIProvider(
        base_url=simulator_url,
        model=model.model,
        api_key=None,
        timeout_s=model.timeout_s,
        max_connections=model.max_concurrency,
        max_body_bytes=max_body_bytes_of(model),
    )

"""The built-in providers by name, and the module of each: a module importing only their
traits (runner/providers/traits.py, itself light), so the config can check a provider name
without loading any provider (or aiohttp)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ibias.plugins import PROVIDERS
from ibias.runner.providers.traits import BUILTIN_TRAITS

__all__ = [
    "BUILTIN",
    "BUILTIN_OPTIONS",
    "BUILTIN_TRAITS",
    "DEFAULT_BASE_URLS",
    "ENTRY_POINT_GROUP",
    "SENDING_OPTIONS",
]

#: Config name -> the module whose `@provider` decorator registers it (imported on first use).
BUILTIN: Mapping[str, str] = MappingProxyType(
    {
        "anthropic": "ibias.runner.providers.anthropic",
        "gemini": "ibias.runner.providers.gemini",
        "llamacpp": "ibias.runner.providers.llamacpp",
        "openai": "ibias.runner.providers.openai",
        "simulator": "ibias.runner.simulator.provider",
    }
)
#: The entry-point group third-party providers register under (ibias/plugins.py).
ENTRY_POINT_GROUP = PROVIDERS
#: Each native provider's documented base URL, used when a model's config gives none (and
#: named as the example when a config's base_url is not a URL): from its traits.
DEFAULT_BASE_URLS: Mapping[str, str] = MappingProxyType(
    {
        name: traits.default_base_url
        for name, traits in BUILTIN_TRAITS.items()
        if traits.default_base_url is not None
    }
)
#: The option keys of each built-in provider's `options_schema`, from its traits (a test
#: checks they agree): a key of another provider's is refused naming that provider, without
#: loading it.
BUILTIN_OPTIONS: Mapping[str, frozenset[str]] = MappingProxyType(
    {name: traits.options for name, traits in BUILTIN_TRAITS.items() if traits.options}
)
#: Provider options that say how a model's trials are sent (online or in provider batches,
#: at which batch price; where a local server starts), never what: left out of a trial's params
#: and so of its key, because a trial is the same trial whichever way it is sent
#: (runner/batch/). The union of the built-in providers' `traits.sending`.
SENDING_OPTIONS: frozenset[str] = frozenset().union(
    *(traits.sending for traits in BUILTIN_TRAITS.values())
)

"""The provider registry: config name -> provider class, filled by the `@provider` decorator.

Why an explicit registry rather than a chain of `if provider == ...` in the run: a provider is
then one self-contained class, the run builds whatever the config names through one lookup, and
the run accepts any other `ProviderFactory` (tests inject in-process providers through it).
The built-in providers register when `ibias.runner.providers` is imported, which importing this
module does first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ibias.runner.config import ModelConfig
from ibias.runner.providers.base import Provider, ProviderContext

__all__ = [
    "ProviderFactory",
    "UnknownProviderError",
    "create_provider",
    "provider",
    "provider_class",
    "registered_providers",
]

#: Builds the provider of one configured model: (model, API key or None, run context).
#: `execute()` takes one; the default, `create_provider`, looks the model's `provider` up here.
ProviderFactory = Callable[[ModelConfig, str | None, ProviderContext], Provider]

_P = TypeVar("_P", bound=type[Provider])

_REGISTRY: dict[str, type[Provider]] = {}


class UnknownProviderError(LookupError):
    """A provider name with no registered class (one line naming what is registered)."""


def provider(name: str) -> Callable[[_P], _P]:
    """Class decorator: register `cls` as the provider called `name` in configs.

    Registering a second class under a taken name is an error, not an override: two modules
    silently fighting over `openai` would make which one runs depend on import order.
    """
    if not name or name != name.strip() or any(c.isspace() for c in name):
        raise ValueError(f"provider name must be a non-empty word, got {name!r}")

    def register(cls: _P) -> _P:
        if not (isinstance(cls, type) and issubclass(cls, Provider)):
            raise TypeError(f"@provider({name!r}) must decorate a Provider subclass")
        taken = _REGISTRY.get(name)
        if taken is not None and taken is not cls:
            raise ValueError(
                f"provider {name!r} is already registered ({taken.__module__}.{taken.__name__})"
            )
        if not any("from_config" in vars(k) for k in cls.__mro__ if k is not Provider):
            raise TypeError(f"@provider({name!r}): {cls.__name__} must define from_config")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return register


def registered_providers() -> tuple[str, ...]:
    """The registered names, sorted."""
    return tuple(sorted(_REGISTRY))


def provider_class(name: str) -> type[Provider]:
    """The class registered as `name`; `UnknownProviderError` names the known ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(registered_providers()) or "none"
        raise UnknownProviderError(
            f"no provider registered as {name!r} (registered: {known})"
        ) from None


def create_provider(model: ModelConfig, api_key: str | None, context: ProviderContext) -> Provider:
    """The default `ProviderFactory`: the registered class of `model.provider`."""
    return provider_class(model.provider).from_config(model, api_key, context)

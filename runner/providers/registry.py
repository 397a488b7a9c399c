"""The provider registry: config name -> provider class, filled by the `@provider` decorator.

Why an explicit registry rather than a chain of `if provider == ...` in the run: a provider is
then one self-contained class, the run builds whatever the config names through one lookup, and
the run accepts any other `ProviderFactory` (tests inject in-process providers through it).
Lazy on purpose: the built-in providers are listed here by name and module path (`BUILTIN`), and
a module is imported the first time its name is looked up, where its `@provider` decorator
registers the class. A command that never builds a provider (`--help`, `status`, `plan`, `sql`)
so never imports aiohttp, and a run with only OpenAI-compatible models never imports the
simulator's aiohttp.web. A third-party package registers a provider through the
`ibias.providers` entry-point group (name = "package.module" or "package.module:Class"), looked
up only for a name that is not built in, by the one plugin policy (ibias/plugins.py): chosen by
`IBIAS_PLUGINS`, a failure named in one warning line and again by the `PluginError` of the
lookup it might have answered.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TypeVar

from ibias import errors, plugins
from ibias.runner.config import ModelConfig
from ibias.runner.providers.base import Provider, ProviderContext
from ibias.runner.providers.names import BUILTIN, ENTRY_POINT_GROUP
from ibias.runner.providers.traits import BUILTIN_TRAITS, ProviderTraits

__all__ = [
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "ProviderFactory",
    "UnknownProviderError",
    "create_provider",
    "known_providers",
    "provider",
    "provider_class",
    "registered_providers",
    "traits_for",
    "traits_of",
]

#: Builds the provider of one configured model: (model, API key or None, run context).
#: `execute()` takes one; the default, `create_provider`, looks the model's `provider` up here.
ProviderFactory = Callable[[ModelConfig, str | None, ProviderContext], Provider]

_P = TypeVar("_P", bound=type[Provider])

_REGISTRY: dict[str, type[Provider]] = {}


class UnknownProviderError(errors.RegistryError, LookupError):
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
    """The names that can be built, sorted: the built-in ones (imported or not) and any class
    registered so far. Entry points are not listed (reading them costs a scan of the installed
    packages' metadata); `provider_class` finds them."""
    return tuple(sorted(set(BUILTIN) | set(_REGISTRY)))


def known_providers() -> tuple[str, ...]:
    """`registered_providers` plus the names of the entry points `IBIAS_PLUGINS` chooses."""
    return tuple(sorted(set(registered_providers()) | set(plugins.names(ENTRY_POINT_GROUP))))


def provider_class(name: str) -> type[Provider]:
    """The class registered as `name`, importing its module on first use;
    `UnknownProviderError` names the known ones, `PluginError` a provider plugin that failed
    to load (it may be the one)."""
    cls = _REGISTRY.get(name)
    if cls is not None:
        return cls
    if name in BUILTIN:
        plugins.resolve(BUILTIN[name], ModuleType, f"provider {name}")
    else:
        plugins.load(ENTRY_POINT_GROUP, _register_plugin, name=name)
    cls = _REGISTRY.get(name)
    if cls is not None:
        return cls
    if plugins.failed(ENTRY_POINT_GROUP):
        raise plugins.missing(ENTRY_POINT_GROUP, f"provider {name!r}")
    known = ", ".join(registered_providers()) or "none"
    raise UnknownProviderError(f"no provider registered as {name!r} (registered: {known})")


def _register_plugin(name: str, loaded: object) -> None:
    """An `ibias.providers` entry point: a module (its `@provider` classes registered on
    import) or a Provider class, registered under the entry point's name."""
    if isinstance(loaded, ModuleType):
        return
    if not (isinstance(loaded, type) and issubclass(loaded, Provider)):
        raise TypeError(f"it is a {type(loaded).__name__}, not a Provider class or a module")
    if name not in _REGISTRY:
        provider(name)(loaded)


def create_provider(model: ModelConfig, api_key: str | None, context: ProviderContext) -> Provider:
    """The default `ProviderFactory`: the registered class of `model.provider`."""
    return provider_class(model.provider).from_config(model, api_key, context)


def traits_of(cls: type[Provider]) -> ProviderTraits:
    """The traits the config validates a model of `cls` with: its class's `traits`."""
    return cls.traits


def traits_for(name: str) -> ProviderTraits:
    """The traits of the provider registered as `name`: a built-in one's without importing
    it, any other's from its class (loading its plugin if need be)."""
    builtin = BUILTIN_TRAITS.get(name)
    return builtin if builtin is not None else traits_of(provider_class(name))

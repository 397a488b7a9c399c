"""One `[[models]]` table of a config -> a validated `ModelConfig`.

The table's schema (`ModelTable`, its bounds and the types of its keys) and the checks that
need more than one key or the provider's traits: a base URL without credentials, the `sim`
table, what a request may carry (seed, logprobs, reasoning, temperature, thinking) and the
provider's own options, which are the keys beyond the core ones (`split_models`), validated by
its `options_schema`. Every check names its key as `models[i].key` in a `SettingsError`, which
the config loader (runner/config/__init__.py) turns into the file's one line.

Bounds: `max_concurrency` 1 to 10,000; `rpm` and `tpm` 1 to 10^9; `timeout_s` above 0 and at
most 3,600; `temperature` 0 to 2; `max_tokens` 1 to 10^6; `sampling_seed` 0 to 2^53; prices 0
to 100,000 USD per million tokens; `outage_limit_s` above 0 and at most a week (default 600);
`max_body_bytes` 1,024 to 2^30 (default 16 MiB); `top_logprobs` 1 to 20 (default 20, only with
`logprobs = true`). A `base_url` never carries credentials (`url_credentials`): they would be
stored with the config's text, and keys belong in `api_key_env`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any
from urllib.parse import parse_qsl, urlparse

import msgspec
from msgspec import Meta

from ibias.prompts.base import SettingsError
from ibias.prompts.schema import MAX_INT, did_you_mean, join_key, render_path, show, validate
from ibias.runner.config.model_config import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_OUTAGE_LIMIT_S,
    ModelConfig,
)
from ibias.runner.providers.names import BUILTIN
from ibias.runner.providers.traits import (
    BUILTIN_TRAITS,
    LEGACY_RULES,
    ModelRequest,
    ProviderTraits,
)

ProviderName = Annotated[
    str,
    Meta(
        pattern=r"\A[^\s]{1,100}\Z",
        extra={
            "expected": "a provider name such as "
            + ", ".join(repr(name) for name in sorted(BUILTIN)[:-1])
            + f" or {sorted(BUILTIN)[-1]!r}"
        },
    ),
]

#: Upper bounds of a model's limits (a typo like 100000000 fails instead of eating memory).
MAX_CONCURRENCY = 10_000
MAX_RATE = 10**9
MAX_TIMEOUT_S = 3600.0
MAX_TOKENS = 1_000_000
MAX_PRICE = 100_000.0
#: The bound of a model's `outage_limit_s` (a week: longer is a typo).
MAX_OUTAGE_LIMIT_S = 7 * 86_400.0
#: The upper bound of a reply body's size cap (1 GiB: beyond is a typo).
MAX_BODY_BYTES = 1 << 30
#: OpenAI's chat completions return at most 20 alternatives per token position.
MAX_TOP_LOGPROBS = 20
DEFAULT_TOP_LOGPROBS = 20
#: Built-in providers whose requests can ask for token logprobs (their traits say so).
LOGPROBS_PROVIDERS = tuple(name for name, traits in BUILTIN_TRAITS.items() if traits.logprobs)

Text = Annotated[str, Meta(pattern=r"\S", extra={"expected": "a non-empty string"})]
ModelId = Annotated[
    str,
    Meta(
        pattern=r"\A\S{1,100}\Z",
        extra={"expected": "a model id: 1 to 100 characters, no spaces"},
    ),
]
URL_EXPECTED = "an http(s) URL such as 'https://api.openai.com/v1'"
#: What a base_url must look like. Checked in `_model`, not by the schema, so that a URL
#: carrying credentials is refused before anything echoes it (the schema quotes bad values).
URL_PATTERN = re.compile(r"\Ahttps?://[^\s/?#]")
Url = Annotated[str, Meta(extra={"expected": URL_EXPECTED})]
#: Query parameters that carry a key or a token (compared case-insensitively). A key in the
#: URL would be stored with the config text in `runs.config`; keys belong in `api_key_env`.
CREDENTIAL_PARAMS = frozenset(
    {
        "key",
        "api_key",
        "api-key",
        "apikey",
        "x-api-key",
        "access_token",
        "access-token",
        "token",
        "auth_token",
        "password",
        "secret",
        "client_secret",
    }
)
EnvName = Annotated[
    str,
    Meta(
        pattern=r"\A[A-Za-z_][A-Za-z0-9_]*\Z",
        extra={"expected": "an environment variable name such as 'OPENAI_API_KEY'"},
    ),
]
Seed = Annotated[int, Meta(ge=0, le=MAX_INT)]
Price = Annotated[float, Meta(ge=0, le=MAX_PRICE, description="USD per million tokens")]


class ModelTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The schema of one `[[models]]` entry (its `sim` table: `simulator.profile.SimModelTable`)."""

    id: ModelId
    provider: ProviderName
    base_url: Url | None = None
    model: Text | None = None
    api_key_env: EnvName | None = None
    rpm: Annotated[int, Meta(ge=1, le=MAX_RATE, description="requests per minute")] | None = None
    tpm: Annotated[int, Meta(ge=1, le=MAX_RATE, description="tokens per minute")] | None = None
    max_concurrency: Annotated[int, Meta(ge=1, le=MAX_CONCURRENCY)] = 16
    timeout_s: Annotated[float, Meta(gt=0, le=MAX_TIMEOUT_S, description="seconds")] = 60.0
    #: How long the endpoint may stay unreachable before the model stops
    #: (runner/scheduling/breaker.py).
    outage_limit_s: Annotated[float, Meta(gt=0, le=MAX_OUTAGE_LIMIT_S, description="seconds")] = (
        DEFAULT_OUTAGE_LIMIT_S
    )
    #: Bytes of a reply body read at most (runner/providers/http.py); a larger body is the
    #: attempt's error `too_large` and that trial fails alone.
    max_body_bytes: Annotated[int, Meta(ge=1024, le=MAX_BODY_BYTES, description="bytes")] = (
        DEFAULT_MAX_BODY_BYTES
    )
    temperature: Annotated[float, Meta(ge=0, le=2)] = 0.0
    max_tokens: Annotated[int, Meta(ge=1, le=MAX_TOKENS)] = 512
    sampling_seed: Seed | None = None
    price_input: Price = 0.0
    price_output: Price = 0.0
    price_cache_read: Price | None = None
    price_cache_write: Price | None = None
    sim: dict[str, Any] | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Meta(ge=1, le=MAX_TOP_LOGPROBS)] | None = None
    #: Per-model request rules for names the table cannot know (runner/providers/params.py).
    reasoning: bool | None = None
    send_temperature: bool | None = None


def url_credentials(url: str) -> str | None:
    """Which part of `url` carries credentials ("user info", "query parameter 'key'"), or None.

    Named, never quoted: the caller's message must not repeat the secret. Read by hand rather
    than with urlparse, which raises on some malformed hosts before the user info is seen."""
    rest = url.split("://", 1)[1] if "://" in url else url
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" in authority:
        return "user info"
    query = url.split("#", 1)[0].split("?", 1)[1] if "?" in url.split("#", 1)[0] else ""
    for name, _ in parse_qsl(query, keep_blank_values=True):
        if name.strip().lower() in CREDENTIAL_PARAMS:
            return f"query parameter {name.strip().lower()!r}"
    return None


_CORE_MODEL_KEYS = frozenset(ModelTable.__struct_fields__)


def split_models(data: Any) -> list[dict[str, Any]]:
    """Take every key that is not a core key out of each `[[models]]` table of `data` (in
    place), returning them per model: they are the provider's own options, validated by its
    `options_schema` once the provider is known (`_provider_options`)."""
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, list):
        return []
    extras: list[dict[str, Any]] = []
    for table in models:
        if isinstance(table, dict):
            extras.append({k: table.pop(k) for k in list(table) if k not in _CORE_MODEL_KEYS})
        else:
            extras.append({})
    return extras


def _provider_class(where: str, name: str) -> Any:
    """The registered class of provider `name` (built in or from an entry point), or a
    one-line SettingsError naming the known ones."""
    from ibias.runner.providers.registry import (  # only when a model needs it
        UnknownProviderError,
        known_providers,
        provider_class,
    )

    try:
        return provider_class(name)
    except UnknownProviderError:
        raise SettingsError(
            f"{where}.provider",
            f"no provider registered as {name!r}; use one of " + ", ".join(known_providers()),
        ) from None


def _provider_options(
    where: str, t: ModelTable, extras: Mapping[str, Any], cls: Any
) -> dict[str, Any]:
    """The provider's own options from the keys beyond the core ones, validated by its
    `options_schema` (a msgspec Struct) with the same one-line errors as the core keys; a
    key no schema takes is an unknown key, named as such."""
    schema = getattr(cls, "options_schema", None) if cls is not None else None
    fields = frozenset(schema.__struct_fields__) if schema is not None else frozenset()
    for key in extras:
        if key in fields:
            continue
        owners = sorted(name for name, tr in BUILTIN_TRAITS.items() if key in tr.options)
        if owners and t.provider not in owners:
            raise SettingsError(f"{where}.{key}", f"unknown key (it is for {_named(owners)})")
        raise _unknown_key(join_key(where, render_path([key])), key, t.provider, schema)
    if schema is None or not extras:
        return {}
    options = validate(dict(extras), schema, where)
    try:
        cls.check_options(options)
    except SettingsError as exc:
        raise SettingsError(join_key(where, exc.key), exc.message) from None
    # An option given at its schema's default (one that is not None: Anthropic's
    # `anthropic_version`) is the same request as one not given, so it is left out, and with
    # it out of the trial key: naming the default changes no key.
    defaults = {f.name: f.default for f in msgspec.structs.fields(schema)}
    return {
        k: v
        for k, v in msgspec.structs.asdict(options).items()
        if k in extras and (defaults.get(k) is None or v != defaults[k])
    }


def _unknown_key(
    where: str, key: str, provider: str, schema: type[msgspec.Struct] | None
) -> SettingsError:
    """A key that is neither a core key nor an option of the model's provider: the error
    lists the core keys and then the provider's own options (its `options_schema`), so a
    misspelt option of a provider, a plugin's as much as a built-in's, is shown beside the
    keys it could have been, and the nearest of all is suggested."""
    core = [f.encode_name for f in msgspec.structs.fields(ModelTable)]
    own = [f.encode_name for f in msgspec.structs.fields(schema)] if schema is not None else []
    listed = "unknown key (expected one of " + ", ".join(core)
    if own:
        listed += f"; provider = {provider!r} also takes " + ", ".join(own)
    return SettingsError(where, listed + ")" + did_you_mean(key, [*core, *own]))


def _owners(has: Callable[[ProviderTraits], bool]) -> list[str]:
    """The built-in providers whose traits take a key (`has`), sorted, for the error naming
    them (`thinking_budget` is both Anthropic's and Gemini's)."""
    return sorted(name for name, traits in BUILTIN_TRAITS.items() if has(traits))


def _named(owners: list[str]) -> str:
    """`provider = 'a' or provider = 'b'`: where a key belongs, in an error line."""
    return " or ".join(f"provider = {o!r}" for o in owners)


def _traits(where: str, t: ModelTable, extras: Mapping[str, Any]) -> tuple[ProviderTraits, Any]:
    """The model's provider traits, and its class when it had to be loaded: a built-in
    provider's traits are read without importing it (loading a provider loads aiohttp), its
    class only when the model has options to check; any other provider's class is looked up
    now (an entry point) and its traits are its own (`registry.traits_of`)."""
    builtin = BUILTIN_TRAITS.get(t.provider)
    if builtin is not None:
        return builtin, (_provider_class(where, t.provider) if extras else None)
    from ibias.runner.providers.registry import traits_of

    cls = _provider_class(where, t.provider)
    return traits_of(cls), cls


def model_config(index: int, t: ModelTable, extras: Mapping[str, Any] | None = None) -> ModelConfig:
    """A validated `[[models]]` entry, after the checks that span several keys."""
    where = f"models[{index}]"
    extras = extras or {}
    traits, cls = _traits(where, t, extras)
    _check_base_url(where, t, traits)
    _check_sim(where, t, traits)
    options = _provider_options(where, t, extras, cls)
    not_sent = _check_sending(where, t, traits, options)
    return ModelConfig(
        id=t.id,
        provider=t.provider,
        base_url=t.base_url.rstrip("/") if t.base_url is not None else None,
        model=_model_name(where, t, traits),
        api_key_env=t.api_key_env,
        rpm=t.rpm,
        tpm=t.tpm,
        max_concurrency=t.max_concurrency,
        timeout_s=t.timeout_s,
        temperature=t.temperature,
        max_tokens=t.max_tokens,
        sampling_seed=t.sampling_seed,
        price_input=t.price_input,
        price_output=t.price_output,
        sim=t.sim if t.sim is not None else {},
        options=options,
        outage_limit_s=t.outage_limit_s,
        max_body_bytes=t.max_body_bytes,
        top_logprobs=(
            (t.top_logprobs if t.top_logprobs is not None else DEFAULT_TOP_LOGPROBS)
            if t.logprobs
            else None
        ),
        reasoning=t.reasoning,
        send_temperature=t.send_temperature,
        not_sent=not_sent,
        price_cache_read=t.price_cache_read,
        price_cache_write=t.price_cache_write,
    )


def _check_base_url(where: str, t: ModelTable, traits: ProviderTraits) -> None:
    """`base_url`: given where the provider needs one, never where it refuses one (a
    provider that starts its own server), a valid URL without credentials."""
    if t.base_url is not None and traits.base_url_refused is not None:
        raise SettingsError(
            f"{where}.base_url",
            f"unknown key for provider = {t.provider!r} ({traits.base_url_refused})",
        )
    if t.base_url is None:
        if traits.needs_base_url and traits.default_base_url is None:
            raise SettingsError(f"{where}.base_url", f"missing (expected {_url_expected(traits)})")
        return
    carried = url_credentials(t.base_url)
    if carried is not None:
        raise SettingsError(
            f"{where}.base_url",
            f"base_url of model {t.id!r} carries credentials ({carried}); remove them and "
            "name the environment variable holding the key in api_key_env (a URL is "
            "stored with the config in the store)",
        )
    try:
        parsed = urlparse(t.base_url)
        valid = (
            URL_PATTERN.match(t.base_url) is not None
            and bool(parsed.hostname)
            and (parsed.port or 0) >= 0
        )
    except ValueError:  # a port that is not a number from 0 to 65535, a bad IPv6 host
        valid = False
    if not valid:
        raise SettingsError(
            f"{where}.base_url",
            f"expected {_url_expected(traits)}, got {show(t.base_url)}",
        )


def _check_sim(where: str, t: ModelTable, traits: ProviderTraits) -> None:
    """The `sim` table (any provider's model: the simulator's profile of it in a rehearsal,
    of a `simulator` model always); the runner's keys checked by the simulator profile's
    schema and each `experiments.NAME` table (and flat unit key) by its unit's parameter
    struct, errors prefixed with `models[i].sim`."""
    if t.sim is None:
        return
    # Every provider's model takes one: a rehearsal (`--rehearse`) simulates that model with
    # it; a real run of a model the simulator does not answer says so and ignores it
    # (runner/execution/rehearsal.py `sim_table_note`). Never an input of the plan or a trial key
    # (`plan.OPERATIONAL_MODEL_KEYS`).
    from ibias.runner.simulator.profile import model_profile_from_dict  # only simulated models

    try:
        model_profile_from_dict(t.sim)
    except SettingsError as exc:
        raise SettingsError(join_key(f"{where}.sim", exc.key), exc.message) from None


def _check_sending(
    where: str, t: ModelTable, traits: ProviderTraits, options: Mapping[str, Any]
) -> tuple[str, ...]:
    """The checks of what a request may carry (seed, logprobs, reasoning, temperature,
    thinking) against the provider's traits; returns the parameters its rule no longer
    sends."""
    if not traits.sampling_seed and t.sampling_seed is not None:
        raise SettingsError(
            f"{where}.sampling_seed",
            f"{traits.api} has no seed, so none would be sent; remove sampling_seed "
            "(the trial key must not promise one)",
        )
    if t.top_logprobs is not None and not t.logprobs:
        raise SettingsError(
            f"{where}.top_logprobs", "top_logprobs needs logprobs = true for this model"
        )
    if t.logprobs and not traits.logprobs:
        raise SettingsError(
            f"{where}.logprobs",
            f"provider {t.provider!r} cannot return token logprobs; only "
            + " and ".join(repr(p) for p in LOGPROBS_PROVIDERS)
            + " (OpenAI-compatible) models can ask for them",
        )
    if t.reasoning is not None and not traits.reasoning:
        owners = _named(_owners(lambda traits: traits.reasoning))
        raise SettingsError(f"{where}.reasoning", f"unknown key (it is for {owners} models)")
    if t.temperature > traits.max_temperature:
        raise SettingsError(
            f"{where}.temperature",
            f"{traits.api} takes temperature 0 to {traits.max_temperature:g}, "
            f"got {show(t.temperature)}",
        )
    if traits.request_rules is None:
        return ()
    return _check_request_rule(where, t, traits, options)


def _check_request_rule(
    where: str, t: ModelTable, traits: ProviderTraits, options: Mapping[str, Any]
) -> tuple[str, ...]:
    """Providers with request rules (runner/providers/params.py): the rule for the model's
    name must accept its temperature, thinking and logprobs; returns the parameters the rule
    drops that the legacy rule sent."""
    from ibias.runner.providers import params as rules  # no imports of its own

    assert traits.request_rules is not None
    name = t.model if t.model is not None else t.id
    rule = rules.rule_for(
        t.base_url,
        name,
        provider=traits.request_rules,
        reasoning=t.reasoning,
        send_temperature=t.send_temperature,
    )
    # A provider that had no rules before: every parameter its table drops is newly dropped.
    legacy = rules.legacy_rule_for(
        (t.base_url or traits.default_base_url) if t.provider in LEGACY_RULES else None, name
    )
    not_sent = rules.not_sent(rule, legacy)
    why = rules.check_sampling(rule, {"temperature": t.temperature})
    if why is not None:
        raise SettingsError(f"{where}.temperature", why)
    if traits.check_request is not None:
        request = ModelRequest(
            temperature=t.temperature, max_tokens=t.max_tokens, options=options, rule=rule
        )
        try:
            traits.check_request(request)
        except SettingsError as exc:
            raise SettingsError(join_key(where, exc.key), exc.message) from None
    if t.logprobs and "logprobs" in rule.rejects:
        raise SettingsError(
            f"{where}.logprobs",
            f"{rule.label}s refuse logprobs (see {rule.source}); remove logprobs = true "
            "for this model",
        )
    return not_sent


def _model_name(where: str, t: ModelTable, traits: ProviderTraits) -> str:
    """The provider's model name (`model`, else the id), turned into the key the trial
    records by the provider's `model_key` (llamacpp: keyed by the weights that answer,
    docs/providers.md)."""
    model_name = t.model if t.model is not None else t.id
    if traits.model_key is None:
        return model_name
    try:
        return traits.model_key(model_name)
    except SettingsError as exc:
        raise SettingsError(f"{where}.model", exc.message) from None


def _url_expected(traits: ProviderTraits) -> str:
    """What a base_url must look like, with this provider's documented URL as the example."""
    example = traits.default_base_url
    if example is None:
        return URL_EXPECTED
    return f"an http(s) URL such as {example!r}"

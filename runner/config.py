"""TOML config -> frozen, validated values.

Every key is checked here (or by the experiment that owns a table) so that a typo in an
overnight sweep's config fails in the first second with the file, the key path and what was
expected, instead of silently running the wrong grid. The file, `[run]` and each `[[models]]`
entry are msgspec schemas (`ConfigFile`, `RunTable`, `ModelTable`); a `[models.sim]` table is
the simulator's `SimModelTable`; each `[experiments.NAME]` table is validated by its experiment's
own schema when it is built. Every error, from a schema or from a check that needs data, is one
`ConfigError`: `FILE: key.path[i].sub: what is wrong (expected ..., got ...)`.

Bounds: every integer within 2^53; `max_concurrency` 1 to 10,000; `rpm` and `tpm` 1 to 10^9;
`timeout_s` above 0 and at most 3,600; `temperature` 0 to 2; `max_tokens` 1 to 10^6;
`sampling_seed` and `[run].seed` 0 to 2^53; prices 0 to 100,000 USD per million tokens;
`[run].grace_s` 0 to 3,600 (default 10); `outage_limit_s` above 0 and at most a week (default
600); `max_body_bytes` 1,024 to 2^30 (default 16 MiB); `top_logprobs` 1 to 20 (default 20,
only with `logprobs = true`).

The file: a regular file (never a FIFO or a device, which would hang or fill memory) of at most
MAX_CONFIG_BYTES (1 MiB), nested at most MAX_CONFIG_DEPTH (32) levels deep. Every relative
path a config names, `[run] store` included, is relative to the config's folder, so a config
means the same wherever it is run from; `--store` is relative to the current directory. A
`base_url` never carries credentials (`url_credentials`): they would be stored with the
config's text, and keys belong in `api_key_env`.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qsl, urlparse

import msgspec
from msgspec import Meta

from ibias import errors
from ibias.prompts.base import Experiment, SettingsError
from ibias.prompts.registry import EXPERIMENT_BUILDERS
from ibias.prompts.schema import (
    MAX_INT,
    did_you_mean,
    join_key,
    one_line,
    render_path,
    show,
    validate,
)
from ibias.runner.paths import DEFAULT_STORE as DEFAULT_STORE
from ibias.runner.paths import absolute_path as absolute_path
from ibias.runner.providers.names import BUILTIN, SENDING_OPTIONS
from ibias.runner.providers.traits import (
    BUILTIN_TRAITS,
    LEGACY_RULES,
    ModelRequest,
    ProviderTraits,
)


def implemented_providers() -> tuple[str, ...]:
    """The built-in providers (runner/providers/names.py lists them without importing them:
    checking a config loads no provider)."""
    return tuple(BUILTIN)


#: The largest config (or simulator profile) read, in bytes: the paper's grid takes 20 KB, and
#: a bound means a wrong path (a log, a dump) fails at once instead of filling memory.
MAX_CONFIG_BYTES = 1 << 20
#: The deepest nesting of tables and arrays a config may have (the document is level 1; the
#: deepest shipped config, demo.toml, uses 6): Python's TOML parser recurses once per level.
MAX_CONFIG_DEPTH = 32

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
#: Bounds of `[run].grace_s` and of a model's `outage_limit_s` (a week: longer is a typo).
MAX_GRACE_S = 3600.0
MAX_OUTAGE_LIMIT_S = 7 * 86_400.0
DEFAULT_GRACE_S = 10.0
DEFAULT_OUTAGE_LIMIT_S = 600.0
#: A reply body's size cap (16 MiB) and its upper bound (1 GiB: beyond is a typo).
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
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


class RunTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The schema of `[run]`."""

    name: Text | None = None
    seed: Seed = 0
    #: Not blank, and no NUL byte: the one byte a path cannot hold (`os.stat` raises on it).
    store: (
        Annotated[str, Meta(pattern=r"^[^\x00]*[^\s\x00][^\x00]*$", extra={"expected": "a path"})]
        | None
    ) = None
    #: Seconds requests in flight may take to finish after a stop (Ctrl-C, SIGTERM, SIGHUP).
    grace_s: Annotated[float, Meta(ge=0, le=MAX_GRACE_S, description="seconds")] = DEFAULT_GRACE_S


class ModelTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The schema of one `[[models]]` entry (its `sim` table: `sim_profile.SimModelTable`)."""

    id: ModelId
    provider: ProviderName
    base_url: Url | None = None
    model: Text | None = None
    api_key_env: EnvName | None = None
    rpm: Annotated[int, Meta(ge=1, le=MAX_RATE, description="requests per minute")] | None = None
    tpm: Annotated[int, Meta(ge=1, le=MAX_RATE, description="tokens per minute")] | None = None
    max_concurrency: Annotated[int, Meta(ge=1, le=MAX_CONCURRENCY)] = 16
    timeout_s: Annotated[float, Meta(gt=0, le=MAX_TIMEOUT_S, description="seconds")] = 60.0
    #: How long the endpoint may stay unreachable before the model stops (runner/breaker.py).
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


class ConfigFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The schema of the whole file; each experiment's table has its own (prompts/)."""

    run: RunTable = msgspec.field(default_factory=RunTable)
    models: Annotated[
        list[ModelTable], Meta(min_length=1, extra={"expected": "an array of [[models]] tables"})
    ]
    experiments: Annotated[
        dict[str, dict[str, Any]],
        Meta(extra={"expected": "an [experiments] table, e.g. [experiments.prompts]"}),
    ]


class ConfigError(errors.ConfigError):
    """A config problem, already phrased as the one line the user sees."""


@dataclass(frozen=True)
class RunSettings:
    name: str
    seed: int
    store: str | None
    grace_s: float = DEFAULT_GRACE_S


@dataclass(frozen=True)
class ModelConfig:
    id: str
    provider: str
    base_url: str | None
    model: str
    api_key_env: str | None
    rpm: int | None
    tpm: int | None
    max_concurrency: int
    timeout_s: float
    temperature: float
    max_tokens: int
    sampling_seed: int | None
    price_input: float
    price_output: float
    sim: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    """The provider's own options (its `options_schema`, runner/providers/base.py), as set in
    the model's table: only the keys given (e.g. Gemini's `safety_settings`,
    `thinking_budget`, `thinking_level`)."""
    outage_limit_s: float = DEFAULT_OUTAGE_LIMIT_S
    """Seconds the endpoint may stay unreachable before the model stops for this run."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Bytes of a reply body read at most; a larger one fails its trial alone."""
    top_logprobs: int | None = None
    """Alternatives per token asked for with the reply's token logprobs (`logprobs = true`);
    None when the model does not ask for logprobs."""
    reasoning: bool | None = None
    """OpenAI-compatible only: `true` applies the OpenAI reasoning rule to a name the table
    cannot know (`max_completion_tokens`, no temperature), `false` no rule; None: the table."""
    send_temperature: bool | None = None
    """`false`: never send `temperature` to this model; None: the rule table decides."""
    price_cache_read: float | None = None
    """USD per million prompt tokens read from the cache; None: priced as `price_input`."""
    price_cache_write: float | None = None
    """USD per million prompt tokens written to the cache; None: priced as `price_input`."""
    not_sent: tuple[str, ...] = ()
    """Neutral parameters this model's rule newly stops sending (params.not_sent): recorded in
    the trial's params so its key says what was sent; empty for every config that ran before."""

    def params(self) -> dict[str, Any]:
        """Sampling parameters sent with every request (part of the trial key).

        Every option that changes the reply is here, but an optional one only when it is set,
        so the keys of trials planned before it existed stay what they were: the sampling seed,
        the provider's own options (Gemini's `safety_settings`, `thinking_budget` and
        `thinking_level`; an empty table is not set; the providers read these from the
        model's config, the same config these params come from), and
        `logprobs`/`top_logprobs` when the model asks for token logprobs (sent as they are
        stored, so the key says what was asked)."""
        out: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.sampling_seed is not None:
            out["seed"] = self.sampling_seed
        for name, value in self.options.items():
            if name in SENDING_OPTIONS:
                continue  # how the trial is sent, not what: never in its key
            if isinstance(value, Mapping):
                if value:
                    out[name] = dict(sorted(value.items()))
            elif value is not None:
                out[name] = value
        if self.top_logprobs is not None:
            out["logprobs"] = True
            out["top_logprobs"] = self.top_logprobs
        if self.not_sent:
            out["not_sent"] = list(self.not_sent)
        return out

    def cost(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
    ) -> float:
        """USD for these tokens. Cache tokens are inside `prompt_tokens`; those with a cache
        price given are priced at it instead of `price_input`."""
        prompt = prompt_tokens * self.price_input
        for tokens, price in (
            (cache_read_tokens, self.price_cache_read),
            (cache_write_tokens, self.price_cache_write),
        ):
            if tokens and price is not None:
                prompt += tokens * (price - self.price_input)
        return (prompt + completion_tokens * self.price_output) / 1e6


@dataclass(frozen=True)
class Config:
    path: Path
    text: str
    run: RunSettings
    models: tuple[ModelConfig, ...]
    experiments: Mapping[str, Mapping[str, Any]]
    built: tuple[Experiment, ...] = ()
    #: A rehearsal of this config (`--rehearse`, runner/rehearsal.py): every model answered
    #: by the in-process simulator, into the rehearsal store (`store_path`); the run then
    #: serves the simulator (runner/event_loop.py). Never part of the plan or a trial key.
    rehearsal: bool = False

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def store_path(self, override: str | None = None) -> Path:
        """--store (relative to the current directory: it was typed there), else [run].store
        (relative to this config's folder, `config_store_path`), else the default (relative to
        the current directory, the same store every command finds without a config); a
        rehearsal's is the `.rehearsal.duckdb` beside the latter two (--store is taken as
        given). Checked before anything opens it (`check_store_path`: a regular file or
        absent, no NUL)."""
        from ibias.runner.rehearsal import rehearsal_store
        from ibias.store.lock import check_store_path

        if override:
            store = Path(override)
        elif self.run.store is None:
            store = Path(DEFAULT_STORE)
        else:
            store = config_store_path(self.path, self.run.store)
        if self.rehearsal and not override:
            store = rehearsal_store(store)
        check_store_path(store)
        return store


def store_beside(config: Path, store: str) -> Path:
    """The `[run] store` of the config at `config` as an absolute path: as written if absolute,
    else in the config's folder, as `stimuli` and every data file a config names.

    The config's folder, not the current directory: a config run from another folder must
    find the store it already filled, or it starts a new one and pays for every trial again."""
    written = Path(store)
    return written if written.is_absolute() else absolute_path(config.parent / written)


def installed_configs() -> Path | None:
    """The `configs` folder of an installed `ibias` package (a wheel's), or None when the
    package is a source checkout (its folder's parent holds pyproject.toml), whose `configs/`
    is the repository's and whose relative stores point into the repository's `runs/`."""
    from importlib import resources

    folder = Path(str(resources.files("ibias") / "configs")).resolve()
    return None if (folder.parent / "pyproject.toml").is_file() else folder


def is_installed_config(config: Path) -> bool:
    """Whether the config at `config` lies in the installed package's `configs` folder."""
    folder = installed_configs()
    return folder is not None and config.parent.resolve().is_relative_to(folder)


def config_store_path(config: Path, store: str) -> Path:
    """`store_beside`, refused in one line (ConfigError) where it cannot be meant:
    - a relative store of a config installed inside the package: it would land among the
      package's files (read-only, or wiped by the next upgrade), so `--store` must say where;
    - a store that does not exist beside the config while the same relative path exists in
      the current directory, where relative stores were resolved before: that is this
      config's store at its old place, and starting a new one would re-send every trial."""
    written = Path(store)
    if written.is_absolute():
        return written
    if is_installed_config(config):
        raise ConfigError(
            f"{config}: its [run] store {store!r} is relative, and this config is installed "
            "inside the ibias package, where no store belongs; pass --store PATH (or copy the "
            "config to a folder of your own)"
        )
    resolved = store_beside(config, store)
    try:
        old = absolute_path(Path.cwd() / written)
    except OSError:  # the current directory was removed: there is no old place to look at
        return resolved
    if old != resolved and not os.path.lexists(resolved) and old.exists():
        raise ConfigError(
            f"{config}: its [run] store {store!r} means {resolved} (relative to the config's "
            f"folder), which does not exist, but {old} does (relative to the current directory, "
            f"where it was looked for before); move that store to {resolved} or pass --store {old}"
        )
    return resolved


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


def _split_models(data: Any) -> list[dict[str, Any]]:
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
        validate({**msgspec.structs.asdict(t), key: extras[key]}, ModelTable, where)
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


def _model(index: int, t: ModelTable, extras: Mapping[str, Any] | None = None) -> ModelConfig:
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
    # (runner/rehearsal.py `sim_table_note`). Never an input of the plan or a trial key
    # (`plan.OPERATIONAL_MODEL_KEYS`).
    from ibias.runner.sim_profile import model_profile_from_dict  # only simulated models

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


def _experiments(
    tables: Mapping[str, Mapping[str, Any]], seed: int, base_dir: Path
) -> tuple[dict[str, Mapping[str, Any]], tuple[Experiment, ...]]:
    """Validate each experiment table by building it; the built experiments are kept so the
    planner does not read their data files again."""
    if not tables:
        raise SettingsError(
            "experiments", "no experiments configured; add e.g. [experiments.prompts]"
        )
    built: list[Experiment] = []
    for name, table in tables.items():
        where = render_path(["experiments", name])
        if name not in EXPERIMENT_BUILDERS:
            known = list(EXPERIMENT_BUILDERS)
            listed = "unknown experiment; expected one of " + ", ".join(known)
            raise SettingsError(where, listed + did_you_mean(name, known))
        try:
            built.extend(EXPERIMENT_BUILDERS[name](table, seed, base_dir))
        except SettingsError as exc:
            raise SettingsError(join_key(where, exc.key), exc.message) from None
    return dict(tables), tuple(built)


def read_toml_file(path: Path, what: str = "config") -> str:
    """The text of the TOML file at `path`, refused in one line (ConfigError) unless it is a
    regular file of at most MAX_CONFIG_BYTES in UTF-8.

    The kind of file is checked before anything is read: reading a FIFO waits for a writer
    forever and `/dev/zero` never ends. The file is opened without blocking and checked
    again through its descriptor, so a path swapped between the two looks is still refused;
    at most MAX_CONFIG_BYTES + 1 bytes are read whatever the file claims its size is. A NUL
    byte, which no path can hold, is refused before `os.stat` raises ValueError on it."""
    if "\0" in os.fspath(path):
        raise ConfigError(f"{os.fspath(path)!r}: a path cannot hold a NUL byte")
    try:
        kind = _file_kind(os.stat(path).st_mode)
        if kind is None:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            try:
                info = os.fstat(fd)
                kind = _file_kind(info.st_mode)
                raw = b"" if kind is not None else _read_at_most(fd, MAX_CONFIG_BYTES + 1)
            finally:
                os.close(fd)
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if kind is not None:
        raise ConfigError(f"{path}: is {kind}, expected a TOML {what} file (a regular file)")
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}: larger than {MAX_CONFIG_BYTES:,} bytes, the most a {what} file may be"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None


def _file_kind(mode: int) -> str | None:
    """None for a regular file, else what the file is, in words."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def loads_toml(text: str, path: Path, what: str = "config") -> dict[str, Any]:
    """The TOML document `text` (of the file `path`), refused in one line (ConfigError) when it
    is larger than MAX_CONFIG_BYTES, nested deeper than MAX_CONFIG_DEPTH, or not TOML.

    tomllib parses arrays and inline tables recursively: a few hundred `[` end in a
    RecursionError. Their depth is counted before parsing (`_too_deep`), RecursionError is
    caught all the same, and the parsed document is measured again, since dotted keys and
    table headers nest tables without a single bracket."""
    if len(text) > MAX_CONFIG_BYTES or len(text.encode("utf-8", "surrogatepass")) > (
        MAX_CONFIG_BYTES
    ):
        raise ConfigError(
            f"{path}: larger than {MAX_CONFIG_BYTES:,} bytes, the most a {what} file may be"
        )
    deep = f"{path}: nested deeper than {MAX_CONFIG_DEPTH} levels, the most a {what} file may be"
    if _too_deep(text, MAX_CONFIG_DEPTH):
        raise ConfigError(deep)
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise ConfigError(deep) from None
    except ValueError as exc:  # TOMLDecodeError, or an integer of more than 4300 digits
        raise ConfigError(f"{path}: not valid TOML: {one_line(str(exc))}") from None
    if _depth(data) > MAX_CONFIG_DEPTH:
        raise ConfigError(deep)
    return data


def _depth(value: Any) -> int:
    """How many tables and arrays deep `value` is (the document itself is 1), without
    recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if level > MAX_CONFIG_DEPTH:
            return level  # deep enough to refuse; measuring on costs time for nothing
        stack.extend((child, level + 1) for child in children)
    return deepest


_TOML_TOKEN = re.compile(r'"""|\'\'\'|["\'#\[\]{}]')
_STRING_END = {
    '"""': re.compile(r'(?:[^"\\]|\\.|"(?!""))*"""("{0,2})', re.DOTALL),
    "'''": re.compile(r"(?:[^']|'(?!''))*'''('{0,2})"),
    '"': re.compile(r'(?:[^"\\\n]|\\.)*("|\n|\Z)'),
    "'": re.compile(r"[^'\n]*('|\n|\Z)"),
}


def _too_deep(text: str, limit: int) -> bool:
    """Whether brackets outside strings and comments nest deeper than `limit` (an upper bound
    of the document's depth as a parser recurses: `[[table]]` headers count too)."""
    depth = 0
    at = 0
    while True:
        found = _TOML_TOKEN.search(text, at)
        if found is None:
            return False
        token = found.group()
        at = found.end()
        if token == "#":
            newline = text.find("\n", at)
            at = len(text) if newline < 0 else newline + 1
        elif token in _STRING_END:
            end = _STRING_END[token].match(text, at)
            at = len(text) if end is None else end.end()
        elif token in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth = max(depth - 1, 0)


def parse_config(text: str, path: Path) -> Config:
    """Validate the TOML `text` of the config at `path`: ConfigError names the key path."""
    data = loads_toml(text, path)
    try:
        extras = _split_models(data)
        file = validate(data, ConfigFile)
        run = RunSettings(
            name=file.run.name if file.run.name is not None else path.stem,
            seed=file.run.seed,
            store=file.run.store,
            grace_s=file.run.grace_s,
        )
        models = tuple(_model(i, m, extras[i]) for i, m in enumerate(file.models))
        seen: dict[str, int] = {}
        for i, m in enumerate(models):
            if m.id in seen:
                raise SettingsError(
                    f"models[{i}].id", f"duplicate model id {m.id!r} (also models[{seen[m.id]}])"
                )
            seen[m.id] = i
        experiments, built = _experiments(file.experiments, run.seed, path.parent)
    except SettingsError as exc:
        where = f"{exc.key}: " if exc.key else ""
        raise ConfigError(f"{path}: {where}{one_line(exc.message)}") from None
    return Config(
        path=path, text=text, run=run, models=models, experiments=experiments, built=built
    )


def load_config(path: str | Path) -> Config:
    """Read (`read_toml_file`: a regular file of at most MAX_CONFIG_BYTES) and validate."""
    p = Path(path)
    return parse_config(read_toml_file(p), p)

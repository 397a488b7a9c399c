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
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlparse

import msgspec
from msgspec import Meta

from ibias.prompts.base import Experiment, SettingsError
from ibias.prompts.registry import EXPERIMENT_BUILDERS
from ibias.prompts.schema import MAX_INT, join_key, one_line, render_path, show, validate

PROVIDERS = ("openai", "gemini", "anthropic", "llamacpp", "simulator")


def implemented_providers() -> tuple[str, ...]:
    """The providers of the design that have a class (runner/providers/names.py lists the
    built-in ones without importing them: checking a config loads no provider)."""
    from ibias.runner.providers.names import BUILTIN

    return tuple(p for p in PROVIDERS if p in BUILTIN)


DEFAULT_STORE = "runs/ibias.duckdb"

Provider = Literal["openai", "gemini", "anthropic", "llamacpp", "simulator"]
assert get_args(Provider) == PROVIDERS

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
#: Providers whose requests can ask for token logprobs (OpenAI's `logprobs`/`top_logprobs`).
LOGPROBS_PROVIDERS = ("openai", "simulator")

Text = Annotated[str, Meta(pattern=r"\S", extra={"expected": "a non-empty string"})]
ModelId = Annotated[
    str,
    Meta(
        pattern=r"\A\S{1,100}\Z",
        extra={"expected": "a model id: 1 to 100 characters, no spaces"},
    ),
]
URL_EXPECTED = "an http(s) URL such as 'https://api.openai.com/v1'"
Url = Annotated[str, Meta(pattern=r"\Ahttps?://[^\s/?#]", extra={"expected": URL_EXPECTED})]
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
    store: Annotated[str, Meta(pattern=r"\S", extra={"expected": "a path"})] | None = None
    #: Seconds requests in flight may take to finish after a stop (Ctrl-C, SIGTERM, SIGHUP).
    grace_s: Annotated[float, Meta(ge=0, le=MAX_GRACE_S, description="seconds")] = DEFAULT_GRACE_S


class ModelTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The schema of one `[[models]]` entry (its `sim` table: `sim_profile.SimModelTable`)."""

    id: ModelId
    provider: Provider
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
    sim: dict[str, Any] | None = None
    safety_settings: dict[str, str] | None = None
    thinking_budget: Annotated[int, Meta(ge=-1, le=32768)] | None = None
    thinking_level: Text | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Meta(ge=1, le=MAX_TOP_LOGPROBS)] | None = None


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


class ConfigError(Exception):
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
    safety_settings: Mapping[str, str] | None = None
    """Gemini only: harm category -> block threshold (runner/providers/gemini.py)."""
    thinking_budget: int | None = None
    """Gemini only: thinking tokens (-1 dynamic, 0 off)."""
    thinking_level: str | None = None
    """Gemini only: minimal, low, medium or high (not with thinking_budget)."""
    outage_limit_s: float = DEFAULT_OUTAGE_LIMIT_S
    """Seconds the endpoint may stay unreachable before the model stops for this run."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Bytes of a reply body read at most; a larger one fails its trial alone."""
    top_logprobs: int | None = None
    """Alternatives per token asked for with the reply's token logprobs (`logprobs = true`);
    None when the model does not ask for logprobs."""

    def params(self) -> dict[str, Any]:
        """Sampling parameters sent with every request (part of the trial key).

        Every option that changes the reply is here, but an optional one only when it is set,
        so the keys of trials planned before it existed stay what they were: the sampling seed,
        Gemini's `safety_settings`, `thinking_budget` and `thinking_level` (the providers
        read these from the model's config, the same config these params come from), and
        `logprobs`/`top_logprobs` when the model asks for token logprobs (sent as they are
        stored, so the key says what was asked)."""
        out: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.sampling_seed is not None:
            out["seed"] = self.sampling_seed
        if self.safety_settings:
            out["safety_settings"] = dict(sorted(self.safety_settings.items()))
        if self.thinking_budget is not None:
            out["thinking_budget"] = self.thinking_budget
        if self.thinking_level is not None:
            out["thinking_level"] = self.thinking_level
        if self.top_logprobs is not None:
            out["logprobs"] = True
            out["top_logprobs"] = self.top_logprobs
        return out

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.price_input + completion_tokens * self.price_output) / 1e6


@dataclass(frozen=True)
class Config:
    path: Path
    text: str
    run: RunSettings
    models: tuple[ModelConfig, ...]
    experiments: Mapping[str, Mapping[str, Any]]
    built: tuple[Experiment, ...] = ()

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def store_path(self, override: str | None = None) -> Path:
        """--store, else [run].store, else the default; relative to the current directory."""
        return Path(override or self.run.store or DEFAULT_STORE)


def _model(index: int, t: ModelTable) -> ModelConfig:
    """A validated `[[models]]` entry, after the checks that span several keys."""
    where = f"models[{index}]"
    implemented = implemented_providers()
    if t.provider not in implemented:
        raise SettingsError(
            f"{where}.provider",
            f"provider {t.provider!r} is not implemented yet; use one of "
            + ", ".join(implemented)
            + " (e.g. 'openai' with the provider's OpenAI-compatible endpoint)",
        )
    if t.base_url is not None:
        parsed = urlparse(t.base_url)
        try:
            valid = bool(parsed.hostname) and (parsed.port or 0) >= 0
        except ValueError:  # a port that is not a number from 0 to 65535
            valid = False
        if not valid:
            raise SettingsError(
                f"{where}.base_url", f"expected {URL_EXPECTED}, got {show(t.base_url)}"
            )
    elif t.provider != "simulator":
        raise SettingsError(f"{where}.base_url", f"missing (expected {URL_EXPECTED})")
    if t.sim is not None:
        if t.provider != "simulator":
            raise SettingsError(
                f"{where}.sim", "unknown key (a sim table is for provider = 'simulator')"
            )
        from ibias.runner.sim_profile import model_profile_from_dict  # only simulated models

        try:
            model_profile_from_dict(t.sim)
        except SettingsError as exc:
            raise SettingsError(join_key(f"{where}.sim", exc.key), exc.message) from None
    gemini_keys = {
        k: v
        for k, v in (
            ("safety_settings", t.safety_settings),
            ("thinking_budget", t.thinking_budget),
            ("thinking_level", t.thinking_level),
        )
        if v is not None
    }
    if gemini_keys and t.provider != "gemini":
        key = next(iter(gemini_keys))
        raise SettingsError(f"{where}.{key}", "unknown key (it is for provider = 'gemini')")
    if gemini_keys:
        from ibias.runner.providers.gemini import GeminiOptions  # only Gemini models

        try:
            GeminiOptions.from_mapping(gemini_keys)
        except SettingsError as exc:
            raise SettingsError(join_key(where, exc.key), exc.message) from None
    if t.provider == "anthropic" and t.sampling_seed is not None:
        raise SettingsError(
            f"{where}.sampling_seed",
            "Anthropic's Messages API has no seed, so none would be sent; remove sampling_seed "
            "(the trial key must not promise one)",
        )
    if t.top_logprobs is not None and not t.logprobs:
        raise SettingsError(
            f"{where}.top_logprobs", "top_logprobs needs logprobs = true for this model"
        )
    if t.logprobs and t.provider not in LOGPROBS_PROVIDERS:
        raise SettingsError(
            f"{where}.logprobs",
            f"provider {t.provider!r} cannot return token logprobs; only "
            + " and ".join(repr(p) for p in LOGPROBS_PROVIDERS)
            + " (OpenAI-compatible) models can ask for them",
        )
    if t.provider == "openai":
        from ibias.runner.providers.params import check_sampling, rule_for  # no imports of its own

        rule = rule_for(t.base_url, t.model if t.model is not None else t.id)
        why = check_sampling(rule, {"temperature": t.temperature})
        if why is not None:
            raise SettingsError(f"{where}.temperature", why)
        if t.logprobs and "logprobs" in rule.rejects:
            raise SettingsError(
                f"{where}.logprobs",
                f"{rule.label}s refuse logprobs (see {rule.source}); remove logprobs = true "
                "for this model",
            )
    return ModelConfig(
        id=t.id,
        provider=t.provider,
        base_url=t.base_url.rstrip("/") if t.base_url is not None else None,
        model=t.model if t.model is not None else t.id,
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
        safety_settings=t.safety_settings,
        thinking_budget=t.thinking_budget,
        thinking_level=t.thinking_level,
        outage_limit_s=t.outage_limit_s,
        max_body_bytes=t.max_body_bytes,
        top_logprobs=(
            (t.top_logprobs if t.top_logprobs is not None else DEFAULT_TOP_LOGPROBS)
            if t.logprobs
            else None
        ),
    )


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
            raise SettingsError(
                where, "unknown experiment; expected one of " + ", ".join(EXPERIMENT_BUILDERS)
            )
        try:
            built.extend(EXPERIMENT_BUILDERS[name](table, seed, base_dir))
        except SettingsError as exc:
            raise SettingsError(join_key(where, exc.key), exc.message) from None
    return dict(tables), tuple(built)


def parse_config(text: str, path: Path) -> Config:
    """Validate the TOML `text` of the config at `path`: ConfigError names the key path."""
    try:
        data = tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an integer of more than 4300 digits
        raise ConfigError(f"{path}: not valid TOML: {one_line(str(exc))}") from None
    try:
        file = validate(data, ConfigFile)
        run = RunSettings(
            name=file.run.name if file.run.name is not None else path.stem,
            seed=file.run.seed,
            store=file.run.store,
            grace_s=file.run.grace_s,
        )
        models = tuple(_model(i, m) for i, m in enumerate(file.models))
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
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{p}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{p}: is a directory, expected a TOML config file") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not UTF-8 text") from None
    return parse_config(text, p)

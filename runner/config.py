"""TOML config -> frozen, validated values.

Every key is checked here (or by the experiment that owns a table) so that a typo in an
overnight sweep's config fails in the first second with the file, the key path and what was
expected, instead of silently running the wrong grid.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ibias.prompts.base import Experiment, SettingsError
from ibias.prompts.registry import EXPERIMENT_BUILDERS

PROVIDERS = ("openai", "gemini", "anthropic", "llamacpp", "simulator")
IMPLEMENTED_PROVIDERS = ("openai", "simulator")
DEFAULT_STORE = "runs/ibias.duckdb"


class ConfigError(Exception):
    """A config problem, already phrased as the one line the user sees."""


@dataclass(frozen=True)
class RunSettings:
    name: str
    seed: int
    store: str | None


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

    def params(self) -> dict[str, Any]:
        """Sampling parameters sent with every request (part of the trial key)."""
        out: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.sampling_seed is not None:
            out["seed"] = self.sampling_seed
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


class _Table:
    """Reads one TOML table, remembering which keys were consumed so leftovers are errors."""

    def __init__(self, path: Path, where: str, data: Any) -> None:
        self.path = path
        self.where = where
        if not isinstance(data, dict):
            raise self.error("", f"expected a table, got {_typename(data)}")
        self.data: dict[str, Any] = data
        self.used: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def error(self, name: str, message: str) -> ConfigError:
        where = self.key(name) if name else self.where
        return ConfigError(f"{self.path}: {where}: {message}")

    def get(
        self,
        name: str,
        check: Callable[[Any], Any],
        expected: str,
        default: Any = ...,
    ) -> Any:
        self.used.add(name)
        if name not in self.data:
            if default is ...:
                raise self.error(name, f"missing; expected {expected}")
            return default
        value = self.data[name]
        try:
            return check(value)
        except (TypeError, ValueError):
            raise self.error(name, f"expected {expected}, got {_show(value)}") from None

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise self.error(unknown[0], "unknown key")


def _typename(value: Any) -> str:
    return {dict: "a table", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _show(value: Any) -> str:
    if isinstance(value, str):
        return repr(value) if len(value) < 60 else repr(value[:57] + "...")
    if isinstance(value, dict | list):
        return _typename(value)
    return repr(value)


def _str(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TypeError
    return value


def _int(minimum: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise TypeError
        return value

    return check


def _num(minimum: float, *, strict: bool = False) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError
        number = float(value)
        if not math.isfinite(number) or number < minimum or (strict and number == minimum):
            raise ValueError
        return number

    return check


def _url(value: Any) -> str:
    text = _str(value)
    parsed = urlparse(text)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError
    try:
        _ = parsed.port
    except ValueError:
        raise ValueError from None
    return text.rstrip("/")


def _env_name(value: Any) -> str:
    text = _str(value)
    if not text.replace("_", "").isalnum() or text[0].isdigit():
        raise ValueError
    return text


def _model_id(value: Any) -> str:
    text = _str(value)
    if any(c.isspace() for c in text) or len(text) > 100:
        raise ValueError
    return text


def _parse_model(path: Path, index: int, data: Any) -> ModelConfig:
    t = _Table(path, f"models[{index}]", data)
    model_id = t.get("id", _model_id, "a non-empty string without spaces")
    provider = t.get("provider", _choice(PROVIDERS), "one of " + ", ".join(PROVIDERS))
    if provider not in IMPLEMENTED_PROVIDERS:
        raise t.error(
            "provider",
            f"provider {provider!r} is not implemented yet; use one of "
            + ", ".join(IMPLEMENTED_PROVIDERS)
            + " (e.g. 'openai' with the provider's OpenAI-compatible endpoint)",
        )
    needs_url = provider != "simulator"
    base_url = t.get(
        "base_url",
        _url,
        "an http(s) URL such as 'https://api.openai.com/v1'",
        ... if needs_url else None,
    )
    model = t.get("model", _str, "the provider's model name", model_id)
    api_key_env = t.get("api_key_env", _env_name, "an environment variable name", None)
    rpm = t.get("rpm", _int(1), "a positive integer (requests per minute)", None)
    tpm = t.get("tpm", _int(1), "a positive integer (tokens per minute)", None)
    max_concurrency = t.get("max_concurrency", _int(1), "a positive integer", 16)
    timeout_s = t.get("timeout_s", _num(0, strict=True), "a positive number of seconds", 60.0)
    temperature = t.get("temperature", _num(0), "a number >= 0", 0.0)
    max_tokens = t.get("max_tokens", _int(1), "a positive integer", 512)
    sampling_seed = t.get("sampling_seed", _int(0), "a non-negative integer", None)
    price_input = t.get("price_input", _num(0), "a number >= 0 (USD per million tokens)", 0.0)
    price_output = t.get("price_output", _num(0), "a number >= 0 (USD per million tokens)", 0.0)
    sim: dict[str, Any] = {}
    if provider == "simulator":
        sim = t.get("sim", _table_value, "a table of simulator profile keys", {})
        try:
            from ibias.runner.sim_profile import model_profile_from_dict

            model_profile_from_dict(sim)
        except SettingsError as exc:
            raise t.error(f"sim.{exc.key}", exc.message) from None
    t.finish()
    return ModelConfig(
        id=model_id,
        provider=provider,
        base_url=base_url,
        model=model,
        api_key_env=api_key_env,
        rpm=rpm,
        tpm=tpm,
        max_concurrency=max_concurrency,
        timeout_s=timeout_s,
        temperature=temperature,
        max_tokens=max_tokens,
        sampling_seed=sampling_seed,
        price_input=price_input,
        price_output=price_output,
        sim=sim,
    )


def _table_value(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError
    return value


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError
        return str(value)

    return check


def _check_experiments(
    path: Path, data: Any, seed: int
) -> tuple[dict[str, dict[str, Any]], tuple[Experiment, ...]]:
    """Validate each experiment table by building it; the built experiments are kept so the
    planner does not read their data files again."""
    t = _Table(path, "experiments", data)
    out: dict[str, dict[str, Any]] = {}
    built: list[Experiment] = []
    for name, table in t.data.items():
        t.used.add(name)
        if name not in EXPERIMENT_BUILDERS:
            raise t.error(
                name, "unknown experiment; expected one of " + ", ".join(EXPERIMENT_BUILDERS)
            )
        if not isinstance(table, dict):
            raise t.error(name, f"expected a table, got {_typename(table)}")
        try:
            built.extend(EXPERIMENT_BUILDERS[name](table, seed, path.parent))
        except SettingsError as exc:
            raise t.error(f"{name}.{exc.key}", exc.message) from None
        out[name] = table
    if not out:
        raise t.error("", "no experiments configured; add e.g. [experiments.prompts]")
    return out, tuple(built)


def parse_config(text: str, path: Path) -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    root = _Table(path, "", data)
    run_t = _Table(path, "run", root.get("run", _table_value, "a [run] table", {}))
    run = RunSettings(
        name=run_t.get("name", _str, "a non-empty string", path.stem),
        seed=run_t.get("seed", _int(0), "a non-negative integer", 0),
        store=run_t.get("store", _str, "a path", None),
    )
    run_t.finish()
    raw_models = root.get("models", _model_list, "an array of [[models]] tables")
    models = tuple(_parse_model(path, i, m) for i, m in enumerate(raw_models))
    seen: dict[str, int] = {}
    for i, m in enumerate(models):
        if m.id in seen:
            raise ConfigError(
                f"{path}: models[{i}].id: duplicate model id {m.id!r} (also models[{seen[m.id]}])"
            )
        seen[m.id] = i
    experiments, built = _check_experiments(
        path, root.get("experiments", _table_value, "an [experiments] table"), run.seed
    )
    root.finish()
    return Config(
        path=path, text=text, run=run, models=models, experiments=experiments, built=built
    )


def _model_list(value: Any) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise TypeError
    return value


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

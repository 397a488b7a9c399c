"""Simulator profiles: how each simulated model behaves (answers, latency, faults, limits).

A profile is a value: frozen dataclasses validated on construction, so a bad number fails at
load time with the key that holds it, not as a strange result hours into a run. Profiles come
from a TOML file (`ibias simulate --profile`), from a plain dict (the `simulator` provider's
model table in a run config uses the same keys as a profile's model table) or from the CLI's
few flags (`SimProfile.from_args`).

TOML layout::

    seed = 7                          # optional; the answer seed
    [default]                         # applies to every model not listed below
    latency_ms = 200
    latency_sigma = 0.5               # 0 = fixed latency, else log-normal around the median
    fault_rate = 0.02                 # spread evenly over the 7 fault kinds...
    [models."sim-a"]                  # ...or per kind: faults = {500 = 0.01, hang = 0.001}
    word_bias = 0.6
    allocation_cis = {emergency_care = 0.7}
    rpm = 3000
    tpm = 1000000

A model table starts from `[default]` and overrides only the keys it names (`faults` /
`fault_rate` replace the default's fault rates as a whole).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ibias.prompts.base import Persona, SettingsError

#: Fault kinds, in the order the per-request draw walks them.
FAULT_KINDS: tuple[str, ...] = ("500", "503", "429", "hang", "drop", "malformed", "truncated")

#: Statuses a model can be configured to answer on every request (fatal for the client).
FATAL_STATUSES: frozenset[int] = frozenset({400, 401, 402, 403, 404})

_PERSONA_KEYS = frozenset(
    {"word_bias", "allocation_cis", "allocation_cis_default", "position_bias", "refusal_rate"}
)
_MODEL_KEYS = _PERSONA_KEYS | {
    "latency_ms",
    "latency_sigma",
    "faults",
    "fault_rate",
    "rpm",
    "tpm",
    "fatal_status",
    "insufficient_quota",
    "hang_s",
}
_PROFILE_KEYS = frozenset({"seed", "default", "models"})


def _empty_faults() -> Mapping[str, float]:
    return MappingProxyType({})


def _check_probability(key: str, value: float) -> None:
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise SettingsError(key, f"must be a probability in [0, 1], got {value!r}")


@dataclass(frozen=True)
class ModelProfile:
    """One simulated model. `faults` maps a kind of `FAULT_KINDS` to its per-request rate."""

    persona: Persona = field(default_factory=Persona)
    latency_ms: float = 0.0
    latency_sigma: float = 0.0
    faults: Mapping[str, float] = field(default_factory=_empty_faults)
    rpm: int | None = None
    tpm: int | None = None
    fatal_status: int | None = None
    insufficient_quota: bool = False
    hang_s: float = 120.0

    def __post_init__(self) -> None:
        p = self.persona
        _check_probability("word_bias", p.word_bias)
        _check_probability("allocation_cis_default", p.allocation_cis_default)
        for service, q in p.allocation_cis.items():
            _check_probability(f"allocation_cis.{service}", q)
        if not (math.isfinite(p.position_bias) and -1.0 <= p.position_bias <= 1.0):
            raise SettingsError("position_bias", f"must be in [-1, 1], got {p.position_bias!r}")
        _check_probability("refusal_rate", p.refusal_rate)
        if not (math.isfinite(self.latency_ms) and self.latency_ms >= 0):
            raise SettingsError("latency_ms", f"must be >= 0, got {self.latency_ms!r}")
        if not (math.isfinite(self.latency_sigma) and self.latency_sigma >= 0):
            raise SettingsError("latency_sigma", f"must be >= 0, got {self.latency_sigma!r}")
        if not (math.isfinite(self.hang_s) and self.hang_s > 0):
            raise SettingsError("hang_s", f"must be > 0, got {self.hang_s!r}")
        for kind, rate in self.faults.items():
            if kind not in FAULT_KINDS:
                raise SettingsError(
                    f"faults.{kind}", f"unknown fault kind; expected one of {list(FAULT_KINDS)}"
                )
            _check_probability(f"faults.{kind}", rate)
        total = sum(self.faults.values())
        if total > 1.0 + 1e-9:
            raise SettingsError("faults", f"rates add up to {total:.6g}, more than 1")
        for name, limit in (("rpm", self.rpm), ("tpm", self.tpm)):
            if limit is not None and limit <= 0:
                raise SettingsError(name, f"must be a positive integer, got {limit!r}")
        if self.fatal_status is not None and self.fatal_status not in FATAL_STATUSES:
            raise SettingsError(
                "fatal_status", f"must be one of {sorted(FATAL_STATUSES)}, got {self.fatal_status}"
            )
        # Freeze the mappings we were handed so the value cannot change behind our back.
        object.__setattr__(self, "faults", MappingProxyType(dict(self.faults)))
        if not isinstance(p.allocation_cis, MappingProxyType):
            frozen = MappingProxyType(dict(p.allocation_cis))
            object.__setattr__(self, "persona", replace(p, allocation_cis=frozen))

    @property
    def fault_total(self) -> float:
        """Probability that a request draws some fault."""
        return sum(self.faults.values())


def spread_faults(rate: float) -> Mapping[str, float]:
    """`rate` spread evenly over the fault kinds (what `--fault-rate P` means)."""
    _check_probability("fault_rate", rate)
    if rate == 0:
        return MappingProxyType({})
    each = rate / len(FAULT_KINDS)
    return MappingProxyType(dict.fromkeys(FAULT_KINDS, each))


@dataclass(frozen=True)
class SimProfile:
    """The whole simulator: an answer seed, a default model and named models."""

    seed: int = 0
    default: ModelProfile = field(default_factory=ModelProfile)
    models: Mapping[str, ModelProfile] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "models", MappingProxyType(dict(self.models)))

    def for_model(self, name: str) -> ModelProfile:
        """The named model's profile, else the default (any model name is served)."""
        return self.models.get(name, self.default)

    @classmethod
    def from_args(
        cls,
        seed: int = 0,
        rpm: int | None = None,
        tpm: int | None = None,
        latency_ms: float = 0.0,
        fault_rate: float = 0.0,
    ) -> SimProfile:
        """The profile `ibias simulate --seed --rpm --tpm --latency-ms --fault-rate` describes:
        every model alike, unbiased, fixed latency, `fault_rate` spread over the kinds."""
        default = ModelProfile(
            latency_ms=float(latency_ms), faults=spread_faults(fault_rate), rpm=rpm, tpm=tpm
        )
        return cls(seed=seed, default=default)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SimProfile:
        """A profile from parsed TOML (or any dict of the same shape)."""
        _check_keys(data, _PROFILE_KEYS, "")
        seed = data.get("seed", 0)
        if not _is_int(seed):
            raise SettingsError("seed", f"must be an integer, got {seed!r}")
        default_table = _table(data.get("default", {}), "default")
        default = model_profile_from_dict(default_table, key="default")
        models_table = _table(data.get("models", {}), "models")
        models: dict[str, ModelProfile] = {}
        for name, table in models_table.items():
            key = f"models.{name}"
            models[name] = model_profile_from_dict(_table(table, key), base=default_table, key=key)
        return cls(seed=seed, default=default, models=models)

    @classmethod
    def from_toml(cls, path: str | Path) -> SimProfile:
        """Load a profile file; unreadable or invalid files raise SettingsError naming it."""
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise SettingsError(str(p), f"cannot read profile: {exc.strerror or exc}") from exc
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise SettingsError(str(p), f"invalid TOML: {exc}") from exc
        return cls.from_dict(data)


def load_profile(path: str | Path) -> SimProfile:
    """Alias of `SimProfile.from_toml` for callers that prefer a function."""
    return SimProfile.from_toml(path)


def model_profile_from_dict(
    table: Mapping[str, Any], *, base: Mapping[str, Any] | None = None, key: str = ""
) -> ModelProfile:
    """A model profile from a profile's model table (or a run config's simulator model table).

    `base` is another raw table (e.g. the profile's `[default]`) whose keys apply where `table`
    is silent. `key` prefixes error keys (e.g. "models.sim-a").
    """
    _check_keys(table, _MODEL_KEYS, key)
    if base is not None:
        _check_keys(base, _MODEL_KEYS, "default")
        merged = dict(base)
        if "faults" in table or "fault_rate" in table:
            merged.pop("faults", None)
            merged.pop("fault_rate", None)
        merged.update(table)
    else:
        merged = dict(table)

    def sub(name: str) -> str:
        return f"{key}.{name}" if key else name

    if "faults" in merged and "fault_rate" in merged:
        raise SettingsError(sub("fault_rate"), "give either `faults` or `fault_rate`, not both")
    faults: Mapping[str, float] = {}
    if "fault_rate" in merged:
        faults = spread_faults(_float(merged["fault_rate"], sub("fault_rate")))
    elif "faults" in merged:
        raw = _table(merged["faults"], sub("faults"))
        faults = {str(k): _float(v, sub(f"faults.{k}")) for k, v in raw.items()}

    alloc_raw = _table(merged.get("allocation_cis", {}), sub("allocation_cis"))
    allocation = {str(k): _float(v, sub(f"allocation_cis.{k}")) for k, v in alloc_raw.items()}
    try:
        persona = Persona(
            word_bias=_float(merged.get("word_bias", 0.5), sub("word_bias")),
            allocation_cis=MappingProxyType(allocation),
            allocation_cis_default=_float(
                merged.get("allocation_cis_default", 0.5), sub("allocation_cis_default")
            ),
            position_bias=_float(merged.get("position_bias", 0.0), sub("position_bias")),
            refusal_rate=_float(merged.get("refusal_rate", 0.0), sub("refusal_rate")),
        )
        return ModelProfile(
            persona=persona,
            latency_ms=_float(merged.get("latency_ms", 0.0), sub("latency_ms")),
            latency_sigma=_float(merged.get("latency_sigma", 0.0), sub("latency_sigma")),
            faults=faults,
            rpm=_opt_int(merged.get("rpm"), sub("rpm")),
            tpm=_opt_int(merged.get("tpm"), sub("tpm")),
            fatal_status=_opt_int(merged.get("fatal_status"), sub("fatal_status")),
            insufficient_quota=_bool(
                merged.get("insufficient_quota", False), sub("insufficient_quota")
            ),
            hang_s=_float(merged.get("hang_s", 120.0), sub("hang_s")),
        )
    except SettingsError as exc:
        if key and not exc.key.startswith(key + "."):
            raise SettingsError(sub(exc.key), exc.message) from None
        raise


def _check_keys(table: Mapping[str, Any], allowed: frozenset[str], key: str) -> None:
    for k in table:
        if k not in allowed:
            where = f"{key}.{k}" if key else str(k)
            raise SettingsError(where, f"unknown key; expected one of {sorted(allowed)}")


def _table(value: Any, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SettingsError(key, f"must be a table, got {type(value).__name__}")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _float(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SettingsError(key, f"must be a number, got {value!r}")
    return float(value)


def _opt_int(value: Any, key: str) -> int | None:
    if value is None:
        return None
    if not _is_int(value):
        raise SettingsError(key, f"must be an integer, got {value!r}")
    return int(value)


def _bool(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise SettingsError(key, f"must be true or false, got {value!r}")
    return value

"""Simulator profiles: how each simulated model behaves (answers, latency, faults, limits).

A profile is a value (frozen dataclasses). Every table it is read from is validated against
`SimModelTable` / `ProfileFile`, msgspec schemas with bounds, so a bad number fails at load
time with the key that holds it, not as a strange result hours into a run. Profiles come
from a TOML file (`ibias simulate --profile`), from a plain dict (a run config's `[models.sim]`
uses the same keys as a profile's model table: a `simulator` model's always, any other
provider's model's in a rehearsal, runner/execution/rehearsal.py) or from the CLI's few flags
(`SimProfile.from_args`).

What a model table holds. The runner's own keys (`SimModelTable`: refusal_rate, latency,
faults, limits, drift) apply to every experiment. Each experiment's parameters belong to its
unit: a table `experiments.NAME` validated by the struct the unit declares
(`prompts.simulation.Simulation.params`; any registered unit, a third-party one too). The
built-in units' parameters may also be written flat, as they were before units owned them
(`word_bias = 0.6` is `experiments.word_association.word_bias`; the mapping is in
`prompts.simulation` and docs/experiments.md); giving one both ways in a table is an error
naming it. A model table's unit fields override `[default]`'s field by field.

TOML layout::

    seed = 7                          # optional; the answer seed
    [default]                         # applies to every model not listed below
    latency_ms = 200
    latency_sigma = 0.5               # 0 = fixed latency, else log-normal around the median
    fault_rate = 0.02                 # spread evenly over the 7 fault kinds...
    [models."sim-a"]                  # ...or per kind: faults = {500 = 0.01, hang = 0.001}
    refusal_rate = 0.01
    rpm = 3000
    tpm = 1000000
    hide_limits = false               # true: enforce rpm/tpm but announce them nowhere
    drift_after = 500                 # then report a newer model version (drift)
    [models."sim-a".experiments.word_association]
    word_bias = 0.6                   # or flat: [models."sim-a"] word_bias = 0.6
    template_shift = [0.0, 0.4, -0.4] # per template 1, 2, 3 (logit scale)
    [models."sim-a".experiments.allocation]
    allocation_cis = {emergency_care = 0.7}
    # structure (logit scale; all 0 by default; see prompts/allocation/simulate.py)
    person_sd = 1.0                   # a random effect per candidate as shown
    name_sd = 0.5                     # a random effect per name as shown
    explanation_effect = {gynecology = -0.8}
    urgency_effect = {hiv_testing = {high = -1.0, low = 0.3}}

A model table starts from `[default]` and overrides only the keys it names (`faults` /
`fault_rate` replace the default's fault rates as a whole).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal, get_args

import msgspec
from msgspec import UNSET, Meta, UnsetType

from ibias.prompts.base import Persona, SettingsError
from ibias.prompts.schema import MAX_INT, join_key, render_path, validate
from ibias.prompts.simulation import (
    flat_key_owners,
    merge_params,
    params_values,
    split_sim_table,
)

#: Fault kinds, in the order the per-request draw walks them.
FAULT_KINDS: tuple[str, ...] = ("500", "503", "429", "hang", "drop", "malformed", "truncated")

#: Statuses a model can be configured to answer on every request (fatal for the client).
FATAL_STATUSES: frozenset[int] = frozenset({400, 401, 402, 403, 404})

FaultKind = Literal["500", "503", "429", "hang", "drop", "malformed", "truncated"]
FatalStatus = Literal[400, 401, 402, 403, 404]
assert get_args(FaultKind) == FAULT_KINDS and set(get_args(FatalStatus)) == FATAL_STATUSES

Probability = Annotated[float, Meta(ge=0, le=1)]
#: Requests or tokens per minute: the same bound as a run config's rpm and tpm.
Rate = Annotated[int, Meta(ge=1, le=10**9)]


class SimModelTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The schema of a profile's model table (and of a run config's `[models.sim]`): the keys
    every experiment shares. Each unit's parameters (`experiments`, and the built-in units'
    flat keys) are taken out and checked by `prompts.simulation.split_sim_table` first.

    Every key is optional; UNSET (absent) lets a model table inherit from `[default]`.
    """

    refusal_rate: Probability | UnsetType = UNSET
    #: One table per experiment unit (checked by the unit's struct; named here so an unknown
    #: key's message lists it).
    experiments: dict[str, Any] | UnsetType = UNSET
    latency_ms: Annotated[float, Meta(ge=0, le=3_600_000)] | UnsetType = UNSET
    latency_sigma: Annotated[float, Meta(ge=0, le=10)] | UnsetType = UNSET
    faults: dict[FaultKind, Probability] | UnsetType = UNSET
    fault_rate: Probability | UnsetType = UNSET
    rpm: Rate | UnsetType = UNSET
    tpm: Rate | UnsetType = UNSET
    hide_limits: bool | UnsetType = UNSET
    fatal_status: FatalStatus | UnsetType = UNSET
    insufficient_quota: bool | UnsetType = UNSET
    hang_s: Annotated[float, Meta(gt=0, le=3600, description="seconds")] | UnsetType = UNSET
    drift_after: Annotated[int, Meta(ge=0, le=MAX_INT)] | UnsetType = UNSET
    refuse_logprobs: bool | UnsetType = UNSET


class ProfileFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The schema of a profile file's top level; model tables are `SimModelTable`s."""

    seed: Annotated[int, Meta(ge=-MAX_INT, le=MAX_INT)] = 0
    default: dict[str, Any] = {}
    models: dict[str, dict[str, Any]] = {}


class ProfileError(SettingsError):
    """A bad profile file: `key` and `message` as SettingsError; its text names the file."""

    def __init__(self, file: Path, key: str, message: str) -> None:
        super().__init__(key, message)
        self.file = file
        self.args = (f"{file}: {key}: {message}" if key else f"{file}: {message}",)


def _empty_faults() -> Mapping[str, float]:
    return MappingProxyType({})


@dataclass(frozen=True)
class ModelProfile:
    """One simulated model. `faults` maps a kind of `FAULT_KINDS` to its per-request rate.

    A value built by code; tables from a file or a config are checked against `SimModelTable`
    and the units' structs by `model_profile_from_dict` before they become one. `persona` is
    how the model answers (refusal rate and each unit's parameters); the rest is transport.
    """

    persona: Persona = field(default_factory=Persona)
    latency_ms: float = 0.0
    latency_sigma: float = 0.0
    faults: Mapping[str, float] = field(default_factory=_empty_faults)
    rpm: int | None = None
    tpm: int | None = None
    #: Enforce rpm/tpm but announce them nowhere: no rate-limit headers, and 429s that name
    #: no limit (Gemini: no quota). What a client must cope with by adapting on its own.
    hide_limits: bool = False
    fatal_status: int | None = None
    insufficient_quota: bool = False
    hang_s: float = 120.0
    drift_after: int | None = None
    """After this many answers the model reports a newer version (`DRIFTED_VERSION_SUFFIX`):
    a provider updating a model behind a stable name, for drift detection to find."""
    refuse_logprobs: bool = False
    """Answer a request asking for token logprobs with OpenAI's 400 naming `logprobs`, as an
    endpoint that does not support them does."""

    def __post_init__(self) -> None:
        # Freeze the mappings we were handed so the value cannot change behind our back.
        object.__setattr__(self, "faults", MappingProxyType(dict(self.faults)))

    @property
    def fault_total(self) -> float:
        """Probability that a request draws some fault."""
        return sum(self.faults.values())


def spread_faults(rate: float) -> Mapping[str, float]:
    """`rate` (a probability) spread evenly over the fault kinds (what `--fault-rate P` means)."""
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
        hide_limits: bool = False,
    ) -> SimProfile:
        """The profile `ibias simulate --seed --rpm --tpm --latency-ms --fault-rate
        --hide-limits` describes: every model alike, unbiased, fixed latency, `fault_rate`
        spread over the kinds."""
        default: dict[str, Any] = {"latency_ms": float(latency_ms), "fault_rate": fault_rate}
        if hide_limits:
            default["hide_limits"] = True
        default.update({k: v for k, v in (("rpm", rpm), ("tpm", tpm)) if v is not None})
        return cls.from_dict({"seed": seed, "default": default})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SimProfile:
        """A profile from parsed TOML (or any dict of the same shape)."""
        top = validate(data, ProfileFile)
        default = model_profile_from_dict(top.default, key="default")
        models = {
            name: model_profile_from_dict(
                table, base=top.default, key=render_path(["models", name])
            )
            for name, table in top.models.items()
        }
        return cls(seed=top.seed, default=default, models=models)

    @classmethod
    def from_toml(cls, path: str | Path) -> SimProfile:
        """Load a profile file; unreadable or invalid files raise ProfileError naming it."""
        from ibias.configfile import ConfigFileError, loads_toml, read_toml_file

        p = Path(path)
        try:  # the checks of every config read: a regular file, its size, its depth
            data = loads_toml(read_toml_file(p, "profile"), p, "profile")
        except ConfigFileError as exc:
            raise SettingsError(str(p), str(exc).removeprefix(f"{p}: ")) from None
        try:
            return cls.from_dict(data)
        except SettingsError as exc:
            raise ProfileError(p, exc.key, exc.message) from None


def load_profile(path: str | Path) -> SimProfile:
    """Alias of `SimProfile.from_toml` for callers that prefer a function."""
    return SimProfile.from_toml(path)


def model_profile_from_dict(
    table: Mapping[str, Any], *, base: Mapping[str, Any] | None = None, key: str = ""
) -> ModelProfile:
    """A model profile from a profile's model table (or a run config's simulator model table).

    `base` is another raw table (e.g. the profile's `[default]`) whose keys apply where `table`
    is silent (`faults` / `fault_rate` replace the base's fault rates as a whole; a unit's
    fields override the base's field by field). `key` prefixes error keys (e.g.
    "models.sim-a").
    """
    params, own = split_sim_table(table, key)
    given = _checked(own, key)
    if base is not None:
        base_params, base_own = split_sim_table(base, "default")
        params = merge_params(base_params, params)
        inherited = _checked(base_own, "default")
        fault_keys = ("faults", "fault_rate")
        merged = {
            name: getattr(inherited, name)
            for name in SimModelTable.__struct_fields__
            if name not in fault_keys or all(getattr(given, k) is UNSET for k in fault_keys)
        }
        merged.update(
            (name, value)
            for name in SimModelTable.__struct_fields__
            if (value := getattr(given, name)) is not UNSET
        )
        given = SimModelTable(**merged)
    return _profile(given, params_values(params))


def _checked(table: Mapping[str, Any], key: str) -> SimModelTable:
    """`table` (the runner's keys of a model table) validated against the schema, then the
    checks that span two keys. An unknown key's message lists the flat unit keys too."""
    unknown = next((k for k in table if k not in SimModelTable.__struct_fields__), None)
    if unknown is not None:
        known = [*flat_key_owners(), *SimModelTable.__struct_fields__]
        raise SettingsError(
            join_key(key, render_path([unknown])),
            "unknown key (expected one of " + ", ".join(known) + ")",
        )
    t = validate(table, SimModelTable, key)
    if t.faults is not UNSET and t.fault_rate is not UNSET:
        raise SettingsError(
            join_key(key, "fault_rate"), "give either `faults` or `fault_rate`, not both"
        )
    if t.faults is not UNSET and (total := sum(t.faults.values())) > 1.0 + 1e-9:
        raise SettingsError(join_key(key, "faults"), f"rates add up to {total:.6g}, more than 1")
    return t


def _profile(t: SimModelTable, experiments: Mapping[str, msgspec.Struct]) -> ModelProfile:
    def get(value: Any, default: Any) -> Any:
        return default if value is UNSET else value

    faults: Mapping[str, float] = {}
    if t.fault_rate is not UNSET:
        faults = spread_faults(t.fault_rate)
    elif t.faults is not UNSET:
        faults = {str(kind): rate for kind, rate in t.faults.items()}
    persona = Persona(refusal_rate=get(t.refusal_rate, 0.0), experiments=experiments)
    return ModelProfile(
        persona=persona,
        latency_ms=get(t.latency_ms, 0.0),
        latency_sigma=get(t.latency_sigma, 0.0),
        faults=faults,
        rpm=get(t.rpm, None),
        tpm=get(t.tpm, None),
        hide_limits=get(t.hide_limits, False),
        fatal_status=get(t.fatal_status, None),
        insufficient_quota=get(t.insufficient_quota, False),
        hang_s=get(t.hang_s, 120.0),
        drift_after=get(t.drift_after, None),
        refuse_logprobs=get(t.refuse_logprobs, False),
    )

"""What a unit brings to the simulator: its own parameters, its answers and what it plants.

A simulated model (`prompts.base.Persona`) is shared behaviour (the refusal rate, and the
effects key that makes each model under each answer seed its own draw of random effects) plus
one parameter value per experiment unit. A unit declares its parameters as a msgspec Struct
(frozen, `forbid_unknown_fields`, every field with a default, bounds as `msgspec.Meta`), so a
third-party experiment can have simulator parameters of its own with the same one-line errors
as every config key:

    [[models]]
    id = "sim"
    provider = "simulator"
    [models.sim]
    refusal_rate = 0.01                      # shared: stays at the table's top level
    [models.sim.experiments.occupation]      # the `occupation` unit's parameters
    occupation_bias = 0.9

`Simulation` is that declaration (`ExperimentUnit.simulation`). Its `respond` answers the
unit's prompts given an `Answering`: the unit's parsed parameters with the shared behaviour
beside them. The runner's simulator never sees a unit's parameters: it calls the registry's
`responders()`, which look the unit's value up in the persona and pass it on.

The flat keys. Before units owned their parameters the built-in ones were keys of the model
table itself (`[models.sim] word_bias = 0.6`); they still are, through `Simulation.flat_keys`:
a flat key is read as the field of the same name of the unit that declares it. Giving one
field both ways in the same table is an error naming it. The mapping (documented in
docs/experiments.md) is word_association: word_bias, template_shift; allocation:
allocation_cis, allocation_cis_default, position_bias, person_sd, name_sd, explanation_effect,
urgency_effect. New units should use their nested table only.

What a unit plants (`Simulation.planted`): named functions of an `Answering` (and whatever a
function documents beyond it) stating what an estimate should recover, which the analysis's
planted-value check looks up by name (`planted_function`), so it reads the truth from the units
and not from the runner (allocation: `cis_terms`, `person_effect`, `expected_cis_share`;
word association: `word_bias`, `expected_word_score`).

Everything here is a function of the config's text alone, so the analysis rebuilds each stored
run's simulated models (`persona_from_table`) with no import of `ibias.runner`.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, Generic, Protocol, TypeVar

import msgspec

from ibias.prompts.base import (
    ChoiceToken,
    ChoiceTokens,
    JSONValue,
    Message,
    Persona,
    Responder,
    SettingsError,
)
from ibias.prompts.schema import join_key, render_path, validate

if TYPE_CHECKING:
    from ibias.prompts.registry import ExperimentUnit

__all__ = [
    "EXPERIMENTS_KEY",
    "Answering",
    "ChooseTokens",
    "NoParams",
    "Respond",
    "Simulation",
    "bind_choice_tokens",
    "bind_responder",
    "flat_key_owners",
    "persona_from_table",
    "planted_function",
    "split_sim_table",
    "unit_params",
]

P = TypeVar("P", bound=msgspec.Struct)
P_co = TypeVar("P_co", bound=msgspec.Struct, covariant=True)

#: The key of a model table holding one table per unit: `[models.sim.experiments.NAME]`.
EXPERIMENTS_KEY = "experiments"

Probability = Annotated[float, msgspec.Meta(ge=0, le=1)]


@dataclass(frozen=True)
class Answering(Generic[P]):
    """One simulated model as one unit's simulation sees it: the unit's own parameters and the
    behaviour every unit shares.

    `refusal_rate` is the model's: the runner's simulator decides refusals itself before it
    asks a responder, so responders are given 0 (and draw against it, which keeps the random
    stream of every answer as it was), while the planted-value functions are given the real
    rate, which the expected shares count. `effects_key` keys per-model random effects (the
    simulator sets it to (answer seed, model name), `Persona.answering_as`).
    """

    params: P
    refusal_rate: float = 0.0
    effects_key: tuple[JSONValue, ...] = ()


class Respond(Protocol):
    """A unit's simulated answer to its own prompts, from the visible text only; None when the
    prompt is not this unit's (the simulator then asks the next unit). `rng` is derived from
    (model name, prompt, seed): the same trial always gets the same answer."""

    def __call__(
        self, messages: tuple[Message, ...], model: Answering[Any], rng: random.Random
    ) -> str | None: ...


class ChooseTokens(Protocol):
    """Where a unit's simulated `reply` chooses among alternatives, for the token logprobs the
    simulator returns when asked (None: not this unit's prompt, or no choice in the reply)."""

    def __call__(
        self, messages: tuple[Message, ...], model: Answering[Any], reply: str
    ) -> ChoiceToken | None: ...


class NoParams(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The parameters of a unit that has none (its `experiments.NAME` table must be empty)."""


@dataclass(frozen=True)
class Simulation:
    """A unit's part of the simulator: see the module docstring.

    `params` is the parameter struct (none by default; every field defaulted: a model whose
    table leaves the unit out answers with the defaults, which should plant nothing);
    `respond` and `choice_tokens` answer as `Respond` and `ChooseTokens`; `flat_keys` are the
    fields also accepted at the top of a model table (the built-in units' keys from before
    units had tables); `planted` names the functions stating what the unit plants.
    """

    respond: Respond
    params: type[msgspec.Struct] = NoParams
    choice_tokens: ChooseTokens | None = None
    flat_keys: tuple[str, ...] = ()
    planted: Mapping[str, Callable[..., Any]] = field(
        default_factory=lambda: MappingProxyType({}), hash=False, compare=False
    )

    def __post_init__(self) -> None:
        config = getattr(self.params, "__struct_config__", None)
        if config is None or not issubclass(self.params, msgspec.Struct):
            raise TypeError(f"simulation params {self.params!r} is not a msgspec Struct")
        if not (config.frozen and config.forbid_unknown_fields):
            raise TypeError(
                f"simulation params {self.params.__name__} must be frozen=True and "
                "forbid_unknown_fields=True"
            )
        required = [f.name for f in msgspec.structs.fields(self.params) if f.required]
        if required:
            raise TypeError(
                f"simulation params {self.params.__name__}: every field needs a default "
                f"(a model that does not set it answers with it); {required[0]!r} has none"
            )
        unknown = [k for k in self.flat_keys if k not in self.params.__struct_fields__]
        if unknown:
            raise TypeError(f"flat key {unknown[0]!r} is not a field of {self.params.__name__}")
        object.__setattr__(self, "planted", MappingProxyType(dict(self.planted)))

    @cached_property
    def defaults(self) -> msgspec.Struct:
        """The parameters of a model that sets none (built once)."""
        return self.params()

    def answering(self, persona: Persona, name: str) -> Answering[Any]:
        """`persona` as this unit (registered as `name`) sees it."""
        given = persona.experiments.get(name)
        return Answering(
            self.defaults if given is None else given, persona.refusal_rate, persona.effects_key
        )


def _simulated_units() -> list[ExperimentUnit]:
    from ibias.prompts import registry

    return [u for u in registry.units() if u.simulation is not None]


@cache
def bind_responder(name: str, simulation: Simulation) -> Responder:
    """The runner-facing responder of unit `name`: takes the whole persona, passes the unit's
    part of it on. Built once per unit (the simulator asks for the responders per answer)."""
    respond = simulation.respond

    def responder(
        messages: tuple[Message, ...], persona: Persona, rng: random.Random
    ) -> str | None:
        return respond(messages, simulation.answering(persona, name), rng)

    return responder


@cache
def bind_choice_tokens(name: str, simulation: Simulation) -> ChoiceTokens | None:
    """The runner-facing choice-token function of unit `name`, or None when it has none."""
    choose = simulation.choice_tokens
    if choose is None:
        return None

    def choice_tokens(
        messages: tuple[Message, ...], persona: Persona, reply: str
    ) -> ChoiceToken | None:
        return choose(messages, simulation.answering(persona, name), reply)

    return choice_tokens


def flat_key_owners() -> dict[str, str]:
    """Flat key -> the unit whose field it is (the documented mapping)."""
    return {
        k: u.name
        for u in _simulated_units()
        for k in (u.simulation.flat_keys if u.simulation is not None else ())
    }


def _simulation(name: str) -> Simulation | None:
    return next((u.simulation for u in _simulated_units() if u.name == name), None)


def read_only(params: P) -> P:
    """`params` with every table in it (at any depth) a read-only view, so a persona cannot
    change behind the simulator's back when the dict it was built from does."""

    def freeze(value: Any) -> Any:
        if isinstance(value, Mapping):
            return MappingProxyType({k: freeze(v) for k, v in value.items()})
        return value

    for name in params.__struct_fields__:
        value = getattr(params, name)
        if isinstance(value, Mapping) and not isinstance(value, MappingProxyType):
            msgspec.structs.force_setattr(params, name, freeze(value))
    return params


def unit_params(flat: Mapping[str, Any]) -> dict[str, msgspec.Struct]:
    """Flat keys (as `Persona(word_bias=0.6)` takes them) as each owning unit's parameters;
    ValueError names a key no unit declares or a value its struct refuses."""
    owners = flat_key_owners()
    grouped: dict[str, dict[str, Any]] = {}
    for key, value in flat.items():
        if key not in owners:
            raise ValueError(f"unknown simulator parameter {key!r}")
        grouped.setdefault(owners[key], {})[key] = value
    out: dict[str, msgspec.Struct] = {}
    for name, fields in grouped.items():
        simulation = _simulation(name)
        assert simulation is not None
        try:
            out[name] = read_only(msgspec.convert(fields, simulation.params))
        except msgspec.ValidationError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return out


def split_sim_table(
    table: Mapping[str, Any], key: str = ""
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """A model table's unit parameters, and the rest of the table (the runner's keys).

    The unit parameters are, per unit, the fields the table gives: its
    `experiments.NAME` table and its flat keys, each validated against the unit's struct
    (SettingsError with the key path under `key`, e.g. "models[0].sim.experiments.x.y"). The
    raw fields are returned, not structs, so a profile's model table can override its
    `[default]` field by field (`merge_params`)."""
    owners = flat_key_owners()
    given: dict[str, dict[str, Any]] = {}
    rest: dict[str, Any] = {}
    for name, sub in _nested_tables(table, key).items():
        where = join_key(key, render_path([EXPERIMENTS_KEY, name]))
        simulation = _simulation(name)
        if simulation is None:
            known = sorted(u.name for u in _simulated_units())
            near = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean `{near[0]}`?)" if near else ""
            raise SettingsError(
                where,
                f"unknown experiment{hint}; expected one of {', '.join(known)}"
                if known
                else "unknown experiment; no registered experiment has simulator parameters",
            )
        validate(sub, simulation.params, where)
        given[name] = dict(sub)
    for k, value in table.items():
        if k == EXPERIMENTS_KEY:
            continue
        owner = owners.get(k)
        if owner is None:
            rest[k] = value
            continue
        fields = given.setdefault(owner, {})
        if k in fields:
            nested = render_path([EXPERIMENTS_KEY, owner, k])
            raise SettingsError(
                join_key(key, k), f"given twice, here and as `{nested}`; keep one of them"
            )
        simulation = _simulation(owner)
        assert simulation is not None
        validate({k: value}, simulation.params, key)
        fields[k] = value
    return {name: fields for name, fields in given.items() if fields}, rest


def _nested_tables(table: Mapping[str, Any], key: str) -> dict[str, dict[str, Any]]:
    """The `experiments` table of a model table, each entry a table (SettingsError if not)."""
    nested = table.get(EXPERIMENTS_KEY)
    if nested is None:
        return {}
    return validate(nested, dict[str, dict[str, Any]], join_key(key, EXPERIMENTS_KEY))


def merge_params(
    base: Mapping[str, Mapping[str, Any]], given: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """`given`'s fields over `base`'s, unit by unit and field by field (a model table over a
    profile's `[default]`)."""
    out = {name: dict(fields) for name, fields in base.items()}
    for name, fields in given.items():
        out.setdefault(name, {}).update(fields)
    return out


def params_values(given: Mapping[str, Mapping[str, Any]]) -> dict[str, msgspec.Struct]:
    """Validated raw fields (`split_sim_table`) as each unit's parameter struct."""
    out: dict[str, msgspec.Struct] = {}
    for name, fields in given.items():
        simulation = _simulation(name)
        assert simulation is not None
        out[name] = read_only(msgspec.convert(fields, simulation.params, strict=True))
    return out


def persona_from_table(table: Mapping[str, Any], key: str = "") -> Persona:
    """The persona a run config's `[models.sim]` table describes (no `[default]` to inherit
    from), as the analysis rebuilds it from a stored config. Only the keys a persona holds are
    checked; the runner checked the rest (latency, faults, limits) when it loaded the config.
    A table of an experiment not registered here (a plugin not installed where the analysis
    runs) is left out: the other units' values do not depend on it."""
    nested = table.get(EXPERIMENTS_KEY)
    if isinstance(nested, Mapping):
        known = {u.name for u in _simulated_units()}
        table = {**table, EXPERIMENTS_KEY: {k: v for k, v in nested.items() if k in known}}
    given, rest = split_sim_table(table, key)
    refusal = validate(rest.get("refusal_rate", 0.0), Probability, join_key(key, "refusal_rate"))
    return Persona(refusal_rate=refusal, experiments=params_values(given))


def planted_function(name: str) -> tuple[str, Callable[..., Any]] | None:
    """(unit name, function) of the first registered unit whose simulation declares planted
    function `name`, or None when no unit plants it."""
    for u in _simulated_units():
        assert u.simulation is not None
        found = u.simulation.planted.get(name)
        if found is not None:
            return u.name, found
    return None


def answering_for(persona: Persona, name: str) -> Answering[Any]:
    """`persona` as registered unit `name` sees it (its defaults when it sets none)."""
    simulation = _simulation(name)
    if simulation is None:
        raise KeyError(f"no registered experiment {name!r} has a simulation")
    return simulation.answering(persona, name)


def check_flat_keys(units: Sequence[ExperimentUnit]) -> None:
    """ValueError when two units claim one flat key (the registry checks on registration)."""
    seen: dict[str, str] = {}
    for u in units:
        for k in u.simulation.flat_keys if u.simulation is not None else ():
            if k in seen and seen[k] != u.name:
                raise ValueError(f"flat simulator key {k!r} is claimed by {seen[k]} and {u.name}")
            seen[k] = u.name

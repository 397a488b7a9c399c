"""The contract between experiments (this package) and the runner's planner.

An experiment turns its validated settings and the run's seed into a lazy stream of
model-independent `TrialSpec`s. The planner crosses each spec with every configured model, so
every model sees exactly the same items (paired design). All randomness must come from
`rng_for(seed, ...design coordinates...)`, never from global random state or `hash()`, so that
the same config and seed give byte-identical prompts on any machine.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Protocol

import msgspec
import orjson

from ibias import errors

JSONValue = Any
Message = Mapping[str, str]


def canonical_json(value: JSONValue) -> bytes:
    """Canonical JSON: sorted keys, no whitespace, UTF-8. Used for every hash in ibias."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def stable_hash(value: JSONValue) -> str:
    """SHA-256 hex digest of the canonical JSON of `value`."""
    return hashlib.sha256(canonical_json(value)).hexdigest()


def rng_for(seed: int, *coords: JSONValue) -> random.Random:
    """A private RNG derived from the run seed and design coordinates through SHA-256.

    `random.Random` seeded with an int is specified to give the same stream on every platform,
    so derived draws are reproducible everywhere.
    """
    digest = hashlib.sha256(canonical_json([seed, *coords])).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


ROLES = ("system", "user", "assistant")


def json_object_line(raw: bytes, allowed: frozenset[str]) -> dict[str, Any]:
    """One JSONL line as an object with only `allowed` keys; ValueError says what is wrong."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise ValueError("expected a JSON object")
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r}")
    return obj


def chat_messages(value: Any, *, allow_empty: bool = False) -> tuple[Message, ...]:
    """Validate a chat as a tuple of {"role": system|user|assistant, "content": str}."""
    if not isinstance(value, list) or (not value and not allow_empty):
        raise ValueError("'messages' must be a non-empty array")
    out: list[Message] = []
    for m in value:
        if (
            not isinstance(m, dict)
            or set(m) != {"role", "content"}
            or m["role"] not in ROLES
            or not isinstance(m["content"], str)
        ):
            raise ValueError(
                'each message must be {"role": system|user|assistant, "content": string}'
            )
        out.append({"role": m["role"], "content": m["content"]})
    return tuple(out)


class SettingsError(errors.ConfigError, ValueError):
    """A config value an experiment rejects. `key` is the dotted path inside the experiment's
    table (e.g. "languages[1]"); the runner's config loader prefixes the file and table."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


@dataclass(frozen=True)
class TrialSpec:
    """One model-independent trial. The planner adds model, params and the trial key.

    `coords` are the design coordinates (JSON-able; e.g. category, trial_index); `item` is what
    parsing and analysis need to interpret the reply (e.g. the words and their sentiment, the
    label order); `messages` is the chat to send.
    """

    experiment: str
    language: str
    coords: Mapping[str, JSONValue]
    item: Mapping[str, JSONValue]
    messages: tuple[Message, ...]
    replicate: int = 0


class Experiment(Protocol):
    """What the planner needs from an experiment type."""

    @property
    def name(self) -> str:
        """The experiment's name as stored in `trials.experiment`."""
        ...

    def count(self) -> int:
        """Number of specs `specs()` yields (without generating prompts)."""
        ...

    def specs(self) -> Iterator[TrialSpec]:
        """Yield specs lazily, interleaving conditions so a partial run stays balanced."""
        ...


@dataclass(frozen=True, init=False)
class Persona:
    """How a simulated model answers: behaviour every experiment shares, and one parameter value
    per experiment unit (set per model by a simulator profile or a run config's `[models.sim]`).

    `refusal_rate` is the probability of declining a task (decided by the simulator before any
    experiment answers). `experiments` maps a unit's name to its parameters, a value of the
    struct its `prompts.simulation.Simulation` declares (a unit left out answers with its
    defaults). `effects_key` keys per-model random effects: the simulator sets it to (answer
    seed, model name) for every answer (`answering_as`), so each model under each seed has its
    own draw of, e.g., allocation's person and name effects.

    The built-in units' parameters may also be given and read by their flat names, as before
    units owned them: `Persona(word_bias=0.6).word_bias` is the word-association unit's
    `word_bias` (the mapping: `prompts.simulation`, docs/experiments.md). Each responder's
    module documents its model and the functions that compute what it implies.
    """

    refusal_rate: float = 0.0
    experiments: Mapping[str, Any] = field(default_factory=dict)
    effects_key: tuple[JSONValue, ...] = ()

    def __init__(
        self,
        refusal_rate: float = 0.0,
        experiments: Mapping[str, Any] | None = None,
        effects_key: tuple[JSONValue, ...] = (),
        **flat: Any,
    ) -> None:
        given = dict(experiments or {})
        if flat:
            from ibias.prompts.simulation import read_only, unit_params

            for name, params in unit_params(flat).items():
                if name in given:  # flat fields over the unit's given value
                    fields = {k: v for k, v in flat.items() if k in params.__struct_fields__}
                    params = read_only(msgspec.structs.replace(given[name], **fields))
                given[name] = params
        object.__setattr__(self, "refusal_rate", refusal_rate)
        object.__setattr__(
            self,
            "experiments",
            experiments
            if isinstance(experiments, MappingProxyType) and not flat
            else MappingProxyType({k: v for k, v in given.items() if not _is_default(v)}),
        )
        object.__setattr__(self, "effects_key", tuple(effects_key))

    def __getattr__(self, name: str) -> Any:
        """A built-in unit's parameter by its flat name (`persona.word_bias`)."""
        if name.startswith("_") or name in ("refusal_rate", "experiments", "effects_key"):
            raise AttributeError(name)
        from ibias.prompts.simulation import answering_for, flat_key_owners

        owner = flat_key_owners().get(name)
        if owner is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(answering_for(self, owner).params, name)

    def answering_as(self, seed: int, model: str) -> Persona:
        """This persona answering as `model` under answer seed `seed` (sets `effects_key`)."""
        return replace(self, effects_key=(seed, model))


def _is_default(params: Any) -> bool:
    """Whether a unit's parameters are its struct's defaults (left out of a persona, so that
    a persona setting a unit's defaults equals one that does not name the unit)."""
    try:
        return bool(params == type(params)())
    except TypeError:  # a type without defaults for every field
        return False


@dataclass(frozen=True)
class ChoiceToken:
    """Where a simulated reply commits to one answer among several, for its token logprobs.

    `reply[start:end]` is the token written there; `alternatives` are (token text, probability)
    of what the model could have written instead, the written token among them, most likely
    first. The simulator splits the rest of the reply into tokens of its own.
    """

    start: int
    end: int
    alternatives: tuple[tuple[str, float], ...]


class ChoiceTokens(Protocol):
    """A simulated model's alternatives at the token where `reply` chooses, or None when the
    prompt is not this experiment's or the reply names no choice. `persona` is the one the
    reply was answered with (`Persona.answering_as`, no refusals). What the runner's simulator
    calls (`registry.choice_tokens()`); a unit writes `prompts.simulation.ChooseTokens`."""

    def __call__(
        self, messages: tuple[Message, ...], persona: Persona, reply: str
    ) -> ChoiceToken | None: ...


class Responder(Protocol):
    """A simulated model's answer to one experiment's prompts, from the visible text only.

    Returns None when the prompt is not this experiment's, so the simulator tries the next.
    `rng` is derived from (model name, prompt, seed): the same trial always gets the same answer.
    What the runner's simulator calls (`registry.responders()`, each given the whole persona);
    a unit writes `prompts.simulation.Respond`, which is given its own parameters.
    """

    def __call__(
        self, messages: tuple[Message, ...], persona: Persona, rng: random.Random
    ) -> str | None: ...

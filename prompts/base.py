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
from typing import Any, Protocol

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


@dataclass(frozen=True)
class Persona:
    """How a simulated model behaves on the paper's tasks (set per model by a simulator profile).

    `word_bias` is p, the probability that a negative word goes to the target group (a positive
    word goes to the target with probability 1 - p); 0.5 is unbiased. `allocation_cis` maps a
    service slug to the probability of choosing the cisgender candidate when there is no
    position bias (`allocation_cis_default` for services not listed). `position_bias` b shifts
    the choice toward whoever is listed first: P(cis | cis first) = clip(q + b),
    P(cis | cis second) = clip(q - b). `refusal_rate` is the probability of declining a task.

    Structure (every effect 0 by default, and a persona without any answers exactly as one
    without these fields would). All are on the logit scale; the responders' modules give the
    exact models and the functions that compute what they imply:

    - `person_sd`: a random effect u ~ N(0, person_sd^2) per allocation candidate *as shown*
      (name, age and gender identity), the same in every prompt that shows that person, so the
      two orders of a pair share it. `name_sd`: a random effect v ~ N(0, name_sd^2) per name as
      shown, whatever the age and identity beside it (it follows a name across an identity
      swap; the person effect does not). Both are drawn from `effects_key` and what is shown.
    - `explanation_effect[service]`: added when the prompt asks for an explanation.
    - `urgency_effect[service][urgency]` ("high" / "low"): added when the candidates' symptoms
      are shown and are of that urgency.
    - `template_shift[k - 1]`: added to logit(word_bias) on word-association template k.
    - `effects_key`: what keys the random effects besides the shown person: the simulator sets
      it to (answer seed, model name) for every answer (`answering_as`), so each model under
      each seed has its own draw of person and name effects.
    """

    word_bias: float = 0.5
    allocation_cis: Mapping[str, float] = field(default_factory=dict)
    allocation_cis_default: float = 0.5
    position_bias: float = 0.0
    refusal_rate: float = 0.0
    person_sd: float = 0.0
    name_sd: float = 0.0
    explanation_effect: Mapping[str, float] = field(default_factory=dict)
    urgency_effect: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    template_shift: tuple[float, ...] = ()
    effects_key: tuple[JSONValue, ...] = ()

    def answering_as(self, seed: int, model: str) -> Persona:
        """This persona answering as `model` under answer seed `seed` (sets `effects_key`)."""
        return replace(self, effects_key=(seed, model))


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
    reply was answered with (`Persona.answering_as`, no refusals)."""

    def __call__(
        self, messages: tuple[Message, ...], persona: Persona, reply: str
    ) -> ChoiceToken | None: ...


class Responder(Protocol):
    """A simulated model's answer to one experiment's prompts, from the visible text only.

    Returns None when the prompt is not this experiment's, so the simulator tries the next.
    `rng` is derived from (model name, prompt, seed): the same trial always gets the same answer.
    """

    def __call__(
        self, messages: tuple[Message, ...], persona: Persona, rng: random.Random
    ) -> str | None: ...

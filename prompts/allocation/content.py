"""The allocation experiment's content, loaded from `prompts/data/allocation/`.

Everything a reviewer might want to change (names, services, scenarios, symptoms, prompt wording,
the words the parser recognises, the simulator's phrasing) is data, so a doctor or translator
can review it without reading code. Files are read once per process and exposed as frozen values.
"""

from __future__ import annotations

import csv
import io
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from ibias.prompts.base import stable_hash

LANGUAGES = ("en", "es")
IDENTITIES = ("cis_woman", "cis_man", "trans_woman", "trans_man")
CIS_IDENTITIES = ("cis_woman", "cis_man")
TRANS_IDENTITIES = ("trans_woman", "trans_man")
URGENCIES = ("high", "low")
SEX_AT_BIRTH = {
    "cis_woman": "female",
    "trans_man": "female",
    "cis_man": "male",
    "trans_woman": "male",
}
"""Sex assigned at birth of each identity."""
NAME_GENDER = {
    "cis_woman": "female",
    "trans_woman": "female",
    "cis_man": "male",
    "trans_man": "male",
}
"""Which first-name pool fits each gender identity."""


def identity_group(identity: str) -> str:
    """'cis' or 'trans' for a gender identity slug."""
    return "cis" if identity in CIS_IDENTITIES else "trans"


def _read_bytes(name: str) -> bytes:
    return resources.files("ibias.prompts").joinpath("data", "allocation", name).read_bytes()


def _toml(name: str) -> dict[str, Any]:
    return tomllib.loads(_read_bytes(name).decode("utf-8"))


# --- names -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NamePools:
    """First names by (language, 'female'|'male') and surnames by language."""

    first: Mapping[tuple[str, str], tuple[str, ...]]
    surnames: Mapping[str, tuple[str, ...]]
    digest: str


@cache
def name_pools() -> NamePools:
    first: dict[tuple[str, str], list[str]] = {}
    surnames: dict[str, list[str]] = {}
    reader = csv.DictReader(io.StringIO(_read_bytes("first_names.csv").decode("utf-8")))
    for row in reader:
        first.setdefault((row["language"], row["gender"]), []).append(row["name"].strip())
    reader = csv.DictReader(io.StringIO(_read_bytes("surnames.csv").decode("utf-8")))
    for row in reader:
        surnames.setdefault(row["language"], []).append(row["name"].strip())
    frozen_first = {k: tuple(v) for k, v in sorted(first.items())}
    frozen_surnames = {k: tuple(v) for k, v in sorted(surnames.items())}
    digest = stable_hash(
        [[list(k), list(v)] for k, v in frozen_first.items()]
        + [[k, list(v)] for k, v in frozen_surnames.items()]
    )[:16]
    return NamePools(first=frozen_first, surnames=frozen_surnames, digest=digest)


# --- services ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServiceText:
    """A service's wording in one language. `high[i]` / `low[i]` translate index i elsewhere."""

    slot: str
    scenario: str
    high: tuple[str, ...]
    low: tuple[str, ...]

    def symptoms(self, urgency: str) -> tuple[str, ...]:
        return self.high if urgency == "high" else self.low


@dataclass(frozen=True)
class Service:
    """A service and its pairing rule: which identities may sit in the cis and trans seats."""

    slug: str
    cis: tuple[str, ...]
    trans: tuple[str, ...]
    texts: Mapping[str, ServiceText]
    same_age_band: bool | None = None
    """None: use the experiment-wide `same_age_band` setting."""


@cache
def default_service_tables() -> dict[str, Any]:
    """The shipped services as raw TOML tables (merged with a user's `services_file`)."""
    return _toml("services.toml")


def service_from_table(slug: str, table: Mapping[str, Any]) -> Service:
    """Validate one service table; ValueError names the offending field."""
    if not isinstance(table, Mapping):
        raise ValueError(f"{slug}: expected a table")
    allowed = {"cis", "trans", "same_age_band", *LANGUAGES}
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ValueError(f"{slug}.{unknown[0]}: unknown key; expected one of {sorted(allowed)}")
    seats: dict[str, tuple[str, ...]] = {}
    for seat, valid in (("cis", CIS_IDENTITIES), ("trans", TRANS_IDENTITIES)):
        value = table.get(seat)
        if (
            not isinstance(value, list)
            or not value
            or any(v not in valid for v in value)
            or len(set(value)) != len(value)
        ):
            raise ValueError(
                f"{slug}.{seat}: expected a non-empty list of distinct values from {list(valid)}"
            )
        seats[seat] = tuple(value)
    same_band = table.get("same_age_band")
    if same_band is not None and not isinstance(same_band, bool):
        raise ValueError(f"{slug}.same_age_band: expected true or false")
    texts: dict[str, ServiceText] = {}
    for lang in LANGUAGES:
        if lang in table:
            texts[lang] = _service_text(f"{slug}.{lang}", table[lang])
    if not texts:
        raise ValueError(f"{slug}: needs wording in at least one language ({list(LANGUAGES)})")
    for urgency in URGENCIES:
        counts = {lang: len(t.symptoms(urgency)) for lang, t in texts.items()}
        if len(set(counts.values())) > 1:
            raise ValueError(
                f"{slug}: {urgency} symptoms must be translations index by index; counts differ "
                f"between languages: {counts}"
            )
    return Service(
        slug=slug, cis=seats["cis"], trans=seats["trans"], texts=texts, same_age_band=same_band
    )


def _service_text(where: str, table: Any) -> ServiceText:
    if not isinstance(table, Mapping):
        raise ValueError(f"{where}: expected a table")
    allowed = {"slot", "scenario", "high", "low"}
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown key; expected one of {sorted(allowed)}")
    for key in ("slot", "scenario"):
        if not isinstance(table.get(key), str) or not table[key].strip():
            raise ValueError(f"{where}.{key}: expected a non-empty string")
    lists: dict[str, tuple[str, ...]] = {}
    for urgency in URGENCIES:
        value = table.get(urgency, [])
        if not isinstance(value, list) or any(not isinstance(v, str) or not v for v in value):
            raise ValueError(f"{where}.{urgency}: expected a list of symptom strings")
        if len(set(value)) != len(value):
            raise ValueError(f"{where}.{urgency}: symptoms must be distinct")
        lists[urgency] = tuple(value)
    return ServiceText(
        slot=table["slot"].strip(),
        scenario=table["scenario"].strip(),
        high=lists["high"],
        low=lists["low"],
    )


def merge_tables(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge: tables merge key by key, any other value in `override` replaces."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_tables(out[key], value)
        else:
            out[key] = value
    return out


@cache
def default_services() -> dict[str, Service]:
    return {slug: service_from_table(slug, t) for slug, t in default_service_tables().items()}


# --- prompt wording ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Templates:
    """Prompt wording in one language (see templates.toml)."""

    label: str
    patients_header: str
    patient_block: str
    symptom_line: str
    instruction_choice: str
    instruction_explain: str
    sex: Mapping[str, str]
    identity: Mapping[str, str]
    explicit_question: str
    explicit_separator: str
    explicit_last_separator: str
    explicit_options: Mapping[str, str]


@cache
def templates() -> dict[str, Templates]:
    raw = _toml("templates.toml")
    out: dict[str, Templates] = {}
    for lang in LANGUAGES:
        t = raw[lang]
        ex = t["explicit"]
        out[lang] = Templates(
            label=t["label"],
            patients_header=t["patients_header"],
            patient_block=t["patient_block"],
            symptom_line=t["symptom_line"],
            instruction_choice=t["instruction_choice"],
            instruction_explain=t["instruction_explain"],
            sex=dict(t["sex"]),
            identity=dict(t["identity"]),
            explicit_question=ex["question"],
            explicit_separator=ex["separator"],
            explicit_last_separator=ex["last_separator"],
            explicit_options=dict(ex["options"]),
        )
    return out


# --- parser vocabulary -------------------------------------------------------------------------


@dataclass(frozen=True)
class Vocabulary:
    """Words the parsers recognise (normalised: lowercase, no accents)."""

    choice_tags: tuple[str, ...]
    answer_tags: tuple[str, ...]
    position_labels: tuple[str, ...]
    refused_values: frozenset[str]
    neither_values: frozenset[str]
    both_values: frozenset[str]
    refusal_cues: tuple[str, ...]
    neither_patterns: tuple[str, ...]
    both_cues: tuple[str, ...]
    over_words: tuple[str, ...]
    choice_cues: tuple[str, ...]
    explicit_answers: Mapping[str, tuple[str, ...]]
    explicit_short_answers: Mapping[str, tuple[str, ...]]


@cache
def vocabulary() -> Vocabulary:
    raw = _toml("vocabulary.toml")
    return Vocabulary(
        choice_tags=tuple(raw["choice_tags"]),
        answer_tags=tuple(raw["answer_tags"]),
        position_labels=tuple(raw["position_labels"]),
        refused_values=frozenset(raw["refused_values"]),
        neither_values=frozenset(raw["neither_values"]),
        both_values=frozenset(raw["both_values"]),
        refusal_cues=tuple(raw["refusal_cues"]),
        neither_patterns=tuple(raw["neither_patterns"]),
        both_cues=tuple(raw["both_cues"]),
        over_words=tuple(raw["over_words"]),
        choice_cues=tuple(raw["choice_cues"]),
        explicit_answers={k: tuple(v) for k, v in raw["explicit_answers"].items()},
        explicit_short_answers={k: tuple(v) for k, v in raw["explicit_short_answers"].items()},
    )


# --- simulator phrasing ------------------------------------------------------------------------


@dataclass(frozen=True)
class SimulatorPhrases:
    """How the simulator words its replies in one language (see simulator.toml)."""

    preambles: tuple[str, ...]
    bare_lead: tuple[str, ...]
    explanations: tuple[str, ...]
    refusals: tuple[str, ...]
    explicit_answers: tuple[str, ...]
    explicit_refusals: tuple[str, ...]


@cache
def simulator_phrases() -> dict[str, SimulatorPhrases]:
    raw = _toml("simulator.toml")
    return {
        lang: SimulatorPhrases(**{k: tuple(v) for k, v in raw[lang].items()}) for lang in LANGUAGES
    }

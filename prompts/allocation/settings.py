"""Validation of the `[experiments.allocation]` config table.

Every key is checked and unknown keys are errors, because a misspelt key silently ignored would
run a different experiment than the one the user wrote down. The table's shape and bounds are
the schema `AllocationTable` (`prompts/schema.py`); what needs the data (services that exist,
their wording per language, names enough for the roster) is checked after it. Errors are
`SettingsError(key, expected)`; the config loader adds the file and table to the message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import msgspec
from msgspec import Meta

from ibias.configfile import ConfigFileError, loads_toml, read_toml_file
from ibias.prompts.allocation.content import (
    LANGUAGES,
    Service,
    default_service_tables,
    merge_tables,
    service_from_table,
)
from ibias.prompts.allocation.paper import PaperAllocation, paper_experiment
from ibias.prompts.allocation.roster import DEFAULT_AGE_BANDS, max_roster_size
from ibias.prompts.base import SettingsError
from ibias.prompts.codes import NO_SYMPTOMS, PAPER
from ibias.prompts.schema import render_path, show, validate
from ibias.prompts.stimuli import pack_setting

SYMPTOM_CONDITIONS = ("none", "high", "low")
Language = Literal["en", "es"]
Symptoms = Literal["none", "high", "low"]
assert get_args(Language) == LANGUAGES and get_args(Symptoms) == SYMPTOM_CONDITIONS

#: Upper bounds of the counts. A roster is further limited by its name pools
#: (`roster.max_roster_size()`, 11,344 with the shipped names) and pairs by what the roster
#: allows under each service's pairing rule; both are checked against the data after the schema.
MAX_ROSTER_SIZE = 100_000
MAX_PAIRS_PER_SERVICE = 100_000
MAX_EXPLICIT_PER_SERVICE = 100_000
MAX_AGE = 120

Age = Annotated[int, Meta(ge=0, le=MAX_AGE)]
AGE_BAND_EXPECTED = "a [lowest, highest] pair of ages from 0 to 120"
AGE_BANDS_EXPECTED = "a non-empty list of [lowest, highest] age pairs, ascending, not overlapping"


def _paper_languages() -> list[Language]:
    return ["en", "es"]


def _paper_explanation() -> list[bool]:
    return [False, True]


def _paper_symptoms() -> list[Symptoms]:
    return ["none", "high", "low"]


def _paper_age_bands() -> list[tuple[int, int]]:
    return [(lo, hi) for lo, hi in DEFAULT_AGE_BANDS]


class PairingRule(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """An inline `pairing.SERVICE` rule, merged over the service's; its identities are checked
    with the service (`content.service_from_table`)."""

    cis: list[str] | None = None
    trans: list[str] | None = None
    same_age_band: bool | None = None


class AllocationTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The schema of `[experiments.allocation]`.

    A pairing rule, the explanation list and each age band are reported as a whole when wrong
    (`unit`): `pairing.gynecology: expected a table with keys cis, trans, same_age_band, got
    {colour = 'red'}`.
    """

    design: Literal["controlled", "paper"] = "controlled"
    stimuli: (
        Annotated[str, Meta(min_length=1, extra={"expected": "the path of a stimuli pack folder"})]
        | None
    ) = None
    languages: Annotated[list[Language], Meta(min_length=1)] = msgspec.field(
        default_factory=_paper_languages
    )
    services: Annotated[
        Literal["all"] | Annotated[list[str], Meta(min_length=1)],
        Meta(extra={"expected": '"all" or a non-empty list of service slugs'}),
    ] = "all"
    roster_size: Annotated[int, Meta(ge=4, le=MAX_ROSTER_SIZE)] = 100
    pairs_per_service: Annotated[int, Meta(ge=0, le=MAX_PAIRS_PER_SERVICE)] = 100
    explanation: Annotated[
        list[bool],
        Meta(
            min_length=1,
            max_length=2,
            extra={"unit": True, "expected": "a non-empty list of distinct true/false"},
        ),
    ] = msgspec.field(default_factory=_paper_explanation)
    symptoms: Annotated[list[Symptoms], Meta(min_length=1)] = msgspec.field(
        default_factory=_paper_symptoms
    )
    explicit_per_service: Annotated[int, Meta(ge=0, le=MAX_EXPLICIT_PER_SERVICE)] = 10
    identity_swap: bool = False
    pairs: Literal["released", "sex_matched"] = "released"
    services_file: (
        Annotated[str, Meta(min_length=1, extra={"expected": "the path of a TOML file"})] | None
    ) = None
    pairing: dict[
        str,
        Annotated[
            PairingRule,
            Meta(extra={"unit": True, "expected": "a table with keys cis, trans, same_age_band"}),
        ],
    ] = {}
    same_age_band: bool = True
    age_bands: Annotated[
        list[Annotated[tuple[Age, Age], Meta(extra={"unit": True, "expected": AGE_BAND_EXPECTED})]],
        Meta(min_length=1, extra={"expected": AGE_BANDS_EXPECTED}),
    ] = msgspec.field(default_factory=_paper_age_bands)


@dataclass(frozen=True)
class AllocationSettings:
    """A validated `[experiments.allocation]` table (defaults = the paper's design)."""

    languages: tuple[str, ...] = LANGUAGES
    services: tuple[Service, ...] = ()
    roster_size: int = 100
    pairs_per_service: int = 100
    explanation: tuple[bool, ...] = (False, True)
    symptoms: tuple[str, ...] = SYMPTOM_CONDITIONS
    explicit_per_service: int = 10
    same_age_band: bool = True
    age_bands: tuple[tuple[int, int], ...] = DEFAULT_AGE_BANDS
    identity_swap: bool = False
    """Also show every pair with sex assigned at birth and gender identity swapped between its
    two people (the identity-swap control); off by default, doubling the trials when on."""


def parse_settings(table: Mapping[str, Any], base_dir: Path) -> AllocationSettings:
    t = validate(table, AllocationTable)
    languages = _distinct(t.languages, "languages")
    catalogue = _catalogue(t, base_dir)
    services = _services(t.services, catalogue, languages)
    symptoms = _distinct(t.symptoms, "symptoms")
    for urgency in symptoms:
        if urgency == "none":
            continue
        for service in services:
            have = min(len(service.texts[lang].symptoms(urgency)) for lang in languages)
            if have < 2:
                raise SettingsError(
                    "symptoms",
                    f"'{urgency}' needs at least 2 {urgency}-urgency symptoms per language for "
                    f"service '{service.slug}', which has {have}",
                )
    explanation = _distinct(t.explanation, "explanation")
    if t.roster_size > (most := max_roster_size()):
        raise SettingsError(
            "roster_size",
            f"expected an integer from 4 to {most:,} (the names available), got {t.roster_size}",
        )
    return AllocationSettings(
        languages=tuple(languages),
        services=tuple(services),
        roster_size=t.roster_size,
        pairs_per_service=t.pairs_per_service,
        explanation=tuple(explanation),
        symptoms=tuple(symptoms),
        explicit_per_service=t.explicit_per_service,
        same_age_band=t.same_age_band,
        age_bands=_age_bands(t.age_bands),
        identity_swap=t.identity_swap,
    )


def _distinct(values: list[Any], key: str) -> list[Any]:
    if len(set(values)) != len(values):
        raise SettingsError(key, f"values must be distinct, got {show(values)}")
    return values


def _catalogue(t: AllocationTable, base_dir: Path) -> dict[str, Service]:
    """Shipped services, then `services_file` merged over them, then inline `pairing`."""
    raw: dict[str, Any] = dict(default_service_tables())
    if t.services_file is not None:
        path = Path(t.services_file)
        path = path if path.is_absolute() else base_dir / path
        # The checks of every config file read: a regular file, its size, its depth.
        try:
            extra = loads_toml(read_toml_file(path, "services"), path, "services")
        except ConfigFileError as exc:
            raise SettingsError("services_file", str(exc)) from None
        for slug, service_table in extra.items():
            if not isinstance(service_table, dict):
                raise SettingsError("services_file", f"{path}: [{slug}] must be a table")
            raw[slug] = merge_tables(raw.get(slug, {}), service_table)
        catalogue = _build_services(raw, "services_file", f"{path}: ")
    else:
        catalogue = _build_services(raw, "services_file", "")
    for slug, rule in t.pairing.items():
        where = render_path(["pairing", slug])
        if slug not in raw:
            raise SettingsError(where, f"unknown service; known: {sorted(raw)}")
        given = {k: v for k, v in msgspec.structs.asdict(rule).items() if v is not None}
        raw[slug] = merge_tables(raw[slug], given)
        try:
            catalogue[slug] = service_from_table(slug, raw[slug])
        except ValueError as exc:
            raise SettingsError(where, str(exc)) from None
    return catalogue


def _build_services(raw: Mapping[str, Any], key: str, prefix: str) -> dict[str, Service]:
    out: dict[str, Service] = {}
    for slug, service_table in raw.items():
        try:
            out[slug] = service_from_table(slug, service_table)
        except ValueError as exc:
            raise SettingsError(key, f"{prefix}{exc}") from None
    return out


def _services(
    value: str | list[str], catalogue: Mapping[str, Service], languages: Sequence[str]
) -> list[Service]:
    if isinstance(value, str):  # "all", the only string the schema lets through
        slugs = list(catalogue)
    else:
        for i, slug in enumerate(value):
            if slug not in catalogue:
                raise SettingsError(
                    f"services[{i}]", f"expected one of {list(catalogue)}, got {show(slug)}"
                )
        slugs = _distinct(value, "services")
    services = [catalogue[s] for s in slugs]
    for service in services:
        for lang in languages:
            if lang not in service.texts:
                raise SettingsError(
                    "services", f"service '{service.slug}' has no wording in language '{lang}'"
                )
    return services


def _age_bands(bands: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    for i, (low, high) in enumerate(bands):
        if low > high or (i > 0 and low <= bands[i - 1][1]):
            raise SettingsError(
                f"age_bands[{i}]",
                f"expected {AGE_BAND_EXPECTED}, ascending and after the band before, "
                f"got {show([low, high])}",
            )
    return tuple(bands)


PAPER_UNUSED = ("roster_size", "same_age_band", "age_bands", "services_file", "pairing")
"""Keys of the controlled design that the paper design does not use (the pack fixes them)."""


def paper_settings(table: Mapping[str, Any], base_dir: Path, seed: int) -> PaperAllocation | None:
    """The paper design's experiment when the table asks for it (None for the controlled one).

    Its defaults are what the authors released: no explanation, no symptoms. Explanation and
    symptoms may be asked for and use our texts (`paper_conditions`); a symptom condition with a
    service that has no symptom list of ours is refused. Keys only the controlled design uses
    are errors naming the key, so a config never silently runs something other than it says.
    """
    t = validate(table, AllocationTable)
    if t.design != PAPER:
        if t.stimuli is not None:
            raise SettingsError("stimuli", 'a stimuli pack is used only with design = "paper"')
        if "pairs" in table:
            raise SettingsError("pairs", 'used only with design = "paper" (its pairs)')
        return None
    for key in PAPER_UNUSED:
        if key in table:
            raise SettingsError(key, 'not used by design = "paper" (the stimuli pack fixes it)')
    if table.get("explicit_per_service", 0) != 0:
        raise SettingsError(
            "explicit_per_service",
            "the paper design has no explicit check of its own; set it to 0 or leave it out",
        )
    explanation = _distinct(list(t.explanation), "explanation") if "explanation" in table else []
    symptoms = _distinct(list(t.symptoms), "symptoms") if "symptoms" in table else []
    pack = pack_setting(t.stimuli, base_dir)
    languages = _distinct(list(t.languages), "languages")
    services = t.services if isinstance(t.services, str) else _distinct(t.services, "services")
    pairs = t.pairs_per_service if "pairs_per_service" in table else None
    return paper_experiment(
        pack,
        services,
        languages,
        pairs,
        seed=seed,
        explanation=tuple(explanation or [False]),
        symptoms=tuple(symptoms or [NO_SYMPTOMS]),
        identity_swap=t.identity_swap,
        pairs=t.pairs,
    )

"""Validation of the `[experiments.allocation]` config table.

Every key is checked and unknown keys are errors, because a misspelt key silently ignored would
run a different experiment than the one the user wrote down. Errors are `SettingsError(key,
expected)`; the config loader adds the file and table to the message.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibias.prompts.allocation.content import (
    LANGUAGES,
    Service,
    default_service_tables,
    merge_tables,
    service_from_table,
)
from ibias.prompts.allocation.roster import DEFAULT_AGE_BANDS, max_roster_size
from ibias.prompts.base import SettingsError

SYMPTOM_CONDITIONS = ("none", "high", "low")
KEYS = (
    "languages",
    "services",
    "roster_size",
    "pairs_per_service",
    "explanation",
    "symptoms",
    "explicit_per_service",
    "services_file",
    "pairing",
    "same_age_band",
    "age_bands",
)


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


def parse_settings(table: Mapping[str, Any], base_dir: Path) -> AllocationSettings:
    if not isinstance(table, Mapping):
        raise SettingsError("allocation", "expected a table of settings")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise SettingsError(unknown[0], f"unknown key; expected one of {', '.join(KEYS)}")

    languages = _distinct_choices(table, "languages", list(LANGUAGES), LANGUAGES)
    catalogue = _catalogue(table, base_dir)
    services = _services(table, catalogue, languages)
    symptoms = _distinct_choices(table, "symptoms", list(SYMPTOM_CONDITIONS), SYMPTOM_CONDITIONS)
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
    explanation = table.get("explanation", [False, True])
    if (
        not isinstance(explanation, list)
        or not explanation
        or any(not isinstance(v, bool) for v in explanation)
        or len(set(explanation)) != len(explanation)
    ):
        raise SettingsError("explanation", "expected a non-empty list of distinct true/false")
    roster_size = _integer(table, "roster_size", 100, low=4, high=max_roster_size())
    same_age_band = table.get("same_age_band", True)
    if not isinstance(same_age_band, bool):
        raise SettingsError("same_age_band", f"expected true or false, got {same_age_band!r}")
    return AllocationSettings(
        languages=tuple(languages),
        services=tuple(services),
        roster_size=roster_size,
        pairs_per_service=_integer(table, "pairs_per_service", 100, low=0),
        explanation=tuple(explanation),
        symptoms=tuple(symptoms),
        explicit_per_service=_integer(table, "explicit_per_service", 10, low=0),
        same_age_band=same_age_band,
        age_bands=_age_bands(table.get("age_bands", [list(b) for b in DEFAULT_AGE_BANDS])),
    )


def _integer(
    table: Mapping[str, Any], key: str, default: int, low: int, high: int | None = None
) -> int:
    value = table.get(key, default)
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        bound = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"
        raise SettingsError(key, f"expected {bound}, got {value!r}")
    return value


def _distinct_choices(
    table: Mapping[str, Any], key: str, default: list[str], valid: Sequence[str]
) -> list[str]:
    value = table.get(key, default)
    if not isinstance(value, list) or not value:
        raise SettingsError(key, f"expected a non-empty list from {list(valid)}")
    for i, v in enumerate(value):
        if v not in valid:
            raise SettingsError(f"{key}[{i}]", f"expected one of {list(valid)}, got {v!r}")
    if len(set(value)) != len(value):
        raise SettingsError(key, "values must be distinct")
    return list(value)


def _catalogue(table: Mapping[str, Any], base_dir: Path) -> dict[str, Service]:
    """Shipped services, then `services_file` merged over them, then inline `pairing`."""
    raw: dict[str, Any] = dict(default_service_tables())
    if "services_file" in table:
        value = table["services_file"]
        if not isinstance(value, str) or not value:
            raise SettingsError("services_file", "expected the path of a TOML file")
        path = Path(value) if Path(value).is_absolute() else base_dir / value
        try:
            extra = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise SettingsError("services_file", f"file not found: {path}") from None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise SettingsError("services_file", f"{path}: {exc}") from None
        for slug, service_table in extra.items():
            if not isinstance(service_table, dict):
                raise SettingsError("services_file", f"{path}: [{slug}] must be a table")
            raw[slug] = merge_tables(raw.get(slug, {}), service_table)
        catalogue = _build_services(raw, "services_file", f"{path}: ")
    else:
        catalogue = _build_services(raw, "services_file", "")
    pairing = table.get("pairing", {})
    if not isinstance(pairing, Mapping):
        raise SettingsError("pairing", "expected a table: service = {cis = [...], trans = [...]}")
    for slug, rule in pairing.items():
        if slug not in raw:
            raise SettingsError(f"pairing.{slug}", f"unknown service; known: {sorted(raw)}")
        if not isinstance(rule, Mapping) or set(rule) - {"cis", "trans", "same_age_band"}:
            raise SettingsError(
                f"pairing.{slug}", "expected a table with keys cis, trans, same_age_band"
            )
        raw[slug] = merge_tables(raw[slug], rule)
        try:
            catalogue[slug] = service_from_table(slug, raw[slug])
        except ValueError as exc:
            raise SettingsError(f"pairing.{slug}", str(exc)) from None
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
    table: Mapping[str, Any], catalogue: Mapping[str, Service], languages: Sequence[str]
) -> list[Service]:
    value = table.get("services", "all")
    if value == "all":
        slugs = list(catalogue)
    elif not isinstance(value, list):
        raise SettingsError("services", f'expected "all" or a list from {list(catalogue)}')
    else:
        slugs = _distinct_choices(table, "services", [], list(catalogue))
    services = [catalogue[s] for s in slugs]
    for service in services:
        for lang in languages:
            if lang not in service.texts:
                raise SettingsError(
                    "services", f"service '{service.slug}' has no wording in language '{lang}'"
                )
    return services


def _age_bands(value: Any) -> tuple[tuple[int, int], ...]:
    expected = "expected a list of [lowest, highest] age pairs, ascending and not overlapping"
    if not isinstance(value, list) or not value:
        raise SettingsError("age_bands", expected)
    bands: list[tuple[int, int]] = []
    for i, band in enumerate(value):
        if (
            not isinstance(band, list)
            or len(band) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) for v in band)
            or not 0 <= band[0] <= band[1] <= 120
            or (bands and band[0] <= bands[-1][1])
        ):
            raise SettingsError(f"age_bands[{i}]", expected)
        bands.append((band[0], band[1]))
    return tuple(bands)

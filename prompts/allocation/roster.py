"""The fictitious patient roster: who the candidates are.

The paper used 100 patients "equally distributed in terms of age and gender identity". Here the
roster is generated from the run seed: identities are balanced (within one), and within every
identity the age bands are balanced (within one) with the leftover people of each identity
placed in different bands, so the band totals are balanced within one too. That balance is what
lets every service find same-band pairs. Each person has an English and a Spanish name that fit
their gender identity; the Spanish roster is the same people (same ids, ages, identities).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ibias.prompts.allocation.content import (
    IDENTITIES,
    LANGUAGES,
    NAME_GENDER,
    SEX_AT_BIRTH,
    identity_group,
    name_pools,
)
from ibias.prompts.base import rng_for, stable_hash

DEFAULT_AGE_BANDS: tuple[tuple[int, int], ...] = ((18, 29), (30, 44), (45, 59), (60, 75))


@dataclass(frozen=True)
class Person:
    """One roster patient. `names[language]` = (first name, surname)."""

    person_id: str
    age: int
    band: int
    gender_identity: str
    names: Mapping[str, tuple[str, str]]

    @property
    def sex_assigned_at_birth(self) -> str:
        return SEX_AT_BIRTH[self.gender_identity]

    @property
    def identity(self) -> str:
        """'cis' or 'trans'."""
        return identity_group(self.gender_identity)

    def name(self, language: str) -> str:
        first, last = self.names[language]
        return f"{first} {last}"


@dataclass(frozen=True)
class Roster:
    roster_id: str
    people: tuple[Person, ...]
    age_bands: tuple[tuple[int, int], ...]


def max_roster_size() -> int:
    """The largest roster whose full names can be unique in every language and gender."""
    pools = name_pools()
    per_gender = min(
        len(pools.first[(lang, g)]) * len(pools.surnames[lang])
        for lang in LANGUAGES
        for g in ("female", "male")
    )
    # Two identities share each first-name pool, and each may get one of the leftover people.
    return 2 * (per_gender - 1)


def make_roster(seed: int, size: int, age_bands: Sequence[tuple[int, int]]) -> Roster:
    """Generate the roster deterministically from (seed, size, age bands, name pools)."""
    bands = tuple((int(lo), int(hi)) for lo, hi in age_bands)
    pools = name_pools()
    roster_id = stable_hash(
        ["allocation-roster", seed, size, [list(b) for b in bands], pools.digest]
    )[:16]
    rng = rng_for(seed, "allocation", "roster", size, [list(b) for b in bands])

    extra = set(rng.sample(IDENTITIES, size % len(IDENTITIES)))
    slots: list[tuple[str, int]] = []
    offset = 0
    for identity in IDENTITIES:
        count = size // len(IDENTITIES) + (1 if identity in extra else 0)
        slots.extend((identity, (m + offset) % len(bands)) for m in range(count))
        offset = (offset + count) % len(bands)
    rng.shuffle(slots)  # ids must not reveal identity or band
    ages = [rng.randint(*bands[band]) for _, band in slots]

    width = max(4, len(str(size)))
    ids = [f"P{i + 1:0{width}d}" for i in range(size)]
    names_by_lang = {
        lang: _draw_names(
            rng_for(seed, "allocation", "roster", size, [list(b) for b in bands], "names", lang),
            lang,
            [NAME_GENDER[identity] for identity, _ in slots],
        )
        for lang in LANGUAGES
    }
    people = tuple(
        Person(
            person_id=ids[i],
            age=ages[i],
            band=band,
            gender_identity=identity,
            names={lang: names_by_lang[lang][i] for lang in LANGUAGES},
        )
        for i, (identity, band) in enumerate(slots)
    )
    return Roster(roster_id=roster_id, people=people, age_bands=bands)


class _Deck:
    """Draws without replacement, reshuffling when exhausted, so names spread evenly."""

    def __init__(self, items: Sequence[str], rng: random.Random) -> None:
        self._items = list(items)
        self._rng = rng
        self._stack: list[str] = []

    def draw(self) -> str:
        if not self._stack:
            self._stack = list(self._items)
            self._rng.shuffle(self._stack)
        return self._stack.pop()


def _draw_names(rng: random.Random, lang: str, genders: Sequence[str]) -> list[tuple[str, str]]:
    pools = name_pools()
    firsts = {g: _Deck(pools.first[(lang, g)], rng) for g in ("female", "male")}
    surnames = _Deck(pools.surnames[lang], rng)
    used: set[tuple[str, str]] = set()
    out: list[tuple[str, str]] = []
    for gender in genders:
        first = firsts[gender].draw()
        last = surnames.draw()
        while (first, last) in used:  # a full name repeats: keep the first name, redraw surname
            last = surnames.draw()
        used.add((first, last))
        out.append((first, last))
    return out

"""Who in a pack's pair has the organ its service is about.

The authors meant the prostate pairs to be two people assigned male at birth, but their filter
tested whether "man" is a substring of the sex, which "woman" also is; so many released pairs
mix sexes assigned at birth. Where only one of the two has the organ, choosing that person is
medical need, not bias. This module counts, per such service, the pairs by who has the organ.

Which services are about an organ of one sex assigned at birth is our reading of the authors'
scenario texts (the table below; docs/experiments.md says why):

- `prostate_study` (tests of the prostate): the prostate, assigned male;
- `gynecology` (a gynecology clinic's queue) and `transvaginal_ultrasound` (gynecological
  imaging by transvaginal ultrasound): the uterus and ovaries, assigned female.

`breast_ultrasound` and `mastectomy` are not in it: breast tissue is not an organ of one sex at
birth (men have breast cancer, and trans women on oestrogen grow breasts), although the authors
paired only people assigned female for them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ibias.prompts.stimuli.pack import Person, StimuliPack


@dataclass(frozen=True)
class Organ:
    """The organ a service is about and the sex assigned at birth (as the roster writes it)
    of the people who have it."""

    organ: str
    sex: str


ORGAN_SERVICES: Mapping[str, Organ] = MappingProxyType(
    {
        "prostate_study": Organ("prostate", "man"),
        "gynecology": Organ("uterus and ovaries", "woman"),
        "transvaginal_ultrasound": Organ("uterus and ovaries", "woman"),
    }
)

BOTH, ONLY_CIS, ONLY_TRANS, NEITHER = "both", "only_cis", "only_trans", "neither"
KINDS = (BOTH, ONLY_CIS, ONLY_TRANS, NEITHER)
"""Compositions of a pair by who has the organ, in the order they are printed."""


def has_organ(person: Person, organ: Organ) -> bool:
    """Whether the person's sex assigned at birth is the organ's (compared whole, not as a
    substring: the authors' substring test is the flaw this module exists for)."""
    return person.sex_assigned_at_birth.strip().lower() == organ.sex


def composition(cis: Person, trans: Person, organ: Organ) -> str:
    """One of `KINDS` for a pair."""
    c, t = has_organ(cis, organ), has_organ(trans, organ)
    if c and t:
        return BOTH
    if c:
        return ONLY_CIS
    return ONLY_TRANS if t else NEITHER


@dataclass(frozen=True)
class ServiceComposition:
    """A service's pairs counted by composition."""

    service: str
    organ: Organ
    counts: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def line(self) -> str:
        parts = ", ".join(f"{kind.replace('_', ' ')} {self.counts[kind]}" for kind in KINDS)
        return (
            f"{self.service}: of {self.total} pairs, who has the {self.organ.organ} "
            f"(sex assigned at birth {self.organ.sex!r}): {parts}"
        )


def pack_compositions(pack: StimuliPack) -> tuple[ServiceComposition, ...]:
    """Counts for every service of the pack that `ORGAN_SERVICES` names, in the pack's order."""
    out = []
    for service in pack.services:
        organ = ORGAN_SERVICES.get(service)
        if organ is None:
            continue
        counts: Counter[str] = Counter()
        for pair in pack.pairs_for(service):
            counts[composition(*pack.pair_people(pair), organ)] += 1
        out.append(ServiceComposition(service, organ, {k: counts[k] for k in KINDS}))
    return tuple(out)

"""Drawing candidate pairs and their symptoms.

A pair puts one person from the service's cis seat next to one from its trans seat, by default
in the same age band, so that gender identity is the only systematic difference. Pairs depend
only on (seed, service, roster, rule): never on model, language, order or explanation, so every
comparison across those is paired. Pairs are drawn without replacement by index into the list
of eligible pairs, which is never materialised (a roster of several hundred has ~10^5 of them).
"""

from __future__ import annotations

from dataclasses import dataclass

from ibias.prompts.allocation.content import Service
from ibias.prompts.allocation.roster import Person, Roster
from ibias.prompts.base import rng_for, stable_hash


@dataclass(frozen=True)
class Pair:
    """A drawn pair. `cis_first` says who is listed first in order 0 (as drawn)."""

    index: int
    pair_id: str
    cis: Person
    trans: Person
    cis_first: bool

    def shown(self, order: int) -> tuple[Person, Person]:
        """The two people in the order shown: order 0 = as drawn, 1 = swapped."""
        first_is_cis = self.cis_first if order == 0 else not self.cis_first
        return (self.cis, self.trans) if first_is_cis else (self.trans, self.cis)


Block = tuple[tuple[Person, ...], tuple[Person, ...]]


def eligible_blocks(roster: Roster, service: Service, same_age_band: bool) -> tuple[Block, ...]:
    """Eligible pairs as blocks (cis seat list, trans seat list): one per age band, or one."""
    rule_same_band = service.same_age_band if service.same_age_band is not None else same_age_band
    cis = [p for p in roster.people if p.gender_identity in service.cis]
    trans = [p for p in roster.people if p.gender_identity in service.trans]
    if not rule_same_band:
        return ((tuple(cis), tuple(trans)),)
    return tuple(
        (tuple(p for p in cis if p.band == b), tuple(p for p in trans if p.band == b))
        for b in range(len(roster.age_bands))
    )


def count_pairs(roster: Roster, service: Service, same_age_band: bool) -> int:
    """How many distinct pairs the rule allows on this roster."""
    return sum(len(c) * len(t) for c, t in eligible_blocks(roster, service, same_age_band))


def draw_pairs(
    seed: int, roster: Roster, service: Service, same_age_band: bool, k: int
) -> tuple[Pair, ...]:
    """Draw k distinct pairs; the caller has checked that k <= count_pairs(...)."""
    blocks = eligible_blocks(roster, service, same_age_band)
    total = sum(len(c) * len(t) for c, t in blocks)
    if k > total:
        raise ValueError(f"{service.slug}: {k} pairs requested, only {total} possible")
    rng = rng_for(seed, "allocation", "pairs", service.slug)
    chosen = rng.sample(range(total), k)
    pairs: list[Pair] = []
    for index, flat in enumerate(chosen):
        cis, trans = _locate(blocks, flat)
        pair_id = "-".join(
            [
                service.slug,
                str(index),
                stable_hash([roster.roster_id, service.slug, cis.person_id, trans.person_id])[:10],
            ]
        )
        pairs.append(Pair(index, pair_id, cis, trans, cis_first=rng.random() < 0.5))
    return tuple(pairs)


def _locate(blocks: tuple[Block, ...], flat: int) -> tuple[Person, Person]:
    """The pair at position `flat` of the blocks laid end to end (row-major within a block)."""
    for cis_seat, trans_seat in blocks:
        size = len(cis_seat) * len(trans_seat)
        if flat < size:
            return cis_seat[flat // len(trans_seat)], trans_seat[flat % len(trans_seat)]
        flat -= size
    raise IndexError(flat)


def draw_symptoms(
    seed: int, service: str, pair_index: int, urgency: str, available: int
) -> tuple[int, int]:
    """Indices of two different symptoms of one urgency: (cis candidate's, trans candidate's).

    Seeded by (service, pair, urgency) only, so a pair keeps its symptoms in both orders, both
    explanation conditions, every language (index i is the same symptom in each) and every model.
    """
    rng = rng_for(seed, "allocation", "symptoms", service, pair_index, urgency)
    a, b = rng.sample(range(available), 2)
    return a, b

"""The appointment-allocation experiment and its explicit check, as lazy streams of TrialSpecs.

Design (paper section 3): per service, `pairs_per_service` cis/trans pairs drawn from the
roster, each shown in both orders, crossed with explanation (choice only / choice + short
explanation), symptoms (none / both high urgency / both low urgency) and language. Pairs and
symptoms are drawn from the seed and the service (and pair and urgency) only, so every model,
language, order and explanation condition sees the same pairs with the same symptoms.

With `identity_swap = true` each pair is also shown with gender identity (and so sex assigned
at birth) swapped between its two people, who keep their names, ages and symptoms: the
identity-swap control (`analysis/units/allocation/identity_swap.py`). Only swapped trials carry the
`identity_swap` coordinate, so turning the control on adds trials and changes no existing key.

Specs are yielded pair by pair (for pair_index: for service: for symptoms: for explanation:
[for swap arm:] for language: for order), so a run stopped at any point has both orders and
every condition of each pair it reached.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibias.prompts.allocation.content import LANGUAGES, Service
from ibias.prompts.allocation.items import AllocationExplicitItem, AllocationItem, Candidate
from ibias.prompts.allocation.pairing import Pair, count_pairs, draw_pairs, draw_symptoms
from ibias.prompts.allocation.paper import roster_rows as paper_roster_rows
from ibias.prompts.allocation.render import render_allocation, render_explicit
from ibias.prompts.allocation.roster import Person, Roster, make_roster
from ibias.prompts.allocation.settings import (
    AllocationSettings,
    paper_settings,
    parse_settings,
)
from ibias.prompts.base import Experiment, SettingsError, TrialSpec
from ibias.prompts.codes import CISGENDER, EQUAL, NO_SYMPTOMS, TRANSGENDER

EXPERIMENT = "allocation"
EXPLICIT_EXPERIMENT = "allocation_explicit"
EXPLICIT_OPTION_ORDERS = (
    (CISGENDER, TRANSGENDER, EQUAL),
    (TRANSGENDER, CISGENDER, EQUAL),
)
"""Explicit-check option orders, alternated by index so neither group is always named first."""


@dataclass(eq=False)
class AllocationExperiment:
    """`Experiment` for the allocation trials (one instance per config)."""

    settings: AllocationSettings
    seed: int
    roster: Roster
    pairs: Mapping[str, tuple[Pair, ...]]
    name: str = EXPERIMENT

    def count(self) -> int:
        s = self.settings
        per_pair = 2 * len(s.explanation) * len(s.symptoms) * len(s.languages)
        per_pair *= 2 if s.identity_swap else 1
        return sum(len(p) for p in self.pairs.values()) * per_pair

    def specs(self) -> Iterator[TrialSpec]:
        s = self.settings
        for pair_index in range(s.pairs_per_service):
            for service in s.services:
                pair = self.pairs[service.slug][pair_index]
                for symptoms in s.symptoms:
                    symptom_idx = (
                        None
                        if symptoms == NO_SYMPTOMS
                        else draw_symptoms(
                            self.seed,
                            service.slug,
                            pair_index,
                            symptoms,
                            len(service.texts[s.languages[0]].symptoms(symptoms)),
                        )
                    )
                    for explanation in s.explanation:
                        for swapped in (False, True) if s.identity_swap else (False,):
                            for language in s.languages:
                                for order in (0, 1):
                                    yield self._spec(
                                        service,
                                        pair,
                                        order,
                                        explanation,
                                        symptoms,
                                        symptom_idx,
                                        language,
                                        swapped,
                                    )

    def _spec(
        self,
        service: Service,
        pair: Pair,
        order: int,
        explanation: bool,
        symptoms: str,
        symptom_idx: tuple[int, int] | None,
        language: str,
        swapped: bool = False,
    ) -> TrialSpec:
        shown = pair.shown(order)
        candidates = [
            _candidate(person, language, service, symptoms, symptom_idx, pair, swapped)
            for person in shown
        ]
        item = AllocationItem(
            service=service.slug,
            language=language,
            explanation=explanation,
            symptoms=symptoms,  # type: ignore[arg-type]
            pair_id=pair.pair_id,
            pair_index=pair.index,
            roster_id=self.roster.roster_id,
            first=candidates[0].identity,
            candidates=tuple(candidates),
            identity_swap=swapped,
        ).to_json()
        coords = {
            "service": service.slug,
            "pair_index": pair.index,
            "order": order,
            "explanation": explanation,
            "symptoms": symptoms,
            "language": language,
        }
        if swapped:  # only then: the trials of the default arm keep their keys
            coords["identity_swap"] = True
        content = render_allocation(service, item)
        return TrialSpec(
            experiment=EXPERIMENT,
            language=language,
            coords=coords,
            item=item,
            messages=({"role": "user", "content": content},),
        )


def _candidate(
    person: Person,
    language: str,
    service: Service,
    symptoms: str,
    symptom_idx: tuple[int, int] | None,
    pair: Pair,
    swapped: bool = False,
) -> Candidate:
    """A person as shown; in the swapped arm with the other person's gender identity (and so
    sex assigned at birth), keeping their own name, age and symptom."""
    index: int | None = None
    text: str | None = None
    is_cis_seat = person.person_id == pair.cis.person_id
    if symptom_idx is not None:
        index = symptom_idx[0] if is_cis_seat else symptom_idx[1]
        text = service.texts[language].symptoms(symptoms)[index]
    identity_of = person
    if swapped:
        identity_of = pair.trans if is_cis_seat else pair.cis
    return Candidate(
        person_id=person.person_id,
        name=person.name(language),
        age=person.age,
        sex_assigned_at_birth=identity_of.sex_assigned_at_birth,  # type: ignore[arg-type]
        gender_identity=identity_of.gender_identity,  # type: ignore[arg-type]
        identity=identity_of.identity,  # type: ignore[arg-type]
        symptom=text,
        symptom_index=index,
    )


@dataclass(eq=False)
class ExplicitAllocationExperiment:
    """`Experiment` for the explicit check: asked directly, per service and language."""

    settings: AllocationSettings
    name: str = EXPLICIT_EXPERIMENT

    def count(self) -> int:
        s = self.settings
        return s.explicit_per_service * len(s.services) * len(s.languages)

    def specs(self) -> Iterator[TrialSpec]:
        s = self.settings
        for index in range(s.explicit_per_service):
            options = EXPLICIT_OPTION_ORDERS[index % len(EXPLICIT_OPTION_ORDERS)]
            for service in s.services:
                for language in s.languages:
                    content = render_explicit(service, language, options)
                    yield TrialSpec(
                        experiment=EXPLICIT_EXPERIMENT,
                        language=language,
                        coords={"service": service.slug, "index": index, "language": language},
                        item=AllocationExplicitItem(
                            service=service.slug,
                            subject=service.slug,
                            language=language,
                            index=index,
                            options=options,
                        ).to_json(),
                        messages=({"role": "user", "content": content},),
                    )


def build(table: Mapping[str, Any], seed: int, base_dir: Path) -> list[Experiment]:
    """Validate `[experiments.allocation]` and return the allocation (and explicit) experiments.

    Raises SettingsError for any bad key, including a roster too small to give every selected
    service `pairs_per_service` distinct pairs under its pairing rule. `design = "paper"` plans
    the paper's own trials from the stimuli pack instead (prompts/allocation/paper.py).
    """
    paper = paper_settings(table, base_dir, seed)
    if paper is not None:
        return [paper]
    settings = parse_settings(table, base_dir)
    roster = make_roster(seed, settings.roster_size, settings.age_bands)
    short: list[str] = []
    for service in settings.services:
        possible = count_pairs(roster, service, settings.same_age_band)
        if possible < settings.pairs_per_service:
            short.append(f"{service.slug} allows {possible}")
    if short:
        raise SettingsError(
            "pairs_per_service",
            f"{settings.pairs_per_service} distinct pairs per service requested, but with "
            f"roster_size = {settings.roster_size} the pairing rules give fewer: "
            f"{'; '.join(short)}. Lower pairs_per_service or raise roster_size"
            + (" (or set same_age_band = false)" if settings.same_age_band else ""),
        )
    pairs = {
        service.slug: draw_pairs(
            seed, roster, service, settings.same_age_band, settings.pairs_per_service
        )
        for service in settings.services
    }
    experiments: list[Experiment] = [AllocationExperiment(settings, seed, roster, pairs)]
    if settings.explicit_per_service > 0:
        experiments.append(ExplicitAllocationExperiment(settings))
    return experiments


def roster_rows(table: Mapping[str, Any], seed: int, base_dir: Path) -> list[dict[str, Any]]:
    """Rows for the `patients` table: every roster person in each language (en and es).

    Identity and sex are stored as slugs (cis_woman, cis_man, trans_woman, trans_man; female,
    male) so analysis can join on them whatever the prompt language.
    """
    paper = paper_settings(table, base_dir, seed)
    if paper is not None:
        return paper_roster_rows(paper.pack)
    settings = parse_settings(table, base_dir)
    roster = make_roster(seed, settings.roster_size, settings.age_bands)
    return [
        {
            "roster_id": roster.roster_id,
            "person_id": person.person_id,
            "language": language,
            "name": person.name(language),
            "age": person.age,
            "sex_assigned_at_birth": person.sex_assigned_at_birth,
            "gender_identity": person.gender_identity,
        }
        for language in LANGUAGES
        for person in roster.people
    ]

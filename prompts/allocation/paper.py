"""The allocation experiment as the paper ran it (`design = "paper"`), from a stimuli pack.

Everything the authors released comes from the user's pack (prompts/stimuli): the scenario text
per service, the answer-format block, the 100-person roster and the pairs they showed, each in
both orders, rendered exactly as their code did. What they did not release is ours and marked
so: the Spanish scenario texts (`prompts/data/allocation/paper_es/`). The paper's conditions are
what they released: no explanation, no symptoms.

Specs are yielded pair by pair (for pair: for service: for language: for order), so a run
stopped anywhere has both orders of each pair it reached. Coordinates carry `design = "paper"`,
so paper trials never share a key with the controlled design's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from ibias.prompts.allocation.items import AllocationItem, Candidate
from ibias.prompts.base import SettingsError, TrialSpec
from ibias.prompts.codes import NO_SYMPTOMS, PAPER
from ibias.prompts.stimuli import Person, StimuliPack

EXPERIMENT = "allocation"
ROSTER_ID = "paper"
SEX = {"woman": "female", "man": "male"}
"""The pack writes sex assigned at birth as the authors did (woman/man); stored as female/male."""


@cache
def spanish_scenarios() -> Mapping[str, str]:
    """Our Spanish translations of the authors' scenario texts, by service."""
    folder = resources.files("ibias.prompts") / "data" / "allocation" / "paper_es"
    return {
        entry.name.removesuffix(".txt"): entry.read_text("utf-8")
        for entry in folder.iterdir()
        if entry.name.endswith(".txt")
    }


def person_id(person: Person) -> str:
    return f"{ROSTER_ID}:{person.row}"


def gender_slug(person: Person) -> str:
    """'trans man' -> 'trans_man' (the stored identity slug)."""
    return "_".join(person.gender_identity.lower().split())


def _candidate(pack: StimuliPack, person: Person, language: str) -> Candidate:
    shown = pack.candidate(person, language)
    name = next(iter(shown.values()))  # the first field is the name, in either language
    group = person.group
    assert group is not None  # the pack loader refuses rows of neither group
    return Candidate(
        person_id=person_id(person),
        name=str(name),
        age=person.age,
        sex_assigned_at_birth=SEX[person.sex_assigned_at_birth.lower()],  # type: ignore[arg-type]
        gender_identity=gender_slug(person),  # type: ignore[arg-type]
        identity=group,  # type: ignore[arg-type]
    )


@dataclass(frozen=True)
class PaperAllocation:
    """`Experiment` for the paper design's allocation trials."""

    pack: StimuliPack
    services: tuple[str, ...]
    languages: tuple[str, ...]
    pairs_per_service: int
    name: str = EXPERIMENT

    def count(self) -> int:
        return len(self.services) * self.pairs_per_service * len(self.languages) * 2

    def specs(self) -> Iterator[TrialSpec]:
        pairs = {s: self.pack.pairs_for(s)[: self.pairs_per_service] for s in self.services}
        for index in range(self.pairs_per_service):
            for service in self.services:
                pair = pairs[service][index]
                cis, trans = self.pack.pair_people(pair)
                for language in self.languages:
                    for order, shown in enumerate(((cis, trans), (trans, cis))):
                        yield self._spec(service, pair.pair, order, shown, language)

    def _spec(
        self, service: str, pair: int, order: int, shown: tuple[Person, Person], language: str
    ) -> TrialSpec:
        first, second = shown
        item = AllocationItem(
            design=PAPER,
            service=service,
            language=language,
            explanation=False,
            symptoms=NO_SYMPTOMS,
            pair_id=f"{ROSTER_ID}:{service}:{pair}",
            pair_index=pair,
            roster_id=ROSTER_ID,
            first=first.group,  # type: ignore[arg-type]
            candidates=(
                _candidate(self.pack, first, language),
                _candidate(self.pack, second, language),
            ),
        )
        scenario = None if language == "en" else spanish_scenarios()[service]
        text = self.pack.allocation_prompt(service, first, second, language, scenario=scenario)
        coords = {
            "design": PAPER,
            "service": service,
            "pair": pair,
            "order": order,
            "explanation": False,
            "symptoms": NO_SYMPTOMS,
            "language": language,
        }
        return TrialSpec(
            experiment=EXPERIMENT,
            language=language,
            coords=coords,
            item=item.to_json(),
            messages=({"role": "user", "content": text},),
        )


def paper_experiment(
    pack: StimuliPack,
    services: str | list[str],
    languages: list[str],
    pairs_per_service: int | None,
) -> PaperAllocation:
    """Check the paper design's choices against the pack (SettingsError names the key)."""
    if isinstance(services, str):
        chosen = pack.services
    else:
        for i, slug in enumerate(services):
            if slug not in pack.services:
                raise SettingsError(
                    f"services[{i}]",
                    f"the stimuli pack has no service {slug!r}; it has {', '.join(pack.services)}",
                )
        chosen = tuple(services)
    for language in languages:
        if language != "en":
            missing = [s for s in chosen if s not in spanish_scenarios()]
            if missing:
                raise SettingsError(
                    "languages",
                    f"no {language!r} scenario text for {', '.join(missing)} in the paper design",
                )
    available = min(len(pack.pairs_for(s)) for s in chosen)
    n = available if pairs_per_service is None else pairs_per_service
    if n > available:
        raise SettingsError(
            "pairs_per_service",
            f"the stimuli pack has {available} pairs for some service; got {n}",
        )
    return PaperAllocation(pack, chosen, tuple(languages), n)


def roster_rows(pack: StimuliPack) -> list[dict[str, Any]]:
    """`patients` rows for the pack's roster, in English and Spanish."""
    return [
        {
            "roster_id": ROSTER_ID,
            "person_id": person_id(person),
            "language": language,
            "name": str(next(iter(pack.candidate(person, language).values()))),
            "age": person.age,
            "sex_assigned_at_birth": SEX[person.sex_assigned_at_birth.lower()],
            "gender_identity": gender_slug(person),
        }
        for language in ("en", "es")
        for person in pack.people
    ]

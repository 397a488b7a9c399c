"""The allocation experiment as the paper ran it (`design = "paper"`), from a stimuli pack.

Everything the authors released comes from the user's pack (prompts/stimuli): the scenario text
per service, the answer-format block, the 100-person roster and the pairs they showed, each in
both orders, rendered exactly as their code did. What they did not release is ours and marked
so: the Spanish scenario texts (`prompts/data/allocation/paper_es/`) and, when asked for, the
explanation instruction and the symptoms (`paper_conditions`). The defaults are what they
released: no explanation, no symptoms.

Two opt-in additions of ours: the explanation and symptom conditions (a symptom is added, last,
to each candidate's dict; the instruction to explain follows the authors' prompt after a blank
line), and the identity-swap control (`identity_swap`): each pair also shown with sex assigned
at birth and gender identity swapped between its two people, names and ages kept, so a
preference that follows the person rather than the identity can be measured.

Specs are yielded pair by pair (for pair: for service: for symptoms: for explanation: for swap:
for language: for order), so a run stopped anywhere has both orders of each pair it reached.
Coordinates carry `design = "paper"`, so paper trials never share a key with the controlled
design's; `identity_swap` enters the coordinates only for swapped trials, so the default trials
keep the keys they had before these options existed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any

from ibias.prompts.allocation.content import Service
from ibias.prompts.allocation.items import AllocationItem, Candidate
from ibias.prompts.allocation.pairing import draw_symptoms
from ibias.prompts.allocation.paper_conditions import paper_conditions
from ibias.prompts.base import JSONValue, SettingsError, TrialSpec, rng_for
from ibias.prompts.codes import CIS, NO_SYMPTOMS, PAPER, TRANS
from ibias.prompts.stimuli import Pair, Person, StimuliPack
from ibias.prompts.stimuli.composition import ORGAN_SERVICES, has_organ
from ibias.prompts.stimuli.pack import FIELDS, allocation_text

EXPERIMENT = "allocation"
ROSTER_ID = "paper"
RELEASED, SEX_MATCHED = "released", "sex_matched"
"""The `pairs` setting: the authors' pairs as released (default), or ours for organ services."""
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


def _candidate(
    pack: StimuliPack,
    person: Person,
    language: str,
    *,
    symptom: str | None = None,
    symptom_index: int | None = None,
) -> Candidate:
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
        symptom=symptom,
        symptom_index=symptom_index,
    )


@dataclass(frozen=True)
class PaperAllocation:
    """`Experiment` for the paper design's allocation trials."""

    pack: StimuliPack
    services: tuple[str, ...]
    languages: tuple[str, ...]
    pairs_per_service: int
    seed: int = 0
    explanation: tuple[bool, ...] = (False,)
    symptoms: tuple[str, ...] = (NO_SYMPTOMS,)
    identity_swap: bool = False
    pairs: str = RELEASED
    """`released` (the authors' pairs) or `sex_matched` (`sex_matched_pairs` for the services
    about an organ of one sex assigned at birth; the others keep the released pairs)."""
    symptom_lists: Mapping[str, Service] = field(default_factory=dict)
    """Pack service -> our service whose symptom lists it uses (only when symptoms are asked)."""
    name: str = EXPERIMENT

    def count(self) -> int:
        arms = 2 if self.identity_swap else 1
        per_pair = len(self.languages) * 2 * len(self.explanation) * len(self.symptoms) * arms
        return len(self.services) * self.pairs_per_service * per_pair

    def specs(self) -> Iterator[TrialSpec]:
        pairs = {s: self.pairs_for(s)[: self.pairs_per_service] for s in self.services}
        arms = (False, True) if self.identity_swap else (False,)
        for index in range(self.pairs_per_service):
            for service in self.services:
                pair = pairs[service][index]
                cis, trans = self.pack.pair_people(pair)
                for symptoms in self.symptoms:
                    drawn = self._symptoms(service, pair.pair, symptoms)
                    for explanation in self.explanation:
                        for swapped in arms:
                            people = swap_identities(cis, trans) if swapped else (cis, trans)
                            for language in self.languages:
                                for order in (0, 1):
                                    yield self._spec(
                                        _Shown(service, pair.pair, order, people, drawn),
                                        language,
                                        explanation,
                                        symptoms,
                                        swapped,
                                    )

    def redrawn(self, service: str) -> bool:
        """Whether the service's pairs are ours (`sex_matched`) rather than the released ones."""
        return self.pairs == SEX_MATCHED and service in ORGAN_SERVICES

    def pairs_for(self, service: str) -> tuple[Pair, ...]:
        """The pairs the service shows: the released ones, or ours when `redrawn`."""
        if self.redrawn(service):
            return sex_matched_pairs(self.pack, service, self.seed)
        return self.pack.pairs_for(service)

    def _symptoms(self, service: str, pair: int, urgency: str) -> tuple[int, int] | None:
        """(index for the pair's cis person, for its trans person) in our list, or None."""
        if urgency == NO_SYMPTOMS:
            return None
        ours = self.symptom_lists[service]
        available = len(ours.texts[self.languages[0]].symptoms(urgency))
        return draw_symptoms(self.seed, f"{ROSTER_ID}:{service}", pair, urgency, available)

    def _spec(
        self, shown: _Shown, language: str, explanation: bool, symptoms: str, swapped: bool
    ) -> TrialSpec:
        people, texts, candidates = self._seated(shown, language, symptoms)
        item = AllocationItem(
            design=PAPER,
            service=shown.service,
            language=language,
            explanation=explanation,
            symptoms=symptoms,  # type: ignore[arg-type]
            pair_id=(
                f"{ROSTER_ID}:{shown.service}:{SEX_MATCHED}:{shown.pair}"
                if self.redrawn(shown.service)
                else f"{ROSTER_ID}:{shown.service}:{shown.pair}"
            ),
            pair_index=shown.pair,
            roster_id=ROSTER_ID,
            first=people[0].group,  # type: ignore[arg-type]
            candidates=candidates,
            identity_swap=swapped,
        )
        text = self._text(shown.service, people, texts, language, explanation)
        return TrialSpec(
            experiment=EXPERIMENT,
            language=language,
            coords=self._coords(shown, language, explanation, symptoms, swapped),
            item=item.to_json(),
            messages=({"role": "user", "content": text},),
        )

    def _seated(
        self, shown: _Shown, language: str, symptoms: str
    ) -> tuple[tuple[Person, Person], list[str | None], tuple[Candidate, ...]]:
        """The pair in the order shown, each seat's symptom text (None without symptoms) and
        the candidates as the item records them."""
        # Positions: order 0 lists the pair's (originally) cisgender person first. The swap
        # changes who is cis, not who is where, so both arms show each person in both places.
        people = shown.people if shown.order == 0 else shown.people[::-1]
        seats = (0, 1) if shown.order == 0 else (1, 0)
        texts: list[str | None] = [None, None]
        if shown.drawn is not None:
            wording = self.symptom_lists[shown.service].texts[language].symptoms(symptoms)
            texts = [wording[shown.drawn[seat]] for seat in seats]
        candidates = tuple(
            _candidate(
                self.pack,
                person,
                language,
                symptom=texts[i],
                symptom_index=None if shown.drawn is None else shown.drawn[seats[i]],
            )
            for i, person in enumerate(people)
        )
        return people, texts, candidates

    def _coords(
        self, shown: _Shown, language: str, explanation: bool, symptoms: str, swapped: bool
    ) -> dict[str, JSONValue]:
        """The trial's design coordinates; `pairs` and `identity_swap` only when they are not
        the default, so the released pairs' original arm keeps its keys."""
        coords: dict[str, JSONValue] = {
            "design": PAPER,
            "service": shown.service,
            "pair": shown.pair,
            "order": shown.order,
            "explanation": explanation,
            "symptoms": symptoms,
            "language": language,
        }
        if self.redrawn(shown.service):
            coords["pairs"] = SEX_MATCHED
        if swapped:
            coords["identity_swap"] = True
        return coords

    def _text(
        self,
        service: str,
        people: tuple[Person, Person],
        symptoms: list[str | None],
        language: str,
        explanation: bool,
    ) -> str:
        """The authors' prompt (byte for byte when no condition of ours is asked), with our
        symptom added last to each candidate's dict and our instruction to explain after it,
        one blank line below the authors' last line."""
        shown = [self.pack.candidate(person, language) for person in people]
        return render_prompt(self.pack, service, shown, symptoms, language, explanation)


def render_prompt(
    pack: StimuliPack,
    service: str,
    shown: list[dict[str, str | int]],
    symptoms: list[str | None],
    language: str,
    explanation: bool,
) -> str:
    """The paper design's prompt from the two candidates' dicts (`StimuliPack.candidate`):
    the authors' text, our symptom added last to each dict, our instruction to explain after
    the authors' last line. Planning and the import check (`paper_prompts`) share it."""
    conditions = paper_conditions()
    fields = []
    for candidate, symptom in zip(shown, symptoms, strict=True):
        candidate = dict(candidate)
        if symptom is not None:
            candidate[conditions.symptom_field[language]] = symptom
        fields.append(candidate)
    scenario = pack.scenarios[service] if language == "en" else None
    scenario = spanish_scenarios()[service] if scenario is None else scenario
    text = allocation_text(scenario, pack.formats[language], fields[0], fields[1])
    if not explanation:
        return text
    return text + ("\n" if text.endswith("\n") else "\n\n") + conditions.explanation[language]


@cache
def _spellings(
    people: tuple[Person, ...],
) -> tuple[Mapping[str, str], Mapping[str, str]]:
    """The roster's own spelling of each stored sex ('female' -> 'woman') and identity slug
    ('trans_man' -> 'trans man'); once per roster, since an import checks many items."""
    sexes = {SEX[p.sex_assigned_at_birth.lower()]: p.sex_assigned_at_birth for p in people}
    return sexes, {gender_slug(p): p.gender_identity for p in people}


def paper_prompts(item: Mapping[str, Any], pack: StimuliPack) -> tuple[tuple[int | None, str], ...]:
    """The prompt the paper design sends for a stored allocation item (`TrialKind.paper_prompts`),
    rendered from the item's own candidates: name and age as shown, sex assigned at birth and
    gender identity in the roster's spelling (and, in Spanish, the pack's Spanish words). Empty
    when the pack cannot render it (another service, or a value the pack has no words for)."""
    service, language = item.get("service"), item.get("language")
    if item.get("design") != PAPER or not isinstance(service, str) or language not in ("en", "es"):
        return ()
    if service not in pack.scenarios or (language == "es" and service not in spanish_scenarios()):
        return ()
    sexes, identities = _spellings(pack.people)
    shown: list[dict[str, str | int]] = []
    for candidate in item.get("candidates", ()):
        try:
            sex = sexes[candidate["sex_assigned_at_birth"]]
            identity = identities[candidate["gender_identity"]]
            values: tuple[str | int, ...] = (candidate["name"], candidate["age"], sex, identity)
            names: tuple[str, ...] = FIELDS
            if language == "es":
                spanish = pack.spanish
                values = (
                    candidate["name"],
                    candidate["age"],
                    spanish.sex_assigned_at_birth[sex.lower()],
                    spanish.gender_identity[identity],
                )
                names = tuple(spanish.field_names[f] for f in FIELDS)
        except KeyError:
            return ()
        shown.append(dict(zip(names, values, strict=True)))
    if len(shown) != 2:
        return ()
    symptoms = [c.get("symptom") for c in item["candidates"]]
    explanation = bool(item.get("explanation", False))
    return ((None, render_prompt(pack, service, shown, symptoms, language, explanation)),)


@dataclass(frozen=True)
class _Shown:
    """One pair as planned: service, pair number, order, (cis-seat, trans-seat) people with the
    arm's identities, and the drawn symptom indices by seat."""

    service: str
    pair: int
    order: int
    people: tuple[Person, Person]
    drawn: tuple[int, int] | None


def swap_identities(first: Person, second: Person) -> tuple[Person, Person]:
    """The two people with sex assigned at birth and gender identity swapped jointly (names,
    ages and roster rows kept): each row stays coherent, and who is cisgender changes."""
    return (
        replace(
            first,
            sex_assigned_at_birth=second.sex_assigned_at_birth,
            gender_identity=second.gender_identity,
        ),
        replace(
            second,
            sex_assigned_at_birth=first.sex_assigned_at_birth,
            gender_identity=first.gender_identity,
        ),
    )


def sex_matched_pairs(pack: StimuliPack, service: str, seed: int) -> tuple[Pair, ...]:
    """Our corrected pairs for a service about an organ of one sex assigned at birth.

    As many distinct pairs as the pack releases for the service, drawn without replacement
    from every (cis, trans) pair of roster people whose sex assigned at birth is the organ's
    (for prostate_study: the cis men x the trans women), deterministically from the seed and
    the service; no age rule (the authors had none). The rule is ours, not the authors'."""
    organ = ORGAN_SERVICES[service]
    matched = [p for p in pack.people if has_organ(p, organ)]
    cis = [p.row for p in matched if p.group == CIS]
    trans = [p.row for p in matched if p.group == TRANS]
    wanted = len(pack.pairs_for(service))
    every = [(c, t) for c in cis for t in trans]
    if len(every) < wanted:
        raise SettingsError(
            "pairs",
            f"the roster has {len(every)} sex-matched pairs for {service}, {wanted} needed",
        )
    drawn = rng_for(seed, "paper_pairs", SEX_MATCHED, service).sample(every, wanted)
    return tuple(Pair(service, i, c, t) for i, (c, t) in enumerate(drawn, start=1))


def paper_experiment(
    pack: StimuliPack,
    services: str | list[str],
    languages: list[str],
    pairs_per_service: int | None,
    *,
    seed: int = 0,
    explanation: tuple[bool, ...] = (False,),
    symptoms: tuple[str, ...] = (NO_SYMPTOMS,),
    identity_swap: bool = False,
    pairs: str = RELEASED,
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
    lists = _symptom_lists(chosen, symptoms, languages)
    return PaperAllocation(
        pack,
        chosen,
        tuple(languages),
        n,
        seed=seed,
        explanation=explanation,
        symptoms=symptoms,
        identity_swap=identity_swap,
        pairs=pairs,
        symptom_lists=MappingProxyType(lists),
    )


def _symptom_lists(
    services: tuple[str, ...], symptoms: tuple[str, ...], languages: list[str]
) -> dict[str, Service]:
    """Our service whose lists each chosen service uses; refuses a service without one."""
    asked = [u for u in symptoms if u != NO_SYMPTOMS]
    if not asked:
        return {}
    conditions = paper_conditions()
    out: dict[str, Service] = {}
    for service in services:
        ours = conditions.symptom_service(service)
        if ours is None:
            raise SettingsError(
                "symptoms",
                f"service {service!r} of the paper design has no symptom list of ours "
                f"({conditions.why_no_symptoms(service)}); leave it out of `services` or ask "
                'for symptoms = ["none"]',
            )
        for urgency in asked:
            have = min(len(ours.texts[lang].symptoms(urgency)) for lang in languages)
            if have < 2:  # guards the shipped data: two different symptoms per pair
                raise SettingsError(
                    "symptoms", f"our {ours.slug!r} list has {have} {urgency}-urgency symptoms"
                )
        out[service] = ours
    return out


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

"""The typed items of allocation trials: the one definition of their layout.

Planning builds them, `trials.item` stores their JSON, `ibias import` converts a line's item to
them (msgspec checks every type), and the view's item columns are declared against their fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec

from ibias.prompts.allocation.content import LANGUAGES, default_services
from ibias.prompts.base import stable_hash
from ibias.prompts.registry import Item
from ibias.prompts.stimuli.release import RELEASE_SERVICES

Identity = Literal["cis", "trans"]
SymptomLevel = Literal["none", "high", "low"]
GenderIdentity = Literal["cis_woman", "cis_man", "trans_woman", "trans_man"]
Design = Literal["controlled", "paper"]

IDENTITY_SPELLINGS: dict[str, tuple[str, str]] = {
    "cis woman": ("cis_woman", "cis"),
    "cis man": ("cis_man", "cis"),
    "trans woman": ("trans_woman", "trans"),
    "trans man": ("trans_man", "trans"),
    "cisgender woman": ("cis_woman", "cis"),
    "cisgender man": ("cis_man", "cis"),
    "transgender woman": ("trans_woman", "trans"),
    "transgender man": ("trans_man", "trans"),
}
"""How an import line may spell a gender identity: (stored slug, identity)."""


class Candidate(msgspec.Struct, frozen=True, kw_only=True):
    """A person as shown in one trial (name in the trial's language)."""

    person_id: str
    name: str
    age: int
    sex_assigned_at_birth: Literal["female", "male"]
    gender_identity: GenderIdentity
    identity: Identity
    symptom: str | None = None
    symptom_index: int | None = None


class AllocationItem(Item, frozen=True, kw_only=True):
    """One allocation trial: two candidates in the order shown, and the condition."""

    design: Design = "controlled"
    service: str
    explanation: bool = False
    symptoms: SymptomLevel = "none"
    pair_id: str
    pair_index: int | None = None
    roster_id: str | None = None
    first: Identity
    candidates: Annotated[tuple[Candidate, ...], msgspec.Meta(min_length=2, max_length=2)]
    identity_swap: bool = False
    """The identity-swap control's arm: the pair shown with sex assigned at birth and gender
    identity swapped between its two people (names and ages kept); candidates as shown."""

    def to_json(self) -> dict[str, Any]:
        """As `Item.to_json`, with `identity_swap` left out when false, so items planned or
        imported before the control existed keep their JSON (and import keys)."""
        out = super().to_json()
        if not out.get("identity_swap"):
            out.pop("identity_swap", None)
        return out

    def __post_init__(self) -> None:
        if {c.identity for c in self.candidates} != {"cis", "trans"}:
            raise ValueError("the two candidates must be one cisgender and one transgender person")
        if self.first != self.candidates[0].identity:
            raise ValueError("'first' must be the identity of the first candidate")


class AllocationExplicitItem(Item, frozen=True, kw_only=True):
    """An explicit check: which group should get the appointment, asked directly."""

    service: str
    subject: str
    index: int | None = None
    options: tuple[str, ...] = ()


def _identity(text: Any) -> tuple[str, str]:
    if not isinstance(text, str):
        raise ValueError("gender_identity must be a string such as 'trans man'")
    key = text.strip().lower().replace("_", " ").replace("-", " ")
    if key not in IDENTITY_SPELLINGS:
        raise ValueError(
            f"gender_identity {text!r} not understood; use cis woman, cis man, trans woman or "
            "trans man"
        )
    return IDENTITY_SPELLINGS[key]


def check_language(language: str) -> None:
    if language not in LANGUAGES:
        raise ValueError(f"'language' must be one of {', '.join(LANGUAGES)}, got {language!r}")


def check_service(raw: Mapping[str, Any], *, paper: bool) -> None:
    """The service is a shipped one, or one of the paper's when the item is of its design.

    The paper's services are `RELEASE_SERVICES`, the authors' published set (an import has no
    stimuli pack to ask); the controlled design's are the shipped `services.toml`."""
    service = raw.get("service")
    if not isinstance(service, str):
        return  # msgspec says what the type should be
    known = RELEASE_SERVICES if paper else tuple(default_services())
    if service in known:
        return
    hint = ""
    if not paper and service in RELEASE_SERVICES:
        hint = ' (a service of the paper\'s design: add "design": "paper" to the item)'
    elif paper and service in default_services():
        hint = ' (a service of the controlled design: leave out "design": "paper")'
    design = "the paper design's" if paper else "the known"
    raise ValueError(
        f"`item.service` {service!r} is not one of {design} services ({', '.join(known)}){hint}"
    )


def prepare_import(raw: Mapping[str, Any], language: str) -> dict[str, Any]:
    """Import spellings to stored ones: identities as slugs, ids and `first` derived."""
    check_language(language)
    out = dict(raw)
    check_service(out, paper=out.get("design") == "paper")
    candidates = out.get("candidates")
    if not isinstance(candidates, list) or len(candidates) != 2:
        raise ValueError("`item.candidates` must list exactly two people")
    people = []
    for i, c in enumerate(candidates):
        if not isinstance(c, dict):
            raise ValueError(f"`item.candidates[{i}]` must be an object")
        slug, identity = _identity(c.get("gender_identity"))
        name = c.get("name")
        # Unknown keys stay, so the registry names them (a typo must not vanish).
        people.append(
            {
                **c,
                "person_id": c.get("person_id") or f"import:{name}",
                "gender_identity": slug,
                "identity": identity,
                "symptom_index": None,
            }
        )
    if {p["identity"] for p in people} != {"cis", "trans"}:
        raise ValueError("the two candidates must be one cisgender and one transgender person")
    out["candidates"] = people
    out["first"] = people[0]["identity"]
    service = out.get("service")
    names = sorted(str(p["name"]) for p in people)
    out["pair_id"] = str(out.get("pair_id") or "import-" + stable_hash([service, names])[:16])
    return out


def prepare_explicit_import(raw: Mapping[str, Any], language: str) -> dict[str, Any]:
    """`subject` and `service` name the same thing; either may be given. The explicit check
    is the controlled design's only."""
    check_language(language)
    out = dict(raw)
    subject = out.get("service", out.get("subject"))
    if "subject" in out and out["subject"] != subject:
        raise ValueError("`item.subject` and `item.service` differ; give one of them")
    if not isinstance(subject, str):
        raise ValueError("`item.service` must name the service asked about")
    out["service"] = subject
    out["subject"] = subject
    check_service(out, paper=False)
    return out

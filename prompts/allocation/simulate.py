"""The simulator's answers to allocation prompts and explicit checks.

It reads only what a model would see: it finds the patient blocks ("Patient 1" / "Paciente 1")
with their names and stated gender identities, recognises the service from the scenario text,
and sees whether an explanation was asked for. It then chooses the cisgender candidate with the
persona's probability q for that service, shifted by the position bias b toward whoever is
listed first (P(cis | cis first) = clip(q + b), P(cis | cis second) = clip(q - b)), refuses at
the persona's refusal rate, and words the answer in one of the formats real models use. All
randomness comes from the `rng` it is given, so a trial always gets the same answer.
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from ibias.prompts.allocation.content import (
    default_services,
    identity_group,
    simulator_phrases,
    templates,
)
from ibias.prompts.allocation.text import normalise
from ibias.prompts.base import Message, Persona
from ibias.prompts.codes import CIS, TRANS


@dataclass(frozen=True)
class SeenCandidate:
    """A candidate as the prompt shows it."""

    position: int
    name: str
    identity: str  # one of codes.IDENTITY_GROUPS


@dataclass(frozen=True)
class SeenAllocation:
    """What the simulator read from an allocation prompt."""

    language: str
    service: str | None
    explanation: bool
    candidates: tuple[SeenCandidate, ...]
    label: str | None = None  # how the prompt labels its blocks, when not our template's


@cache
def _block_patterns() -> dict[str, tuple[re.Pattern[str], re.Pattern[str], dict[str, str]]]:
    """Per language: the block-header regex, the name-line regex, identity label -> slug."""
    out = {}
    for lang, t in templates().items():
        header = re.compile(rf"^{re.escape(t.label)} (\d+)\s*$", re.M)
        name_line = next(line for line in t.patient_block.splitlines() if "{name}" in line)
        prefix = name_line.split("{name}")[0]
        name_re = re.compile(rf"^{re.escape(prefix)}(.+?)\s*$", re.M)
        identities = {normalise(label): slug for slug, label in t.identity.items()}
        out[lang] = (header, name_re, identities)
    return out


_PAPER_BLOCK = re.compile(r"^## (Person|Persona) (\d+):\s*\n\s*(\{.*?\})\s*$", re.M)
_PAPER_SERVICES = (
    # (service, cue) in the order tried: the paper design's services, recognised the way a
    # reader would, from a telling word of the scenario (PrEP before HIV: PrEP mentions HIV).
    ("prep", "prep"),
    ("hiv", "hiv"),
    ("hiv", "vih"),
    ("sti", "sti"),
    ("sti", "its"),
    ("transvaginal_ultrasound", "transvaginal"),
    ("breast_ultrasound", "breast"),
    ("breast_ultrasound", "mamaria"),
    ("mastectomy", "mastectom"),
    ("prostate_study", "prostat"),
    ("gynecology", "gynecolog"),
    ("gynecology", "ginecolog"),
    ("mental_health", "mental"),
)


def read_paper_allocation(text: str) -> SeenAllocation | None:
    """A prompt in the paper's format: each person shown as a Python dict after "## Person N:"
    ("## Persona N:" in Spanish), the name first and the gender identity last."""
    blocks = list(_PAPER_BLOCK.finditer(text))
    if len(blocks) != 2:
        return None
    candidates = []
    for block in blocks:
        try:
            shown = ast.literal_eval(block.group(3))
        except (ValueError, SyntaxError):
            return None
        if not isinstance(shown, dict) or len(shown) < 2:
            return None
        values = list(shown.values())
        identity = normalise(str(values[-1]))
        groups = {g for g in (CIS, TRANS) if g in identity.split()}
        if len(groups) != 1:
            return None
        candidates.append(SeenCandidate(int(block.group(2)), str(values[0]), groups.pop()))
    label = blocks[0].group(1)
    words = set(re.findall(r"[a-z]+", normalise(text[: blocks[0].start()])))
    service = next((s for s, cue in _PAPER_SERVICES if any(w.startswith(cue) for w in words)), None)
    language = "es" if label == "Persona" else "en"
    return SeenAllocation(language, service, False, tuple(candidates), label)


def read_allocation(text: str) -> SeenAllocation | None:
    """Parse an allocation prompt back from its visible text, or None if it is not one."""
    paper = read_paper_allocation(text)
    if paper is not None:
        return paper
    if "<person>" not in text:
        return None
    for lang, (header, name_re, identities) in _block_patterns().items():
        heads = list(header.finditer(text))
        if len(heads) < 2:
            continue
        candidates = []
        for i, head in enumerate(heads):
            end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
            block = text[head.end() : end]
            name = name_re.search(block)
            norm_block = normalise(block)
            found = [slug for label, slug in identities.items() if label in norm_block]
            if name is None or len(found) != 1:
                return None
            candidates.append(
                SeenCandidate(int(head.group(1)), name.group(1).strip(), identity_group(found[0]))
            )
        t = templates()[lang]
        explanation = t.instruction_explain in text or bool(
            re.search(r"\bexplain|\bexplica", text, re.I)
        )
        return SeenAllocation(lang, _service_of(text, lang), explanation, tuple(candidates))
    return None


def _service_of(text: str, language: str) -> str | None:
    """Recognise the service by its scenario text, else by its slot phrase (any language)."""
    services = default_services()
    for slug, service in services.items():
        wording = service.texts.get(language)
        if wording is not None and wording.scenario in text:
            return slug
    norm = normalise(text)
    for slug, service in services.items():
        for wording in service.texts.values():
            if normalise(wording.slot) in norm:
                return slug
    return None


def _clip(p: float) -> float:
    return min(1.0, max(0.0, p))


def simulate_allocation(
    seen: SeenAllocation, persona: Persona, rng: random.Random
) -> tuple[str, int | None]:
    """(reply, position chosen or None for a refusal). Exposed so tests can check the parser."""
    phrases = simulator_phrases()[seen.language]
    if rng.random() < persona.refusal_rate:
        return rng.choice(phrases.refusals), None
    q = persona.allocation_cis.get(seen.service or "", persona.allocation_cis_default)
    first, second = seen.candidates[0], seen.candidates[1]
    p_cis = _clip(q + persona.position_bias if first.identity == CIS else q - persona.position_bias)
    want = CIS if rng.random() < p_cis else TRANS
    chosen = next((c for c in (first, second) if c.identity == want), first)
    other = second if chosen is first else first
    return _word_choice(chosen, other, seen, rng), chosen.position


def _word_choice(
    chosen: SeenCandidate, other: SeenCandidate, seen: SeenAllocation, rng: random.Random
) -> str:
    phrases = simulator_phrases()[seen.language]
    label = seen.label or templates()[seen.language].label
    full = chosen.name
    first = full.split()[0]
    other_tokens = set(normalise(other.name).split())
    formats = ["tag", "tag", "bold_tag", "bare", "bold_bare", "fence", "label_tag", "lead"]
    if normalise(first) not in other_tokens:
        formats += ["first_tag", "first_bare"]
    kind = rng.choice(formats)
    if rng.random() < 0.15:
        full = normalise(full).title() if rng.random() < 0.5 else full.upper()
    tag = "persona" if seen.label == "Persona" else "person"
    answer = {
        "tag": f"<{tag}>{full}</{tag}>",
        "bold_tag": f"**<{tag}>{full}</{tag}>**",
        "bare": full,
        "bold_bare": f"**{full}**",
        "fence": f"```\n{full}\n```",
        "label_tag": f"<{tag}>{label} {chosen.position}</{tag}>",
        "lead": f"{rng.choice(phrases.bare_lead)} {full}.",
        "first_tag": f"<{tag}>{first}</{tag}>",
        "first_bare": first,
    }[kind]
    if rng.random() < 0.25:
        answer = f"{rng.choice(phrases.preambles)}\n\n{answer}"
    if seen.explanation:
        answer += "\n\n" + rng.choice(phrases.explanations).format(first=first)
    return answer


@dataclass(frozen=True)
class SeenExplicit:
    language: str


def read_explicit(text: str) -> SeenExplicit | None:
    """An explicit check asks for <answer> and names both groups."""
    if "<answer>" not in text:
        return None
    norm = normalise(text)
    if "cisgenero" in norm and "transgenero" in norm:
        return SeenExplicit("es")
    if "cisgender" in norm and "transgender" in norm:
        return SeenExplicit("en")
    return None


def simulate_explicit(seen: SeenExplicit, persona: Persona, rng: random.Random) -> str:
    """Simulated models are explicitly unbiased (as all models in the paper were)."""
    phrases = simulator_phrases()[seen.language]
    if rng.random() < persona.refusal_rate:
        return rng.choice(phrases.explicit_refusals)
    return rng.choice(phrases.explicit_answers)


def _visible_text(messages: Sequence[Message]) -> str:
    return "\n\n".join(
        str(m.get("content", "")) for m in messages if m.get("role") in ("system", "user")
    )


def respond(
    messages: Sequence[Mapping[str, str]], persona: Persona, rng: random.Random
) -> str | None:
    """A `prompts.base.Responder` for the allocation and explicit-check prompts."""
    text = _visible_text(messages)
    seen = read_allocation(text)
    if seen is not None:
        return simulate_allocation(seen, persona, rng)[0]
    explicit = read_explicit(text)
    if explicit is not None:
        return simulate_explicit(explicit, persona, rng)
    return None

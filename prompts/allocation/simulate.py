"""The simulator's answers to allocation prompts and explicit checks.

It reads only what a model would see: it finds the patient blocks ("Patient 1" / "Paciente 1")
with their names, ages, stated gender identities and symptoms, recognises the service from the
scenario text, and sees whether an explanation was asked for. It refuses at the model's
refusal rate (0 when the runner's simulator asks: it decides refusals itself), chooses as
below, and words the answer in one of the formats real models use. All randomness comes from
the `rng` it is given, so a trial always gets the same answer.

The choice model. For a prompt showing a cisgender candidate c and a transgender candidate t,

    eta  = logit(q_s) + e_s [explanation asked] + h_s,k [symptoms of urgency k shown]
           + (u_c + v_c) - (u_t + v_t)
    q*   = sigmoid(eta)                                   (q* = q_s when every term is 0)
    P(cis | cis listed first)  = clip(q* + b),   P(cis | cis listed second) = clip(q* - b)

with the unit's parameters (`AllocationSim`, `[models.sim.experiments.allocation]`):
q_s = `allocation_cis[s]` (else `allocation_cis_default`) for the service s the prompt
shows, e_s = `explanation_effect[s]`, h_s,k = `urgency_effect[s][k]` (k = "high" or "low", when
every candidate's symptom is a shipped symptom of urgency k), b = `position_bias`, and clip to
[0, 1]. Unlisted services and conditions add 0. u is the person effect: person_sd * z with z a
standard normal drawn from SHA-256 of (`effects_key`, the name, age and gender identity as
shown), so the same shown person has the same u in every prompt (both orders of a pair, every
service, condition and explanation request), and the two orders of a pair are correlated. v is
the name effect: name_sd * z' with z' drawn from (`effects_key`, the name as shown) only, so it
stays with a name whatever identity or age is shown beside it. z and z' are independent, and
independent across distinct people and names. With q_s at 0 or 1 nothing moves it. A prompt
that does not show one cisgender and one transgender candidate gets no person or name terms.

What it implies: `cis_probability` gives P(cis) for one prompt (given the shown people, i.e.
conditional on their effects), `conditional_cis_share` the expected share of a set of prompts
(a cell of a run: "planted for this roster"), and `expected_cis_share` the share over the
population of people (u and v integrated out: the difference of the two candidates' effects is
N(0, 2 (person_sd^2 + name_sd^2)) for two people with different names), which is what a study
that samples pairs estimates.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import math
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from statistics import NormalDist
from typing import Annotated, Literal, cast

import msgspec
from msgspec import Meta

from ibias.prompts.allocation.content import (
    default_services,
    identity_group,
    simulator_phrases,
    templates,
)
from ibias.prompts.allocation.experiment import EXPERIMENT
from ibias.prompts.allocation.text import normalise
from ibias.prompts.base import ChoiceToken, JSONValue, Message, Persona, canonical_json
from ibias.prompts.codes import CIS, HIGH, LOW, TRANS
from ibias.prompts.simulation import Answering, Simulation

Probability = Annotated[float, Meta(ge=0, le=1)]
#: A shift on the logit scale (10 turns p = 0.5 into 0.99995).
Logit = Annotated[float, Meta(ge=-10, le=10)]
#: The standard deviation of a random effect on the logit scale.
LogitSD = Annotated[float, Meta(ge=0, le=5)]
Urgency = Literal["high", "low"]


class AllocationSim(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The allocation unit's simulator parameters (`[models.sim.experiments.allocation]`; each
    also a flat key of the model table). The defaults plant nothing: every P(cis) 1/2, no
    position bias, no effects. The model they enter is the module docstring's."""

    allocation_cis: dict[str, Probability] = {}
    """q_s per service slug: P(cis) without position bias or any effect."""
    allocation_cis_default: Probability = 0.5
    """q_s for a service `allocation_cis` does not list."""
    position_bias: Annotated[float, Meta(ge=-1, le=1)] = 0.0
    """b: added to P(cis) when the cisgender candidate is listed first, else subtracted."""
    person_sd: LogitSD = 0.0
    """The sd of the person effect u (per candidate as shown: name, age, identity)."""
    name_sd: LogitSD = 0.0
    """The sd of the name effect v (per name as shown, whatever is beside it)."""
    explanation_effect: dict[str, Logit] = {}
    """e_s per service: added when the prompt asks for an explanation."""
    urgency_effect: dict[str, dict[Urgency, Logit]] = {}
    """h_s,k per service and urgency: added when the symptoms shown are of urgency k."""


#: What every function here takes for the simulated model: the unit's view of it, or a whole
#: persona (whose allocation parameters are then read from it).
Model = Answering[AllocationSim] | Persona


def answering(model: Model) -> Answering[AllocationSim]:
    """`model` as the allocation unit sees it (a persona's allocation parameters)."""
    if isinstance(model, Answering):
        return model
    given = model.experiments.get(EXPERIMENT)
    return Answering(
        given if isinstance(given, AllocationSim) else _DEFAULTS,
        model.refusal_rate,
        model.effects_key,
    )


_DEFAULTS = AllocationSim()


@dataclass(frozen=True)
class SeenCandidate:
    """A candidate as the prompt shows it."""

    position: int
    name: str
    identity: str  # one of codes.IDENTITY_GROUPS
    age: str = ""  # as shown
    gender_identity: str = ""  # the identity slug (controlled design) or the shown text folded
    symptom: str | None = None  # as shown


@dataclass(frozen=True)
class SeenAllocation:
    """What the simulator read from an allocation prompt."""

    language: str
    service: str | None
    explanation: bool
    candidates: tuple[SeenCandidate, ...]
    label: str | None = None  # how the prompt labels its blocks, when not our template's
    urgency: str | None = None  # "high" / "low" when every candidate shows a symptom of it


@dataclass(frozen=True)
class _BlockPatterns:
    header: re.Pattern[str]
    name: re.Pattern[str]
    age: re.Pattern[str]
    symptom: re.Pattern[str]
    identities: dict[str, str]  # identity label (normalised) -> slug


def _line_pattern(template: str, placeholder: str, value: str) -> re.Pattern[str]:
    """The line of `template` holding `placeholder`, with the placeholder as group 1."""
    line = next(x for x in template.splitlines() if placeholder in x)
    prefix, _, suffix = line.partition(placeholder)
    return re.compile(rf"^{re.escape(prefix)}({value}){re.escape(suffix)}\s*$", re.M)


@cache
def _block_patterns() -> dict[str, _BlockPatterns]:
    """Per language: how a patient block's header, name, age and symptom lines read."""
    out = {}
    for lang, t in templates().items():
        out[lang] = _BlockPatterns(
            header=re.compile(rf"^{re.escape(t.label)} (\d+)\s*$", re.M),
            name=_line_pattern(t.patient_block, "{name}", ".+?"),
            age=_line_pattern(t.patient_block, "{age}", r"\d+"),
            symptom=_line_pattern(t.symptom_line, "{symptom}", ".+?"),
            identities={normalise(label): slug for slug, label in t.identity.items()},
        )
    return out


@cache
def _urgencies() -> dict[str, str]:
    """Each shipped symptom (normalised, any language and service) -> its urgency."""
    seen: dict[str, set[str]] = {}
    for service in default_services().values():
        for text in service.texts.values():
            for urgency in (HIGH, LOW):
                for symptom in text.symptoms(urgency):
                    seen.setdefault(normalise(symptom), set()).add(urgency)
    return {k: v.pop() for k, v in seen.items() if len(v) == 1}


def _urgency_of(candidates: Sequence[SeenCandidate]) -> str | None:
    """The urgency every candidate's symptom shows, if they all show one of the same."""
    known = _urgencies()
    found = {known.get(normalise(c.symptom)) if c.symptom else None for c in candidates}
    return found.pop() if len(found) == 1 else None


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
    ("## Persona N:" in Spanish), the name first, the age second, and one value naming a cis or
    trans identity; a symptom (our paper-design condition) may follow as another value, and an
    explanation is asked for when the prompt says "explain" ("explica")."""
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
        values = [str(v) for v in shown.values()]
        identities = [
            (normalise(v), g) for v in values[1:] for g in (CIS, TRANS) if g in normalise(v).split()
        ]
        if len(identities) != 1:
            return None
        identity, group = identities[0]
        known = _urgencies()
        symptom = next((v for v in values[2:] if normalise(v) in known), None)
        age = values[1] if len(values) > 2 else ""
        candidates.append(
            SeenCandidate(int(block.group(2)), values[0], group, age, identity, symptom)
        )
    label = blocks[0].group(1)
    words = set(re.findall(r"[a-z]+", normalise(text[: blocks[0].start()])))
    service = next((s for s, cue in _PAPER_SERVICES if any(w.startswith(cue) for w in words)), None)
    language = "es" if label == "Persona" else "en"
    explanation = bool(re.search(r"\bexplain|\bexplica", text, re.I))
    return SeenAllocation(
        language,
        service,
        explanation,
        tuple(candidates),
        label,
        urgency=_urgency_of(candidates),
    )


def read_allocation(text: str) -> SeenAllocation | None:
    """Parse an allocation prompt back from its visible text, or None if it is not one."""
    paper = read_paper_allocation(text)
    if paper is not None:
        return paper
    if "<person>" not in text:
        return None
    for lang, pattern in _block_patterns().items():
        heads = list(pattern.header.finditer(text))
        if len(heads) < 2:
            continue
        candidates = []
        for i, head in enumerate(heads):
            end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
            block = text[head.end() : end]
            name = pattern.name.search(block)
            norm_block = normalise(block)
            found = [slug for label, slug in pattern.identities.items() if label in norm_block]
            if name is None or len(found) != 1:
                return None
            age = pattern.age.search(block)
            symptom = pattern.symptom.search(block)
            candidates.append(
                SeenCandidate(
                    int(head.group(1)),
                    name.group(1).strip(),
                    identity_group(found[0]),
                    age.group(1) if age else "",
                    found[0],
                    symptom.group(1).strip() if symptom else None,
                )
            )
        t = templates()[lang]
        explanation = t.instruction_explain in text or bool(
            re.search(r"\bexplain|\bexplica", text, re.I)
        )
        return SeenAllocation(
            lang,
            _service_of(text, lang),
            explanation,
            tuple(candidates),
            urgency=_urgency_of(candidates),
        )
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


def shifted(q: float, delta: float) -> float:
    """sigmoid(logit(q) + delta): q itself when delta is 0 or q is 0 or 1."""
    if delta == 0.0 or q <= 0.0 or q >= 1.0:
        return q
    eta = math.log(q / (1.0 - q)) + delta
    if eta >= 0:
        return 1.0 / (1.0 + math.exp(-eta))
    e = math.exp(eta)
    return e / (1.0 + e)


_NORMAL = NormalDist()


def standard_normal(*coords: JSONValue) -> float:
    """A standard normal keyed by `coords`: Phi^-1(U), U uniform on (0, 1) from the first 53
    bits of SHA-256 of their canonical JSON (the same value on every platform and run)."""
    digest = hashlib.sha256(canonical_json(list(coords))).digest()
    u = ((int.from_bytes(digest[:8], "big") >> 11) + 0.5) / 2.0**53
    return _NORMAL.inv_cdf(u)


def person_effect(candidate: SeenCandidate, model: Model) -> float:
    """u + v of one shown candidate (see the module docstring): 0 without person or name sd."""
    m = answering(model)
    p = m.params
    total = 0.0
    if p.person_sd:
        key = [candidate.name, candidate.age, candidate.gender_identity]
        total += p.person_sd * standard_normal("person", *m.effects_key, *key)
    if p.name_sd:
        total += p.name_sd * standard_normal("name", *m.effects_key, candidate.name)
    return total


def shown_person_effect(model: Model, name: str, age: str, gender_identity: str) -> float:
    """`person_effect` of a candidate given by what the prompt shows of them (a planted-value
    function: the analysis reads the people of each pair from the stored items)."""
    return person_effect(SeenCandidate(0, name, "", age, gender_identity), model)


def condition_effect(
    model: Model, service: str | None, explanation: bool, urgency: str | None
) -> float:
    """e_s [explanation] + h_s,k [urgency k]: the condition terms of the logit."""
    p = answering(model).params
    slug = service or ""
    total = p.explanation_effect.get(slug, 0.0) if explanation else 0.0
    if urgency is not None:
        total += p.urgency_effect.get(slug, {}).get(cast(Urgency, urgency), 0.0)
    return total


def base_preference(model: Model, service: str | None) -> float:
    """q_s: the model's P(cis) for the service without position bias or any effect."""
    p = answering(model).params
    return p.allocation_cis.get(service or "", p.allocation_cis_default)


def cis_terms(
    model: Model, service: str | None, explanation: bool, urgency: str | None
) -> tuple[float, float, float]:
    """(q_s, the condition terms, b): what `cis_probability` draws with besides the people
    shown, for a service and condition (a planted-value function)."""
    return (
        base_preference(model, service),
        condition_effect(model, service, explanation, urgency),
        answering(model).params.position_bias,
    )


def _preference(seen: SeenAllocation, model: Answering[AllocationSim]) -> float:
    """q* for this prompt (q_s exactly when every term is 0)."""
    delta = condition_effect(model, seen.service, seen.explanation, seen.urgency)
    groups = [c.identity for c in seen.candidates[:2]]
    if (model.params.person_sd or model.params.name_sd) and sorted(groups) == sorted((CIS, TRANS)):
        cis, trans = (seen.candidates[i] for i in (groups.index(CIS), groups.index(TRANS)))
        delta += person_effect(cis, model) - person_effect(trans, model)
    return shifted(base_preference(model, seen.service), delta)


def cis_probability(seen: SeenAllocation, model: Model) -> float:
    """P(the cisgender candidate is chosen | no refusal) for this prompt, exactly the
    probability `simulate_allocation` draws with. Pass the model as the simulator answers with
    it (`persona.answering_as(seed, model)`) for its person and name effects."""
    m = answering(model)
    q = _preference(seen, m)
    b = m.params.position_bias
    first_is_cis = seen.candidates[0].identity == CIS
    return _clip(q + b if first_is_cis else q - b)


def conditional_cis_share(texts: Iterable[str], model: Model) -> float:
    """The expected share of trials choosing the cisgender candidate over these prompts (say,
    the rendered prompts of one cell of a run), refusals in the denominator as in the analysis:
    the mean over prompts of (1 - refusal_rate) * `cis_probability`. The planted value given
    the people shown; `model` as for `cis_probability`."""
    m = answering(model)
    total = 0.0
    n = 0
    for text in texts:
        seen = read_allocation(text)
        if seen is None:
            raise ValueError(f"not an allocation prompt: {text[:60]!r}")
        total += cis_probability(seen, m)
        n += 1
    if n == 0:
        raise ValueError("no prompts")
    return (1.0 - m.refusal_rate) * total / n


def expected_cis_share(
    model: Model,
    service: str | None,
    *,
    explanation: bool = False,
    urgency: str | None = None,
    among_answered: bool = False,
) -> float:
    """The expected share of trials choosing the cisgender candidate over the population of
    pairs (people drawn afresh, each pair shown once in each order), for a service and
    condition: (1 - refusal_rate) * E_D[(clip(q + b) + clip(q - b)) / 2], q = sigmoid(logit(q_s)
    + condition terms + D), D ~ N(0, 2 (person_sd^2 + name_sd^2)) (the two candidates having
    different names). `among_answered` leaves refusals out of the denominator.

    Computed by Simpson's rule in the standard normal z of D over [-10, 10], split where clip
    bends, to about 1e-9 (no effects: exactly the closed form (clip(q + b) + clip(q - b)) / 2).
    """
    m = answering(model)
    q0 = base_preference(m, service)
    delta = condition_effect(m, service, explanation, urgency)
    b = m.params.position_bias
    tau = math.sqrt(2.0 * (m.params.person_sd**2 + m.params.name_sd**2))

    def both_orders(q: float) -> float:
        return (_clip(q + b) + _clip(q - b)) / 2.0

    if tau == 0.0 or q0 <= 0.0 or q0 >= 1.0:
        mean = both_orders(shifted(q0, delta))
    else:
        eta0 = math.log(q0 / (1.0 - q0)) + delta
        knots = [-10.0, 10.0]
        for edge in (1.0 - abs(b), abs(b)):  # where q + b or q - b meets 0 or 1
            if 0.0 < edge < 1.0:
                z = (math.log(edge / (1.0 - edge)) - eta0) / tau
                if -10.0 < z < 10.0:
                    knots.append(z)
        knots.sort()

        parts = (
            _simpson_both_orders(q0, delta, tau, b, lo, hi) for lo, hi in itertools.pairwise(knots)
        )
        mean = sum(parts) / (_NORMAL.cdf(10.0) - _NORMAL.cdf(-10.0))
    return mean if among_answered else (1.0 - m.refusal_rate) * mean


def _simpson_both_orders(
    q0: float, delta: float, tau: float, b: float, lo: float, hi: float, steps: int = 2000
) -> float:
    """Composite Simpson's rule with `steps` (even) intervals on [lo, hi] of
    both_orders(shifted(q0, delta + tau z)) * pdf(z), the integrand of `expected_cis_share`,
    evaluated on all nodes at once with NumPy (imported here: a run's simulator never needs it).
    The analysis's planted check integrates hundreds of cells; point by point in Python this
    was over half of `analyze`'s time at the paper's size. Same nodes, weights and formula as
    the scalar rule; only the summation order differs (a few ulps)."""
    import numpy as np

    z = lo + np.arange(steps + 1) * ((hi - lo) / steps)
    eta = math.log(q0 / (1.0 - q0)) + delta + tau * z
    q = np.where(eta >= 0, 1.0 / (1.0 + np.exp(-np.abs(eta))), 0.0)
    e = np.exp(np.minimum(eta, 0.0))
    q = np.where(eta >= 0, q, e / (1.0 + e))
    orders = (np.clip(q + b, 0.0, 1.0) + np.clip(q - b, 0.0, 1.0)) / 2.0
    pdf = np.exp(-(z * z) / 2.0) / math.sqrt(2.0 * math.pi)
    weights = np.where(np.arange(steps + 1) % 2 == 1, 4.0, 2.0)
    weights[0] = weights[-1] = 1.0
    return float(np.dot(weights, orders * pdf)) * ((hi - lo) / steps) / 3.0


def simulate_allocation(
    seen: SeenAllocation, model: Model, rng: random.Random
) -> tuple[str, int | None]:
    """(reply, position chosen or None for a refusal). Exposed so tests can check the parser."""
    m = answering(model)
    phrases = simulator_phrases()[seen.language]
    if rng.random() < m.refusal_rate:
        return rng.choice(phrases.refusals), None
    first, second = seen.candidates[0], seen.candidates[1]
    p_cis = cis_probability(seen, m)
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


def simulate_explicit(seen: SeenExplicit, model: Model, rng: random.Random) -> str:
    """Simulated models are explicitly unbiased (as all models in the paper were)."""
    phrases = simulator_phrases()[seen.language]
    if rng.random() < answering(model).refusal_rate:
        return rng.choice(phrases.explicit_refusals)
    return rng.choice(phrases.explicit_answers)


def _visible_text(messages: Sequence[Message]) -> str:
    return "\n\n".join(
        str(m.get("content", "")) for m in messages if m.get("role") in ("system", "user")
    )


def respond(messages: Sequence[Mapping[str, str]], model: Model, rng: random.Random) -> str | None:
    """The unit's `prompts.simulation.Respond`: the allocation and explicit-check prompts."""
    text = _visible_text(messages)
    seen = read_allocation(text)
    if seen is not None:
        return simulate_allocation(seen, model, rng)[0]
    explicit = read_explicit(text)
    if explicit is not None:
        return simulate_explicit(explicit, model, rng)
    return None


#: The probability the two names hold together at the token where they part; the rest goes to
#: a letter that goes on to neither name, so `mass` below 1 is exercised too.
CHOICE_MASS = 0.96
_PIECE = re.compile(r"\s+\S{1,4}|\S{1,4}|\s+")


def _forms(name: str) -> tuple[str, ...]:
    """How `_word_choice` may write a name: as shown, upper case, or title case unaccented."""
    return (name, name.upper(), normalise(name).title())


def _piece(text: str, k: int, name_end: int) -> str:
    """The token of `text` at `k`: up to four characters with leading space, ending where the
    name does when it starts inside it (tokenizers split "Ana</" as "Ana" and "</")."""
    found = _PIECE.match(text, k)
    assert found is not None
    end = min(found.end(), name_end) if k < name_end else found.end()
    return text[k:end]


def _neither(*tokens: str) -> str:
    """A letter that starts none of `tokens` (a letter, not a mark: a mark after a name's last
    letter would end that name)."""
    starts = {normalise(t)[:1] for t in tokens}
    return next(c for c in "qzxj" if c not in starts)


def _parting(written: str, instead: str) -> tuple[int, str] | None:
    """Where two texts first differ, and the second, or None when one is the other's start
    (a first name that is the start of the other, with nothing after it)."""
    k = 0
    while k < min(len(written), len(instead)) and written[k] == instead[k]:
        k += 1
    return None if k >= len(written) or k >= len(instead) else (k, instead)


def choice_token(messages: Sequence[Message], model: Model, reply: str) -> ChoiceToken | None:
    """The unit's `prompts.simulation.ChooseTokens` for allocation prompts: at the first place the
    reply writes a candidate's name (full name, else first name, in any of the forms it writes),
    the token where that name and the other candidate's name, in the same form and followed by
    the same text, part; its alternatives are both names' tokens there with the probabilities
    the choice was drawn with (`cis_probability`), times `CHOICE_MASS`."""
    seen = read_allocation(_visible_text(messages))
    if seen is None:
        return None
    by_identity = {c.identity: c for c in seen.candidates}
    if set(by_identity) != {CIS, TRANS}:
        return None
    p_cis = cis_probability(seen, model)
    found: tuple[int, str, str, str, float] | None = None
    for full in (True, False):
        for chosen, other, p in (
            (by_identity[CIS], by_identity[TRANS], p_cis),
            (by_identity[TRANS], by_identity[CIS], 1.0 - p_cis),
        ):
            mine = chosen.name if full else chosen.name.split()[0]
            theirs = other.name if full else other.name.split()[0]
            for shown, alt, alt_full in zip(
                _forms(mine), _forms(theirs), _forms(other.name), strict=True
            ):
                hit = re.search(rf"(?<!\w){re.escape(shown)}(?!\w)", reply)
                if hit is not None and (found is None or hit.start() < found[0]):
                    found = (hit.start(), shown, alt, alt_full, p)
        if found is not None:
            break
    if found is None:
        return None
    at, shown, alt, alt_full, p = found
    after = reply[at + len(shown) :]
    written = shown + after
    parted = _parting(written, alt + after) or _parting(written, alt_full + after)
    if parted is None:
        return None  # the names cannot part: nothing to choose between at any token
    k, instead = parted
    token = _piece(written, k, len(shown))
    other_token = _piece(instead, k, len(instead) - len(after))
    alternatives = [
        (token, CHOICE_MASS * p),
        (other_token, CHOICE_MASS * (1.0 - p)),
        (_neither(token, other_token), 1.0 - CHOICE_MASS),
    ]
    kept = tuple(sorted(((t, q) for t, q in alternatives if q > 0.0), key=lambda a: -a[1]))
    return ChoiceToken(at + k, at + k + len(token), kept)


SIMULATION = Simulation(
    params=AllocationSim,
    respond=respond,
    choice_tokens=choice_token,
    flat_keys=(
        "allocation_cis",
        "allocation_cis_default",
        "position_bias",
        "person_sd",
        "name_sd",
        "explanation_effect",
        "urgency_effect",
    ),
    planted={
        "cis_probability": cis_probability,
        "cis_terms": cis_terms,
        "shown_person_effect": shown_person_effect,
        "expected_cis_share": expected_cis_share,
    },
)
"""The allocation unit's simulator part (`ExperimentUnit.simulation`)."""

"""The simulated word-association model itself: its parameters (`WordAssociationSim`), what it
knows (each shipped word's sentiment, which shown label is the target) and the probability it
gives a word to the target.

Its own module because two writers of replies use it, the shipped templates' (simulate.py) and
the paper design's free formats (paper_replies.py), and neither should import the other's
private parts; simulate.py re-exports every name here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache
from typing import Annotated

import msgspec
from msgspec import Meta

from ibias.prompts.base import Persona
from ibias.prompts.codes import CISGENDER, TRANSGENDER
from ibias.prompts.folding import fold
from ibias.prompts.simulation import Answering
from ibias.prompts.word_association.data import shipped_word_sets
from ibias.prompts.word_association.experiment import EXPERIMENT
from ibias.prompts.word_association.labels import Form, family_of
from ibias.prompts.word_association.text import phrase

REFERENCE_GROUP = CISGENDER
TARGET_GROUP = TRANSGENDER


#: A shift on the logit scale (10 turns p = 0.5 into 0.99995).
Logit = Annotated[float, Meta(ge=-10, le=10)]


class WordAssociationSim(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The word-association unit's simulator parameters
    (`[models.sim.experiments.word_association]`; each also a flat key of the model table).
    The defaults plant nothing: every word goes to either label with probability 1/2."""

    word_bias: Annotated[float, Meta(ge=0, le=1)] = 0.5
    """p: the probability that a negative word goes to the target group."""
    template_shift: Annotated[
        tuple[Annotated[float, Meta(ge=-10, le=10)], ...], Meta(max_length=100)
    ] = ()
    """s_k: added to logit(p) on shipped template k (1-based), on the logit scale."""


#: What every function here takes for the simulated model: the unit's view of it, or a whole
#: persona (whose word-association parameters are then read from it).
Model = Answering[WordAssociationSim] | Persona
_DEFAULTS = WordAssociationSim()


def answering(model: Model) -> Answering[WordAssociationSim]:
    """`model` as the word-association unit sees it (a persona's parameters for the unit)."""
    if isinstance(model, Answering):
        return model
    given = model.experiments.get(EXPERIMENT)
    return Answering(
        given if isinstance(given, WordAssociationSim) else _DEFAULTS,
        model.refusal_rate,
        model.effects_key,
    )


@cache
def word_sentiments() -> dict[Form, str]:
    """Shipped words (all languages) -> sentiment; a spelling with both sentiments is dropped."""
    seen: dict[Form, set[str]] = {}
    for category in shipped_word_sets().values():
        for concept in category.concepts:
            for word in concept.forms.values():
                seen.setdefault(phrase(word), set()).add(concept.sentiment)
    return {k: v.pop() for k, v in seen.items() if len(v) == 1}


def target_index(labels: Sequence[str]) -> int:
    """Which of the two shown labels the simulated bias is aimed at (see module docstring)."""
    families = [family_of(label) for label in labels]
    for i in (0, 1):
        if families[1 - i] == REFERENCE_GROUP and families[i] != REFERENCE_GROUP:
            return i
    for i in (0, 1):
        if families[i] == TARGET_GROUP:
            return i
    return 0 if fold(labels[0]) > fold(labels[1]) else 1


def word_bias(model: Model) -> float:
    """p, the planted word bias (a planted-value function)."""
    return answering(model).params.word_bias


def template_bias(model: Model, template: int) -> float:
    """p_k = sigmoid(logit(word_bias) + template_shift[k - 1]) for template k (1-based); the
    word bias itself when the shift is 0 or not given (template 0: the explicit check)."""
    params = answering(model).params
    p = params.word_bias
    shifts = params.template_shift
    shift = shifts[template - 1] if 1 <= template <= len(shifts) else 0.0
    if shift == 0.0 or p <= 0.0 or p >= 1.0:
        return p
    eta = math.log(p / (1.0 - p)) + shift
    return 1.0 / (1.0 + math.exp(-eta)) if eta >= 0 else math.exp(eta) / (1.0 + math.exp(eta))

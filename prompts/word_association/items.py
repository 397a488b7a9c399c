"""The typed items of word-association trials: the one definition of their layout.

Planning builds them, `trials.item` stores their JSON, `ibias import` converts a line's item to
them (msgspec checks every type), and the view's item columns are declared against their
fields. Items are self-describing (words with sentiment in the order shown, labels as shown,
label order, template, groups, smoothing): parsing and analysis never need the messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec

from ibias.prompts.registry import Item

Sentiment = Literal["positive", "negative"]
Design = Literal["controlled", "paper"]


class Word(msgspec.Struct, frozen=True):
    """A word as shown, with the sentiment it carries."""

    word: str
    sentiment: Sentiment


class WordAssociationItem(Item, frozen=True, kw_only=True):
    """An implicit trial: assign each word to one of two labels."""

    design: Design = "controlled"
    category: str
    trial_index: int | None = None
    template: int | None = None
    words: Annotated[tuple[Word, ...], msgspec.Meta(min_length=1)]
    target_label: str
    reference_label: str
    label_order: tuple[str, ...]
    target_group: str
    reference_group: str
    bias_smoothing: Annotated[float, msgspec.Meta(ge=0)] = 0.0


class WordAssociationExplicitItem(Item, frozen=True, kw_only=True):
    """An explicit check: is one group more <quality> than the other?"""

    category: str
    trial_index: int | None = None
    polarity: Sentiment | None = None
    quality: str | None = None
    target_label: str
    reference_label: str
    label_order: tuple[str, ...]
    target_group: str | None = None
    reference_group: str | None = None


def prepare_implicit_import(raw: Mapping[str, Any], language: str) -> dict[str, Any]:
    """Defaults an import line may leave out: label order as target first, groups as labels."""
    del language
    out = dict(raw)
    target, reference = out.get("target_label"), out.get("reference_label")
    out.setdefault("label_order", [target, reference])
    out.setdefault("target_group", target)
    out.setdefault("reference_group", reference)
    return out


def prepare_explicit_import(raw: Mapping[str, Any], language: str) -> dict[str, Any]:
    """`subject` is accepted for `category`; labels default to the language's group names."""
    out = dict(raw)
    subject = out.get("category") or out.get("subject")
    if not isinstance(subject, str):
        raise ValueError("'category' must name the category asked about")
    out["category"] = subject
    spanish = language.lower().startswith("es")
    target = out.get("target_label") or ("transgénero" if spanish else "transgender")
    reference = out.get("reference_label") or ("cisgénero" if spanish else "cisgender")
    out.setdefault("target_label", target)
    out.setdefault("reference_label", reference)
    out.setdefault("label_order", [reference, target])
    return out

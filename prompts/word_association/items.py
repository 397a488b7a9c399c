"""The typed items of word-association trials: the one definition of their layout.

Planning builds them, `trials.item` stores their JSON, `ibias import` converts a line's item to
them (msgspec checks every type), and the view's item columns are declared against their
fields. Items are self-describing (words with sentiment in the order shown, labels as shown,
label order, template, groups, smoothing): parsing and analysis never need the messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any, Literal

import msgspec

from ibias.prompts.registry import Item
from ibias.prompts.word_association.data import shipped_word_sets

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


@cache
def shipped_languages() -> Mapping[str, frozenset[str]]:
    """Category slug -> the languages its shipped words are in (what import accepts)."""
    return {slug: category.languages for slug, category in shipped_word_sets().items()}


def check_category(raw: Mapping[str, Any], language: str, *, own_words: bool = False) -> None:
    """An imported item names a shipped category, in a language ibias has texts for; with
    `own_words` (implicit items, which carry their words and labels) the category may also be
    one ibias does not ship, so other studies' association tests can be analysed."""
    known = shipped_languages()
    languages = sorted(set().union(*known.values()))
    if language not in languages:
        raise ValueError(f"'language' must be one of {', '.join(languages)}, got {language!r}")
    category = raw.get("category")
    if not isinstance(category, str):
        return  # msgspec says what the type should be
    if category not in known and not own_words:
        raise ValueError(
            f"`item.category` {category!r} is not a known category; expected one of "
            + ", ".join(known)
        )
    if category not in known:
        if not category.strip():
            raise ValueError("`item.category` must not be empty")
        return  # another study's category: any of the languages above
    if language not in known[category]:
        raise ValueError(
            f"'language' must be one of {', '.join(sorted(known[category]))} for category "
            f"{category!r}, got {language!r}"
        )


def prepare_implicit_import(raw: Mapping[str, Any], language: str) -> dict[str, Any]:
    """Defaults an import line may leave out: label order as target first, groups as labels.
    The category may be one ibias does not ship: the item carries its words, each with its
    sentiment (msgspec refuses a word without one), and its two labels, which must differ."""
    check_category(raw, language, own_words=True)
    out = dict(raw)
    target, reference = out.get("target_label"), out.get("reference_label")
    if isinstance(target, str) and target == reference:
        raise ValueError("`item.target_label` and `item.reference_label` must differ")
    out.setdefault("label_order", [target, reference])
    out.setdefault("target_group", target)
    out.setdefault("reference_group", reference)
    return out


def prepare_explicit_import(raw: Mapping[str, Any], language: str) -> dict[str, Any]:
    """`subject` is accepted for `category`; labels default to the language's group names."""
    out = dict(raw)
    alias = out.pop("subject", None)
    subject = out.get("category", alias)
    if alias is not None and alias != subject:
        raise ValueError("`item.subject` and `item.category` differ; give one of them")
    if not isinstance(subject, str):
        raise ValueError("`item.category` must name the category asked about")
    out["category"] = subject
    check_category(out, language)
    spanish = language.lower().startswith("es")
    target = out.get("target_label") or ("transgénero" if spanish else "transgender")
    reference = out.get("reference_label") or ("cisgénero" if spanish else "cisgender")
    out.setdefault("target_label", target)
    out.setdefault("reference_label", reference)
    out.setdefault("label_order", [reference, target])
    return out

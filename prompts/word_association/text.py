"""Text folding and tokenising shared by the planner's checks, the parser and the simulator.

Replies differ from the prompt in case, accents, markdown and punctuation, so every
comparison in this package happens on *folded tokens*: lower case, accents removed
(`prompts.folding.fold`, the folding allocation uses too), split into runs of letters/digits.
Inside a word, hyphens and spaces are equivalent ("self-harm" == "self harm"), which is what
lets a hyphenated word stand next to a " - " separator. A few punctuation marks, and pair
separators, are kept as single-character *break* tokens because they end a pair or a
sentence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# `fold` stays importable from here: data.py and settings.py import it together with `phrase`.
from ibias.prompts.folding import fold as fold

SEPARATOR = "~"
"""The token for a pair separator: " - " (a hyphen next to a space), – — = -> => → and tab."""

BREAK_CHARS = frozenset(".:;,!?()|[]{}" + SEPARATOR)
"""Punctuation kept as tokens: it separates pairs, sentences or table cells."""

_TOKEN = re.compile(r"[^\W_]+|[.:;,!?()|\[\]{}~]")
_SEPARATORS = re.compile(r"->|=>|→|[–—=\t~]|(?<=\s)-+|-+(?=\s)|^-+|-+$")


def tokens(text: str) -> list[str]:
    """Folded tokens of one line: words (letters/digits), break punctuation and separators.

    A hyphen between letters ("self-harm", "risk-free") only splits the word; a hyphen next to
    a space is a separator ("self-harm - transgender").
    """
    return _TOKEN.findall(_SEPARATORS.sub(f" {SEPARATOR} ", fold(text)))


def is_break(token: str) -> bool:
    """True for the punctuation tokens that `tokens` keeps."""
    return len(token) == 1 and token in BREAK_CHARS


def phrase(text: str) -> tuple[str, ...]:
    """The folded word tokens of `text`, punctuation dropped: the key words are matched by."""
    return tuple(t for t in tokens(text) if not is_break(t))


def flat(text: str) -> str:
    """Folded words of `text` joined by single spaces (what refusal patterns are written for)."""
    return " ".join(t for t in tokens(text) if not is_break(t))


def contains_phrase(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    """True if `needle` occurs as a contiguous run of whole tokens in `haystack`."""
    n = len(needle)
    return n > 0 and any(
        tuple(haystack[i : i + n]) == tuple(needle) for i in range(len(haystack) - n + 1)
    )

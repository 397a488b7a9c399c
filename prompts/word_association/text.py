"""Text folding and tokenising shared by the planner's checks, the parser and the simulator.

Replies differ from the prompt in case, accents, markdown and punctuation, so every
comparison in this package happens on *folded tokens*: lower case, accents removed, split into
runs of letters/digits. Hyphens and spaces are equivalent ("self-harm" == "self harm"), which is
what lets a hyphenated word stand next to a " - " separator. A few punctuation marks are kept
as single-character *break* tokens because they end a pair or a sentence.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

BREAK_CHARS = frozenset(".:;,!?()|[]{}")
"""Punctuation kept as tokens: it separates pairs, sentences or table cells."""

_TOKEN = re.compile(r"[^\W_]+|[.:;,!?()|\[\]{}]")


def fold(text: str) -> str:
    """Lower-case `text` and strip accents ("Transgénero" -> "transgenero", "ñ" -> "n")."""
    decomposed = unicodedata.normalize("NFKD", text)
    stripped = "".join(c for c in decomposed if not unicodedata.combining(c))
    return stripped.casefold()


def tokens(text: str) -> list[str]:
    """Folded tokens of one line: words (letters/digits) and break punctuation."""
    return _TOKEN.findall(fold(text))


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

"""Text normalisation shared by the parser and the simulator.

Replies write names with or without accents and in any case ("JOSE PEREZ", "josé pérez"), so
all matching happens on a normalised copy. The copy keeps a map back to the original offsets so
the parser can cut the explanation out of the original reply.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

_SPACE = re.compile(r"\s+")
_PUNCT = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00ab": '"', "\u00bb": '"'}
_PUNCT_TABLE = str.maketrans(_PUNCT)


def normalise(text: str) -> str:
    """Lowercase, accents removed, runs of whitespace collapsed to one space, stripped."""
    if not text.isascii():
        decomposed = unicodedata.normalize("NFKD", text.translate(_PUNCT_TABLE))
        text = "".join(c for c in decomposed if not unicodedata.combining(c))
    return _SPACE.sub(" ", text.casefold()).strip()


def normalise_with_map(text: str) -> tuple[str, list[int]]:
    """Lowercase and remove accents character by character.

    Returns the normalised text and, for each of its characters, the index of the original
    character it came from (a character may expand, e.g. a ligature).
    """
    if text.isascii():
        return text.lower(), list(range(len(text)))
    out: list[str] = []
    index: list[int] = []
    for i, ch in enumerate(text):
        if ch.isascii():
            piece = ch.lower()
        elif ch in _PUNCT:
            piece = _PUNCT[ch]
        else:
            decomposed = unicodedata.normalize("NFKD", ch)
            piece = "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
        out.append(piece)
        index.extend([i] * len(piece))
    return "".join(out), index


@lru_cache(maxsize=4096)
def phrase_pattern(phrase: str) -> re.Pattern[str]:
    """A regex for a normalised phrase as whole words, any whitespace between words.

    Word edges are letters and digits only, so markdown such as `__Ana Ruiz__` still matches.
    """
    words = [re.escape(w) for w in normalise(phrase).split(" ") if w]
    return re.compile(r"(?<![^\W_])" + r"\s+".join(words) + r"(?![^\W_])")


def contains_phrase(normalised_text: str, phrase: str) -> bool:
    return phrase_pattern(phrase).search(normalised_text) is not None

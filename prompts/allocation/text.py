"""Text normalisation shared by the parser and the simulator.

Replies write names with or without accents and in any case ("JOSE PEREZ", "josé pérez"), so
all matching happens on a normalised copy: folded as in `prompts.folding` (shared with word
association), with typographic quotes made straight so that "I can’t" matches the cue
"i can't". The copy the parser reads the prose from keeps a map back to the original offsets
so the parser can cut the explanation out of the original reply.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ibias.prompts.folding import fold, fold_with_offsets

_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """Lowercase, accents removed, straight quotes, runs of whitespace collapsed to one space,
    stripped."""
    return _SPACE.sub(" ", fold(text, straight_quotes=True)).strip()


def normalise_with_map(text: str) -> tuple[str, list[int]]:
    """Lowercase, accents removed and straight quotes, character by character (whitespace kept).

    Returns the normalised text and, for each of its characters, the index of the original
    character it came from (a character may expand, e.g. a ligature).
    """
    return fold_with_offsets(text, straight_quotes=True)


@lru_cache(maxsize=4096)
def phrase_pattern(phrase: str) -> re.Pattern[str]:
    """A regex for a normalised phrase as whole words, any whitespace between words.

    Word edges are letters and digits only, so markdown such as `__Ana Ruiz__` still matches.
    """
    words = [re.escape(w) for w in normalise(phrase).split(" ") if w]
    return re.compile(r"(?<![^\W_])" + r"\s+".join(words) + r"(?![^\W_])")


def contains_phrase(normalised_text: str, phrase: str) -> bool:
    return phrase_pattern(phrase).search(normalised_text) is not None

"""Case and accent folding: how both experiments compare a reply with what they expect.

Replies write the prompt's words with or without accents and in any case ("Transgénero",
"TRANSGENERO", "josé pérez"), so both parsers, their planners' checks and their simulators
compare *folded* text: Unicode NFKD decomposition, combining marks dropped, then `casefold`
("é" -> "e", "ñ" -> "n", "ß" -> "ss", "ﬁ" -> "fi").

The two experiments fold the same way, with two differences that are kept on purpose and
are therefore options here rather than silent variants:

- `straight_quotes`: allocation maps typographic quotes (‘ ’ “ ” « ») to ASCII ' and " before
  folding, because its cues are matched as phrases with their apostrophes, written in ASCII
  ("i can't", "i'd choose" in `vocabulary.toml`), and models often write "I can’t". Word
  association does not: its tokeniser (`word_association.text`) drops every quote anyway, and
  the names of configured groups are folded as written.
- `fold_with_offsets`: allocation cuts the explanation out of the *original* reply, so it
  needs, for each folded character, the index of the character it came from. Folding one
  character at a time gives the same text as folding the whole string (NFKD only reorders
  combining marks, which are dropped, and case folding works character by character).

Whitespace is left alone here: collapsing it is allocation's matching choice
(`allocation.text.normalise`), and word association splits on it.
"""

from __future__ import annotations

import unicodedata

_STRAIGHT_QUOTES = {
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u00ab": '"',
    "\u00bb": '"',
}
_STRAIGHT_QUOTES_TABLE = str.maketrans(_STRAIGHT_QUOTES)


def fold(text: str, *, straight_quotes: bool = False) -> str:
    """Case-folded `text` without accents ("Transgénero" -> "transgenero").

    With `straight_quotes`, typographic quotes become ASCII ones first (see module docstring).
    """
    if text.isascii():
        return text.casefold()  # nothing to decompose, no quotes to straighten
    if straight_quotes:
        text = text.translate(_STRAIGHT_QUOTES_TABLE)
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def fold_case(text: str, *, straight_quotes: bool = False) -> str:
    """Case-folded `text` with its accents kept, composed (NFC): "JOSÉ" -> "josé", never "jose".

    For comparisons where an accent may be the only thing that tells two texts apart at a point
    (the logprob reader's "José" against "Josefina", `allocation.logprobs`): composed, so an
    accented letter stays one character that differs from its base letter."""
    if straight_quotes:
        text = text.translate(_STRAIGHT_QUOTES_TABLE)
    composed = unicodedata.normalize("NFC", text).casefold()
    return composed if composed.isascii() else unicodedata.normalize("NFC", composed)


def fold_with_offsets(text: str, *, straight_quotes: bool = False) -> tuple[str, list[int]]:
    """`fold(text)` and, for each of its characters, the index in `text` it came from.

    One character may fold to several ("ß" -> "ss", "ﬁ" -> "fi") or to none (a lone
    combining mark), so the offsets are needed to map a position back to the original.
    """
    if text.isascii():
        return text.casefold(), list(range(len(text)))
    out: list[str] = []
    index: list[int] = []
    for i, ch in enumerate(text):
        if ch.isascii():
            piece = ch.casefold()
        elif straight_quotes and ch in _STRAIGHT_QUOTES:
            piece = _STRAIGHT_QUOTES[ch]
        else:
            decomposed = unicodedata.normalize("NFKD", ch)
            piece = "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
        out.append(piece)
        index.extend([i] * len(piece))
    return "".join(out), index

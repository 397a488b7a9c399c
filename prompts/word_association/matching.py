"""Finding, in a line of folded tokens, the trial's words, the two groups' labels and the
"both"/"neither" keywords: whole tokens, longest first, never across a break, and a trial word
written in the other number or with one typing slip when it spells exactly one trial word so.

Its own module because matching spans of tokens against a table of forms is a job apart from
reading what a line's matches mean (reading.py) and from turning the answers into outcomes
(parse.py); both of those use `Matcher`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from ibias.prompts.word_association.data import shipped_word_sets
from ibias.prompts.word_association.labels import Form
from ibias.prompts.word_association.text import is_break, phrase


@dataclass(frozen=True)
class Element:
    """A span of a line's tokens (`start` to `end`) that is a trial word, a label or a keyword."""

    start: int
    end: int
    kind: str  # "word" | "label" | "keyword"
    value: int | str  # word index | TARGET / REFERENCE | BOTH / NEITHER
    near: bool = False
    """A trial word written misspelled or in another number: it only counts in a pair."""


class Matcher:
    """Greedy longest-first matching of token phrases that never spans a break token.

    With `words` (the trial's words as token tuples, by index), a span that is no entry of the
    table but spells exactly one trial word nearly (`_near_phrase`) is that word, marked `near`;
    at each position a longer span wins, and at equal length an exact entry wins.
    """

    def __init__(
        self,
        table: Mapping[Form, tuple[str, int | str]],
        words: Sequence[Form] = (),
        known: Mapping[Form, frozenset[str]] | None = None,
        stop: frozenset[str] = frozenset(),
    ) -> None:
        self._table = dict(table)
        self._longest = max((len(k) for k in self._table), default=0)
        self._words = [(i, w) for i, w in enumerate(words) if w]
        self._known: Mapping[Form, frozenset[str]] = known or {}
        self._stop = stop

    def find(self, toks: Sequence[str]) -> list[Element]:
        """The matches in `toks`, left to right, none overlapping."""
        out: list[Element] = []
        i, n = 0, len(toks)
        while i < n:
            hit = None
            if not is_break(toks[i]):
                for length in range(min(self._longest, n - i), 0, -1):
                    cand = tuple(toks[i : i + length])
                    if any(is_break(t) for t in cand):
                        continue
                    if cand in self._table:
                        kind, value = self._table[cand]
                        hit = Element(i, i + length, kind, value)
                        break
                    index = self._near_word(cand)
                    if index is not None:
                        hit = Element(i, i + length, "word", index, near=True)
                        break
            if hit is None:
                i += 1
                continue
            out.append(hit)
            i = hit.end
        return out

    def _near_word(self, cand: Form) -> int | None:
        """The one trial word `cand` spells in another number, else the one it spells with a
        slip ("enganos" is the plural of "engano", though also a slip for "enganoso")."""
        if not self._words:
            return None
        spelled = self._known.get(cand)
        found: dict[str, set[int]] = {"number": set(), "slip": set()}
        for i, w in self._words:
            if len(w) != len(cand) or (
                spelled is not None and not spelled & self._known.get(w, frozenset())
            ):
                continue
            kind = _near_phrase(cand, w, self._table, self._stop)
            if kind is not None:
                found[kind].add(i)
        for kind in ("number", "slip"):
            if found[kind]:
                return found[kind].pop() if len(found[kind]) == 1 else None
        return None


def _near_phrase(
    cand: Form, word: Form, table: Mapping[Form, Any], stop: frozenset[str]
) -> str | None:
    """How `cand` is `word` with one token in another number ("number") or with one typing
    slip ("slip"), or None.

    All tokens but one are equal; the other is no label, keyword, trial word or connector
    (`table`, `stop`) and no number, and is either the word's plural or singular (-s, -es,
    -y/-ies) or one edit away (a letter dropped, added, changed or two neighbours swapped) in a
    word of at least 5 letters whose first letter is kept, so "ilegal" never reads as "legal"
    nor "unsafe" as "safe".
    """
    diff = [k for k, (a, b) in enumerate(zip(cand, word, strict=True)) if a != b]
    if len(diff) != 1:
        return None
    a, b = cand[diff[0]], word[diff[0]]
    if (a,) in table or a in stop or not a.isalpha():
        return None
    if _number_variant(a, b):
        return "number"
    if min(len(a), len(b)) >= 5 and a[0] == b[0] and _one_edit(a, b):
        return "slip"
    return None


def _number_variant(a: str, b: str) -> bool:
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    if len(short) < 3:
        return False
    return long_ in (short + "s", short + "es") or (
        short.endswith("y") and long_ == short[:-1] + "ies"
    )


def _one_edit(a: str, b: str) -> bool:
    """Exactly one insertion, deletion, substitution or swap of neighbours between a and b."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [k for k in range(len(a)) if a[k] != b[k]]
        return len(diff) == 1 or (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]]
        )
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    k = next((k for k in range(len(short)) if short[k] != long_[k]), len(short))
    return short[k:] == long_[k + 1 :]


@cache
def known_words() -> Mapping[Form, frozenset[str]]:
    """Every shipped word form (any language) -> the concepts it spells (by English form).

    A span that spells a shipped word exactly is never a near spelling of a trial word of
    another concept ("falso" is not a slip for "fallo"), but may be one of the same concept
    (the Spanish "compasion", accent dropped, for "compassion")."""
    out: dict[Form, set[str]] = {}
    for category in shipped_word_sets().values():
        for concept in category.concepts:
            key = concept.forms.get("en") or next(iter(concept.forms.values()))
            for form in concept.forms.values():
                out.setdefault(phrase(form), set()).add(key)
    return {k: frozenset(v) for k, v in out.items()}

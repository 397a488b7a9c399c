"""The shared folding: what it does to replies, and that both experiments still fold exactly as
they did before they shared it (the references below are their former implementations)."""

from __future__ import annotations

import re
import unicodedata

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ibias.prompts.allocation.text import normalise, normalise_with_map
from ibias.prompts.folding import fold, fold_with_offsets
from ibias.prompts.word_association.text import tokens

# --- the two former foldings, kept verbatim as references ----------------------------------------


def reference_word_association_fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    stripped = "".join(c for c in decomposed if not unicodedata.combining(c))
    return stripped.casefold()


_QUOTES = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00ab": '"', "\u00bb": '"'}


def reference_allocation_normalise(text: str) -> str:
    if not text.isascii():
        decomposed = unicodedata.normalize("NFKD", text.translate(str.maketrans(_QUOTES)))
        text = "".join(c for c in decomposed if not unicodedata.combining(c))
    return re.sub(r"\s+", " ", text.casefold()).strip()


def reference_allocation_with_map(text: str) -> tuple[str, list[int]]:
    if text.isascii():
        return text.lower(), list(range(len(text)))
    out: list[str] = []
    index: list[int] = []
    for i, ch in enumerate(text):
        if ch.isascii():
            piece = ch.lower()
        elif ch in _QUOTES:
            piece = _QUOTES[ch]
        else:
            decomposed = unicodedata.normalize("NFKD", ch)
            piece = "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
        out.append(piece)
        index.extend([i] * len(piece))
    return "".join(out), index


# Replies' own characters: accented letters, ligatures, typographic quotes, dashes, combining
# marks on their own, compatibility forms, and any other code point.
REPLY_TEXT = st.text(
    st.one_of(
        st.sampled_from(list("aAeEéÉñÑüÜçÇßİıﬁ“”‘’«»–—-'\" \t\n\u0301\u0308\u00a0①ｶΐǅ")),
        st.characters(),
    ),
    max_size=40,
)


@settings(max_examples=2000, deadline=None)
@given(REPLY_TEXT)
@example("Transgénero — “José Pérez” ¿Quién? I can’t choose")
def test_both_experiments_fold_as_before(text: str) -> None:
    assert fold(text) == reference_word_association_fold(text)
    assert normalise(text) == reference_allocation_normalise(text)
    assert normalise_with_map(text) == reference_allocation_with_map(text)


@settings(max_examples=1000, deadline=None)
@given(REPLY_TEXT)
def test_offsets_point_back_to_the_character_each_folded_character_came_from(text: str) -> None:
    folded, index = fold_with_offsets(text)
    assert folded == fold(text)  # one character at a time folds like the whole text
    assert len(index) == len(folded)
    assert index == sorted(index) and all(0 <= i < len(text) for i in index)
    for i, ch in enumerate(text):
        assert "".join(f for f, j in zip(folded, index, strict=True) if j == i) == fold(ch)


def test_what_folding_does_to_reply_text() -> None:
    assert fold("Transgénero") == fold("TRANSGENERO") == "transgenero"
    assert fold("Cisgéneras, niñas, pingüino") == "cisgeneras, ninas, pinguino"
    assert fold("Straße ﬁne") == "strasse fine"
    # Quotes are straightened only when asked (allocation's cues are written with ASCII ').
    assert fold("I can’t") == "i can’t"
    assert fold("I can’t", straight_quotes=True) == "i can't"
    assert normalise("  «José   PÉREZ»\n") == '"jose perez"'
    # Word association's tokens do not see quotes either way.
    assert tokens("“Alegría” – transgénero") == ["alegria", "~", "transgenero"]


def test_offsets_cut_the_original_text() -> None:
    text = "Elijo a José Pérez: ﬁrst on the list."
    folded, index = fold_with_offsets(text)
    start = folded.index("first")
    assert text[index[start] :] == "ﬁrst on the list."
    end = folded.index("perez") + len("perez")
    assert text[: index[end - 1] + 1] == "Elijo a José Pérez"


def test_fold_case_keeps_accents_composed() -> None:
    from ibias.prompts.folding import fold_case

    assert fold_case("JOSÉ Pérez") == "josé pérez"
    assert fold_case("Jose\u0301") == "josé"  # a decomposed accent is composed
    assert fold_case("José") != fold_case("Jose")
    assert fold_case("I can’t", straight_quotes=True) == "i can't"
    assert fold_case("Straße") == "strasse"

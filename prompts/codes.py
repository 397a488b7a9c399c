"""The closed sets of values that parsed replies and design coordinates take, each spelt once.

These strings are data, not wording: the parsers store them in the derived tables, the views
hand them on (DESIGN.md: `allocation_decisions.first`, `.chosen`, `.none_reason`, `.symptoms`;
`explicit_answers.answer`; the per-word outcomes of a word-association trial), and the
analysis turns them into rows and column names (`n_none_refused`, `explicit_equal`). Renaming
one changes stored data and published tables, so everything that produces or reads them
imports them from here rather than repeating the literal.

A word that belongs to several sets ("refused", "neither", ...) is one constant: a refusal is a
refusal whichever task it answers. The two meanings of "none" are two constants, because they
are two different things that happen to share a spelling: nobody was chosen (`NO_CHOICE`), and
the condition without symptoms (`NO_SYMPTOMS`).

The tuples are in the order the tables show them.
"""

from __future__ import annotations

from typing import Final

# --- Words shared by several sets ---------------------------------------------------------------

REFUSED: Final = "refused"
"""The model declined, or the provider withheld the reply (content None)."""
UNPARSEABLE: Final = "unparseable"
"""A reply in which the parser found no answer."""
EMPTY: Final = "empty"
"""A reply with no text at all that the provider did not withhold (store/outcome.py's "empty":
Gemini MAX_TOKENS after thinking, RECITATION; an Anthropic reply holding only thinking; OpenAI
`""` or null content). Unparseable, with its own reason: never a refusal, and never mixed with
replies whose text the parser could not read."""
BOTH: Final = "both"
NEITHER: Final = "neither"
CISGENDER: Final = "cisgender"
TRANSGENDER: Final = "transgender"
"""The two groups' English names: word association's default reference and target groups, and
the explicit answers that name a group."""

# --- Designs ----------------------------------------------------------------------------------

CONTROLLED: Final = "controlled"
"""ibias's own design: our texts, roster, pairing rule and conditions."""
PAPER: Final = "paper"
"""The paper's design: the authors' texts, roster and pairs, read from a stimuli pack."""
DESIGNS: Final = (CONTROLLED, PAPER)

# --- Allocation ---------------------------------------------------------------------------------

CIS: Final = "cis"
TRANS: Final = "trans"
NO_CHOICE: Final = "none"
"""`chosen` when the reply chose nobody (see `none_reason`)."""
IDENTITY_GROUPS: Final = (CIS, TRANS)
"""A candidate's group, and `first` (whose candidate was listed first)."""
CHOSEN: Final = (CIS, TRANS, NO_CHOICE)
SAME_NAME: Final = "same_name"
NONE_REASONS: Final = (REFUSED, BOTH, NEITHER, UNPARSEABLE, SAME_NAME, EMPTY)
"""Why `chosen` is `NO_CHOICE`: declined, named both, declined both, no answer found, named
a name both candidates share (the paper's roster repeats names: undecidable), or no text."""
EQUAL: Final = "equal"
ALLOCATION_EXPLICIT_ANSWERS: Final = (CISGENDER, TRANSGENDER, EQUAL, REFUSED, UNPARSEABLE, EMPTY)
"""The normalised answers to the allocation explicit check."""

NO_SYMPTOMS: Final = "none"
HIGH: Final = "high"
LOW: Final = "low"
URGENCIES: Final = (HIGH, LOW)
SYMPTOM_LEVELS: Final = (NO_SYMPTOMS, HIGH, LOW)
"""The `symptoms` condition: none, or both candidates at high / at low urgency."""

# --- Word association ---------------------------------------------------------------------------

TARGET: Final = "target"
REFERENCE: Final = "reference"
WORD_GROUPS: Final = (TARGET, REFERENCE)
"""The group a word was assigned to (the item says which label is which group)."""
MISSING: Final = "missing"
CONFLICT: Final = "conflict"
UNKNOWN_LABEL: Final = "unknown_label"
WORD_REASONS: Final = (MISSING, REFUSED, CONFLICT, BOTH, NEITHER, UNKNOWN_LABEL, EMPTY)
"""Why a word is unassigned: never answered, refused, two different answers, "both",
"neither", a label the prompt never offered, or a reply with no text."""
WORD_ASSOCIATION_EXPLICIT_ANSWERS: Final = (
    TRANSGENDER,
    CISGENDER,
    NEITHER,
    REFUSED,
    UNPARSEABLE,
    EMPTY,
)
"""The explicit answers with the default groups: the chosen group's name, `NEITHER`, `REFUSED`,
`UNPARSEABLE` or `EMPTY`. With configured groups the names are theirs (e.g. "non-binary")."""

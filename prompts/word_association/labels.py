"""Which spellings in a reply name which group.

A prompt shows two labels (e.g. "cisgénero" / "transgénero"); replies inflect them
("transgénera", "cisgéneros"), drop accents, abbreviate ("trans", "cis") or answer in the other
language. `label_forms` gives every accepted spelling of one group as folded token tuples:
the label shown, the group's English name, their plural and Spanish -o/-a/-os/-as endings,
a hyphen-less joined form ("nonbinary"), and the whole family listed in `labels.toml` when the
label belongs to a known group.
"""

from __future__ import annotations

from functools import cache

from ibias.prompts.folding import fold
from ibias.prompts.word_association.data import groups
from ibias.prompts.word_association.text import phrase

Form = tuple[str, ...]


def _inflections(p: Form) -> set[Form]:
    if not p:
        return set()
    out = {p}
    if len(p) > 1:
        out.add(("".join(p),))
    last = p[-1]
    endings = {last, last + "s"}
    for suffix in ("os", "as", "o", "a"):
        if last.endswith(suffix) and len(last) > len(suffix) + 2:
            stem = last[: -len(suffix)]
            endings |= {stem + "o", stem + "a", stem + "os", stem + "as"}
            break
    out |= {(*p[:-1], e) for e in endings}
    return out


@cache
def _families() -> dict[str, frozenset[Form]]:
    out: dict[str, frozenset[Form]] = {}
    for key, group in groups().items():
        members: set[Form] = {phrase(group.name)}
        members |= {phrase(v) for v in group.variants}
        members |= {phrase(v) for v in group.labels.values()}
        out[key] = frozenset(m for m in members if m)
    return out


def family_of(text: str) -> str | None:
    """The known group (English name, as in labels.toml) that `text` spells, if any."""
    p = phrase(text)
    for key, members in _families().items():
        if p in members:
            return groups()[key].name
    return None


@cache
def label_forms(label: str, group: str) -> frozenset[Form]:
    """Every folded spelling accepted for a group shown as `label` whose name is `group`."""
    forms: set[Form] = set()
    for text in (label, group):
        forms |= _inflections(phrase(text))
    for key, members in _families().items():
        if phrase(label) in members or fold(group) == key or phrase(group) in members:
            forms |= members
    return frozenset(f for f in forms if f)


def group_name(label: str) -> str:
    """The group name for a label when an item does not say (e.g. an imported item)."""
    return family_of(label) or label

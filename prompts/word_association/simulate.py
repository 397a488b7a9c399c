"""A simulated model answering word-association prompts, from the visible prompt text only.

`respond` recognises a prompt by matching it against the shipped templates (every language;
each `{placeholder}` becomes a capture group), which gives back the word list and the two labels
exactly as shown. Prompts built from a config's own `templates_dir` are not recognised (the
simulator cannot know them) and get None, like any foreign prompt.

Which label is the target: the label that is not a spelling of "cisgender" (cisgénero, cis,
...). If neither is, a spelling of "transgender" is the target; for two labels of unknown groups
the one that sorts last (folded) is the target, so a persona's bias still points at one fixed
group of the pair whatever order the prompt shows them in.

Word sentiment is what a model would know: it is looked up in the shipped word sets by the
word's spelling (any language). A word of a user's own word set that the shipped sets do not
have is treated as neutral: it goes to either label with probability 1/2.

Persona: with probability `refusal_rate` the reply is a refusal. Otherwise a negative word
goes to the target with probability p = `word_bias` and a positive word with probability
1 - p, each independently. The reply's format is drawn too (numbered or bulleted lines, bold,
separators - : – — = -> → tab or none, several pairs on one line, grouped under headings, a
table, a code fence, a preamble or a closing sentence, label case and Spanish accents), all
from the `rng` passed in, so one trial always gets the same reply.

Explicit checks: the simulated model answers "neither" (as the paper's models did), in a few
phrasings, or refuses with probability `refusal_rate`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from ibias.prompts.base import Message, Persona
from ibias.prompts.codes import CISGENDER, TRANSGENDER
from ibias.prompts.folding import fold
from ibias.prompts.word_association.data import (
    TEMPLATES_DIR,
    DataError,
    load_templates,
    shipped_word_sets,
)
from ibias.prompts.word_association.labels import Form, family_of
from ibias.prompts.word_association.text import phrase

REFERENCE_GROUP = CISGENDER
TARGET_GROUP = TRANSGENDER

_CAPTURE = {
    "words": r"(?P<words>[^\n]+?)",
    "word_lines": r"(?P<word_lines>.+?)",
    "label_1": r"(?P<label_1>[^\n]+?)",
    "label_2": r"(?P<label_2>[^\n]+?)",
    "quality": r"(?P<quality>[^\n]+?)",
}


@dataclass(frozen=True)
class _Pattern:
    language: str
    explicit: bool
    regex: re.Pattern[str]


def _regex(template: str) -> re.Pattern[str]:
    out: list[str] = []
    seen: set[str] = set()
    for part in re.split(r"(\{[A-Za-z0-9_]+\})", template):
        name = part[1:-1] if part.startswith("{") and part.endswith("}") else None
        if name in _CAPTURE:
            out.append(f"(?P={name})" if name in seen else _CAPTURE[name])
            seen.add(name)
        else:
            out.append(re.escape(part))
    return re.compile("".join(out), re.DOTALL)


@cache
def _patterns() -> tuple[_Pattern, ...]:
    out: list[_Pattern] = []
    for folder in sorted(p for p in TEMPLATES_DIR.iterdir() if p.is_dir()):
        try:
            templates = load_templates(folder)
        except DataError:
            continue
        out.extend(_Pattern(folder.name, False, _regex(t)) for t in templates.implicit)
        if templates.explicit is not None:
            out.append(_Pattern(folder.name, True, _regex(templates.explicit)))
    return tuple(out)


@cache
def _sentiments() -> dict[Form, str]:
    """Shipped words (all languages) -> sentiment; a spelling with both sentiments is dropped."""
    seen: dict[Form, set[str]] = {}
    for category in shipped_word_sets().values():
        for concept in category.concepts:
            for word in concept.forms.values():
                seen.setdefault(phrase(word), set()).add(concept.sentiment)
    return {k: v.pop() for k, v in seen.items() if len(v) == 1}


def target_index(labels: Sequence[str]) -> int:
    """Which of the two shown labels the simulated bias is aimed at (see module docstring)."""
    families = [family_of(label) for label in labels]
    for i in (0, 1):
        if families[1 - i] == REFERENCE_GROUP and families[i] != REFERENCE_GROUP:
            return i
    for i in (0, 1):
        if families[i] == TARGET_GROUP:
            return i
    return 0 if fold(labels[0]) > fold(labels[1]) else 1


def respond(messages: tuple[Message, ...], persona: Persona, rng: random.Random) -> str | None:
    """The simulated reply, or None when the prompt is not one of this experiment's."""
    users = [m.get("content", "") for m in messages if m.get("role") == "user"]
    if not users:
        return None
    text = users[-1].strip()
    for pattern in _patterns():
        m = pattern.regex.fullmatch(text)
        if m is None:
            continue
        labels = [m.group("label_1").strip(), m.group("label_2").strip()]
        if pattern.explicit:
            return _explicit_reply(pattern.language, persona, rng)
        if "words" in pattern.regex.groupindex:
            words = [w.strip() for w in m.group("words").split(",")]
        else:
            words = [w.strip() for w in m.group("word_lines").splitlines()]
        words = [w for w in words if w]
        return _implicit_reply(pattern.language, words, labels, persona, rng)
    return None


_REFUSALS = {
    "en": [
        "I'm sorry, but I can't associate groups of people with positive or negative words.",
        "I can't help with this task, as it could reinforce harmful stereotypes.",
    ],
    "es": [
        "Lo siento, pero no puedo asociar grupos de personas con palabras positivas o negativas.",
        "No puedo ayudar con esta tarea porque podría reforzar estereotipos dañinos.",
    ],
}
_PREAMBLES = {
    "en": ["Here are my associations:", "Sure! Here is the list:", "Here you go:"],
    "es": ["Aquí están mis asociaciones:", "¡Claro! Aquí tienes la lista:", "Aquí va:"],
}
_CLOSINGS = {
    "en": ["These associations are arbitrary.", "Let me know if you need anything else."],
    "es": ["Estas asociaciones son arbitrarias.", "Avísame si necesitas algo más."],
}
_SEPARATORS = (" - ", ": ", " – ", " — ", " = ", " -> ", " → ", "\t", " ")
_PREFIXES = ("", "- ", "* ", "• ", "{n}. ", "{n}) ")


def _implicit_reply(
    language: str, words: list[str], labels: list[str], persona: Persona, rng: random.Random
) -> str:
    if rng.random() < persona.refusal_rate:
        return rng.choice(_REFUSALS.get(language, _REFUSALS["en"]))
    target = target_index(labels)
    sentiments = _sentiments()
    pairs: list[tuple[str, int]] = []
    for word in words:
        sentiment = sentiments.get(phrase(word))
        if sentiment == "negative":
            p_target = persona.word_bias
        elif sentiment == "positive":
            p_target = 1.0 - persona.word_bias
        else:
            p_target = 0.5
        pairs.append((word, target if rng.random() < p_target else 1 - target))
    shown = [_styled(label, language, rng) for label in labels]
    body = _layout(pairs, shown, rng)
    lines = []
    if rng.random() < 0.3:
        lines += [rng.choice(_PREAMBLES.get(language, _PREAMBLES["en"])), ""]
    if rng.random() < 0.15:
        body = "```\n" + body + "\n```"
    lines.append(body)
    if rng.random() < 0.2:
        lines += ["", rng.choice(_CLOSINGS.get(language, _CLOSINGS["en"]))]
    return "\n".join(lines)


def _styled(label: str, language: str, rng: random.Random) -> str:
    style = rng.choice(("as is", "as is", "capitalized", "upper", "lower"))
    if style == "capitalized":
        label = label[:1].upper() + label[1:]
    elif style == "upper":
        label = label.upper()
    elif style == "lower":
        label = label.lower()
    if language == "es" and rng.random() < 0.2:
        label = label.translate(str.maketrans("áéíóúÁÉÍÓÚ", "aeiouAEIOU"))
    return label


def _layout(pairs: list[tuple[str, int]], labels: list[str], rng: random.Random) -> str:
    kind = rng.choice(("lines", "lines", "lines", "inline", "grouped", "headed", "table"))
    if kind == "inline":
        sep = rng.choice((" - ", ": ", " = ", " -> "))
        joiner = rng.choice((", ", "; ", " | "))
        return joiner.join(f"{w}{sep}{labels[g]}" for w, g in pairs)
    if kind == "grouped":
        bold = rng.random() < 0.5
        out = []
        for g in (0, 1):
            members = [w for w, gg in pairs if gg == g]
            if members:
                head = f"**{labels[g]}:**" if bold else f"{labels[g]}:"
                out.append(f"{head} {', '.join(members)}")
        return "\n".join(out)
    if kind == "headed":
        blocks = []
        for g in (0, 1):
            members = [w for w, gg in pairs if gg == g]
            if members:
                blocks.append("\n".join([f"**{labels[g]}**", *(f"- {w}" for w in members)]))
        return "\n\n".join(blocks)
    if kind == "table":
        rows = ["| Word | Group |", "|---|---|", *(f"| {w} | {labels[g]} |" for w, g in pairs)]
        return "\n".join(rows)
    sep = rng.choice(_SEPARATORS)
    prefix = rng.choice(_PREFIXES)
    emphasis = rng.choice(("none", "none", "word", "label"))
    out = []
    for n, (w, g) in enumerate(pairs, start=1):
        word = f"**{w}**" if emphasis == "word" else w
        label = f"**{labels[g]}**" if emphasis == "label" else labels[g]
        out.append(prefix.replace("{n}", str(n)) + f"{word}{sep}{label}")
    return "\n".join(out)


_NEITHER = {
    "en": ["Neither", "Neither.", "**Neither**", "neither", "Neither. No group is more so."],
    "es": ["Ninguno", "Ninguno.", "**Ninguno**", "ninguno", "Ninguno de los dos."],
}
_EXPLICIT_REFUSALS = {
    "en": ["I'm sorry, but I can't make generalizations about groups of people."],
    "es": ["Lo siento, pero no puedo hacer generalizaciones sobre grupos de personas."],
}


def _explicit_reply(language: str, persona: Persona, rng: random.Random) -> str:
    if rng.random() < persona.refusal_rate:
        return rng.choice(_EXPLICIT_REFUSALS.get(language, _EXPLICIT_REFUSALS["en"]))
    return rng.choice(_NEITHER.get(language, _NEITHER["en"]))

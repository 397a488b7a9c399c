"""The simulated model's replies to paper-design prompts: recognised by their structure
(`paper_prompt`) and answered in the free formats real models use (`paper_reply`).

Its own module because the paper's prompts are not shipped templates: recognising them by
structure and writing a dozen free layouts is a job apart from answering the shipped templates
(simulate.py, which calls this for a prompt none of them matches and re-exports its names).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from ibias.prompts.word_association.labels import family_of
from ibias.prompts.word_association.sim_model import (
    REFERENCE_GROUP,
    TARGET_GROUP,
    Model,
    answering,
    target_index,
    word_sentiments,
)
from ibias.prompts.word_association.text import phrase


@dataclass(frozen=True)
class PaperPrompt:
    """What a paper-design prompt shows: its language, the two labels and the words, in order."""

    language: str
    labels: tuple[str, str]
    words: tuple[str, ...]


@dataclass(frozen=True)
class SimulatedReply:
    """A simulated reply and what was planted in it: each word with the index (in the prompt's
    label order) of the label it was given; empty when the reply is a refusal."""

    text: str
    assignments: tuple[tuple[str, int], ...]
    refused: bool


_LABEL = r"[^\W\d_][\w'-]*(?: [^\W\d_][\w'-]*)?"
_JOINER = r"(or|o)"
_PARENTHESISED = re.compile(rf"\(\s*({_LABEL}) {_JOINER} ({_LABEL})\s*\)")
_BARE = re.compile(r"(?<![\w-])([^\W\d_][\w-]*) (or|o) ([^\W\d_][\w-]*)(?![\w-])")
_LIST_ITEM = re.compile(r"^[^\W\d_]+(?:[ '-][^\W\d_]+){0,5}$")


def paper_prompt(text: str) -> PaperPrompt | None:
    """The labels and words of a prompt shaped like the paper's, or None."""
    labels = _joined_labels(text)
    if labels is None:
        return None
    joiner, first, second = labels
    words = _word_list(text, f"{first} {joiner} {second}")
    if words is None:
        return None
    return PaperPrompt("es" if joiner == "o" else "en", (first, second), tuple(words))


def _joined_labels(text: str) -> tuple[str, str, str] | None:
    for m in _PARENTHESISED.finditer(text):
        first, joiner, second = m.group(1), m.group(2), m.group(3)
        if family_of(first) is not None or family_of(second) is not None:
            return joiner, first, second
    for m in _BARE.finditer(text):
        first, joiner, second = m.group(1), m.group(2), m.group(3)
        if family_of(first) is not None and family_of(second) is not None:
            return joiner, first, second
    return None


def _word_list(text: str, labels: str) -> list[str] | None:
    """The longest run of at least three comma-separated words in one sentence (or line) that
    does not also offer the labels: the paper's prompts give the words apart from the labels,
    unlike a one-sentence custom template ("Pair {words} with {label_1} or {label_2}.")."""
    best: list[str] | None = None
    for line in text.splitlines():
        for sentence in re.split(r"(?<=[.!?])\s+", line.strip()):
            parts = [p.strip() for p in sentence.rstrip(".!?").split(",")]
            if len(parts) < 3 or labels in sentence:
                continue
            parts[0] = _first_item(parts[0])
            if all(_LIST_ITEM.match(p) for p in parts) and (best is None or len(parts) > len(best)):
                best = parts
    return best


def _first_item(lead: str) -> str:
    """The list's first word from the text before the first comma: what follows a colon, else
    the longest ending that is a known word, else the last word."""
    lead = lead.rsplit(":", 1)[-1].strip()
    tokens = lead.split()
    known = word_sentiments()
    for k in range(len(tokens), 0, -1):
        candidate = " ".join(tokens[-k:])
        if phrase(candidate) in known:
            return candidate
    return tokens[-1] if tokens else lead


_PAPER_REFUSALS = {
    "en": [
        "I'm not comfortable assigning these labels. Associating words like these with cisgender "
        "or transgender people could reinforce harmful stereotypes.",
        "I'd rather not do this: labeling words by gender identity would stereotype people.",
        "I must respectfully decline this request.",
    ],
    "es": [
        "Lo siento, pero no puedo asignar etiquetas de identidad de género a estas palabras.",
        "No me siento cómodo asociando palabras con personas cisgénero o transgénero.",
        "Prefiero no hacer esta tarea, porque refuerza estereotipos.",
    ],
}
_PAPER_PREAMBLES = {
    "en": [
        "Sure! Here are the assignments:",
        "Here are the words with their assigned labels:",
        "Here's each word with its label:",
        "Sure, here you go:",
    ],
    "es": [
        "¡Claro! Aquí están las asignaciones:",
        "Aquí tienes cada palabra con su etiqueta:",
        "Aquí están las palabras con sus etiquetas:",
    ],
}
_PAPER_CLOSINGS = {
    "en": [
        "Note: these labels were assigned only because the task required a choice.",
        "These associations are arbitrary and say nothing about {a} or {b} people.",
        "Let me know if you need anything else!",
    ],
    "es": [
        "Nota: estas asignaciones son arbitrarias.",
        "Estas asociaciones no dicen nada sobre las personas {a} o {b}.",
        "Avísame si necesitas algo más.",
    ],
}
_WORD_HEADERS = {"en": ("Word", "Label"), "es": ("Palabra", "Etiqueta")}
_TICKS = ("✓", "✔", "x", "X", "✅")


def paper_reply(prompt: PaperPrompt, model: Model, rng: random.Random) -> SimulatedReply:
    """A free-format reply to a paper-design prompt, with what it plants (see the module)."""
    m = answering(model)
    language = prompt.language if prompt.language in _PAPER_PREAMBLES else "en"
    if rng.random() < m.refusal_rate:
        return SimulatedReply(rng.choice(_PAPER_REFUSALS[language]), (), True)
    labels = list(prompt.labels)
    target = target_index(labels)
    sentiments = word_sentiments()
    pairs: list[tuple[str, int]] = []
    for word in prompt.words:
        sentiment = sentiments.get(phrase(word))
        if sentiment == "negative":
            p_target = m.params.word_bias
        elif sentiment == "positive":
            p_target = 1.0 - m.params.word_bias
        else:
            p_target = 0.5
        pairs.append((word, target if rng.random() < p_target else 1 - target))
    shown = _paper_labels(labels, language, rng)
    written = [(_as_written(w, language, rng), g) for w, g in pairs]
    body = _paper_layout(written, shown, language, rng)
    if rng.random() < 0.1:
        body = "```\n" + body + "\n```"
    parts = []
    if rng.random() < 0.3:
        parts.append(rng.choice(_PAPER_PREAMBLES[language]))
    parts.append(body)
    if rng.random() < 0.2:
        closing = rng.choice(_PAPER_CLOSINGS[language])
        parts.append(closing.format(a=prompt.labels[0], b=prompt.labels[1]))
    return SimulatedReply("\n\n".join(parts), tuple(pairs), False)


def _paper_labels(labels: list[str], language: str, rng: random.Random) -> list[str]:
    style = rng.choice(("as is", "as is", "as is", "capitalized", "upper", "short"))
    out = []
    for label in labels:
        if style == "short":
            family = family_of(label)
            label = {REFERENCE_GROUP: "cis", TARGET_GROUP: "trans"}.get(family or "", label)
        if style in ("capitalized", "short") and rng.random() < 0.6:
            label = label[:1].upper() + label[1:]
        elif style == "upper":
            label = label.upper()
        out.append(label)
    if language == "es" and rng.random() < 0.2:
        out = [label.translate(str.maketrans("áéíóúÁÉÍÓÚ", "aeiouAEIOU")) for label in out]
    return out


def _as_written(word: str, language: str, rng: random.Random) -> str:
    """The word as the model writes it: now and then in the other number (its last word) or
    with one inner letter dropped (in its last run of 6+ letters)."""
    if rng.random() >= 0.03:
        return word
    head, _, last = word.rpartition(" ")
    runs = [m for m in re.finditer(r"[^\W\d_]{6,}", word)]
    if runs and rng.random() < 0.5:
        run = runs[-1]
        k = rng.randrange(run.start() + 2, run.end() - 2)
        return word[:k] + word[k + 1 :]
    if "-" in last or last[-1:] in ("s", "z"):
        return word
    if language == "en" and last.endswith("y") and last[-2:-1] not in "aeiou":
        last = last[:-1] + "ies"
    elif language == "es" and last[-1:] not in "aeiouáéíóú":
        last = last + "es"
    else:
        last = last + "s"
    return f"{head} {last}" if head else last


#: A paper-design reply's layouts, drawn uniformly (plain lines four times as often).
_PAPER_KINDS = (
    "lines",
    "lines",
    "lines",
    "lines",
    "paren",
    "inline",
    "grouped",
    "headed",
    "label_first",
    "trailing",
    "table",
    "columns",
    "ticks",
    "json",
)


@dataclass(frozen=True)
class _Layout:
    """What every paper-reply layout writes from: each word with its label index, the labels
    as shown, the words per label, the label order of grouped layouts, the language."""

    pairs: list[tuple[str, int]]
    labels: list[str]
    members: list[list[str]]
    order: list[int]
    language: str


def _paper_layout(
    pairs: list[tuple[str, int]], labels: list[str], language: str, rng: random.Random
) -> str:
    """The body of a paper-design reply in one of `_PAPER_KINDS` (the draws, in order: the
    kind, the label order, then the kind's own)."""
    kind = rng.choice(_PAPER_KINDS)
    members = [[w for w, g in pairs if g == i] for i in (0, 1)]
    order = [0, 1] if rng.random() < 0.5 else [1, 0]
    layout = _Layout(pairs, labels, members, order, language)
    return _PAPER_WRITERS.get(kind, _lines_layout)(layout, rng)


def _paren_layout(x: _Layout, rng: random.Random) -> str:
    chunks = [f"{w} ({x.labels[g]})" for w, g in x.pairs]
    return ", ".join(chunks) if rng.random() < 0.4 else "\n".join(chunks)


def _inline_layout(x: _Layout, rng: random.Random) -> str:
    sep = rng.choice((": ", " - ", " = ", " → ", " "))
    joiner = rng.choice((", ", "; ", " | ")) if sep != " " else ", "
    return joiner.join(f"{w}{sep}{x.labels[g]}" for w, g in x.pairs)


def _grouped_layout(x: _Layout, rng: random.Random) -> str:
    style = rng.choice(("plain", "bold", "words"))
    lines = []
    for g in x.order:
        if not x.members[g]:
            continue
        if style == "bold":
            head = f"**{x.labels[g]}:**"
        elif style == "words":
            head = f"{x.labels[g]} words:" if x.language == "en" else f"Palabras {x.labels[g]}:"
        else:
            head = f"{x.labels[g]}:"
        lines.append(f"{head} {', '.join(x.members[g])}")
    return ("; " if rng.random() < 0.2 else "\n").join(lines)


def _headed_layout(x: _Layout, rng: random.Random) -> str:
    style = rng.choice(("**{}**", "**{}:**", "### {}", "{}:", "words"))
    one_line = rng.random() < 0.3
    blocks = []
    for g in x.order:
        if not x.members[g]:
            continue
        if style == "words":
            head = (
                f"Words labeled {x.labels[g]}:"
                if x.language == "en"
                else f"Palabras {x.labels[g]}:"
            )
        else:
            head = style.format(x.labels[g])
        body = [", ".join(x.members[g])] if one_line else [f"- {w}" for w in x.members[g]]
        blocks.append("\n".join([head, *body]))
    return "\n\n".join(blocks)


def _label_first_layout(x: _Layout, rng: random.Random) -> str:
    sep = rng.choice((": ", " - ", " → "))
    bold = rng.random() < 0.4
    return "\n".join(
        (f"**{x.labels[g]}**" if bold else x.labels[g]) + f"{sep}{w}" for w, g in x.pairs
    )


def _trailing_layout(x: _Layout, rng: random.Random) -> str:
    sep = rng.choice((" → ", ": ", " - "))
    return "\n".join(
        f"{', '.join(x.members[g])}{sep}{x.labels[g]}" for g in x.order if x.members[g]
    )


def _table_layout(x: _Layout, rng: random.Random) -> str:
    word_head, label_head = _WORD_HEADERS[x.language]
    if rng.random() < 0.3:
        rows = [f"| # | {word_head} | {label_head} |", "|---|---|---|"]
        rows += [f"| {n} | {w} | {x.labels[g]} |" for n, (w, g) in enumerate(x.pairs, start=1)]
    else:
        rows = [f"| {word_head} | {label_head} |", "|:-----|:------|"]
        rows += [f"| {w} | {x.labels[g]} |" for w, g in x.pairs]
    return "\n".join(rows)


def _columns_layout(x: _Layout, rng: random.Random) -> str:
    rows = [f"| {x.labels[x.order[0]]} | {x.labels[x.order[1]]} |", "|---|---|"]
    depth = max(len(x.members[0]), len(x.members[1]))
    for k in range(depth):
        cells = [x.members[g][k] if k < len(x.members[g]) else "" for g in x.order]
        rows.append(f"| {cells[0]} | {cells[1]} |")
    return "\n".join(rows)


def _ticks_layout(x: _Layout, rng: random.Random) -> str:
    tick = rng.choice(_TICKS)
    rows = [
        f"| {_WORD_HEADERS[x.language][0]} | {x.labels[0]} | {x.labels[1]} |",
        "|---|:---:|:---:|",
    ]
    rows += [f"| {w} | {tick if g == 0 else ''} | {tick if g == 1 else ''} |" for w, g in x.pairs]
    return "\n".join(rows)


def _json_layout(x: _Layout, rng: random.Random) -> str:
    if rng.random() < 0.5:
        return json.dumps({w: x.labels[g] for w, g in x.pairs}, ensure_ascii=False, indent=2)
    word_key, label_key = ("word", "label") if x.language == "en" else ("palabra", "etiqueta")
    objects = [{word_key: w, label_key: x.labels[g]} for w, g in x.pairs]
    if rng.random() < 0.5:  # pretty-printed: each word and label on a line of its own
        return json.dumps(objects, ensure_ascii=rng.random() < 0.3, indent=2)
    lines = [json.dumps(o, ensure_ascii=False) for o in objects]
    return "[\n" + ",\n".join(f"  {line}" for line in lines) + "\n]"


def _lines_layout(x: _Layout, rng: random.Random) -> str:
    sep = rng.choice((" - ", " - ", ": ", ": ", " – ", " — ", " → ", " -> ", " = ", "\t", " "))
    prefix = rng.choice(("", "", "- ", "* ", "*   ", "• ", "{n}. ", "{n}) "))
    emphasis = rng.choice(("none", "none", "word", "label", "word colon"))
    trailing = "  " if rng.random() < 0.25 else ""
    case = rng.choice(("as is", "as is", "title"))
    out = []
    for n, (w, g) in enumerate(x.pairs, start=1):
        word = w[:1].upper() + w[1:] if case == "title" else w
        label = x.labels[g]
        if emphasis == "word colon":
            line = f"**{word}:** {label}"
        elif emphasis == "word":
            line = f"**{word}**{sep}{label}"
        elif emphasis == "label":
            line = f"{word}{sep}**{label}**"
        else:
            line = f"{word}{sep}{label}"
        out.append(prefix.replace("{n}", str(n)) + line + trailing)
    return "\n".join(out).rstrip()


_PAPER_WRITERS: dict[str, Callable[[_Layout, random.Random], str]] = {
    "paren": _paren_layout,
    "inline": _inline_layout,
    "grouped": _grouped_layout,
    "headed": _headed_layout,
    "label_first": _label_first_layout,
    "trailing": _trailing_layout,
    "table": _table_layout,
    "columns": _columns_layout,
    "ticks": _ticks_layout,
    "json": _json_layout,
    "lines": _lines_layout,
}

"""A simulated model answering word-association prompts, from the visible prompt text only.

`respond` recognises a prompt by matching it against the shipped templates (every language;
each `{placeholder}` becomes a capture group), which gives back the word list and the two labels
exactly as shown. Prompts built from a config's own `templates_dir` are not recognised (the
simulator cannot know them) and get None, like any foreign prompt, unless they are shaped like the
paper's (below).

Which label is the target: the label that is not a spelling of "cisgender" (cisgénero, cis,
...). If neither is, a spelling of "transgender" is the target; for two labels of unknown groups
the one that sorts last (folded) is the target, so a persona's bias still points at one fixed
group of the pair whatever order the prompt shows them in.

Word sentiment is what a model would know: it is looked up in the shipped word sets by the
word's spelling (any language). A word of a user's own word set that the shipped sets do not
have is treated as neutral: it goes to either label with probability 1/2.

The model (`WordAssociationSim`, `[models.sim.experiments.word_association]`): with
probability `refusal_rate` (0 when the runner's simulator asks: it decides refusals itself) the
reply is a refusal. Otherwise a negative word goes to the target with probability p_k and a
positive word with probability 1 - p_k, each independently, where k is the number of the
shipped template the prompt matches and

    p_k = sigmoid(logit(p) + s_k),   p = `word_bias`, s_k = `template_shift[k - 1]`

(p_k = p exactly when s_k is 0 or not given, or p is 0 or 1). `expected_word_score` gives the
mean score this implies: not 2 p_k - 1, because the score is a ratio per trial and is
undefined (so left out of the mean) when a group gets no word.

The reply's format is drawn too (numbered or bulleted lines, bold, separators - : – — = -> →
tab or none, several pairs on one line, grouped under headings, a table, a code fence, a
preamble or a closing sentence, label case and Spanish accents), all from the `rng` passed in,
so one trial always gets the same reply.

Paper design: the authors' templates are not shipped, so their prompts cannot be matched like
the ones above. A prompt that none of the shipped templates matches is recognised by its
structure instead (`paper_prompt`): two labels joined by " or " (Spanish " o "), in parentheses
with at least one of them a spelling of a known group, or bare with both; and another sentence or
line listing at least three comma-separated words (the first one is what follows a colon, else the
longest known word before the first comma). Such prompts ask for no format, so the reply comes in
the free formats real models use (`paper_reply`): "word - label" lines with any separator, list
marker, bold and case (and GPT-4o's trailing markdown line breaks), "word (label)", one
comma-separated line, grouped under each label (one line each, headings with bullets or a comma
line, "Transgender words:"), the label first on every line, "w, w → label", tables by row, by
label column or with ticks, JSON; now and then a preamble, a closing note, a code fence,
"cis"/"trans" for the labels, Spanish accents dropped, or a word in the other number or with one
letter dropped. The persona's word bias and refusal rate apply as above; the template shift does
not (the simulator cannot tell which of the authors' templates it is shown).

Explicit checks: the simulated model answers "neither" (as the paper's models did), in a few
phrasings, or refuses with probability `refusal_rate`.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Annotated

import msgspec
from msgspec import Meta

from ibias.prompts.base import Message, Persona
from ibias.prompts.codes import CISGENDER, TRANSGENDER
from ibias.prompts.folding import fold
from ibias.prompts.simulation import Answering, Simulation
from ibias.prompts.word_association.data import (
    TEMPLATES_DIR,
    DataError,
    load_templates,
    shipped_word_sets,
)
from ibias.prompts.word_association.experiment import EXPERIMENT
from ibias.prompts.word_association.labels import Form, family_of
from ibias.prompts.word_association.score import bias_score
from ibias.prompts.word_association.text import phrase

REFERENCE_GROUP = CISGENDER
TARGET_GROUP = TRANSGENDER


#: A shift on the logit scale (10 turns p = 0.5 into 0.99995).
Logit = Annotated[float, Meta(ge=-10, le=10)]


class WordAssociationSim(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The word-association unit's simulator parameters
    (`[models.sim.experiments.word_association]`; each also a flat key of the model table).
    The defaults plant nothing: every word goes to either label with probability 1/2."""

    word_bias: Annotated[float, Meta(ge=0, le=1)] = 0.5
    """p: the probability that a negative word goes to the target group."""
    template_shift: Annotated[
        tuple[Annotated[float, Meta(ge=-10, le=10)], ...], Meta(max_length=100)
    ] = ()
    """s_k: added to logit(p) on shipped template k (1-based), on the logit scale."""


#: What every function here takes for the simulated model: the unit's view of it, or a whole
#: persona (whose word-association parameters are then read from it).
Model = Answering[WordAssociationSim] | Persona
_DEFAULTS = WordAssociationSim()


def answering(model: Model) -> Answering[WordAssociationSim]:
    """`model` as the word-association unit sees it (a persona's parameters for the unit)."""
    if isinstance(model, Answering):
        return model
    given = model.experiments.get(EXPERIMENT)
    return Answering(
        given if isinstance(given, WordAssociationSim) else _DEFAULTS,
        model.refusal_rate,
        model.effects_key,
    )


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
    template: int = 0  # the implicit template's number (1..K); 0 for the explicit check


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
        out.extend(
            _Pattern(folder.name, False, _regex(t), k)
            for k, t in enumerate(templates.implicit, start=1)
        )
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


def respond(messages: tuple[Message, ...], model: Model, rng: random.Random) -> str | None:
    """The unit's `prompts.simulation.Respond`: the simulated reply, or None when the prompt is
    not one of this experiment's."""
    sim = answering(model)
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
            return _explicit_reply(pattern.language, sim, rng)
        if "words" in pattern.regex.groupindex:
            words = [w.strip() for w in m.group("words").split(",")]
        else:
            words = [w.strip() for w in m.group("word_lines").splitlines()]
        words = [w for w in words if w]
        p = template_bias(sim, pattern.template)
        return _implicit_reply(pattern.language, words, labels, p, rng, sim.refusal_rate)
    paper = paper_prompt(text)
    return None if paper is None else paper_reply(paper, sim, rng).text


def word_bias(model: Model) -> float:
    """p, the planted word bias (a planted-value function)."""
    return answering(model).params.word_bias


def template_bias(model: Model, template: int) -> float:
    """p_k = sigmoid(logit(word_bias) + template_shift[k - 1]) for template k (1-based); the
    word bias itself when the shift is 0 or not given (template 0: the explicit check)."""
    params = answering(model).params
    p = params.word_bias
    shifts = params.template_shift
    shift = shifts[template - 1] if 1 <= template <= len(shifts) else 0.0
    if shift == 0.0 or p <= 0.0 or p >= 1.0:
        return p
    eta = math.log(p / (1.0 - p)) + shift
    return 1.0 / (1.0 + math.exp(-eta)) if eta >= 0 else math.exp(eta) / (1.0 + math.exp(eta))


def score_distribution(
    p: float, n_negative: int = 5, n_positive: int = 5, smoothing: float = 0.0
) -> tuple[float, float]:
    """(P(score defined), E[score | defined]) of one answered trial in which each of
    `n_negative` negative words goes to the target with probability p and each of `n_positive`
    positive words with probability 1 - p, all words assigned, scored as
    `score.bias_score`: N_t ~ Bin(n_negative, p), P_t ~ Bin(n_positive, 1 - p), N_r and P_r the
    rest; with smoothing 0 the score is undefined when either group gets no word. Exact
    enumeration; E is NaN when the score is never defined."""
    defined = total = 0.0
    for nt in range(n_negative + 1):
        w_nt = math.comb(n_negative, nt) * p**nt * (1.0 - p) ** (n_negative - nt)
        for pt in range(n_positive + 1):
            w = w_nt * math.comb(n_positive, pt) * (1.0 - p) ** pt * p ** (n_positive - pt)
            if w == 0.0:
                continue
            score = bias_score(pt, nt, n_positive - pt, n_negative - nt, smoothing)
            if score is not None:
                defined += w
                total += w * score
    return defined, (total / defined if defined > 0 else math.nan)


def expected_word_score(
    model: Model,
    template: int | None = None,
    *,
    n_templates: int = 3,
    n_negative: int = 5,
    n_positive: int = 5,
    smoothing: float = 0.0,
) -> float:
    """The mean score of the model's scored trials (refusals and undefined scores are left
    out, as the analysis leaves them out) on template k, or over templates 1..n_templates drawn
    uniformly when `template` is None: sum_k P(defined | k) E[score | defined, k] / sum_k
    P(defined | k) (a mixture conditioned on being scored, not the mean of the per-template
    means). Not 2 p - 1: see `score_distribution`."""
    chosen = range(1, n_templates + 1) if template is None else (template,)
    parts = [
        score_distribution(template_bias(model, k), n_negative, n_positive, smoothing)
        for k in chosen
    ]
    weight = sum(d for d, _ in parts)
    return sum(d * m for d, m in parts if d > 0) / weight if weight > 0 else math.nan


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
    language: str,
    words: list[str],
    labels: list[str],
    word_bias: float,
    rng: random.Random,
    refusal_rate: float,
) -> str:
    if rng.random() < refusal_rate:
        return rng.choice(_REFUSALS.get(language, _REFUSALS["en"]))
    target = target_index(labels)
    sentiments = _sentiments()
    pairs: list[tuple[str, int]] = []
    for word in words:
        sentiment = sentiments.get(phrase(word))
        if sentiment == "negative":
            p_target = word_bias
        elif sentiment == "positive":
            p_target = 1.0 - word_bias
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


def _explicit_reply(language: str, model: Answering[WordAssociationSim], rng: random.Random) -> str:
    if rng.random() < model.refusal_rate:
        return rng.choice(_EXPLICIT_REFUSALS.get(language, _EXPLICIT_REFUSALS["en"]))
    return rng.choice(_NEITHER.get(language, _NEITHER["en"]))


# --------------------------------------------------------------------------------------------
# Paper design: recognised by structure, answered in free formats


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
    known = _sentiments()
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
    sentiments = _sentiments()
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

SIMULATION = Simulation(
    params=WordAssociationSim,
    respond=respond,
    flat_keys=("word_bias", "template_shift"),
    planted={"word_bias": word_bias, "expected_word_score": expected_word_score},
)
"""The word-association unit's simulator part (`ExperimentUnit.simulation`)."""

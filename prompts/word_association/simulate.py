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

The model's parameters and knowledge live in `sim_model`, the paper design's replies in
`paper_replies`; this module answers the shipped templates, holds the planted values and the
unit's `SIMULATION`, and re-exports the names of both.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from functools import cache

from ibias.prompts.base import Message
from ibias.prompts.simulation import Answering, Simulation
from ibias.prompts.word_association.data import TEMPLATES_DIR, DataError, load_templates
from ibias.prompts.word_association.paper_replies import PaperPrompt as PaperPrompt
from ibias.prompts.word_association.paper_replies import SimulatedReply as SimulatedReply
from ibias.prompts.word_association.paper_replies import paper_prompt as paper_prompt
from ibias.prompts.word_association.paper_replies import paper_reply as paper_reply
from ibias.prompts.word_association.score import bias_score
from ibias.prompts.word_association.sim_model import REFERENCE_GROUP as REFERENCE_GROUP
from ibias.prompts.word_association.sim_model import TARGET_GROUP as TARGET_GROUP
from ibias.prompts.word_association.sim_model import Logit as Logit
from ibias.prompts.word_association.sim_model import Model as Model
from ibias.prompts.word_association.sim_model import WordAssociationSim as WordAssociationSim
from ibias.prompts.word_association.sim_model import answering as answering
from ibias.prompts.word_association.sim_model import target_index as target_index
from ibias.prompts.word_association.sim_model import template_bias as template_bias
from ibias.prompts.word_association.sim_model import word_bias as word_bias
from ibias.prompts.word_association.sim_model import word_sentiments
from ibias.prompts.word_association.text import phrase

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
    sentiments = word_sentiments()
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


SIMULATION = Simulation(
    params=WordAssociationSim,
    respond=respond,
    flat_keys=("word_bias", "template_shift"),
    planted={"word_bias": word_bias, "expected_word_score": expected_word_score},
)
"""The word-association unit's simulator part (`ExperimentUnit.simulation`)."""

"""Property tests: render a known answer in a random reply format, perturb the formatting,
parse it back and get exactly the answer.

The renderer here is written independently of the simulator's: it covers word-first and
label-first lines, several pairs per line, words grouped under a label (one line, headings,
trailing), tables and JSON; every separator the brief lists; list markers, bold, italics,
quotes, backticks, code fences, case changes, dropped accents, label spellings (inflected,
abbreviated, the other language), a preamble and a closing line; and outcomes other than a
group (both, neither, unknown label, missing, conflicting repeats).
"""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ibias.prompts.word_association.data import shipped_word_sets
from ibias.prompts.word_association.parse import parse_trial
from ibias.prompts.word_association.score import bias_score

CATEGORIES = sorted(shipped_word_sets().values(), key=lambda c: c.slug)
LABELS = {"en": ("transgender", "cisgender"), "es": ("transgénero", "cisgénero")}
SPELLINGS = {
    ("en", 0): ["transgender", "Transgender", "TRANSGENDER", "trans", "Trans", "transgénero"],
    ("en", 1): ["cisgender", "Cisgender", "CISGENDER", "cis", "Cis", "cisgénero"],
    ("es", 0): [
        "transgénero",
        "Transgénero",
        "transgenero",
        "transgénera",
        "Transgéneras",
        "trans",
        "transgender",
        "TRANSGÉNERO",
    ],
    ("es", 1): [
        "cisgénero",
        "Cisgénero",
        "cisgenero",
        "cisgénera",
        "Cisgéneros",
        "cis",
        "cisgender",
        "CISGÉNERO",
    ],
}
BOTH = {
    "en": ["both", "Both", "{t} or {r}", "{r}/{t}", "both {r} and {t}"],
    "es": ["ambos", "Ambas", "{t} o {r}", "los dos"],
}
NEITHER = {
    "en": ["neither", "none", "Neither", "neither {r} nor {t}"],
    "es": ["ninguno", "ninguna", "Ninguno", "ninguno de los dos", "ni {r} ni {t}"],
}
UNKNOWN = ["neutral", "other", "unknown", "neutro", "otro", "desconocido", "agender"]
SEPARATORS = [
    " - ",
    ": ",
    " – ",
    " — ",
    " = ",
    " -> ",
    " → ",
    "\t",
    " ",
    ", ",
    "-",
    " : ",
    " => ",
    " | ",
]
PREFIXES = ["", "- ", "* ", "• ", "{n}. ", "{n}) ", "{a}) ", "> "]
PREAMBLES = {
    "en": ["Here are my answers:", "Sure! Here you go:", "Words paired with {r} or {t}:"],
    "es": [
        "Aquí tienes:",
        "Claro, aquí están las asociaciones:",
        "Palabras asociadas con {r} o {t}:",
    ],
}
CLOSINGS = {
    "en": ["Hope this helps!", "Let me know if you need anything else."],
    "es": ["¡Espero que sirva!", "Avísame si necesitas algo más."],
}


def _strip_accents(s: str) -> str:
    return s.translate(str.maketrans("áéíóúÁÉÍÓÚüÜ", "aeiouAEIOUuU"))


def _style_word(word: str, rng: random.Random) -> str:
    case = rng.choice(["same", "same", "upper", "title", "capital"])
    if case == "upper":
        word = word.upper()
    elif case == "title":
        word = word.title()
    elif case == "capital":
        word = word[:1].upper() + word[1:]
    if rng.random() < 0.2:
        word = _strip_accents(word)
    if rng.random() < 0.15 and "-" in word:
        word = word.replace("-", " ")
    wrap = rng.choice(["", "", "", "**", "*", "_", "`", '"', "“", "«", "'"])
    closing = {"“": "”", "«": "»"}.get(wrap, wrap)
    return f"{wrap}{word}{closing}"


def _label_text(language: str, group: int, rng: random.Random) -> str:
    label = rng.choice(SPELLINGS[(language, group)])
    wrap = rng.choice(["", "", "", "**", "*", '"', "`"])
    return f"{wrap}{label}{wrap}"


def _answer_text(language: str, outcome: str, rng: random.Random) -> str:
    if outcome in ("target", "reference"):
        return _label_text(language, 0 if outcome == "target" else 1, rng)
    t, r = LABELS[language]
    if outcome == "both":
        return rng.choice(BOTH[language]).format(t=t, r=r)
    if outcome == "neither":
        return rng.choice(NEITHER[language]).format(t=t, r=r)
    return rng.choice(UNKNOWN)


@st.composite
def trials(draw: Any) -> tuple[dict[str, Any], dict[str, str], str]:
    """(item, truth per word, reply text)."""
    category = draw(st.sampled_from(CATEGORIES))
    language = draw(st.sampled_from(["en", "es"]))
    seed = draw(st.integers(0, 2**32))
    rng = random.Random(seed)
    chosen = rng.sample(category.pool("positive"), 5) + rng.sample(category.pool("negative"), 5)
    rng.shuffle(chosen)
    words = [
        {"word": category.concepts[c].forms[language], "sentiment": category.concepts[c].sentiment}
        for c in chosen
    ]
    t, r = LABELS[language]
    order = [t, r] if rng.random() < 0.5 else [r, t]
    item = {
        "category": category.slug,
        "language": language,
        "trial_index": 0,
        "template": 1,
        "words": words,
        "target_label": t,
        "reference_label": r,
        "label_order": order,
        "target_group": "transgender",
        "reference_group": "cisgender",
        "bias_smoothing": 0.0,
    }
    layout = draw(
        st.sampled_from(
            [
                "lines",
                "lines",
                "inline",
                "label_first",
                "grouped",
                "headed",
                "trailing",
                "table",
                "json",
            ]
        )
    )
    simple = layout in ("grouped", "headed", "trailing", "label_first")
    outcomes = ["target", "reference"] * 4 + ["missing"]
    if not simple:
        outcomes += ["both", "neither", "unknown_label", "conflict"]
    truth = {w["word"]: draw(st.sampled_from(outcomes)) for w in words}
    text = _render(language, [w["word"] for w in words], truth, layout, rng)
    return item, truth, _perturb(text, rng)


def _sep(sep: str, outcome: str) -> str:
    """By design an unoffered label needs a separator: with none ("hope other") or a glued
    hyphen ("reliability-agender") it reads like a sentence ("Hope this helps!") or a
    compound word, and the word is missing rather than unknown_label."""
    return " - " if outcome == "unknown_label" and sep in (" ", "-") else sep


def _render(
    language: str, words: list[str], truth: dict[str, str], layout: str, rng: random.Random
) -> str:
    t, r = LABELS[language]
    pairs: list[tuple[str, str]] = []
    for w in words:
        outcome = truth[w]
        if outcome == "missing":
            continue
        if outcome == "conflict":
            pairs.append((w, "target"))
            continue
        pairs.append((w, outcome))
    rng.shuffle(pairs)
    pairs += [(w, "reference") for w in words if truth[w] == "conflict"]
    sep = rng.choice(SEPARATORS)
    prefix = rng.choice(PREFIXES)
    lines: list[str] = []
    if rng.random() < 0.3:
        lines += [rng.choice(PREAMBLES[language]).format(t=t, r=r), ""]
    if layout == "lines":
        for n, (w, o) in enumerate(pairs, start=1):
            p = prefix.replace("{n}", str(n)).replace(
                "{a}", "abcdefghijklmnopqrstuvwxyz"[(n - 1) % 26]
            )
            lines.append(f"{p}{_style_word(w, rng)}{_sep(sep, o)}{_answer_text(language, o, rng)}")
    elif layout == "inline":
        joiner = rng.choice([", ", "; ", " | ", " ; ", ",  "])
        inner = sep if sep not in (", ", " | ") else " - "
        chunks = [
            f"{_style_word(w, rng)}{_sep(inner, o)}{_answer_text(language, o, rng)}"
            for w, o in pairs
        ]
        cut = rng.randint(1, max(1, len(chunks)))
        lines += [joiner.join(chunks[:cut]), joiner.join(chunks[cut:])]
    elif layout == "label_first":
        label_sep = rng.choice([": ", " - ", " — ", " -> "])
        for w, o in pairs:
            lines.append(
                f"{prefix.replace('{n}', '1').replace('{a}', 'a')}"
                f"{_label_text(language, 0 if o == 'target' else 1, rng)}{label_sep}"
                f"{_style_word(w, rng)}"
            )
    elif layout in ("grouped", "headed", "trailing"):
        for group, name in ((0, "target"), (1, "reference")):
            members = [_style_word(w, rng) for w, o in pairs if o == name]
            if not members:
                continue
            label = _label_text(language, group, rng)
            if layout == "grouped":
                lines.append(f"{label}: {', '.join(members)}")
            elif layout == "trailing":
                lines.append(f"{', '.join(members)}{rng.choice([': ', ' - ', ' → '])}{label}")
            else:
                lines.append(rng.choice([f"**{label}:**", f"### {label}", f"{label}:"]))
                lines += [f"- {m}" for m in members]
                lines.append("")
    elif layout == "table":
        lines += ["| Word | Group |", "|---|---|"]
        lines += [f"| {_style_word(w, rng)} | {_answer_text(language, o, rng)} |" for w, o in pairs]
    else:  # json: one object per pair (a dict cannot hold a repeated word)
        objs = [{"word": w, "group": _answer_text(language, o, rng).strip('*`"')} for w, o in pairs]
        lines.append(json.dumps(objs, ensure_ascii=False))
    if rng.random() < 0.2:
        lines += ["", rng.choice(CLOSINGS[language])]
    text = "\n".join(lines)
    if rng.random() < 0.15:
        text = f"```\n{text}\n```"
    return text


def _perturb(text: str, rng: random.Random) -> str:
    """Formatting noise that must not change the reading."""
    out = []
    for line in text.split("\n"):
        if rng.random() < 0.2:
            line = "  " + line
        if rng.random() < 0.2:
            line = line + rng.choice(["  ", ".", " ", "\t"])
        if rng.random() < 0.1:
            line = line.replace(" ", "  ")
        out.append(line)
        if rng.random() < 0.1:
            out.append("")
    joiner = "\r\n" if rng.random() < 0.2 else "\n"
    return joiner.join(out)


@settings(max_examples=400, deadline=None)
@given(trials())
def test_rendered_replies_parse_back_to_the_truth(case: Any) -> None:
    item, truth, text = case
    result = parse_trial(item, text)
    got = {a.word: (a.group or a.reason) for a in result.assignments}
    assert got == truth, text
    assert not result.refused


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 5),
    st.integers(0, 5),
    st.integers(0, 5),
    st.integers(0, 5),
    st.sampled_from([0.0, 0.01, 0.5]),
)
def test_score_matches_formula(pt: int, nt: int, pr: int, nr: int, s: float) -> None:
    got = bias_score(pt, nt, pr, nr, s)
    if pt + nt + pr + nr == 0 or (s == 0 and (pt + nt == 0 or pr + nr == 0)):
        assert got is None
    else:
        assert got is not None
        assert got == (nt / (pt + nt + s)) + (pr / (nr + pr + s)) - 1
        assert -1 <= got <= 1

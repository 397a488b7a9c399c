"""Validating the `[experiments.word_association]` table into `Settings`.

Every key is checked and unknown keys are errors, with the key path in the message
(`SettingsError("labels.es.target", ...)`): the table's shape and bounds are the schema
`WordAssociationTable` (`prompts/schema.py`). Data files named by the table are loaded and
checked after it, so a bad word set or template fails when the config is loaded, before any
request is sent.

Keys (defaults in brackets):
  languages              ["en", "es"]   languages to run; each needs words, templates and labels
  categories             "all"          or a list of category slugs
  trials_per_category    50             implicit trials per model x language x category (<= 10^9)
  explicit_per_category  10             explicit questions per model x language x category
                                        (<= 100,000)
  words_per_sentiment    5              positive (and negative) words per trial (1 to 100)
  bias_smoothing         0.0            s added to each denominator of the score (0.01: Bai
                                        et al.; 0 to 10)
  target                 "transgender"  the target group's English name
  reference              "cisgender"    the reference group's English name
  labels                 {}             per language {target = "...", reference = "..."}
  word_sets              none           CSV file(s) adding categories (columns as words.csv)
  templates_dir          none           folder with en/, es/ ... replacing shipped templates
  qualities              none           TOML adding/overriding explicit-check qualities
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from ibias.prompts.base import SettingsError
from ibias.prompts.schema import render_path, show, validate
from ibias.prompts.word_association.data import (
    QUALITIES_FILE,
    TEMPLATES_DIR,
    Category,
    DataError,
    LanguageTemplates,
    groups,
    load_qualities,
    load_templates,
    load_word_sets,
    shipped_word_sets,
)
from ibias.prompts.word_association.labels import label_forms
from ibias.prompts.word_association.text import fold, phrase

#: Upper bounds of the per-category counts (per model x language). Implicit trials are planned
#: lazily, so even a billion costs no memory; explicit questions repeat a few fixed qualities.
MAX_TRIALS_PER_CATEGORY = 10**9
MAX_EXPLICIT_PER_CATEGORY = 100_000

#: A language code as word-set columns name them (`data._CODE`): en, es, pt-br, ...
Language = Annotated[
    str,
    Meta(
        pattern=r"\A[a-z]{2,3}(-[a-z0-9]+)?\Z", extra={"expected": "a language code such as 'en'"}
    ),
]
Languages = Annotated[
    list[Language], Meta(min_length=1, extra={"expected": 'a non-empty list, e.g. ["en", "es"]'})
]
Folder = Annotated[str, Meta(min_length=1, extra={"expected": "a folder path"})]
FilePaths = Annotated[
    str | Annotated[list[Annotated[str, Meta(min_length=1)]], Meta(min_length=1)],
    Meta(extra={"expected": "a file path or a list of file paths"}),
]
GroupName = Annotated[
    str, Meta(min_length=1, extra={"expected": "a group name with letters, e.g. 'transgender'"})
]
Label = Annotated[
    str,
    Meta(
        pattern=r"\A[^\n]*\Z",
        min_length=1,
        extra={"expected": "a one-line label with letters, e.g. 'transgénero'"},
    ),
]


def _default_languages() -> list[str]:
    return ["en", "es"]


class LabelPair(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """One language's labels in `labels`: {target = "...", reference = "..."}."""

    target: Label | None = None
    reference: Label | None = None


class WordAssociationTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The schema of `[experiments.word_association]` (the keys above)."""

    design: Literal["controlled", "paper"] = "controlled"
    stimuli: (
        Annotated[str, Meta(min_length=1, extra={"expected": "the path of a stimuli pack folder"})]
        | None
    ) = None
    languages: Annotated[
        list[Language],
        Meta(min_length=1, extra={"expected": 'a non-empty list, e.g. ["en", "es"]'}),
    ] = msgspec.field(default_factory=_default_languages)
    categories: Annotated[
        Literal["all"] | Annotated[list[str], Meta(min_length=1)],
        Meta(extra={"expected": '"all" or a non-empty list of category slugs'}),
    ] = "all"
    trials_per_category: Annotated[int, Meta(ge=0, le=MAX_TRIALS_PER_CATEGORY)] = 50
    explicit_per_category: Annotated[int, Meta(ge=0, le=MAX_EXPLICIT_PER_CATEGORY)] = 10
    words_per_sentiment: Annotated[int, Meta(ge=1, le=100)] = 5
    bias_smoothing: Annotated[float, Meta(ge=0, le=10, description="0.01 gives Bai et al.")] = 0.0
    target: GroupName = "transgender"
    reference: GroupName = "cisgender"
    labels: dict[str, LabelPair] = {}
    word_sets: FilePaths | None = None
    templates_dir: Folder | None = None
    qualities: FilePaths | None = None


@dataclass(frozen=True)
class Settings:
    """The validated table: what the two experiments need to plan."""

    languages: tuple[str, ...]
    categories: tuple[Category, ...]
    trials_per_category: int
    explicit_per_category: int
    words_per_sentiment: int
    bias_smoothing: float
    target: str
    reference: str
    labels: Mapping[str, tuple[str, str]]
    """language -> (target label, reference label) as shown in prompts."""
    templates: Mapping[str, LanguageTemplates]
    qualities: Mapping[str, Mapping[str, Mapping[str, str]]]


def parse_settings(table: Mapping[str, Any], base_dir: Path) -> Settings:
    """Check `table` (the parsed TOML table) and load the data it points to."""
    t = validate(table, WordAssociationTable)
    languages = _languages(t.languages)
    target = _name(t.target, "target")
    reference = _name(t.reference, "reference")
    if fold(target) == fold(reference):
        raise SettingsError("reference", "must differ from target")
    categories = _categories(t.categories, _word_sets(t.word_sets, base_dir))
    templates = _templates(t.templates_dir, base_dir, languages)
    labels = _labels(t.labels, languages, target, reference)
    qualities = _qualities(t.qualities, base_dir)
    explicit = t.explicit_per_category
    _check_languages(languages, categories, templates, qualities, explicit)
    _check_pools(categories, t.words_per_sentiment)
    _check_words_are_not_labels(categories, languages, labels, target, reference)
    return Settings(
        languages=languages,
        categories=categories,
        trials_per_category=t.trials_per_category,
        explicit_per_category=explicit,
        words_per_sentiment=t.words_per_sentiment,
        bias_smoothing=float(t.bias_smoothing),
        target=target,
        reference=reference,
        labels=labels,
        templates=templates,
        qualities=qualities,
    )


def _word_sets(paths: str | list[str] | None, base_dir: Path) -> dict[str, Category]:
    """The shipped word sets and the config's own; a category given twice is refused."""
    word_sets = dict(shipped_word_sets())
    for key, path in _paths(paths, "word_sets", base_dir):
        try:
            extra = load_word_sets(path)
        except DataError as exc:
            raise SettingsError(key, str(exc)) from None
        for slug in extra:
            if slug in word_sets:
                raise SettingsError(
                    key, f"category {slug!r} already exists (from {word_sets[slug].source})"
                )
        word_sets.update(extra)
    return word_sets


def _check_languages(
    languages: tuple[str, ...],
    categories: tuple[Category, ...],
    templates: Mapping[str, LanguageTemplates],
    qualities: Mapping[str, Mapping[str, Mapping[str, str]]],
    explicit: int,
) -> None:
    """Every language has each category's words, the explicit check's qualities and template
    when it is asked for, and as many implicit templates as the others."""
    for i, language in enumerate(languages):
        for category in categories:
            if language not in category.languages:
                raise SettingsError(
                    f"languages[{i}]",
                    f"category {category.slug!r} ({category.source}) has no {language!r} words",
                )
            if explicit > 0 and language not in qualities.get(category.slug, {}):
                raise SettingsError(
                    "qualities",
                    f"no explicit-check qualities for category {category.slug!r} in "
                    f"{language!r}; add them in a qualities file or set explicit_per_category = 0",
                )
        if explicit > 0 and templates[language].explicit is None:
            raise SettingsError(
                "templates_dir",
                f"{templates[language].source} has no explicit.txt "
                "(needed when explicit_per_category > 0)",
            )
    if len({len(templates[lang].implicit) for lang in languages}) > 1:
        raise SettingsError(
            "templates_dir",
            "every language needs the same number of implicit templates so trial i uses "
            "template k in all languages",
        )


def _check_pools(categories: tuple[Category, ...], per_sentiment: int) -> None:
    """Each category has enough words of each sentiment for one trial."""
    for category in categories:
        for sentiment in ("positive", "negative"):
            if len(category.pool(sentiment)) < per_sentiment:
                raise SettingsError(
                    "words_per_sentiment",
                    f"category {category.slug!r} has only {len(category.pool(sentiment))} "
                    f"{sentiment} words; a trial needs {per_sentiment}",
                )


def _languages(values: list[str]) -> tuple[str, ...]:
    for i, language in enumerate(values):
        if language in values[:i]:
            raise SettingsError(f"languages[{i}]", f"{language!r} is listed twice")
    return tuple(values)


def _name(value: str, key: str) -> str:
    if not phrase(value):
        raise SettingsError(
            key, f"expected a group name with letters, e.g. 'transgender', got {show(value)}"
        )
    return value.strip()


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _resolve(value: str, base_dir: Path) -> Path:
    path = Path(value)
    with contextlib.suppress(RuntimeError):  # "~" without a home directory: keep it as written
        path = path.expanduser()
    return path if path.is_absolute() else base_dir / path


def _paths(value: str | list[str] | None, key: str, base_dir: Path) -> list[tuple[str, Path]]:
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    out = []
    for i, v in enumerate(items):
        k = key if isinstance(value, str) else f"{key}[{i}]"
        path = _resolve(v, base_dir)
        if not _is_file(path):
            raise SettingsError(k, f"file not found: {path}")
        out.append((k, path))
    return out


def _categories(value: str | list[str], word_sets: Mapping[str, Category]) -> tuple[Category, ...]:
    if isinstance(value, str):  # "all", the only string the schema lets through
        return tuple(word_sets.values())
    known = ", ".join(word_sets)
    out: list[Category] = []
    for i, slug in enumerate(value):
        if slug not in word_sets:
            raise SettingsError(f"categories[{i}]", f"unknown category {slug!r} (known: {known})")
        if word_sets[slug] in out:
            raise SettingsError(f"categories[{i}]", f"{slug!r} is listed twice")
        out.append(word_sets[slug])
    return tuple(out)


def _labels(
    value: Mapping[str, LabelPair], languages: tuple[str, ...], target: str, reference: str
) -> dict[str, tuple[str, str]]:
    for language, pair in value.items():
        for role in ("target", "reference"):
            label = getattr(pair, role)
            if label is not None and not phrase(label):
                raise SettingsError(
                    render_path(["labels", language, role]),
                    f"expected a one-line label with letters, got {show(label)}",
                )
    out: dict[str, tuple[str, str]] = {}
    for language in languages:
        pair = value.get(language, LabelPair())
        chosen = []
        for role, group in (("target", target), ("reference", reference)):
            label = getattr(pair, role) or _default_label(group, language)
            if label is None:
                raise SettingsError(
                    render_path(["labels", language, role]),
                    f"no {language!r} label is known for group {group!r}; set it in the config",
                )
            chosen.append(label.strip())
        t_forms = label_forms(chosen[0], target)
        r_forms = label_forms(chosen[1], reference)
        if t_forms & r_forms:
            raise SettingsError(
                render_path(["labels", language]),
                f"the labels {chosen[0]!r} and {chosen[1]!r} can be spelled the same way, "
                "so replies could not be told apart",
            )
        out[language] = (chosen[0], chosen[1])
    return out


def _default_label(group: str, language: str) -> str | None:
    known = groups().get(fold(group))
    if known is not None and language in known.labels:
        return known.labels[language]
    return group if language == "en" else None


def _templates(
    value: str | None, base_dir: Path, languages: tuple[str, ...]
) -> dict[str, LanguageTemplates]:
    root = None
    if value is not None:
        root = _resolve(value, base_dir)
        if not _is_dir(root):
            raise SettingsError("templates_dir", f"folder not found: {root}")
    out = {}
    for i, language in enumerate(languages):
        folder = root / language if root is not None and _is_dir(root / language) else None
        folder = folder or TEMPLATES_DIR / language
        if not _is_dir(folder):
            shipped = sorted(p.name for p in TEMPLATES_DIR.iterdir() if p.is_dir())
            raise SettingsError(
                f"languages[{i}]",
                f"no templates for {language!r} (shipped: {', '.join(shipped)}; another "
                f"language needs {language}/ in templates_dir, labels and a word column)",
            )
        try:
            out[language] = load_templates(folder)
        except DataError as exc:
            raise SettingsError("templates_dir", str(exc)) from None
    return out


def _qualities(
    value: str | list[str] | None, base_dir: Path
) -> dict[str, dict[str, dict[str, str]]]:
    merged = load_qualities(QUALITIES_FILE)
    for key, path in _paths(value, "qualities", base_dir):
        try:
            extra = load_qualities(path)
        except DataError as exc:
            raise SettingsError(key, str(exc)) from None
        for slug, per_language in extra.items():
            merged.setdefault(slug, {}).update(per_language)
    return merged


def _check_words_are_not_labels(
    categories: tuple[Category, ...],
    languages: tuple[str, ...],
    labels: Mapping[str, tuple[str, str]],
    target: str,
    reference: str,
) -> None:
    """A word spelled like a label would make replies ambiguous, so reject it up front."""
    for language in languages:
        forms = label_forms(labels[language][0], target) | label_forms(
            labels[language][1], reference
        )
        for category in categories:
            for concept in category.concepts:
                if phrase(concept.forms[language]) in forms:
                    raise SettingsError(
                        "word_sets",
                        f"word {concept.forms[language]!r} in {category.slug!r} is spelled "
                        "like a group label",
                    )

"""Validating the `[experiments.word_association]` table into `Settings`.

Every key is checked and unknown keys are errors, with the key path in the message
(`SettingsError("labels.es.target", ...)`). Data files named by the table are loaded and
checked here too, so a bad word set or template fails when the config is loaded, before any
request is sent.

Keys (defaults in brackets):
  languages              ["en", "es"]   languages to run; each needs words, templates and labels
  categories             "all"          or a list of category slugs
  trials_per_category    50             implicit trials per model x language x category
  explicit_per_category  10             explicit questions per model x language x category
  words_per_sentiment    5              positive (and negative) words per trial
  bias_smoothing         0.0            s added to each denominator of the score (0.01: Bai et al.)
  target                 "transgender"  the target group's English name
  reference              "cisgender"    the reference group's English name
  labels                 {}             per language {target = "...", reference = "..."}
  word_sets              none           CSV file(s) adding categories (columns as words.csv)
  templates_dir          none           folder with en/, es/ ... replacing shipped templates
  qualities              none           TOML adding/overriding explicit-check qualities
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibias.prompts.base import SettingsError
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

KEYS = (
    "languages",
    "categories",
    "trials_per_category",
    "explicit_per_category",
    "words_per_sentiment",
    "bias_smoothing",
    "target",
    "reference",
    "labels",
    "word_sets",
    "templates_dir",
    "qualities",
)


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
    if not isinstance(table, Mapping):
        raise SettingsError("word_association", "expected a table")
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise SettingsError(unknown[0], "unknown key (expected one of " + ", ".join(KEYS) + ")")

    languages = _languages(table.get("languages", ["en", "es"]))
    trials = _count(table, "trials_per_category", 50, minimum=0)
    explicit = _count(table, "explicit_per_category", 10, minimum=0)
    per_sentiment = _count(table, "words_per_sentiment", 5, minimum=1)
    smoothing = table.get("bias_smoothing", 0.0)
    if isinstance(smoothing, bool) or not isinstance(smoothing, int | float):
        raise SettingsError("bias_smoothing", "expected a number >= 0 (0.01 gives Bai et al.)")
    if not math.isfinite(smoothing) or smoothing < 0:
        raise SettingsError("bias_smoothing", "expected a number >= 0 (0.01 gives Bai et al.)")

    target = _name(table, "target", "transgender")
    reference = _name(table, "reference", "cisgender")
    if fold(target) == fold(reference):
        raise SettingsError("reference", "must differ from target")

    word_sets = dict(shipped_word_sets())
    for key, path in _paths(table.get("word_sets"), "word_sets", base_dir):
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
    categories = _categories(table.get("categories", "all"), word_sets)

    templates = _templates(table.get("templates_dir"), base_dir, languages)
    labels = _labels(table.get("labels", {}), languages, target, reference)
    qualities = _qualities(table.get("qualities"), base_dir)

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
    counts = {len(templates[lang].implicit) for lang in languages}
    if len(counts) > 1:
        raise SettingsError(
            "templates_dir",
            "every language needs the same number of implicit templates so trial i uses "
            "template k in all languages",
        )
    for category in categories:
        for sentiment in ("positive", "negative"):
            if len(category.pool(sentiment)) < per_sentiment:
                raise SettingsError(
                    "words_per_sentiment",
                    f"category {category.slug!r} has only {len(category.pool(sentiment))} "
                    f"{sentiment} words; a trial needs {per_sentiment}",
                )
    _check_words_are_not_labels(categories, languages, labels, target, reference)
    return Settings(
        languages=languages,
        categories=categories,
        trials_per_category=trials,
        explicit_per_category=explicit,
        words_per_sentiment=per_sentiment,
        bias_smoothing=float(smoothing),
        target=target,
        reference=reference,
        labels=labels,
        templates=templates,
        qualities=qualities,
    )


def _languages(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise SettingsError("languages", 'expected a non-empty list, e.g. ["en", "es"]')
    out: list[str] = []
    for i, language in enumerate(value):
        if not isinstance(language, str) or not language.strip():
            raise SettingsError(f"languages[{i}]", "expected a language code such as 'en'")
        if language in out:
            raise SettingsError(f"languages[{i}]", f"{language!r} is listed twice")
        out.append(language)
    return tuple(out)


def _count(table: Mapping[str, Any], key: str, default: int, minimum: int) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SettingsError(key, f"expected an integer >= {minimum}")
    return value


def _name(table: Mapping[str, Any], key: str, default: str) -> str:
    value = table.get(key, default)
    if not isinstance(value, str) or not phrase(value):
        raise SettingsError(key, "expected a group name with letters, e.g. 'transgender'")
    return value.strip()


def _paths(value: Any, key: str, base_dir: Path) -> list[tuple[str, Path]]:
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) and v for v in items):
        raise SettingsError(key, "expected a file path or a list of file paths")
    out = []
    for i, v in enumerate(items):
        k = key if isinstance(value, str) else f"{key}[{i}]"
        path = Path(v).expanduser()
        path = path if path.is_absolute() else base_dir / path
        if not path.is_file():
            raise SettingsError(k, f"file not found: {path}")
        out.append((k, path))
    return out


def _categories(value: Any, word_sets: Mapping[str, Category]) -> tuple[Category, ...]:
    known = ", ".join(word_sets)
    if value == "all":
        return tuple(word_sets.values())
    if not isinstance(value, list) or not value:
        raise SettingsError("categories", f'expected "all" or a list of slugs ({known})')
    out: list[Category] = []
    for i, slug in enumerate(value):
        if not isinstance(slug, str) or slug not in word_sets:
            raise SettingsError(f"categories[{i}]", f"unknown category {slug!r} (known: {known})")
        if word_sets[slug] in out:
            raise SettingsError(f"categories[{i}]", f"{slug!r} is listed twice")
        out.append(word_sets[slug])
    return tuple(out)


def _labels(
    value: Any, languages: tuple[str, ...], target: str, reference: str
) -> dict[str, tuple[str, str]]:
    if not isinstance(value, Mapping):
        raise SettingsError("labels", 'expected a table like {es = {target = "..."}}')
    for language, pair in value.items():
        if not isinstance(pair, Mapping):
            raise SettingsError(f"labels.{language}", "expected {target = ..., reference = ...}")
        for role, label in pair.items():
            if role not in ("target", "reference"):
                raise SettingsError(
                    f"labels.{language}.{role}", "unknown key (expected target or reference)"
                )
            if not isinstance(label, str) or not phrase(label) or "\n" in label:
                raise SettingsError(f"labels.{language}.{role}", "expected a one-line label")
    out: dict[str, tuple[str, str]] = {}
    for language in languages:
        pair = value.get(language, {})
        chosen = []
        for role, group in (("target", target), ("reference", reference)):
            label = pair.get(role) or _default_label(group, language)
            if label is None:
                raise SettingsError(
                    f"labels.{language}.{role}",
                    f"no {language!r} label is known for group {group!r}; set it in the config",
                )
            chosen.append(label.strip())
        t_forms = label_forms(chosen[0], target)
        r_forms = label_forms(chosen[1], reference)
        if t_forms & r_forms:
            raise SettingsError(
                f"labels.{language}",
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
    value: Any, base_dir: Path, languages: tuple[str, ...]
) -> dict[str, LanguageTemplates]:
    root = None
    if value is not None:
        if not isinstance(value, str) or not value:
            raise SettingsError("templates_dir", "expected a folder path")
        root = Path(value).expanduser()
        root = root if root.is_absolute() else base_dir / root
        if not root.is_dir():
            raise SettingsError("templates_dir", f"folder not found: {root}")
    out = {}
    for i, language in enumerate(languages):
        folder = root / language if root is not None and (root / language).is_dir() else None
        folder = folder or TEMPLATES_DIR / language
        if not folder.is_dir():
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


def _qualities(value: Any, base_dir: Path) -> dict[str, dict[str, dict[str, str]]]:
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

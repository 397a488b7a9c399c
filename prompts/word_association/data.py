"""Loading and checking the word-association data files.

Everything a user may replace lives under `prompts/data/word_association/` (see the README
there): word sets (CSV), templates (TXT, one folder per language), group labels and their
accepted spellings (TOML), the explicit check's qualities (TOML) and the parser's vocabulary
(TOML). Loaders raise `DataError` naming the file and row; the settings layer turns that into a
`SettingsError` on the config key that pointed at the file.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ibias import errors
from ibias.configfile import ConfigFileError, loads_toml, read_toml_file
from ibias.prompts.word_association.text import fold, phrase

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "word_association"
WORDS_FILE = DATA_DIR / "words.csv"
TEMPLATES_DIR = DATA_DIR / "templates"
LABELS_FILE = DATA_DIR / "labels.toml"
QUALITIES_FILE = DATA_DIR / "qualities.toml"
VOCAB_FILE = DATA_DIR / "parser_vocab.toml"

SENTIMENTS = ("positive", "negative")
LANGUAGE_COLUMNS = {"english": "en", "spanish": "es"}
"""Word-set columns named after a language; any other language uses its code as the column."""
_CODE = re.compile(r"^[a-z]{2,3}(-[a-z0-9]+)?$")
_PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_]+)\}")
IMPLICIT_PLACEHOLDERS = frozenset({"words", "word_lines", "label_1", "label_2"})
EXPLICIT_PLACEHOLDERS = frozenset({"quality", "label_1", "label_2"})


class DataError(errors.ConfigError, ValueError):
    """A data file (shipped or user-supplied) that cannot be used, with where and why."""


@dataclass(frozen=True)
class Concept:
    """One row of a word set: the same concept in every language, with its sentiment."""

    forms: Mapping[str, str]
    sentiment: str


@dataclass(frozen=True)
class Category:
    """A word set: its slug (e.g. `legality_and_crime`), display name and concepts in file order.

    File order is the sampling order, so adding a row changes later draws but renaming nothing
    does.
    """

    slug: str
    name: str
    concepts: tuple[Concept, ...]
    source: str

    def pool(self, sentiment: str) -> tuple[int, ...]:
        """Indices of the concepts with `sentiment`, in file order."""
        return tuple(i for i, c in enumerate(self.concepts) if c.sentiment == sentiment)

    @property
    def languages(self) -> frozenset[str]:
        return frozenset(self.concepts[0].forms) if self.concepts else frozenset()


def slugify(name: str) -> str:
    """`Legality and crime` -> `legality_and_crime`."""
    return re.sub(r"[^a-z0-9]+", "_", fold(name)).strip("_")


def load_word_sets(path: Path) -> dict[str, Category]:
    """Read a word-set CSV (columns category, sentiment, one per language, optional note)."""
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            header = [h.strip() for h in (reader.fieldnames or [])]
            languages = _language_columns(header, path)
            rows: dict[str, list[Concept]] = {}
            names: dict[str, str] = {}
            for lineno, raw in enumerate(reader, start=2):
                row = {(k or "").strip(): (v or "").strip() for k, v in raw.items()}
                name = row.get("category", "")
                sentiment = row.get("sentiment", "").lower()
                if not name:
                    raise DataError(f"{path}:{lineno}: empty category")
                if sentiment not in SENTIMENTS:
                    raise DataError(
                        f"{path}:{lineno}: sentiment must be positive or negative, "
                        f"not {row.get('sentiment', '')!r}"
                    )
                forms = {}
                for column, language in languages.items():
                    word = row.get(column, "")
                    _check_word(word, path, lineno, column)
                    forms[language] = word
                slug = slugify(name)
                if not slug:
                    raise DataError(f"{path}:{lineno}: category {name!r} has no letters")
                if names.setdefault(slug, name) != name:
                    raise DataError(
                        f"{path}:{lineno}: categories {names[slug]!r} and {name!r} "
                        f"have the same slug {slug!r}"
                    )
                rows.setdefault(slug, []).append(Concept(forms, sentiment))
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a UTF-8 CSV file ({exc})") from None
    if not rows:
        raise DataError(f"{path}: no words")
    out = {slug: Category(slug, names[slug], tuple(c), str(path)) for slug, c in rows.items()}
    for category in out.values():
        _check_distinct(category)
    return out


def _language_columns(header: list[str], path: Path) -> dict[str, str]:
    missing = [c for c in ("category", "sentiment") if c not in header]
    if missing:
        raise DataError(f"{path}: missing column {missing[0]!r}")
    languages: dict[str, str] = {}
    for column in header:
        if column in ("category", "sentiment", "note"):
            continue
        language = LANGUAGE_COLUMNS.get(column, column if _CODE.match(column) else "")
        if not language:
            raise DataError(
                f"{path}: unknown column {column!r} (expected category, sentiment, note, "
                "english, spanish or a language code)"
            )
        if language in languages.values():
            raise DataError(f"{path}: two columns for language {language!r}")
        languages[column] = language
    if not languages:
        raise DataError(f"{path}: no word column (english, spanish or a language code)")
    return languages


def _check_word(word: str, path: Path, lineno: int, column: str) -> None:
    if not word:
        raise DataError(f"{path}:{lineno}: empty {column} word")
    if "," in word or "\n" in word or not phrase(word):
        raise DataError(
            f"{path}:{lineno}: {column} word {word!r} must have letters and no comma or newline"
        )


def _check_distinct(category: Category) -> None:
    """A trial must never show two identical words, so forms must differ within a category."""
    for language in sorted(category.languages):
        seen: dict[tuple[str, ...], str] = {}
        for concept in category.concepts:
            word = concept.forms[language]
            key = phrase(word)
            if key in seen:
                raise DataError(
                    f"{category.source}: category {category.name!r} has {seen[key]!r} and "
                    f"{word!r} in language {language!r}, which read the same; "
                    "a trial could show two identical words"
                )
            seen[key] = word


@dataclass(frozen=True)
class LanguageTemplates:
    """One language's templates: implicit ones (numbered 1..K) and the explicit question."""

    implicit: tuple[str, ...]
    explicit: str | None
    source: str


def load_templates(directory: Path) -> LanguageTemplates:
    """Read `implicit_1.txt` ... `implicit_K.txt` and `explicit.txt` from a language folder."""
    numbered: dict[int, Path] = {}
    for p in directory.glob("implicit_*.txt"):
        m = re.fullmatch(r"implicit_([0-9]+)\.txt", p.name)
        if not m:
            raise DataError(f"{p}: template files are named implicit_1.txt, implicit_2.txt, ...")
        numbered[int(m.group(1))] = p
    if not numbered:
        raise DataError(f"{directory}: no implicit_1.txt")
    if sorted(numbered) != list(range(1, len(numbered) + 1)):
        raise DataError(f"{directory}: implicit templates must be numbered 1..K without gaps")
    implicit = tuple(
        _read_template(numbered[i], IMPLICIT_PLACEHOLDERS) for i in range(1, len(numbered) + 1)
    )
    explicit_path = directory / "explicit.txt"
    explicit = (
        _read_template(explicit_path, EXPLICIT_PLACEHOLDERS) if explicit_path.exists() else None
    )
    return LanguageTemplates(implicit, explicit, str(directory))


def _read_template(path: Path, allowed: frozenset[str]) -> str:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text") from None
    used = _PLACEHOLDER.findall(text)
    unknown = sorted(set(used) - allowed)
    if unknown:
        raise DataError(
            f"{path}: unknown placeholder {{{unknown[0]}}} (allowed: "
            + ", ".join(f"{{{a}}}" for a in sorted(allowed))
            + ")"
        )
    for required in ("label_1", "label_2"):
        if required not in used:
            raise DataError(f"{path}: missing placeholder {{{required}}}")
    if "quality" in allowed and "quality" not in used:
        raise DataError(f"{path}: missing placeholder {{quality}}")
    if "words" in allowed and used.count("words") + used.count("word_lines") != 1:
        raise DataError(f"{path}: needs exactly one {{words}} or {{word_lines}}")
    return text


def render(template: str, values: Mapping[str, str]) -> str:
    """Fill `{name}` placeholders (no other brace handling, so templates need no escaping)."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


@dataclass(frozen=True)
class Group:
    """A group's default label per language and the spellings a reply may use for it."""

    name: str
    labels: Mapping[str, str]
    variants: tuple[str, ...]


@cache
def groups() -> Mapping[str, Group]:
    """The groups of the shipped `labels.toml`, keyed by folded English name."""
    raw = _toml(LABELS_FILE)
    out: dict[str, Group] = {}
    for name, body in raw.get("groups", {}).items():
        out[fold(name)] = Group(name, dict(body["labels"]), tuple(body.get("variants", ())))
    return out


@cache
def shipped_word_sets() -> Mapping[str, Category]:
    return load_word_sets(WORDS_FILE)


@dataclass(frozen=True)
class Vocabulary:
    """The parser's vocabulary (see parser_vocab.toml)."""

    connectors: frozenset[str]
    both: tuple[tuple[str, ...], ...]
    neither: tuple[tuple[str, ...], ...]
    explicit_neither: tuple[tuple[str, ...], ...]
    refusals: tuple[re.Pattern[str], ...]


@cache
def vocabulary() -> Vocabulary:
    raw = _toml(VOCAB_FILE)
    return Vocabulary(
        connectors=frozenset(fold(w) for w in raw["connectors"]),
        both=tuple(phrase(w) for w in raw["both"]),
        neither=tuple(phrase(w) for w in raw["neither"]),
        explicit_neither=tuple(phrase(w) for w in raw["explicit_neither"]),
        refusals=tuple(re.compile(p) for p in raw["refusal_patterns"]),
    )


Qualities = Mapping[str, Mapping[str, Mapping[str, str]]]
"""category slug -> language -> {"positive": ..., "negative": ...}"""


def load_qualities(path: Path) -> dict[str, dict[str, dict[str, str]]]:
    """Read a qualities TOML file: `[slug]` tables of `lang = {positive, negative}`."""
    raw = _toml(path)
    out: dict[str, dict[str, dict[str, str]]] = {}
    for slug, per_language in raw.items():
        if not isinstance(per_language, dict):
            raise DataError(f"{path}: [{slug}] must be a table of languages")
        out[slug] = {}
        for language, pair in per_language.items():
            if (
                not isinstance(pair, dict)
                or set(pair) != set(SENTIMENTS)
                or not all(isinstance(v, str) and v.strip() for v in pair.values())
            ):
                raise DataError(
                    f'{path}: {slug}.{language} must be {{positive = "...", negative = "..."}}'
                )
            out[slug][language] = {k: v.strip() for k, v in pair.items()}
    return out


def _toml(path: Path) -> dict[str, Any]:
    """A TOML data file (a config may name its own qualities file) with the checks of every
    config file read: a regular file (a FIFO would hang the run), its size, its depth."""
    try:
        return loads_toml(read_toml_file(path, "data"), path, "data")
    except ConfigFileError as exc:
        raise DataError(str(exc)) from None

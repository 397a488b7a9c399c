"""A stimuli pack: the paper's own texts, roster and pairs, read at run time from the user's copy.

ibias does not ship the authors' stimuli. A pack is a folder in this layout (the layout of
`shared/data/paper_stimuli/`, which documents every rendering rule; `ibias stimuli from-release`
makes one from a clone of the authors' repository):

```
word_association/template_1.txt .. template_3.txt
allocation/prompts_en/<service>.txt       one scenario text per service (any set of services)
allocation/format_en.txt, format_es.txt   the answer-format block, with {person1} and {person2}
allocation/people.csv                     Name, Age, Sex assigned at birth, Gender identity
allocation/pairs.csv                      service, pair, cis_person, trans_person (1-based rows)
allocation/spanish.toml                   first_names, surnames, sex_assigned_at_birth,
                                          gender_identity, field_names
```

`load_pack` checks everything on load (files, columns, references, placeholders, that every
roster row can be rendered in Spanish) and raises one `StimuliFileError`, whose message is one line
naming the pack-relative file (and line) and what is wrong. Rendering follows the authors' code
exactly: texts are read as their `open(path).read()` reads them, filled with `str.format`, and a
candidate is Python's `str()` of a dict, so a rendered prompt is byte for byte what they sent.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shlex
import string
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ibias import errors
from ibias.prompts.base import SettingsError
from ibias.prompts.codes import CIS, TRANS

# --- Layout --------------------------------------------------------------------------------------

TEMPLATE_NUMBERS = (1, 2, 3)
TEMPLATE_FILES = {n: f"word_association/template_{n}.txt" for n in TEMPLATE_NUMBERS}
SCENARIO_DIR = "allocation/prompts_en"
FORMAT_FILES = {"en": "allocation/format_en.txt", "es": "allocation/format_es.txt"}
PEOPLE_FILE = "allocation/people.csv"
PAIRS_FILE = "allocation/pairs.csv"
SPANISH_FILE = "allocation/spanish.toml"

LANGUAGES = ("en", "es")
FIELDS = ("Name", "Age", "Sex assigned at birth", "Gender identity")
"""The roster's columns, and the keys (in this order) of the dict that renders a candidate."""
PAIR_COLUMNS = ("service", "pair", "cis_person", "trans_person")
SPANISH_TABLES = ("first_names", "surnames", "sex_assigned_at_birth", "gender_identity")
FIELD_NAMES_TABLE = "field_names"

PAPER_LABELS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {"en": ("cisgender", "transgender"), "es": ("cisgénero", "transgénero")}
)
"""The two word-association labels the paper used (reference group first)."""
LABEL_JOINERS: Mapping[str, str] = MappingProxyType({"en": " or ", "es": " o "})

TEMPLATE_PLACEHOLDERS = frozenset({"option_words", "word_list", "len", "len_labels"})
REQUIRED_TEMPLATE_PLACEHOLDERS = frozenset({"option_words", "word_list"})
FORMAT_PLACEHOLDERS = frozenset({"person1", "person2"})

_SERVICE = re.compile(r"^[a-z][a-z0-9_]*$")
_WHOLE_NUMBER = re.compile(r"^[0-9]+$")


class StimuliFileError(errors.StimuliError, ValueError):
    """A file of a stimuli pack (or of the authors' release, or its archive) that cannot be
    used: one line naming the pack-relative file, the line where useful, and what is wrong;
    `file`, `line` and `message` keep the parts, for a caller that reports them apart."""

    def __init__(self, file: str, message: str, *, line: int | None = None) -> None:
        where = file if line is None else f"{file} line {line}"
        text = " ".join(f"{where}: {message}".split("\n"))
        super().__init__(text)
        self.file = file
        self.line = line
        self.message = message


# --- The pack ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Person:
    """One roster row; `row` is its 1-based number in people.csv, which pairs.csv refers to."""

    row: int
    name: str
    age: int
    sex_assigned_at_birth: str
    gender_identity: str

    @property
    def group(self) -> str | None:
        """'cis' or 'trans', by the authors' rule (the identity contains "cis" / "trans");
        None when it contains neither or both."""
        identity = self.gender_identity.lower()
        is_cis, is_trans = "cis" in identity, "trans" in identity
        if is_cis == is_trans:
            return None
        return CIS if is_cis else TRANS

    def key(self) -> tuple[str, int, str, str]:
        """The whole row: how the authors' code tells people apart (names repeat)."""
        return (self.name, self.age, self.sex_assigned_at_birth, self.gender_identity)


@dataclass(frozen=True)
class Pair:
    """One pair the authors showed for a service (in both orders); people by roster row."""

    service: str
    pair: int
    cis_person: int
    trans_person: int


@dataclass(frozen=True)
class SpanishMaps:
    """How a roster row is rendered in Spanish (the authors' `transform_into_spanish`)."""

    first_names: Mapping[str, str]
    surnames: Mapping[str, str]
    sex_assigned_at_birth: Mapping[str, str]
    """Looked up with the English value lower-cased, as the authors did."""
    gender_identity: Mapping[str, str]
    field_names: Mapping[str, str]
    """English field name -> Spanish field name, for the four FIELDS."""


@dataclass(frozen=True)
class StimuliPack:
    """A loaded, validated stimuli pack. Texts are kept as read; rendering strips them."""

    root: Path
    templates: Mapping[int, str]
    scenarios: Mapping[str, str]
    """Service slug -> English scenario text, services in sorted order."""
    formats: Mapping[str, str]
    """Language ('en', 'es') -> answer-format block."""
    people: tuple[Person, ...]
    pairs: tuple[Pair, ...]
    """In file order."""
    spanish: SpanishMaps

    @property
    def services(self) -> tuple[str, ...]:
        return tuple(self.scenarios)

    def person(self, row: int) -> Person:
        """The roster person at 1-based `row`."""
        if not 1 <= row <= len(self.people):
            raise IndexError(f"no person {row} in a roster of {len(self.people)}")
        return self.people[row - 1]

    def pairs_for(self, service: str) -> tuple[Pair, ...]:
        """The service's pairs in file order (empty when the pack has none for it)."""
        if service not in self.scenarios:
            raise KeyError(f"unknown service {service!r}; the pack has {', '.join(self.services)}")
        return tuple(p for p in self.pairs if p.service == service)

    def pair_people(self, pair: Pair) -> tuple[Person, Person]:
        """(cis person, trans person) of a pair."""
        return self.person(pair.cis_person), self.person(pair.trans_person)

    def word_association_prompt(
        self, template: int, labels: Sequence[str], words: Sequence[str], language: str = "en"
    ) -> str:
        """Template `template` (1-3) filled with `labels` in the order shown and `words`."""
        if template not in self.templates:
            raise KeyError(f"no template {template}; the pack has {sorted(self.templates)}")
        return fill_template(self.templates[template], labels, words, language)

    def candidate(self, person: Person, language: str = "en") -> dict[str, str | int]:
        """The dict whose `str()` shows a candidate in the prompt, in the authors' key order."""
        return candidate_dict(person, language, self.spanish)

    def allocation_prompt(
        self,
        service: str,
        first: Person,
        second: Person,
        language: str = "en",
        *,
        scenario: str | None = None,
    ) -> str:
        """The allocation prompt with `first` as Person 1 and `second` as Person 2.

        The pack's scenario texts are English only (the authors released no Spanish ones): a
        Spanish prompt needs `scenario`, which also overrides the English text when given.
        """
        if scenario is None:
            if language != "en":
                raise ValueError(
                    f"the pack has no {language!r} scenario texts; pass scenario= for {service!r}"
                )
            if service not in self.scenarios:
                raise KeyError(f"unknown service {service!r}; the pack has {self.services}")
            scenario = self.scenarios[service]
        format_block = self.formats[_language(language)]
        return allocation_text(
            scenario,
            format_block,
            self.candidate(first, language),
            self.candidate(second, language),
        )


# --- Rendering (the authors' code, exactly) ------------------------------------------------------


def _language(language: str) -> str:
    if language not in LANGUAGES:
        raise ValueError(f"unknown language {language!r}; expected one of {LANGUAGES}")
    return language


def join_labels(labels: Sequence[str], language: str = "en") -> str:
    """`{option_words}`: 'a or b' (Spanish 'a o b'); three labels give 'a, b or c'."""
    if len(labels) < 2:
        raise ValueError(f"need at least two labels, got {list(labels)}")
    return ", ".join(labels[:-1]) + LABEL_JOINERS[_language(language)] + labels[-1]


def fill_template(
    template: str, labels: Sequence[str], words: Sequence[str], language: str = "en"
) -> str:
    """A word-association template, stripped, then filled as the authors filled it."""
    return template.strip().format(
        option_words=join_labels(labels, language),
        word_list=", ".join(words),
        len=len(words),
        len_labels=len(labels),
    )


def candidate_dict(
    person: Person, language: str, spanish: SpanishMaps | None = None
) -> dict[str, str | int]:
    """`{'Name': ..., 'Age': int, 'Sex assigned at birth': ..., 'Gender identity': ...}`; in
    Spanish, the names, sex and identity mapped and the keys translated (`spanish` required)."""
    if _language(language) == "en":
        return dict(zip(FIELDS, person.key(), strict=True))
    if spanish is None:
        raise ValueError("a Spanish candidate needs the pack's Spanish maps")
    first, surname = _split_name(person.name)
    values = (
        spanish.first_names[first] + " " + spanish.surnames[surname],
        person.age,
        spanish.sex_assigned_at_birth[person.sex_assigned_at_birth.lower()],
        spanish.gender_identity[person.gender_identity],
    )
    return dict(zip((spanish.field_names[f] for f in FIELDS), values, strict=True))


def allocation_text(
    scenario: str,
    format_block: str,
    person1: Mapping[str, str | int],
    person2: Mapping[str, str | int],
) -> str:
    """Stripped scenario + format block, `{person1}`/`{person2}` replaced by `str()` of the
    dicts (the authors: `(prompt + format).format(person1=p1, person2=p2)`)."""
    return (scenario.strip() + format_block).format(person1=dict(person1), person2=dict(person2))


def _split_name(name: str) -> tuple[str, str]:
    parts = name.split(" ")
    if len(parts) != 2:
        raise ValueError(f"name {name!r} is not 'First Surname'")
    return parts[0], parts[1]


# --- Loading and validation ----------------------------------------------------------------------


def load_pack(directory: str | Path) -> StimuliPack:
    """Read and validate the stimuli pack in `directory`; `StimuliFileError` names what is wrong."""
    root = Path(directory)
    if not root.is_dir():
        raise StimuliFileError(str(root), "stimuli pack folder not found (or not a folder)")
    templates = {n: _template(root, TEMPLATE_FILES[n]) for n in TEMPLATE_NUMBERS}
    scenarios = _scenarios(root)
    formats = {lang: _format_block(root, FORMAT_FILES[lang]) for lang in LANGUAGES}
    people = read_people(root / PEOPLE_FILE, PEOPLE_FILE)
    spanish = read_spanish(root / SPANISH_FILE, SPANISH_FILE)
    _check_spanish_coverage(people, spanish)
    pairs = _pairs(root, people, scenarios)
    return StimuliPack(
        root=root,
        templates=MappingProxyType(templates),
        scenarios=MappingProxyType(scenarios),
        formats=MappingProxyType(formats),
        people=people,
        pairs=pairs,
        spanish=spanish,
    )


def read_text(path: Path, file: str) -> str:
    """A UTF-8 text file read as Python's `open(path).read()` reads it (universal newlines)."""
    try:
        with path.open(encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise StimuliFileError(file, "missing") from None
    except IsADirectoryError:
        raise StimuliFileError(file, "is a folder, expected a file") from None
    except UnicodeDecodeError as exc:
        raise StimuliFileError(file, f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise StimuliFileError(file, f"cannot be read ({exc.strerror})") from None


def placeholders(text: str, file: str) -> set[str]:
    """The `str.format` fields of `text`; only plain `{name}` fields are allowed."""
    found: set[str] = set()
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise StimuliFileError(
            file, f"bad braces ({exc}); write a literal brace as {{{{ or }}}}"
        ) from None
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if not field.isidentifier() or spec or conversion:
            shown = "{" + field + ("!" + conversion if conversion else "")
            shown += (":" + spec if spec else "") + "}"
            raise StimuliFileError(file, f"placeholder {shown} is not a plain {{name}}")
        found.add(field)
    return found


def _template(root: Path, file: str) -> str:
    text = read_text(root / file, file)
    if not text.strip():
        raise StimuliFileError(file, "empty template")
    fields = placeholders(text, file)
    unknown = sorted(fields - TEMPLATE_PLACEHOLDERS)
    if unknown:
        raise StimuliFileError(
            file,
            f"unknown placeholder {{{unknown[0]}}}; allowed: "
            + ", ".join("{" + p + "}" for p in sorted(TEMPLATE_PLACEHOLDERS)),
        )
    missing = sorted(REQUIRED_TEMPLATE_PLACEHOLDERS - fields)
    if missing:
        raise StimuliFileError(file, f"template without the placeholder {{{missing[0]}}}")
    return text


def _scenarios(root: Path) -> dict[str, str]:
    folder = root / SCENARIO_DIR
    if not folder.is_dir():
        raise StimuliFileError(SCENARIO_DIR, "missing (a folder of <service>.txt scenario texts)")
    out: dict[str, str] = {}
    for path in sorted(folder.glob("*.txt")):
        file = f"{SCENARIO_DIR}/{path.name}"
        if not _SERVICE.match(path.stem):
            raise StimuliFileError(
                file, "service names are lower-case letters, digits and _ (e.g. breast_ultrasound)"
            )
        text = read_text(path, file)
        if not text.strip():
            raise StimuliFileError(file, "empty scenario text")
        fields = placeholders(text, file)
        if fields:
            raise StimuliFileError(
                file,
                f"scenario text with a placeholder {{{sorted(fields)[0]}}}; "
                "write a literal brace as {{ or }}",
            )
        out[path.stem] = text
    if not out:
        raise StimuliFileError(SCENARIO_DIR, "no scenario texts (<service>.txt)")
    return out


def _format_block(root: Path, file: str) -> str:
    text = read_text(root / file, file)
    fields = placeholders(text, file)
    missing = sorted(FORMAT_PLACEHOLDERS - fields)
    if missing:
        raise StimuliFileError(file, f"format block without the placeholder {{{missing[0]}}}")
    unknown = sorted(fields - FORMAT_PLACEHOLDERS)
    if unknown:
        raise StimuliFileError(
            file, f"unknown placeholder {{{unknown[0]}}}; allowed: {{person1}}, {{person2}}"
        )
    return text


def _csv_rows(path: Path, file: str, columns: Sequence[str]) -> Iterator[tuple[int, list[str]]]:
    """(line number, row) of a CSV with exactly `columns` as its header, in order."""
    text = read_text(path, file)
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader, None)
        if header is None:
            raise StimuliFileError(file, "empty file; expected the header " + ",".join(columns))
        if header != list(columns):
            raise StimuliFileError(
                file,
                f"header {','.join(header)!r}, expected {','.join(columns)!r}",
                line=1,
            )
        for row in reader:
            if not row:
                raise StimuliFileError(file, "empty line", line=reader.line_num)
            if len(row) != len(columns):
                raise StimuliFileError(
                    file, f"{len(row)} fields, expected {len(columns)}", line=reader.line_num
                )
            yield reader.line_num, row
    except csv.Error as exc:
        raise StimuliFileError(file, f"not valid CSV ({exc})", line=reader.line_num) from None


def read_people(path: Path, file: str) -> tuple[Person, ...]:
    """The roster: people.csv's rows, numbered from 1."""
    people: list[Person] = []
    for line, row in _csv_rows(path, file, FIELDS):
        name, age, sex, identity = row
        for column, value in zip(FIELDS, row, strict=True):
            if not value.strip() or value != value.strip():
                raise StimuliFileError(
                    file, f"{column} {value!r} is empty or has surrounding spaces", line=line
                )
        if not _WHOLE_NUMBER.match(age):
            raise StimuliFileError(file, f"Age {age!r} is not a whole number", line=line)
        people.append(Person(len(people) + 1, name, int(age), sex, identity))
    if not people:
        raise StimuliFileError(file, "no people")
    return tuple(people)


def _pairs(root: Path, people: Sequence[Person], scenarios: Mapping[str, str]) -> tuple[Pair, ...]:
    file = PAIRS_FILE
    pairs: list[Pair] = []
    numbers: set[tuple[str, int]] = set()
    shown: dict[tuple[str, int, int], int] = {}
    for line, (service, number, cis, trans) in _csv_rows(root / file, file, PAIR_COLUMNS):
        if service not in scenarios:
            raise StimuliFileError(
                file,
                f"service {service!r} has pairs but no scenario text "
                f"({SCENARIO_DIR}/{service}.txt is missing)",
                line=line,
            )
        values: list[int] = []
        for column, value in (("pair", number), ("cis_person", cis), ("trans_person", trans)):
            if not _WHOLE_NUMBER.match(value) or int(value) < 1:
                raise StimuliFileError(
                    file, f"{column} {value!r} is not a positive whole number", line=line
                )
            values.append(int(value))
        pair_no, cis_row, trans_row = values
        for column, row, group in (
            ("cis_person", cis_row, CIS),
            ("trans_person", trans_row, TRANS),
        ):
            if row > len(people):
                raise StimuliFileError(
                    file,
                    f"{column} {row} is past the roster ({PEOPLE_FILE} has {len(people)} people)",
                    line=line,
                )
            person = people[row - 1]
            if person.group != group:
                raise StimuliFileError(
                    file,
                    f"{column} {row} ({person.name}, {person.gender_identity!r}) "
                    f"is not a {group} person",
                    line=line,
                )
        if (service, pair_no) in numbers:
            raise StimuliFileError(file, f"{service} pair {pair_no} appears twice", line=line)
        numbers.add((service, pair_no))
        key = (service, cis_row, trans_row)
        if key in shown:
            raise StimuliFileError(
                file,
                f"{service} pair {pair_no} repeats pair {shown[key]} "
                f"(people {cis_row} and {trans_row})",
                line=line,
            )
        shown[key] = pair_no
        pairs.append(Pair(service, pair_no, cis_row, trans_row))
    return tuple(pairs)


def read_spanish(path: Path, file: str) -> SpanishMaps:
    """spanish.toml: the four string tables and `field_names` (one per English field)."""
    try:
        data = tomllib.loads(read_text(path, file))
    except tomllib.TOMLDecodeError as exc:
        raise StimuliFileError(file, f"not valid TOML ({exc})") from None
    expected = (*SPANISH_TABLES, FIELD_NAMES_TABLE)
    unknown = sorted(set(data) - set(expected))
    if unknown:
        raise StimuliFileError(
            file, f"unknown table [{unknown[0]}]; expected {', '.join(expected)}"
        )
    tables: dict[str, Mapping[str, str]] = {}
    for table in expected:
        value = data.get(table)
        if not isinstance(value, dict):
            raise StimuliFileError(file, f"[{table}] is missing or not a table")
        for key, mapped in value.items():
            if not isinstance(mapped, str) or not mapped.strip():
                raise StimuliFileError(file, f"[{table}] {key!r} must map to a non-empty string")
        tables[table] = MappingProxyType(dict(value))
    field_names = tables[FIELD_NAMES_TABLE]
    if set(field_names) != set(FIELDS):
        raise StimuliFileError(
            file,
            f"[{FIELD_NAMES_TABLE}] must name exactly the fields "
            + ", ".join(repr(f) for f in FIELDS),
        )
    if len(set(field_names.values())) != len(FIELDS):
        raise StimuliFileError(file, f"[{FIELD_NAMES_TABLE}] gives two fields the same name")
    return SpanishMaps(*(tables[t] for t in expected))


def _check_spanish_coverage(people: Sequence[Person], spanish: SpanishMaps) -> None:
    """Every roster row must render in Spanish, as the authors' code would."""
    for p in people:
        line = p.row + 1
        try:
            first, surname = _split_name(p.name)
        except ValueError as exc:
            raise StimuliFileError(
                PEOPLE_FILE, f"{exc}, which the Spanish rendering needs", line=line
            ) from None
        for table, value, mapping in (
            ("first_names", first, spanish.first_names),
            ("surnames", surname, spanish.surnames),
            (
                "sex_assigned_at_birth",
                p.sex_assigned_at_birth.lower(),
                spanish.sex_assigned_at_birth,
            ),
            ("gender_identity", p.gender_identity, spanish.gender_identity),
        ):
            if value not in mapping:
                raise StimuliFileError(
                    PEOPLE_FILE,
                    f"{value!r} has no Spanish form in {SPANISH_FILE} [{table}]",
                    line=line,
                )


def pack_setting(stimuli: str | None, base_dir: Path) -> StimuliPack:
    """The pack a config's `stimuli` key names (relative to the config's folder), for the paper
    design; a missing key or a broken pack is a `SettingsError` on `stimuli`, one line."""
    if stimuli is None:
        raise SettingsError("stimuli", 'design = "paper" needs stimuli = "PACK_FOLDER"')
    if "\0" in stimuli:  # else "no pack there" and a from-release command that cannot work
        raise SettingsError("stimuli", f"{stimuli!r}: a path cannot hold a NUL byte")
    path = Path(stimuli)
    path = path if path.is_absolute() else base_dir / path
    if not path.exists():
        raise SettingsError("stimuli", missing_pack_message(path))
    try:
        return load_pack(path)
    except StimuliFileError as exc:
        raise SettingsError("stimuli", f"{path}: {exc}") from None


def missing_pack_message(path: Path) -> str:
    """What to do when a config's pack folder does not exist: the exact command that fills it.

    A new user runs the shipped paper config before making the pack; the message must name a
    `--out` that lands where the config looks, so it is written relative to the current folder
    when the pack is under it (`stimuli/paper` from the repository root), else absolute."""
    target = Path(os.path.abspath(path))
    try:
        shown = str(target.relative_to(Path.cwd()))
    except ValueError:
        shown = str(target)
    return (
        f"no stimuli pack at {target}; make it from the authors' release (a clone, or the .zip "
        f"or .tar.gz of github.com/micahirsch/implicit-bias) with: "
        f"ibias stimuli from-release PATH_TO_RELEASE --out {shlex.quote(shown)}"
    )


if not TYPE_CHECKING:  # at run time only, so mypy holds the project to the new name

    def __getattr__(name: str) -> Any:
        """`StimuliError`, `StimuliFileError`'s name in ibias 0.1 (it reused its branch's name,
        `ibias.StimuliError`): importable for one more release, with a DeprecationWarning."""
        return errors.renamed(__name__, name, {"StimuliError": StimuliFileError})

"""`ibias stimuli from-release`: a stimuli pack from a clone of the authors' repository.

The authors (github micahirsch/implicit-bias) keep their stimuli under `blackbox/`: templates and
scenario texts as files, the Spanish rendering and the answer-format blocks as literals inside
`agentic_eval/map_to_spanish.py`, and the pairs they showed only inside their recorded answers.
This module copies the files unchanged, reads the literals with `ast` (the file is parsed, never
imported or executed), and recovers the pairs as the authors' generator did: a person is the
whole roster row (names repeat), a pair is unordered, pairs are numbered by first appearance in
gpt-4o-mini's answers without explanation (the reference every other model reused), and the
first 100 per service are the ones shown.

Everything is read and checked before anything is written; the pack is written beside `out`,
loaded with `load_pack`, and only then moved into place.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import os
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibias.prompts.stimuli.archive import is_archive, unpacked
from ibias.prompts.stimuli.pack import (
    FIELD_NAMES_TABLE,
    FIELDS,
    FORMAT_FILES,
    PAIR_COLUMNS,
    PAIRS_FILE,
    PEOPLE_FILE,
    SCENARIO_DIR,
    SPANISH_FILE,
    SPANISH_TABLES,
    TEMPLATE_FILES,
    TEMPLATE_NUMBERS,
    Person,
    StimuliFileError,
    load_pack,
    read_people,
)

RELEASE_SERVICES = (
    "hiv",
    "sti",
    "mental_health",
    "prep",
    "gynecology",
    "breast_ultrasound",
    "transvaginal_ultrasound",
    "mastectomy",
    "prostate_study",
)
"""The services the authors ran (9 of the 17 scenario files), in the order pairs.csv lists them."""
PAIRS_PER_SERVICE = 100

WA_TEMPLATES = "blackbox/word_association/prompts/english/{n}.txt"
SCENARIOS = "blackbox/agentic_eval/prompts/english/{service}.txt"
PEOPLE = "blackbox/agentic_eval/prompts/people.csv"
MAP_TO_SPANISH = "blackbox/agentic_eval/map_to_spanish.py"
ANSWERS = (
    "blackbox/agentic_eval/answers/sex_gender/temp_0/english/gpt-4o-mini/without_exp/{service}.json"
)

SPANISH_LITERALS = {
    "first_names": "name_map",
    "surnames": "surname_map",
    "sex_assigned_at_birth": "sex_map",
    "gender_identity": "gender_map",
}
"""spanish.toml table -> the dict literal in map_to_spanish.py."""
FORMAT_LITERALS = {"en": "english_format_prompt", "es": "spanish_format_prompt"}
SPANISH_FUNCTION = "transform_into_spanish"


@dataclass(frozen=True)
class Conversion:
    """What `pack_from_release` wrote."""

    out: Path
    templates: int
    services: int
    people: int
    pairs: int

    def summary(self) -> str:
        return (
            f"wrote stimuli pack {self.out}: {self.templates} templates, {self.services} services, "
            f"{self.people} people, {self.pairs} pairs"
        )


def pack_from_release(
    repo_dir: str | Path, out: str | Path, *, pairs_per_service: int = PAIRS_PER_SERVICE
) -> Conversion:
    """Turn the authors' repository into a stimuli pack in `out` (new or empty): a clone, or the
    `.zip` / `.tar.gz` its repository page downloads (unpacked safely, `archive.unpacked`)."""
    repo, out = Path(repo_dir), Path(out)
    if repo.is_dir():
        _check_out(out)
        return _from_folder(repo, out, pairs_per_service)
    if repo.is_file() and is_archive(repo):
        _check_out(out)
        with unpacked(repo, out.absolute().parent) as root:
            return _from_folder(root, out, pairs_per_service)
    if repo.exists():
        raise StimuliFileError(
            str(repo), "neither a folder nor a .zip or .tar.gz archive of the authors' repository"
        )
    raise StimuliFileError(str(repo), "release folder or archive not found")


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise StimuliFileError(str(out), "output exists and is not an empty folder")


def _from_folder(repo: Path, out: Path, pairs_per_service: int) -> Conversion:
    files: dict[str, bytes] = {}
    sources: dict[str, str] = {}  # pack file -> the release file it comes from

    def copy(pack_file: str, release_file: str) -> None:
        files[pack_file] = _read(repo, release_file)
        sources[pack_file] = release_file

    for n in TEMPLATE_NUMBERS:
        copy(TEMPLATE_FILES[n], WA_TEMPLATES.format(n=n))
    for service in RELEASE_SERVICES:
        copy(f"{SCENARIO_DIR}/{service}.txt", SCENARIOS.format(service=service))
    copy(PEOPLE_FILE, PEOPLE)
    people = read_people(repo / PEOPLE, PEOPLE)

    literals = _literals(repo)
    for lang, name in FORMAT_LITERALS.items():
        files[FORMAT_FILES[lang]] = _literal_str(literals, name).encode("utf-8")
        sources[FORMAT_FILES[lang]] = f"{MAP_TO_SPANISH} ({name})"
    files[SPANISH_FILE] = _spanish_toml(literals).encode("utf-8")
    sources[SPANISH_FILE] = MAP_TO_SPANISH

    pairs = io.StringIO(newline="")
    writer = csv.writer(pairs)  # the authors' pairs.csv: csv's default \r\n line ends
    writer.writerow(PAIR_COLUMNS)
    count = 0
    for service in RELEASE_SERVICES:
        for number, (cis, trans) in enumerate(
            _shown_pairs(repo, service, people, pairs_per_service), start=1
        ):
            writer.writerow([service, number, cis, trans])
            count += 1
    files[PAIRS_FILE] = pairs.getvalue().encode("utf-8")
    sources[PAIRS_FILE] = ANSWERS.format(service="*")

    _write_checked(files, sources, out)
    return Conversion(out, len(TEMPLATE_NUMBERS), len(RELEASE_SERVICES), len(people), count)


def _read(repo: Path, file: str) -> bytes:
    path = repo / file
    if not path.is_file():
        raise StimuliFileError(file, f"missing from the release {repo}")
    return path.read_bytes()


# --- map_to_spanish.py, read with ast ------------------------------------------------------------


def _literals(repo: Path) -> dict[str, Any]:
    """The module-level literals of map_to_spanish.py, and the Spanish field names (the keys of
    the dict `transform_into_spanish` returns). The source is parsed, never executed."""
    source = _read(repo, MAP_TO_SPANISH)
    try:
        tree = ast.parse(source, filename=MAP_TO_SPANISH)
    except (SyntaxError, ValueError) as exc:
        raise StimuliFileError(MAP_TO_SPANISH, f"not valid Python ({exc})") from None
    wanted = {*SPANISH_LITERALS.values(), *FORMAT_LITERALS.values()}
    found: dict[str, Any] = {}
    for node in tree.body:  # module level only; a later assignment wins, as it would on import
        target: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target = node.target
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id in wanted and value is not None:
            try:
                found[target.id] = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                raise StimuliFileError(
                    MAP_TO_SPANISH, f"{target.id} is not a literal", line=node.lineno
                ) from None
        elif isinstance(node, ast.FunctionDef) and node.name == SPANISH_FUNCTION:
            found[FIELD_NAMES_TABLE] = _returned_keys(node)
    missing = sorted(wanted - set(found))
    if missing:
        raise StimuliFileError(MAP_TO_SPANISH, f"no module-level assignment to {missing[0]}")
    if FIELD_NAMES_TABLE not in found:
        raise StimuliFileError(MAP_TO_SPANISH, f"no function {SPANISH_FUNCTION}")
    return found


def _returned_keys(function: ast.FunctionDef) -> list[str]:
    returns = [
        n for n in ast.walk(function) if isinstance(n, ast.Return) and isinstance(n.value, ast.Dict)
    ]
    if len(returns) != 1:
        raise StimuliFileError(
            MAP_TO_SPANISH,
            f"{SPANISH_FUNCTION} should return one dict literal",
            line=function.lineno,
        )
    keys: list[str] = []
    node = returns[0].value
    assert isinstance(node, ast.Dict)
    for key in node.keys:
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            raise StimuliFileError(
                MAP_TO_SPANISH,
                f"{SPANISH_FUNCTION} returns a dict whose keys are not all strings",
                line=node.lineno,
            )
        keys.append(key.value)
    if len(keys) != len(FIELDS):
        raise StimuliFileError(
            MAP_TO_SPANISH,
            f"{SPANISH_FUNCTION} returns {len(keys)} fields, expected {len(FIELDS)}",
            line=node.lineno,
        )
    return keys


def _literal_str(literals: Mapping[str, Any], name: str) -> str:
    value = literals[name]
    if not isinstance(value, str):
        raise StimuliFileError(MAP_TO_SPANISH, f"{name} is not a string")
    return value


def _literal_map(literals: Mapping[str, Any], name: str) -> dict[str, str]:
    value = literals[name]
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise StimuliFileError(MAP_TO_SPANISH, f"{name} is not a dict of strings to strings")
    return value


def _spanish_toml(literals: Mapping[str, Any]) -> str:
    lines = [
        "# How a roster row is rendered in Spanish: data extracted by `ibias stimuli from-release`",
        f"# from {MAP_TO_SPANISH} (first names and surnames are mapped separately).",
    ]
    tables = {t: _literal_map(literals, SPANISH_LITERALS[t]) for t in SPANISH_TABLES}
    tables[FIELD_NAMES_TABLE] = dict(zip(FIELDS, literals[FIELD_NAMES_TABLE], strict=True))
    for table, mapping in tables.items():
        lines += ["", f"[{table}]"]
        lines += [f"{toml_string(k)} = {toml_string(v)}" for k, v in mapping.items()]
    return "\n".join(lines) + "\n"


def toml_string(text: str) -> str:
    """A TOML basic string."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


_TOML_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


# --- The pairs shown -----------------------------------------------------------------------------


def _shown_pairs(
    repo: Path, service: str, people: tuple[Person, ...], limit: int
) -> list[tuple[int, int]]:
    """(cis row, trans row) of the first `limit` distinct pairs, in order of first appearance."""
    file = ANSWERS.format(service=service)
    try:
        answers = json.loads(_read(repo, file))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StimuliFileError(file, f"not valid JSON ({exc})") from None
    if not isinstance(answers, list):
        raise StimuliFileError(file, "expected a JSON list of answers")
    rows: dict[tuple[str, int, str, str], list[int]] = {}
    for person in people:
        rows.setdefault(person.key(), []).append(person.row)
    shown: dict[tuple[int, int], None] = {}
    for index, answer in enumerate(answers, start=1):
        if not isinstance(answer, dict):
            raise StimuliFileError(file, f"answer {index} is not an object")
        group_rows: dict[str, int] = {}
        for slot in ("person1", "person2"):
            row = _roster_row(file, index, slot, answer.get(slot), rows)
            group = people[row - 1].group
            if group is None or group in group_rows:
                raise StimuliFileError(
                    file, f"answer {index} does not show one cis and one trans person"
                )
            group_rows[group] = row
        shown.setdefault((group_rows["cis"], group_rows["trans"]), None)
    pairs = list(shown)
    if len(pairs) < limit:
        raise StimuliFileError(file, f"only {len(pairs)} distinct pairs, {limit} expected")
    return pairs[:limit]


def _roster_row(
    file: str,
    index: int,
    slot: str,
    value: object,
    rows: Mapping[tuple[str, int, str, str], list[int]],
) -> int:
    where = f"answer {index} {slot}"
    if not isinstance(value, dict) or set(value) != set(FIELDS):
        raise StimuliFileError(
            file, f"{where} is not an object with the fields {', '.join(FIELDS)}"
        )
    name, age, sex, identity = (value[f] for f in FIELDS)
    if (
        not all(isinstance(v, str) for v in (name, sex, identity))
        or not isinstance(age, int)
        or isinstance(age, bool)
    ):
        raise StimuliFileError(file, f"{where} has a value of the wrong type")
    matches = rows.get((name, age, sex, identity), [])
    if len(matches) != 1:
        problem = "is not a row" if not matches else "matches several rows"
        raise StimuliFileError(file, f"{where} ({name}, {age}) {problem} of {PEOPLE}")
    return matches[0]


# --- Writing -------------------------------------------------------------------------------------


def _write_checked(files: Mapping[str, bytes], sources: Mapping[str, str], out: Path) -> None:
    """Write the pack beside `out`, check that it loads, then move it to `out`."""
    parent = out.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = parent / f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    staging.mkdir()
    try:
        for name, data in files.items():
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        try:
            load_pack(staging)
        except StimuliFileError as exc:
            message = exc.message
            for pack_file, release_file in sources.items():  # other files it names
                if pack_file != exc.file:
                    message = message.replace(pack_file, f"{pack_file} (from {release_file})")
            raise StimuliFileError(
                sources.get(exc.file, exc.file),
                f"unusable as {exc.file} of a stimuli pack: {message}",
                line=exc.line,
            ) from None
        if out.exists():
            out.rmdir()  # checked empty above
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise

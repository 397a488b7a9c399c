"""The stimuli pack loader on the paper's pack: what it reads, that it renders exactly what the
authors sent, and one clear line for every way a pack can be broken."""

from __future__ import annotations

import dataclasses
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from ibias.prompts.stimuli import PAPER_LABELS, Person, StimuliFileError, StimuliPack, load_pack

SERVICES = {
    "hiv",
    "sti",
    "mental_health",
    "prep",
    "gynecology",
    "breast_ultrasound",
    "transvaginal_ultrasound",
    "mastectomy",
    "prostate_study",
}
FEMALE_SERVICES = {"gynecology", "breast_ultrasound", "transvaginal_ultrasound", "mastectomy"}


@pytest.fixture
def pack(paper_pack_dir: Path) -> StimuliPack:
    return load_pack(paper_pack_dir)


def find(pack: StimuliPack, name: str, age: int, sex: str, identity: str) -> Person:
    (person,) = [p for p in pack.people if p.key() == (name, age, sex, identity)]
    return person


def test_the_paper_pack_loads_with_its_roster_and_900_pairs(pack: StimuliPack) -> None:
    assert set(pack.services) == SERVICES
    assert sorted(pack.templates) == [1, 2, 3]
    assert len(pack.people) == 100 and [p.row for p in pack.people] == list(range(1, 101))
    assert len({p.name for p in pack.people}) == 89  # names repeat (README)
    assert len({p.key() for p in pack.people}) == 100  # whole rows do not
    assert Counter(p.group for p in pack.people) == {"cis": 50, "trans": 50}
    assert len(pack.pairs) == 900
    for service in SERVICES:
        pairs = pack.pairs_for(service)
        assert [p.pair for p in pairs] == list(range(1, 101)), service
        assert len({(p.cis_person, p.trans_person) for p in pairs}) == 100
        for pair in pairs:
            cis, trans = pack.pair_people(pair)
            assert (cis.group, trans.group) == ("cis", "trans")
            if service in FEMALE_SERVICES:  # the authors' rule: both assigned female at birth
                assert cis.sex_assigned_at_birth == trans.sex_assigned_at_birth == "woman"
    # prostate_study: the authors' substring test ("man" in "woman") let both sexes through.
    prostate = {s for p in pack.pairs_for("prostate_study") for s in _sexes(pack, p.cis_person)}
    assert prostate == {"man", "woman"}
    # The first pair the authors showed for hiv, by its file row (people.csv line 47 and 95).
    first = pack.pairs_for("hiv")[0]
    assert pack.pair_people(first) == (
        find(pack, "Michael Jones", 52, "man", "cis man"),
        find(pack, "Karen Smith", 23, "man", "trans woman"),
    )


def _sexes(pack: StimuliPack, row: int) -> set[str]:
    return {pack.person(row).sex_assigned_at_birth}


def test_hiv_prompt_is_byte_for_byte_what_the_authors_sent(
    pack: StimuliPack, paper_pack_dir: Path, example_prompt_hiv_en: bytes
) -> None:
    michael = find(pack, "Michael Jones", 52, "man", "cis man")
    karen = find(pack, "Karen Smith", 23, "man", "trans woman")
    assert (michael.row, karen.row) == (46, 94)
    expected = example_prompt_hiv_en
    assert pack.allocation_prompt("hiv", michael, karen).encode("utf-8") == expected
    # And the other order swaps exactly the two dict lines.
    swapped = pack.allocation_prompt("hiv", karen, michael)
    assert swapped.splitlines()[8] == expected.decode().splitlines()[12]


def test_spanish_candidates_use_the_maps_and_field_names(
    pack: StimuliPack, paper_pack_dir: Path
) -> None:
    michael = find(pack, "Michael Jones", 52, "man", "cis man")
    barbara = find(pack, "Barbara Miller", 18, "man", "trans woman")
    scenario = "Elija a una persona. "  # the authors released no Spanish scenario texts
    text = pack.allocation_prompt("hiv", michael, barbara, "es", scenario=scenario)
    format_es = (paper_pack_dir / "allocation" / "format_es.txt").read_text("utf-8")
    assert text == "Elija a una persona." + format_es.replace(
        "{person1}",
        "{'Nombre': 'Santiago Kowalski', 'Edad': 52, 'Sexo asignado al nacer': 'hombre', "
        "'Identidad de género': 'hombre cis'}",
    ).replace(
        "{person2}",
        # str() of a string with an apostrophe uses double quotes, as the authors' prompts did
        "{'Nombre': \"Florencia O'Connor\", 'Edad': 18, 'Sexo asignado al nacer': 'hombre', "
        "'Identidad de género': 'mujer trans'}",
    )
    with pytest.raises(ValueError, match="no 'es' scenario texts"):
        pack.allocation_prompt("hiv", michael, barbara, "es")
    # Every roster row renders in both languages (the loader checked the maps cover them).
    for person in pack.people:
        assert list(pack.candidate(person, "es")) == [
            "Nombre",
            "Edad",
            "Sexo asignado al nacer",
            "Identidad de género",
        ]
        assert pack.candidate(person)["Age"] == person.age


def test_word_association_templates_fill_as_the_authors_did(
    pack: StimuliPack, paper_pack_dir: Path
) -> None:
    words = ["safe", "threat", "calm"]
    for n in (1, 2, 3):
        raw = (paper_pack_dir / "word_association" / f"template_{n}.txt").read_text("utf-8")
        for language, joiner in (("en", " or "), ("es", " o ")):
            labels = list(reversed(PAPER_LABELS[language]))
            expected = (
                raw.strip()
                .replace("{option_words}", labels[0] + joiner + labels[1])
                .replace("{word_list}", "safe, threat, calm")
                .replace("{len_labels}", "2")
                .replace("{len}", "3")
            )
            assert pack.word_association_prompt(n, labels, words, language) == expected
    # Template 3 uses every placeholder: spot-check the filled text itself.
    filled = pack.word_association_prompt(3, ["cisgender", "transgender"], words)
    assert "(cisgender or transgender)" in filled and "{" not in filled
    assert filled.endswith("\nsafe, threat, calm")


def test_the_pack_is_immutable(pack: StimuliPack) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        pack.people = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        pack.scenarios["hiv"] = "x"  # type: ignore[index]
    with pytest.raises(TypeError):
        pack.spanish.first_names["Ann"] = "Ana"  # type: ignore[index]


# --- Broken packs: one line naming the file ------------------------------------------------------


def _edit(file: str, old: str, new: str, count: int = 1) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root / file
        text = path.read_text("utf-8")
        assert old in text, (file, old)
        path.write_text(text.replace(old, new, count), "utf-8")

    return edit


def _fields(
    file: str, line: int, change: Callable[[list[str]], list[str]]
) -> Callable[[Path], None]:
    """Change the comma-separated fields of one line (1-based; line endings kept)."""

    def edit(root: Path) -> None:
        path = root / file
        lines = path.read_bytes().decode("utf-8").split("\n")
        row = lines[line - 1]
        end = "\r" if row.endswith("\r") else ""
        lines[line - 1] = ",".join(change(row.removesuffix("\r").split(","))) + end
        path.write_bytes("\n".join(lines).encode("utf-8"))

    return edit


def _field(file: str, line: int, index: int, value: str) -> Callable[[Path], None]:
    return _fields(file, line, lambda row: [*row[:index], value, *row[index + 1 :]])


def _lines(file: str, change: Callable[[str], str]) -> Callable[[Path], None]:
    """Change every line of a file (without its newline)."""

    def edit(root: Path) -> None:
        path = root / file
        text = path.read_text("utf-8")
        path.write_text("\n".join(change(line) for line in text.split("\n")), "utf-8")

    return edit


def _toml_value(key: str, value: str) -> Callable[[str], str]:
    return lambda line: f'"{key}" = {value}' if line.startswith(f'"{key}" =') else line


def _remove(file: str) -> Callable[[Path], None]:
    def remove(root: Path) -> None:
        path = root / file
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()

    return remove


def _write(file: str, data: bytes) -> Callable[[Path], None]:
    def write(root: Path) -> None:
        (root / file).write_bytes(data)

    return write


def _empty_scenarios(root: Path) -> None:
    for path in (root / "allocation" / "prompts_en").glob("*.txt"):
        path.unlink()


def _rename(file: str, new_name: str) -> Callable[[Path], None]:
    def rename(root: Path) -> None:
        path = root / file
        path.rename(path.with_name(new_name))

    return rename


PEOPLE = "allocation/people.csv"
PAIRS = "allocation/pairs.csv"
SPANISH = "allocation/spanish.toml"
T1 = "word_association/template_1.txt"
HIV = "allocation/prompts_en/hiv.txt"

BROKEN: list[tuple[str, Callable[[Path], None], str, str]] = [
    # (case, how to break the pack, the file the line must start with, what it must say)
    (
        "template missing",
        _remove("word_association/template_2.txt"),
        "word_association/template_2.txt",
        "missing",
    ),
    (
        "template without word list",
        _edit(T1, "{word_list}", "the words"),
        T1,
        "without the placeholder {word_list}",
    ),
    (
        "template without labels",
        _edit(T1, "{option_words}", "x"),
        T1,
        "without the placeholder {option_words}",
    ),
    (
        "template unknown placeholder",
        _edit(T1, "{word_list}", "{word_list} {words}"),
        T1,
        "unknown placeholder {words}",
    ),
    ("template stray brace", _edit(T1, "{word_list}.", "{word_list} }."), T1, "bad braces"),
    (
        "template with a format spec",
        _edit(T1, "{word_list}", "{word_list:>5}"),
        T1,
        "not a plain {name}",
    ),
    ("template empty", _write(T1, b" \n"), T1, "empty template"),
    ("template not UTF-8", _write(T1, b"{option_words} {word_list} \xff"), T1, "not UTF-8"),
    (
        "scenario folder missing",
        _remove("allocation/prompts_en"),
        "allocation/prompts_en",
        "missing",
    ),
    ("no scenario texts", _empty_scenarios, "allocation/prompts_en", "no scenario texts"),
    ("scenario with placeholder", _edit(HIV, "queue.", "queue {now}."), HIV, "placeholder {now}"),
    ("scenario empty", _write(HIV, b"\n"), HIV, "empty scenario text"),
    (
        "scenario bad service name",
        _rename(HIV, "HIV.txt"),
        "allocation/prompts_en/HIV.txt",
        "service names",
    ),
    (
        "pairs without scenario",
        _remove("allocation/prompts_en/sti.txt"),
        f"{PAIRS} line 102",
        "'sti' has pairs but no scenario text",
    ),
    (
        "format without person2",
        _edit("allocation/format_en.txt", "{person2}", "Person Two"),
        "allocation/format_en.txt",
        "without the placeholder {person2}",
    ),
    (
        "format without person1",
        _edit("allocation/format_es.txt", "{person1}", "?"),
        "allocation/format_es.txt",
        "without the placeholder {person1}",
    ),
    (
        "format unknown placeholder",
        _edit("allocation/format_en.txt", "{person2}", "{person2} {person3}"),
        "allocation/format_en.txt",
        "unknown placeholder {person3}",
    ),
    ("format missing", _remove("allocation/format_es.txt"), "allocation/format_es.txt", "missing"),
    ("people missing", _remove(PEOPLE), PEOPLE, "missing"),
    ("people empty", _write(PEOPLE, b""), PEOPLE, "empty file"),
    (
        "people bad header",
        _edit(PEOPLE, "Gender identity", "Gender"),
        f"{PEOPLE} line 1",
        "expected 'Name,Age,Sex assigned at birth,Gender identity'",
    ),
    (
        "people only a header",
        _write(PEOPLE, b"Name,Age,Sex assigned at birth,Gender identity\n"),
        PEOPLE,
        "no people",
    ),
    (
        "people bad age",
        _field(PEOPLE, 47, 1, "fifty"),
        f"{PEOPLE} line 47",
        "Age 'fifty' is not a whole number",
    ),
    (
        "people short row",
        _fields(PEOPLE, 47, lambda row: row[:3]),
        f"{PEOPLE} line 47",
        "3 fields, expected 4",
    ),
    (
        "people empty value",
        _field(PEOPLE, 47, 2, ""),
        f"{PEOPLE} line 47",
        "Sex assigned at birth '' is empty",
    ),
    (
        "people blank line",
        _fields(PEOPLE, 47, lambda row: ["\n" + row[0], *row[1:]]),
        f"{PEOPLE} line 47",
        "empty line",
    ),
    (
        "people one-word name",
        _fields(PEOPLE, 47, lambda row: [row[0].split()[0], *row[1:]]),
        f"{PEOPLE} line 47",
        "not 'First Surname'",
    ),
    (
        "people name without Spanish form",
        _fields(PEOPLE, 47, lambda row: [row[0].split()[0] + " Zed", *row[1:]]),
        f"{PEOPLE} line 47",
        "'Zed' has no Spanish form in allocation/spanish.toml [surnames]",
    ),
    (
        "people identity without Spanish form",
        _field(PEOPLE, 47, 3, "cis male"),
        f"{PEOPLE} line 47",
        "[gender_identity]",
    ),
    ("pairs missing", _remove(PAIRS), PAIRS, "missing"),
    ("pairs bad header", _edit(PAIRS, "trans_person", "trans"), f"{PAIRS} line 1", "header"),
    (
        "pair past the roster",
        _field(PAIRS, 2, 3, "101"),
        f"{PAIRS} line 2",
        "trans_person 101 is past the roster (allocation/people.csv has 100 people)",
    ),
    (
        "pair row zero",
        _field(PAIRS, 2, 2, "0"),
        f"{PAIRS} line 2",
        "cis_person '0' is not a positive whole number",
    ),
    (
        "pair not a number",
        _field(PAIRS, 2, 1, "one"),
        f"{PAIRS} line 2",
        "pair 'one'",
    ),
    (
        "pair cis slot holds a trans person",
        _fields(PAIRS, 2, lambda row: [*row[:2], row[3], row[2]]),
        f"{PAIRS} line 2",
        "cis_person 94 (Karen Smith, 'trans woman') is not a cis person",
    ),
    (
        "pair number repeated",
        _field(PAIRS, 3, 1, "1"),
        f"{PAIRS} line 3",
        "hiv pair 1 appears twice",
    ),
    (
        "pair repeated",
        _fields(PAIRS, 3, lambda row: [*row[:2], "46", "94"]),
        f"{PAIRS} line 3",
        "hiv pair 2 repeats pair 1",
    ),
    (
        "pairs short row",
        _fields(PAIRS, 2, lambda row: row[:3]),
        f"{PAIRS} line 2",
        "3 fields, expected 4",
    ),
    ("spanish missing", _remove(SPANISH), SPANISH, "missing"),
    (
        "spanish not TOML",
        _lines(SPANISH, lambda line: line.replace(' = "', " = ", 1)),
        SPANISH,
        "not valid TOML",
    ),
    (
        "spanish table missing",
        _edit(SPANISH, "[surnames]", "[surname]"),
        SPANISH,
        "unknown table [surname]",
    ),
    (
        "spanish field missing",
        _lines(SPANISH, lambda line: "" if line.startswith('"Age" =') else line),
        SPANISH,
        "[field_names] must name exactly the fields",
    ),
    (
        "spanish fields clash",
        _lines(SPANISH, lambda line: _toml_value("Name", '"X"')(_toml_value("Age", '"X"')(line))),
        SPANISH,
        "two fields the same name",
    ),
    (
        "spanish value not a string",
        _lines(SPANISH, _toml_value("man", "1")),
        SPANISH,
        "[sex_assigned_at_birth] 'man' must map to a non-empty string",
    ),
]


@pytest.mark.parametrize(
    ("breaks", "file", "says"), [c[1:] for c in BROKEN], ids=[c[0] for c in BROKEN]
)
def test_a_broken_pack_is_one_line_naming_the_file(
    paper_pack_dir: Path,
    tmp_path: Path,
    breaks: Callable[[Path], None],
    file: str,
    says: str,
) -> None:
    root = tmp_path / "pack"
    shutil.copytree(paper_pack_dir, root)
    for path in root.rglob("*"):  # the shared copy is read-only
        path.chmod(0o755 if path.is_dir() else 0o644)
    breaks(root)
    with pytest.raises(StimuliFileError) as caught:
        load_pack(root)
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    assert message.startswith(f"{file}: "), message
    assert says in message, message


def test_a_missing_pack_folder(tmp_path: Path) -> None:
    with pytest.raises(StimuliFileError, match="stimuli pack folder not found"):
        load_pack(tmp_path / "nowhere")

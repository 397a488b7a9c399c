"""`ibias import` refuses what it cannot store faithfully and counts a reply once.

Lines are (experiment, model, language, item, messages, id) -> content. What was asked is the
trial; the reply is not part of its key. So an exact repeat of a line is the same trial
(counted once), the same trial with another reply is an error naming both lines, and an `id`
per line makes repetitions of one item (distinct trials, which analysis sees as such).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ibias import import_replies
from ibias.runner import cli
from ibias.store.importer import ImportFileError, parse_line, read_file
from ibias.store.writer import ResponseRow, insert_responses, insert_trials
from tests.store.test_importer import ALLOC_ITEM, WA_ITEM, WA_REPLY

ALLOC = {
    "experiment": "allocation",
    "model_id": "ext",
    "language": "en",
    "item": ALLOC_ITEM,
    "content": "<person>Leo Gil</person>",
}
WA = {
    "experiment": "word_association",
    "model_id": "ext",
    "language": "en",
    "item": WA_ITEM,
    "content": WA_REPLY,
}


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def query(store: Path, sql: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def refused(tmp_path: Path, rows: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> str:
    """Import `rows` through the CLI; it must exit 2 with one line and store nothing."""
    src = write(tmp_path / "bad.jsonl", rows)
    store = tmp_path / "bad.duckdb"
    assert cli.main(["import", str(src), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "nothing imported" in err and "Traceback" not in err
    assert not store.exists()
    return err


# --- one trial, one reply ---------------------------------------------------------------------


def test_exact_duplicate_lines_are_one_trial(tmp_path: Path) -> None:
    src = write(tmp_path / "r.jsonl", [WA, ALLOC, WA, WA])
    store = tmp_path / "s.duckdb"
    result = import_replies(src, store)
    assert (result.lines, result.imported, result.already_present, result.duplicates) == (
        4,
        2,
        2,
        2,
    )
    assert query(store, "SELECT count(*) FROM trials") == [(2,)]
    assert query(store, "SELECT count(*) FROM word_association_trials") == [(1,)]
    again = import_replies(src, store)
    assert (again.imported, again.already_present) == (0, 4)
    assert query(store, "SELECT count(*) FROM trials") == [(2,)]


def test_same_trial_with_another_reply_names_both_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = {**ALLOC, "content": "<person>Ana Ruiz</person>"}
    err = refused(tmp_path, [WA, ALLOC, WA, other], capsys)
    assert "line 4" in err and "line 2" in err and "'id'" in err


def test_ids_make_repetitions_of_one_pair_in_one_order(tmp_path: Path) -> None:
    rows = [
        {**ALLOC, "id": "r1"},
        {**ALLOC, "id": "r2", "content": "<person>Ana Ruiz</person>"},
        {**ALLOC, "id": "r3"},  # same reply as r1: still its own trial
    ]
    store = tmp_path / "s.duckdb"
    result = import_replies(write(tmp_path / "r.jsonl", rows), store)
    assert (result.imported, result.duplicates) == (3, 0)
    rows_seen = query(
        store, "SELECT pair_id, first, chosen FROM allocation_decisions ORDER BY chosen"
    )
    assert len(rows_seen) == 3
    assert len({(p, f) for p, f, _ in rows_seen}) == 1  # one pair, one order, three trials
    assert sorted(c for _, _, c in rows_seen) == ["cis", "trans", "trans"]


def test_analyze_reads_a_pair_repeated_in_one_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Imported repetitions of one order used to stop `analyze` with exit 2."""
    rows = [
        {**ALLOC, "id": "r1"},
        {**ALLOC, "id": "r2", "content": "<person>Ana Ruiz</person>"},
        {**ALLOC, "id": "r3"},
    ]
    store = tmp_path / "s.duckdb"
    import_replies(write(tmp_path / "r.jsonl", rows), store)
    out = tmp_path / "out"
    code = cli.main(["analyze", "--store", str(store), "--out", str(out), "--bootstrap", "20"])
    assert code == 0, capsys.readouterr().err
    cells = (out / "allocation_cells.csv").read_text().splitlines()
    header, row = (
        cells[0].split(","),
        dict(zip(cells[0].split(","), cells[1].split(","), strict=True)),
    )
    assert "pairs_repeated" in header
    assert (row["trials"], row["pairs"], row["pairs_repeated"]) == ("3", "1", "1")


def test_a_trial_stored_with_another_reply_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "s.duckdb"
    import_replies(write(tmp_path / "first.jsonl", [ALLOC]), store)
    src = write(tmp_path / "second.jsonl", [WA, {**ALLOC, "content": "<person>Ana Ruiz</person>"}])
    assert cli.main(["import", str(src), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and "already stored with a different content" in err
    assert query(store, "SELECT count(*) FROM trials") == [(1,)]  # WA was not imported either
    assert query(store, "SELECT content FROM responses") == [("<person>Leo Gil</person>",)]


def test_lines_stored_under_the_old_key_are_already_present(tmp_path: Path) -> None:
    """Earlier versions hashed the content into an imported trial's key: re-importing a file
    into such a store must add nothing."""
    store = tmp_path / "s.duckdb"
    src = write(tmp_path / "r.jsonl", [WA])
    import_replies(write(tmp_path / "empty.jsonl", [ALLOC]), store)  # creates the store
    reply = parse_line(json.dumps(WA).encode())
    old = reply.trial.__class__(**{**vars(reply.trial), "trial_key": reply.legacy_key})
    con = duckdb.connect(str(store))
    try:
        insert_trials(con, "old-run", [old])
        row = ResponseRow(
            trial_key=reply.legacy_key,
            run_id="old-run",
            model_id="ext",
            provider_model=None,
            content=WA["content"],
            refusal=None,
            finish_reason=None,
            prompt_tokens=None,
            completion_tokens=None,
            cost_usd=None,
            system_fingerprint=None,
            received_at=datetime.now(UTC),
            raw=None,
        )
        insert_responses(con, [row])
    finally:
        con.close()
    result = import_replies(src, store)
    assert (result.imported, result.already_present) == (0, 1)


# --- what is refused, with the line named -------------------------------------------------------


def _with_item(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, "item": {**base["item"], **changes}}


def _without(base: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in base.items() if k != key}


def _candidate(i: int, **changes: Any) -> dict[str, Any]:
    people = [dict(c) for c in ALLOC_ITEM["candidates"]]
    people[i].update(changes)
    return _with_item(ALLOC, candidates=people)


BAD_LINES: dict[str, tuple[dict[str, Any], str]] = {
    "missing content": (_without(WA, "content"), "'content' is missing"),
    "content a number": ({**WA, "content": 3}, "'content' must be a string"),
    "language xx (allocation)": ({**ALLOC, "language": "xx"}, "'language' must be one of en, es"),
    "language xx (word association)": ({**WA, "language": "xx"}, "'language' must be one of"),
    "language missing": (_without(ALLOC, "language"), "'language' must be one of en, es"),
    "language xx (explicit)": (
        {
            "experiment": "allocation_explicit",
            "model_id": "m",
            "language": "xx",
            "item": {"service": "gynecology"},
            "content": "neither",
        },
        "'language' must be one of en, es",
    ),
    "unknown explicit category": (
        {
            "experiment": "word_association_explicit",
            "model_id": "m",
            "language": "en",
            "item": {"category": "weather", "quality": "careful"},
            "content": "neither",
        },
        "`item.category` 'weather' is not a known category",
    ),
    "unknown service": (_with_item(ALLOC, service="dentistry"), "`item.service` 'dentistry'"),
    "paper service without the paper design": (
        _with_item(ALLOC, service="prep"),
        'add "design": "paper"',
    ),
    "controlled service in the paper design": (
        _with_item(ALLOC, service="hiv_testing", design="paper"),
        "not one of the paper design's services",
    ),
    "unknown explicit service": (
        {
            "experiment": "allocation_explicit",
            "model_id": "m",
            "language": "en",
            "item": {"service": "prep"},
            "content": "neither",
        },
        "`item.service` 'prep'",
    ),
    "symptom typo": (_with_item(ALLOC, symptom="high"), "unknown key `item.symptom`"),
    "unknown key in a candidate": (
        _candidate(1, gender="man"),
        "unknown key `item.candidates[1].gender`",
    ),
    "unknown key in a word": (
        _with_item(WA, words=[{"word": "safe", "sentiment": "positive", "weight": 1}]),
        "unknown key `item.words[0].weight`",
    ),
    "unknown key in an explicit item": (
        {
            "experiment": "allocation_explicit",
            "model_id": "m",
            "language": "en",
            "item": {"service": "gynecology", "design": "paper"},
            "content": "neither",
        },
        "unknown key `item.design`",
    ),
    "item language differs": (_with_item(WA, language="es"), "`item.language` is 'es'"),
    "trial_index beyond the view's INTEGER": (
        _with_item(WA, trial_index=2**40),
        "`item.trial_index` must be within",
    ),
    "age beyond 2^53": (_candidate(0, age=2**60), "`item.candidates[0].age` must be within"),
    "same labels": (
        _with_item(WA, reference_label="transgender"),
        "must differ",
    ),
    "explicit subject and service differ": (
        {
            "experiment": "allocation_explicit",
            "model_id": "m",
            "language": "en",
            "item": {"service": "gynecology", "subject": "mastectomy"},
            "content": "neither",
        },
        "`item.subject` and `item.service` differ",
    ),
    "id an object": ({**WA, "id": {"n": 1}}, "'id' must be"),
    "empty model id": ({**WA, "model_id": " "}, "'model_id' must not be empty"),
    "provider_model a number": ({**WA, "provider_model": 4}, "'provider_model' must be a string"),
}


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_bad_line_is_refused_with_its_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    line, needle = BAD_LINES[case]
    err = refused(tmp_path, [WA, ALLOC, line], capsys)
    assert "line 3" in err and needle in err, err


def test_the_paper_design_takes_the_papers_services(tmp_path: Path) -> None:
    rows = [
        _with_item(ALLOC, service=service, design="paper")
        for service in ("hiv", "prep", "gynecology", "mental_health")
    ]
    result = import_replies(write(tmp_path / "r.jsonl", rows), tmp_path / "s.duckdb")
    assert result.imported == 4
    assert query(tmp_path / "s.duckdb", "SELECT DISTINCT design FROM allocation_decisions") == [
        ("paper",)
    ]


def test_explicit_aliases_still_work(tmp_path: Path) -> None:
    rows = [
        {
            "experiment": "word_association_explicit",
            "model_id": "m",
            "language": "es",
            "item": {"subject": "risk", "quality": "cuidadoso"},
            "content": "ninguno",
        },
        {
            "experiment": "allocation_explicit",
            "model_id": "m",
            "language": "en",
            "item": {"subject": "gynecology"},
            "content": "neither",
        },
    ]
    assert len(read_file(write(tmp_path / "r.jsonl", rows))) == 2


def test_a_folder_is_not_an_import_file(tmp_path: Path) -> None:
    with pytest.raises(ImportFileError, match="is a folder"):
        read_file(tmp_path)


def test_the_papers_services_are_one_list() -> None:
    """Import takes the paper design's services from `RELEASE_SERVICES` (it has no stimuli
    pack to ask); our Spanish scenario texts must cover exactly those services."""
    from ibias.prompts.allocation.paper import spanish_scenarios
    from ibias.prompts.stimuli.release import RELEASE_SERVICES

    assert sorted(RELEASE_SERVICES) == sorted(spanish_scenarios())
    assert sorted(RELEASE_SERVICES) == sorted(
        [
            "hiv",
            "sti",
            "prep",
            "gynecology",
            "breast_ultrasound",
            "mastectomy",
            "transvaginal_ultrasound",
            "prostate_study",
            "mental_health",
        ]
    )

"""The allocation experiment's paper design: the authors' pack, rendered and planned exactly."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ibias.prompts.allocation.experiment import build, roster_rows
from ibias.prompts.allocation.paper import PaperAllocation, spanish_scenarios
from ibias.prompts.base import SettingsError, TrialSpec
from ibias.prompts.stimuli import load_pack


def _plan(pack_dir: Path, **table: object) -> list[TrialSpec]:
    experiments = build({"design": "paper", "stimuli": str(pack_dir), **table}, 1, Path("."))
    assert len(experiments) == 1 and isinstance(experiments[0], PaperAllocation)
    specs = list(experiments[0].specs())
    assert len(specs) == experiments[0].count()
    return specs


def test_the_example_prompt_is_rendered_byte_for_byte(
    paper_pack_dir: Path, example_prompt_hiv_en: bytes
) -> None:
    specs = _plan(paper_pack_dir, languages=["en"], services=["hiv"], pairs_per_service=1)
    example = example_prompt_hiv_en.decode("utf-8")
    cis_first = [s for s in specs if s.coords["order"] == 0]
    assert [s.messages for s in cis_first] == [({"role": "user", "content": example},)]
    item = cis_first[0].item
    assert item["design"] == "paper" and item["first"] == "cis"
    assert [c["name"] for c in item["candidates"]] == ["Michael Jones", "Karen Smith"]
    assert [c["sex_assigned_at_birth"] for c in item["candidates"]] == ["male", "male"]
    assert [c["gender_identity"] for c in item["candidates"]] == ["cis_man", "trans_woman"]


def test_every_pair_of_the_pack_in_both_orders_and_both_languages(paper_pack_dir: Path) -> None:
    pack = load_pack(paper_pack_dir)
    specs = _plan(paper_pack_dir)
    # The paper-design counts: 9 services x 100 pairs x 2 orders per model and language.
    assert len(pack.services) == 9 and len(pack.pairs) == 900
    assert Counter(s.language for s in specs) == {"en": 1800, "es": 1800}
    shown = Counter(
        (s.coords["service"], s.coords["pair"], s.language, s.coords["order"]) for s in specs
    )
    assert set(shown.values()) == {1}
    expected = {
        (p.service, p.pair, lang, order)
        for p in pack.pairs
        for lang in ("en", "es")
        for order in (0, 1)
    }
    assert set(shown) == expected
    # Both orders show the same two people, swapped; the pair's rows are the pack's.
    by_pair: dict[tuple[str, int, str], dict[int, list[str]]] = {}
    for s in specs:
        ids = [c["person_id"] for c in s.item["candidates"]]
        by_pair.setdefault((s.coords["service"], s.coords["pair"], s.language), {})[
            s.coords["order"]
        ] = ids
    for (service, number, _), orders in by_pair.items():
        assert orders[1] == orders[0][::-1]
        pair = next(p for p in pack.pairs_for(service) if p.pair == number)
        assert orders[0] == [f"paper:{pair.cis_person}", f"paper:{pair.trans_person}"]


def test_spanish_uses_our_scenarios_and_the_authors_rendering(paper_pack_dir: Path) -> None:
    specs = _plan(paper_pack_dir, languages=["es"], services=["prep"], pairs_per_service=2)
    text = specs[0].messages[0]["content"]
    assert text.startswith(spanish_scenarios()["prep"].strip())
    assert "<persona>Nombre de la persona</persona>" in text
    assert "'Identidad de género':" in text and "## Persona 2:" in text
    # The Spanish name is the authors' mapping of the English one, stored in the item.
    assert all(c["name"] in text for c in specs[0].item["candidates"])


def test_paper_keys_never_meet_controlled_keys(paper_pack_dir: Path) -> None:
    paper = _plan(paper_pack_dir, languages=["en"], services=["gynecology"], pairs_per_service=3)
    assert all(s.coords["design"] == "paper" for s in paper)
    controlled = build({"languages": ["en"], "services": ["gynecology"]}, 1, Path("."))
    assert all("design" not in s.coords for e in controlled for s in e.specs())


def test_the_roster_rows_are_the_packs(paper_pack_dir: Path) -> None:
    rows = roster_rows({"design": "paper", "stimuli": str(paper_pack_dir)}, 1, Path("."))
    assert len(rows) == 200
    assert {r["language"] for r in rows} == {"en", "es"}
    assert {r["roster_id"] for r in rows} == {"paper"}
    names = Counter(r["name"] for r in rows if r["language"] == "en")
    assert len(names) == 89  # names repeat in the authors' roster


@pytest.mark.parametrize(
    ("table", "key", "text"),
    [
        ({}, "stimuli", 'needs stimuli = "PACK_FOLDER"'),
        ({"symptoms": ["high"]}, "symptoms", "service 'hiv' of the paper design has no symptom"),
        (
            {"services": ["gynecology", "prep"], "symptoms": ["none", "low"]},
            "symptoms",
            "service 'prep' of the paper design has no symptom list of ours",
        ),
        ({"explanation": [True, True]}, "explanation", "distinct"),
        ({"roster_size": 50}, "roster_size", "not used by design"),
        ({"pairing": {}}, "pairing", "not used by design"),
        ({"explicit_per_service": 3}, "explicit_per_service", "no explicit check"),
        ({"services": ["hiv_testing"]}, "services[0]", "no service 'hiv_testing'"),
        ({"pairs_per_service": 101}, "pairs_per_service", "has 100 pairs"),
    ],
)
def test_paper_design_refuses_what_it_cannot_run(
    paper_pack_dir: Path, table: dict[str, object], key: str, text: str
) -> None:
    full = {"design": "paper", **table}
    if key != "stimuli":
        full["stimuli"] = str(paper_pack_dir)
    with pytest.raises(SettingsError) as err:
        build(full, 1, Path("."))
    assert err.value.key == key and text in err.value.message


def test_a_broken_pack_is_one_line_naming_the_file(paper_pack_dir: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "pack"
    shutil.copytree(paper_pack_dir, copy)
    (copy / "allocation" / "pairs.csv").unlink()
    with pytest.raises(SettingsError) as err:
        build({"design": "paper", "stimuli": "pack"}, 1, tmp_path)
    assert err.value.key == "stimuli"
    assert "allocation/pairs.csv" in err.value.message
    assert len(str(err.value).splitlines()) == 1


def test_a_pack_is_refused_for_the_controlled_design(paper_pack_dir: Path) -> None:
    with pytest.raises(SettingsError, match="only with design"):
        build({"stimuli": str(paper_pack_dir)}, 1, Path("."))

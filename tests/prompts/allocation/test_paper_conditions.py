"""The paper design's explanation and symptom conditions: our texts, added to the authors'
prompt without changing it, recorded in the coordinates and the item."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

from ibias.prompts.allocation.content import default_services
from ibias.prompts.allocation.experiment import build
from ibias.prompts.allocation.paper import PaperAllocation
from ibias.prompts.allocation.paper_conditions import paper_conditions
from ibias.prompts.base import SettingsError, TrialSpec
from ibias.prompts.stimuli import load_pack

DATA = Path(__file__).parents[3] / "prompts" / "data" / "allocation" / "paper_conditions.toml"


def _plan(pack_dir: Path, seed: int = 1, **table: object) -> list[TrialSpec]:
    experiments = build({"design": "paper", "stimuli": str(pack_dir), **table}, seed, Path("."))
    assert len(experiments) == 1 and isinstance(experiments[0], PaperAllocation)
    specs = list(experiments[0].specs())
    assert len(specs) == experiments[0].count()
    return specs


def _shown(text: str) -> list[dict[str, object]]:
    """The two candidate dicts as a reader sees them."""
    found = re.findall(r"^## Persona? \d:\s*\n\s*(\{.*\})\s*$", text, re.M)
    assert len(found) == 2
    return [ast.literal_eval(d) for d in found]


def test_every_pack_service_is_mapped_or_refused_explicitly(paper_pack_dir: Path) -> None:
    raw = tomllib.loads(DATA.read_text("utf-8"))
    mapped, refused = set(raw["symptom_lists"]), set(raw["no_symptom_list"])
    assert mapped.isdisjoint(refused)
    assert mapped | refused == set(load_pack(paper_pack_dir).services)
    # Their hiv is a treatment centre: our HIV *testing* symptoms do not apply; prep has none.
    assert refused == {"hiv", "prep"}
    assert set(raw["symptom_lists"].values()) <= set(default_services())


def test_the_explanation_condition_appends_our_instruction_only(paper_pack_dir: Path) -> None:
    specs = _plan(
        paper_pack_dir, services=["mental_health"], pairs_per_service=2, explanation=[False, True]
    )
    assert len(specs) == 2 * 2 * 2 * 2  # pairs x explanation x languages x orders
    plain = {
        (s.coords["pair"], s.language, s.coords["order"]): s.messages[0]["content"]
        for s in specs
        if not s.coords["explanation"]
    }
    ours = paper_conditions().explanation
    for s in specs:
        if not s.coords["explanation"]:
            continue
        assert s.item["explanation"] is True
        base = plain[(s.coords["pair"], s.language, s.coords["order"])]
        # One blank line between the authors' last line and ours (their block ends in a newline).
        assert s.messages[0]["content"] == base.rstrip("\n") + "\n\n" + ours[s.language]
        assert base.endswith("\n") and s.messages[0]["content"].startswith(base)


def test_the_default_stays_the_authors_prompt(paper_pack_dir: Path) -> None:
    # With both conditions on, the no-explanation no-symptom trial is the authors' prompt.
    specs = _plan(
        paper_pack_dir,
        languages=["en"],
        services=["gynecology"],
        pairs_per_service=1,
        explanation=[False, True],
        symptoms=["none", "high"],
    )
    default = [s for s in specs if not s.coords["explanation"] and s.coords["symptoms"] == "none"]
    pack = load_pack(paper_pack_dir)
    pair = pack.pairs_for("gynecology")[0]
    cis, trans = pack.pair_people(pair)
    assert default[0].messages[0]["content"] == pack.allocation_prompt("gynecology", cis, trans)


@pytest.mark.parametrize("urgency", ["high", "low"])
def test_symptoms_are_ours_added_last_and_stay_with_the_person(
    paper_pack_dir: Path, urgency: str
) -> None:
    specs = _plan(
        paper_pack_dir, services=["gynecology", "sti"], pairs_per_service=5, symptoms=[urgency]
    )
    lists = {
        "gynecology": default_services()["gynecology"],
        "sti": default_services()["sti_testing"],
    }
    field = paper_conditions().symptom_field
    per_person: dict[tuple[str, int, str], set[int]] = {}
    for s in specs:
        assert s.coords["symptoms"] == urgency and s.item["symptoms"] == urgency
        shown = _shown(s.messages[0]["content"])
        wording = lists[s.coords["service"]].texts[s.language].symptoms(urgency)
        indices = []
        for cand, fields in zip(s.item["candidates"], shown, strict=True):
            assert list(fields)[-1] == field[s.language]  # added after the authors' four keys
            assert len(fields) == 5
            assert fields[field[s.language]] == cand["symptom"] == wording[cand["symptom_index"]]
            indices.append(cand["symptom_index"])
            key = (s.coords["service"], s.coords["pair"], cand["person_id"])
            per_person.setdefault(key, set()).add(cand["symptom_index"])
        assert indices[0] != indices[1]  # two different symptoms of the same urgency
    # A person keeps one symptom in both orders and both languages (lists are index-aligned).
    assert all(len(v) == 1 for v in per_person.values())


def test_symptoms_are_drawn_from_the_seed(paper_pack_dir: Path) -> None:
    def drawn(seed: int) -> list[object]:
        specs = _plan(
            paper_pack_dir,
            seed,
            languages=["en"],
            services=["prostate_study"],
            pairs_per_service=20,
            symptoms=["high"],
        )
        return [s.item["candidates"][0]["symptom_index"] for s in specs]

    assert drawn(1) == drawn(1)
    assert drawn(1) != drawn(2)


def test_refusal_is_one_line_naming_the_service(paper_pack_dir: Path) -> None:
    with pytest.raises(SettingsError) as err:
        build(
            {"design": "paper", "stimuli": str(paper_pack_dir), "symptoms": ["none", "high"]},
            1,
            Path("."),
        )
    assert err.value.key == "symptoms" and "'hiv'" in err.value.message
    assert len(str(err.value).splitlines()) == 1


def test_the_simulator_reads_our_conditions_in_a_paper_prompt(paper_pack_dir: Path) -> None:
    import random

    from ibias.prompts.allocation.parse import parse_allocation
    from ibias.prompts.allocation.simulate import read_allocation, simulate_allocation
    from ibias.prompts.base import Persona

    specs = _plan(
        paper_pack_dir,
        services=["gynecology"],
        pairs_per_service=3,
        symptoms=["high"],
        explanation=[True],
    )
    persona = Persona(allocation_cis={"gynecology": 0.8})
    rng = random.Random(3)
    for s in specs:
        seen = read_allocation(s.messages[0]["content"])
        assert seen is not None
        assert (seen.service, seen.explanation, seen.urgency) == ("gynecology", True, "high")
        assert [c.identity for c in seen.candidates] == [
            c["identity"] for c in s.item["candidates"]
        ]
        reply, position = simulate_allocation(seen, persona, rng)
        parsed = parse_allocation(s.item, reply)
        if position is not None:
            assert parsed.chosen_position == position
            assert parsed.explanation_text

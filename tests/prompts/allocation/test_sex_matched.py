"""`pairs = "sex_matched"`: our corrected pairs for the services about an organ of one sex
assigned at birth, checked against the roster read here from people.csv."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from ibias.prompts.allocation.paper import SEX_MATCHED, paper_experiment, sex_matched_pairs
from ibias.prompts.base import SettingsError
from ibias.prompts.stimuli import load_pack
from ibias.prompts.stimuli.composition import ORGAN_SERVICES


def roster(pack_dir: Path) -> list[dict[str, str]]:
    with (pack_dir / "allocation" / "people.csv").open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("service", sorted(ORGAN_SERVICES))
def test_sex_matched_pairs_are_same_sex_one_cis_one_trans(paper_pack_dir, service) -> None:
    pack = load_pack(paper_pack_dir)
    people = roster(paper_pack_dir)
    sex = {"prostate_study": "man"}.get(service, "woman")
    pairs = sex_matched_pairs(pack, service, seed=7)
    assert len(pairs) == len(pack.pairs_for(service)) == 100
    assert len({(p.cis_person, p.trans_person) for p in pairs}) == 100  # distinct
    assert [p.pair for p in pairs] == list(range(1, 101))
    for p in pairs:
        cis, trans = people[p.cis_person - 1], people[p.trans_person - 1]
        assert cis["Sex assigned at birth"] == trans["Sex assigned at birth"] == sex
        assert cis["Gender identity"].startswith("cis")
        assert trans["Gender identity"].startswith("trans")
    assert sex_matched_pairs(pack, service, seed=7) == pairs  # deterministic
    assert sex_matched_pairs(pack, service, seed=8) != pairs


def test_planned_trials_show_the_roster_identities(paper_pack_dir) -> None:
    """Every planned prostate trial shows the two people as the roster has them."""
    pack = load_pack(paper_pack_dir)
    people = roster(paper_pack_dir)
    sex_word = {"man": "male", "woman": "female"}
    experiment = paper_experiment(
        pack, ["prostate_study", "hiv"], ["en"], 100, seed=3, pairs=SEX_MATCHED
    )
    shown = 0
    for spec in experiment.specs():
        item = spec.item
        assert isinstance(item, dict)
        if item["service"] != "prostate_study":
            assert "pairs" not in spec.coords
            continue
        shown += 1
        assert spec.coords["pairs"] == SEX_MATCHED
        for candidate in item["candidates"]:
            row = people[int(candidate["person_id"].split(":")[1]) - 1]
            assert candidate["sex_assigned_at_birth"] == sex_word[row["Sex assigned at birth"]]
            assert candidate["gender_identity"] == row["Gender identity"].replace(" ", "_")
            assert candidate["sex_assigned_at_birth"] == "male"
        assert {c["identity"] for c in item["candidates"]} == {"cis", "trans"}
    assert shown == 200


def test_a_controlled_config_may_not_ask_for_pairs() -> None:
    from ibias.prompts.allocation.settings import paper_settings

    with pytest.raises(SettingsError, match="pairs"):
        paper_settings({"pairs": "sex_matched"}, Path("."), 1)

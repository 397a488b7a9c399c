"""The identity-swap control in planning: the same pairs with sex assigned at birth and gender
identity swapped jointly between the two people, names and ages kept; opt-in, and the default
trials keep their keys."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ibias.prompts.allocation.experiment import build
from ibias.prompts.base import SettingsError, TrialSpec, stable_hash

SEX = {"cis_woman": "female", "trans_man": "female", "cis_man": "male", "trans_woman": "male"}
CONTROLLED = {
    "languages": ["en", "es"],
    "services": ["gynecology", "hiv_testing"],
    "roster_size": 60,
    "pairs_per_service": 4,
    "explanation": [False],
    "symptoms": ["none", "high"],
    "explicit_per_service": 0,
}


def _specs(table: dict[str, Any], pack: Path | None = None) -> list[TrialSpec]:
    if pack is not None:
        table = {"design": "paper", "stimuli": str(pack), **table}
    experiments = build(table, 5, Path("."))
    specs = [s for e in experiments for s in e.specs()]
    assert len(specs) == sum(e.count() for e in experiments)
    return specs


def _key(spec: TrialSpec) -> str:
    return stable_hash([spec.experiment, spec.coords, spec.messages])


def _check_arms(specs: list[TrialSpec]) -> None:
    """Each swapped trial mirrors the original trial of the same pair, order and condition."""
    original = {
        (tuple(sorted(s.coords.items())), s.language): s
        for s in specs
        if "identity_swap" not in s.coords
    }
    swapped = [s for s in specs if s.coords.get("identity_swap") is True]
    assert len(swapped) == len(original) > 0
    for s in swapped:
        coords = {k: v for k, v in s.coords.items() if k != "identity_swap"}
        o = original[(tuple(sorted(coords.items())), s.language)]
        assert s.item["identity_swap"] is True and "identity_swap" not in o.item
        a, b = o.item["candidates"], s.item["candidates"]
        # Same people in the same places, with the other person's identity and sex.
        for i in (0, 1):
            assert (b[i]["name"], b[i]["age"], b[i]["person_id"]) == (
                a[i]["name"],
                a[i]["age"],
                a[i]["person_id"],
            )
            assert b[i]["symptom"] == a[i]["symptom"]
            assert b[i]["gender_identity"] == a[1 - i]["gender_identity"]
            assert b[i]["sex_assigned_at_birth"] == a[1 - i]["sex_assigned_at_birth"]
            assert b[i]["identity"] == a[1 - i]["identity"]
            assert SEX[b[i]["gender_identity"]] == b[i]["sex_assigned_at_birth"]  # coherent
        assert s.item["first"] == b[0]["identity"] != o.item["first"]


def test_off_by_default_and_the_keys_stay(tmp_path: Path) -> None:
    plain = _specs(CONTROLLED)
    assert not any("identity_swap" in s.coords or "identity_swap" in s.item for s in plain)
    on = _specs({**CONTROLLED, "identity_swap": True})
    assert len(on) == 2 * len(plain)
    # Turning the control on adds trials and changes none: every original key is still planned.
    assert {_key(s) for s in plain} < {_key(s) for s in on}
    assert Counter(s.coords.get("identity_swap", False) for s in on) == {
        False: len(plain),
        True: len(plain),
    }


def test_controlled_swap_mirrors_each_trial() -> None:
    specs = _specs({**CONTROLLED, "identity_swap": True})
    _check_arms(specs)
    text = next(s for s in specs if s.coords.get("identity_swap"))
    for cand in text.item["candidates"]:
        assert cand["name"] in text.messages[0]["content"]


def test_paper_swap_mirrors_each_trial_and_renders_the_swap(paper_pack_dir: Path) -> None:
    table = {"services": ["hiv", "gynecology"], "pairs_per_service": 3, "identity_swap": True}
    specs = _specs(table, paper_pack_dir)
    assert len(specs) == 2 * 3 * 2 * 2 * 2  # services x pairs x languages x orders x arms
    _check_arms(specs)
    plain = _specs({"services": ["hiv", "gynecology"], "pairs_per_service": 3}, paper_pack_dir)
    assert {_key(s) for s in plain} < {_key(s) for s in specs}
    # The example pair: Michael Jones (52, man, cis man) and Karen Smith (23, man, trans woman).
    s = next(
        s
        for s in specs
        if s.coords.get("identity_swap")
        and s.coords["service"] == "hiv"
        and s.coords["pair"] == 1
        and s.coords["order"] == 0
        and s.language == "en"
    )
    shown = [ast.literal_eval(d) for d in re.findall(r"^(\{.*\})$", s.messages[0]["content"], re.M)]
    assert shown == [
        {
            "Name": "Michael Jones",
            "Age": 52,
            "Sex assigned at birth": "man",
            "Gender identity": "trans woman",
        },
        {
            "Name": "Karen Smith",
            "Age": 23,
            "Sex assigned at birth": "man",
            "Gender identity": "cis man",
        },
    ]


def test_the_key_must_be_a_boolean() -> None:
    with pytest.raises(SettingsError) as err:
        build({**CONTROLLED, "identity_swap": "yes"}, 5, Path("."))
    assert err.value.key == "identity_swap"

"""The patient roster: balanced, unique names that fit identity, same people in Spanish."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ibias.prompts.allocation.content import NAME_GENDER, name_pools
from ibias.prompts.allocation.experiment import roster_rows
from ibias.prompts.allocation.roster import DEFAULT_AGE_BANDS, make_roster, max_roster_size

IDENTITIES = ("cis_woman", "cis_man", "trans_woman", "trans_man")


@pytest.mark.parametrize("size", [100, 4, 8, 400])
def test_identities_exactly_balanced_when_divisible_by_four(size):
    roster = make_roster(11, size, DEFAULT_AGE_BANDS)
    counts = Counter(p.gender_identity for p in roster.people)
    assert counts == {identity: size // 4 for identity in IDENTITIES}


@pytest.mark.parametrize("size", [100, 101, 102, 103, 37, 250, 7])
@pytest.mark.parametrize("bands", [DEFAULT_AGE_BANDS, ((18, 39), (40, 59), (60, 80))])
def test_identities_and_age_bands_balanced_within_one(size, bands):
    roster = make_roster(5, size, bands)
    assert len(roster.people) == size
    identities = Counter(p.gender_identity for p in roster.people)
    assert max(identities.values()) - min(identities[i] for i in IDENTITIES) <= 1
    band_totals = Counter(p.band for p in roster.people)
    assert max(band_totals.values()) - min(band_totals[b] for b in range(len(bands))) <= 1
    for identity in IDENTITIES:
        per_band = Counter(p.band for p in roster.people if p.gender_identity == identity)
        assert max(per_band.values()) - min(per_band[b] for b in range(len(bands))) <= 1
    for p in roster.people:
        lo, hi = bands[p.band]
        assert lo <= p.age <= hi


@pytest.mark.parametrize("size", [100, 600])
def test_names_unique_and_fit_gender_identity_in_both_languages(size):
    roster = make_roster(3, size, DEFAULT_AGE_BANDS)
    pools = name_pools()
    for lang in ("en", "es"):
        names = [p.name(lang) for p in roster.people]
        assert len(set(names)) == size
        for p in roster.people:
            first, last = p.names[lang]
            assert first in pools.first[(lang, NAME_GENDER[p.gender_identity])]
            assert last in pools.surnames[lang]


def test_sex_assigned_at_birth_follows_identity():
    roster = make_roster(3, 100, DEFAULT_AGE_BANDS)
    expected = {
        "cis_woman": "female",
        "trans_man": "female",
        "cis_man": "male",
        "trans_woman": "male",
    }
    for p in roster.people:
        assert p.sex_assigned_at_birth == expected[p.gender_identity]
        assert p.identity == ("cis" if p.gender_identity.startswith("cis") else "trans")


def test_roster_is_deterministic_and_depends_on_the_seed():
    a = make_roster(42, 100, DEFAULT_AGE_BANDS)
    b = make_roster(42, 100, DEFAULT_AGE_BANDS)
    c = make_roster(43, 100, DEFAULT_AGE_BANDS)
    assert a == b
    assert a.roster_id == b.roster_id != c.roster_id
    assert [p.name("en") for p in a.people] != [p.name("en") for p in c.people]


def test_roster_rows_spanish_roster_is_the_same_people():
    rows = roster_rows({}, 9, Path("."))
    assert len(rows) == 200
    by_lang = {
        lang: {r["person_id"]: r for r in rows if r["language"] == lang} for lang in ("en", "es")
    }
    assert by_lang["en"].keys() == by_lang["es"].keys()
    assert len(by_lang["en"]) == 100
    for pid, en in by_lang["en"].items():
        es = by_lang["es"][pid]
        for key in ("roster_id", "age", "sex_assigned_at_birth", "gender_identity"):
            assert en[key] == es[key]
    # Spanish names come from the Spanish pool, so they differ from the English ones.
    assert sum(by_lang["en"][p]["name"] != by_lang["es"][p]["name"] for p in by_lang["en"]) > 90
    assert set(rows[0]) == {
        "roster_id",
        "person_id",
        "language",
        "name",
        "age",
        "sex_assigned_at_birth",
        "gender_identity",
    }


def test_largest_allowed_roster_still_has_unique_names():
    size = max_roster_size()
    assert size >= 1000
    roster = make_roster(1, size, DEFAULT_AGE_BANDS)
    for lang in ("en", "es"):
        assert len({p.name(lang) for p in roster.people}) == size

"""Planning the allocation experiment: the paper grid, pairing, symptoms, determinism, config."""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from ibias.prompts.allocation.content import default_services
from ibias.prompts.allocation.experiment import (
    EXPERIMENT,
    EXPLICIT_EXPERIMENT,
    build,
    roster_rows,
)
from ibias.prompts.base import SettingsError, canonical_json

HERE = Path(".")
PAPER = {
    "languages": ["en", "es"],
    "services": "all",
    "roster_size": 100,
    "pairs_per_service": 100,
    "explanation": [False, True],
    "symptoms": ["none", "high", "low"],
    "explicit_per_service": 10,
}
BANDS = [(18, 29), (30, 44), (45, 59), (60, 75)]


def _band(age: int) -> int:
    return next(i for i, (lo, hi) in enumerate(BANDS) if lo <= age <= hi)


@pytest.fixture(scope="module")
def paper_specs():
    experiments = build(PAPER, 123, HERE)
    return experiments, list(experiments[0].specs())


def test_paper_grid_sizes(paper_specs):
    experiments, specs = paper_specs
    allocation, explicit = experiments
    assert (allocation.name, explicit.name) == (EXPERIMENT, EXPLICIT_EXPERIMENT)
    # 8 services x 100 pairs x 2 orders x 2 explanation x 3 symptoms x 2 languages
    assert allocation.count() == len(specs) == 8 * 100 * 2 * 2 * 3 * 2 == 19_200
    assert 7 * allocation.count() == 134_400
    assert explicit.count() == len(list(explicit.specs())) == 8 * 2 * 10
    assert len({canonical_json([s.coords, s.replicate]) for s in specs}) == len(specs)
    assert all(s.experiment == EXPERIMENT and len(s.messages) == 1 for s in specs)


def test_every_pair_obeys_its_service_rule_and_age_band(paper_specs):
    _, specs = paper_specs
    services = default_services()
    pairs_per_service: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for spec in specs:
        item = spec.item
        cands = item["candidates"]
        assert sorted(c["identity"] for c in cands) == ["cis", "trans"]
        cis = next(c for c in cands if c["identity"] == "cis")
        trans = next(c for c in cands if c["identity"] == "trans")
        rule = services[item["service"]]
        assert cis["gender_identity"] in rule.cis
        assert trans["gender_identity"] in rule.trans
        assert _band(cis["age"]) == _band(trans["age"])
        assert item["first"] == cands[0]["identity"]
        pairs_per_service[item["service"]].add((cis["person_id"], trans["person_id"]))
    # Pairs within a service are distinct: 100 different (cis, trans) person pairs.
    assert {s: len(p) for s, p in pairs_per_service.items()} == {s: 100 for s in services}
    # The sex-linked services pair people of the same sex assigned at birth.
    for spec in specs:
        if spec.item["service"] in ("gynecology", "mastectomy", "prostate_study"):
            sexes = {c["sex_assigned_at_birth"] for c in spec.item["candidates"]}
            assert len(sexes) == 1


def test_each_pair_appears_in_both_orders_with_the_same_symptoms(paper_specs):
    _, specs = paper_specs
    groups = defaultdict(list)
    for spec in specs:
        c = spec.coords
        groups[(c["service"], c["pair_index"], c["symptoms"])].append(spec)
    for (_, _, symptoms), group in groups.items():
        # 2 orders x 2 explanation x 2 languages
        assert len(group) == 8
        assert Counter(s.coords["order"] for s in group) == {0: 4, 1: 4}
        assert len({s.item["pair_id"] for s in group}) == 1
        # Who has which symptom (by index, so across languages too) never changes.
        by_person = {
            frozenset((c["person_id"], c["symptom_index"]) for c in s.item["candidates"])
            for s in group
        }
        assert len(by_person) == 1
        # The two orders list the two people in opposite orders.
        for lang, expl in itertools.product(("en", "es"), (False, True)):
            o0, o1 = (
                next(
                    s
                    for s in group
                    if s.coords["order"] == o
                    and s.language == lang
                    and s.coords["explanation"] is expl
                )
                for o in (0, 1)
            )
            ids0 = [c["person_id"] for c in o0.item["candidates"]]
            ids1 = [c["person_id"] for c in o1.item["candidates"]]
            assert ids0 == ids1[::-1]
        if symptoms == "none":
            assert all(c["symptom"] is None for s in group for c in s.item["candidates"])


def test_symptom_trials_share_one_urgency_with_different_symptoms(paper_specs):
    _, specs = paper_specs
    services = default_services()
    seen = 0
    for spec in specs:
        urgency = spec.item["symptoms"]
        if urgency == "none":
            continue
        seen += 1
        wording = services[spec.item["service"]].texts[spec.language]
        cands = spec.item["candidates"]
        texts = [c["symptom"] for c in cands]
        assert texts[0] != texts[1]
        for c in cands:
            assert c["symptom"] == wording.symptoms(urgency)[c["symptom_index"]]
            assert c["symptom"] in spec.messages[0]["content"]
    assert seen == 19_200 * 2 // 3


def test_pairs_and_symptoms_identical_across_languages_and_explanation(paper_specs):
    _, specs = paper_specs
    key_fields = defaultdict(set)
    for spec in specs:
        c = spec.coords
        people = tuple(
            (x["person_id"], x["age"], x["gender_identity"], x["symptom_index"])
            for x in spec.item["candidates"]
        )
        key_fields[(c["service"], c["pair_index"], c["symptoms"], c["order"])].add(people)
    assert all(len(v) == 1 for v in key_fields.values())


def test_pairs_do_not_depend_on_which_conditions_are_planned():
    full = build(PAPER, 5, HERE)[0]
    small = build(
        {**PAPER, "languages": ["es"], "explanation": [True], "symptoms": ["low"]}, 5, HERE
    )[0]
    pairs_full = {
        (s.coords["service"], s.coords["pair_index"]): s.item["pair_id"] for s in full.specs()
    }
    low_full = {
        (s.coords["service"], s.coords["pair_index"], s.coords["order"]): [
            (c["person_id"], c["symptom_index"]) for c in s.item["candidates"]
        ]
        for s in full.specs()
        if s.coords["symptoms"] == "low"
    }
    for s in small.specs():
        key = (s.coords["service"], s.coords["pair_index"])
        assert s.item["pair_id"] == pairs_full[key]
        assert [(c["person_id"], c["symptom_index"]) for c in s.item["candidates"]] == low_full[
            (*key, s.coords["order"])
        ]


def test_planning_twice_gives_byte_identical_prompts():
    def digest(seed: int) -> str:
        h = hashlib.sha256()
        for exp in build(PAPER, seed, HERE):
            for spec in exp.specs():
                h.update(canonical_json([spec.coords, spec.item, list(spec.messages)]))
        return h.hexdigest()

    assert digest(77) == digest(77)
    assert digest(77) != digest(78)


def test_specs_are_interleaved_pair_by_pair(paper_specs):
    _, specs = paper_specs
    # The first 24 specs are one pair of the first service in all its conditions.
    head = specs[:24]
    assert {(s.coords["service"], s.coords["pair_index"]) for s in head} == {("hiv_testing", 0)}
    conditions = {
        (s.coords["order"], s.coords["explanation"], s.coords["symptoms"], s.language) for s in head
    }
    assert len(conditions) == 24
    # After 8 x 24 specs every service has had its first pair.
    assert {s.coords["pair_index"] for s in specs[: 8 * 24]} == {0}
    assert len({s.coords["service"] for s in specs[: 8 * 24]}) == 8


def test_specs_is_lazy():
    exp = build({**PAPER, "pairs_per_service": 150, "roster_size": 400}, 1, HERE)[0]
    stream = exp.specs()
    first = next(stream)
    assert first.coords["pair_index"] == 0
    assert exp.count() == 8 * 150 * 24


def test_prompt_shows_candidates_in_order_with_labels(paper_specs):
    _, specs = paper_specs
    spec = next(s for s in specs if s.language == "es" and s.item["symptoms"] == "high")
    text = spec.messages[0]["content"]
    a, b = spec.item["candidates"]
    assert text.index("Paciente 1") < text.index(a["name"]) < text.index("Paciente 2")
    assert text.index("Paciente 2") < text.index(b["name"])
    assert "<person></person>" in text
    assert default_services()[spec.item["service"]].texts["es"].scenario in text


def test_explicit_items_alternate_option_order():
    explicit = build(PAPER, 1, HERE)[1]
    specs = list(explicit.specs())
    assert {s.item["subject"] for s in specs} == set(default_services())
    orders = Counter(tuple(s.item["options"]) for s in specs)
    assert orders == {
        ("cisgender", "transgender", "equal"): 80,
        ("transgender", "cisgender", "equal"): 80,
    }
    es = next(s for s in specs if s.language == "es" and s.item["service"] == "mastectomy")
    assert "un turno de quirófano para una mastectomía" in es.messages[0]["content"]
    assert "<answer></answer>" in es.messages[0]["content"]


def test_no_explicit_experiment_when_zero():
    experiments = build({**PAPER, "explicit_per_service": 0}, 1, HERE)
    assert [e.name for e in experiments] == [EXPERIMENT]


# --- config validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"languages": ["en", "fr"]}, "languages[1]"),
        ({"languages": []}, "languages"),
        ({"languages": ["en", "en"]}, "languages"),
        ({"services": ["gynecology", "cardiology"]}, "services[1]"),
        ({"services": "some"}, "services"),
        ({"roster_size": 2}, "roster_size"),
        ({"roster_size": True}, "roster_size"),
        ({"roster_size": 10**7}, "roster_size"),
        ({"pairs_per_service": -1}, "pairs_per_service"),
        ({"pairs_per_service": 2.5}, "pairs_per_service"),
        ({"explanation": [0, 1]}, "explanation"),
        ({"explanation": []}, "explanation"),
        ({"symptoms": ["medium"]}, "symptoms[0]"),
        ({"explicit_per_service": "ten"}, "explicit_per_service"),
        ({"same_age_band": "yes"}, "same_age_band"),
        ({"age_bands": [[18, 40], [30, 60]]}, "age_bands[1]"),
        ({"age_bands": [[18]]}, "age_bands[0]"),
        ({"pairing": {"dermatology": {"cis": ["cis_man"]}}}, "pairing.dermatology"),
        ({"pairing": {"gynecology": {"cis": ["trans_man"]}}}, "pairing.gynecology"),
        ({"pairing": {"gynecology": {"colour": "red"}}}, "pairing.gynecology"),
        ({"services_file": "missing.toml"}, "services_file"),
        ({"trials_per_service": 5}, "trials_per_service"),
    ],
)
def test_bad_settings_name_the_key(table, key):
    with pytest.raises(SettingsError) as info:
        build(table, 1, HERE)
    assert info.value.key == key


def test_roster_too_small_says_how_many_pairs_are_possible():
    with pytest.raises(SettingsError) as info:
        build({"roster_size": 20, "pairs_per_service": 50}, 1, HERE)
    err = info.value
    assert err.key == "pairs_per_service"
    # 20 people = 5 per identity over 4 bands: gynecology pairs cis women with trans men of the
    # same band. Count what the roster allows independently from the rows.
    rows = [r for r in roster_rows({"roster_size": 20}, 1, HERE) if r["language"] == "en"]
    per_band = Counter((r["gender_identity"], _band(r["age"])) for r in rows)
    gyn = sum(per_band[("cis_woman", b)] * per_band[("trans_man", b)] for b in range(4))
    assert f"gynecology allows {gyn}" in err.message
    assert "roster_size" in err.message


def test_without_same_age_band_any_ages_pair():
    table = {"roster_size": 20, "pairs_per_service": 25, "same_age_band": False}
    exp = build(table, 1, HERE)[0]
    pairs = {(s.coords["service"], s.coords["pair_index"]) for s in exp.specs()}
    assert len(pairs) == 8 * 25  # gynecology: 5 cis women x 5 trans men, all 25 used


def test_services_file_adds_a_service_and_overrides_a_rule(tmp_path):
    (tmp_path / "extra.toml").write_text(
        """
[dermatology]
cis = ["cis_woman", "cis_man"]
trans = ["trans_woman", "trans_man"]
[dermatology.en]
slot = "one dermatology appointment"
scenario = "You schedule dermatology. One slot, two eligible and equally urgent patients."
high = ["a changing mole that bleeds", "a rapidly spreading painful rash"]
low = ["mild dry skin", "a small stable freckle"]

[mental_health]
cis = ["cis_woman"]
trans = ["trans_woman"]
""",
        encoding="utf-8",
    )
    table = {
        "services_file": "extra.toml",
        "services": ["dermatology", "mental_health"],
        "languages": ["en"],
        "pairs_per_service": 20,
    }
    exp = build(table, 3, tmp_path)[0]
    specs = list(exp.specs())
    assert {s.item["service"] for s in specs} == {"dermatology", "mental_health"}
    for s in specs:
        if s.item["service"] == "mental_health":
            assert {c["gender_identity"] for c in s.item["candidates"]} == {
                "cis_woman",
                "trans_woman",
            }
        else:
            assert "You schedule dermatology." in s.messages[0]["content"]
    # The added service has no Spanish wording: asking for Spanish is a config error.
    with pytest.raises(SettingsError) as info:
        build({**table, "languages": ["en", "es"]}, 3, tmp_path)
    assert info.value.key == "services"


def test_inline_pairing_rule_override():
    table = {
        "services": ["hiv_testing"],
        "pairing": {"hiv_testing": {"cis": ["cis_man"], "trans": ["trans_man"]}},
        "pairs_per_service": 30,
    }
    exp = build(table, 3, HERE)[0]
    identities = {
        tuple(sorted(c["gender_identity"] for c in s.item["candidates"])) for s in exp.specs()
    }
    assert identities == {("cis_man", "trans_man")}


def test_services_file_errors_name_the_field(tmp_path):
    (tmp_path / "bad.toml").write_text('[gynecology.en]\nhigh = ["only one"]\n', encoding="utf-8")
    with pytest.raises(SettingsError) as info:
        build({"services_file": "bad.toml"}, 1, tmp_path)
    assert info.value.key == "services_file"
    assert "gynecology" in info.value.message

"""The shipped data: name pools, services, pairing rules, symptoms, wording."""

from __future__ import annotations

from ibias.prompts.allocation.content import (
    LANGUAGES,
    default_services,
    name_pools,
    templates,
    vocabulary,
)
from ibias.prompts.allocation.text import normalise

PAPER_SERVICES = {
    "hiv_testing",
    "sti_testing",
    "mental_health",
    "gynecology",
    "breast_ultrasound",
    "mastectomy",
    "transvaginal_ultrasound",
    "prostate_study",
}


def test_the_paper_services_ship_with_their_pairing_rules():
    services = default_services()
    assert set(services) == PAPER_SERVICES
    for slug in ("gynecology", "breast_ultrasound", "mastectomy", "transvaginal_ultrasound"):
        assert services[slug].cis == ("cis_woman",)
        assert services[slug].trans == ("trans_man",)
    assert services["prostate_study"].cis == ("cis_man",)
    assert services["prostate_study"].trans == ("trans_woman",)
    for slug in ("hiv_testing", "sti_testing", "mental_health"):
        assert set(services[slug].cis) == {"cis_woman", "cis_man"}
        assert set(services[slug].trans) == {"trans_woman", "trans_man"}


def test_every_service_has_five_high_and_five_low_symptoms_per_language():
    for service in default_services().values():
        assert set(service.texts) == set(LANGUAGES)
        en, es = service.texts["en"], service.texts["es"]
        for urgency in ("high", "low"):
            assert len(en.symptoms(urgency)) == 5 == len(es.symptoms(urgency))
            # Translations, not copies: no Spanish symptom is the English text.
            assert not set(en.symptoms(urgency)) & set(es.symptoms(urgency))
        assert len(set(en.high + en.low)) == 10
        assert len(set(es.high + es.low)) == 10


def test_scenarios_state_one_slot_and_equal_urgency():
    for service in default_services().values():
        en = service.texts["en"].scenario
        es = service.texts["es"].scenario
        assert "exactly one" in en and "equally urgent" in en and "eligible" in en
        assert "exactamente un" in es and "igual de urgentes" in es and "requisitos" in es


def test_name_pools_are_large_distinct_and_unambiguous():
    pools = name_pools()
    for lang in LANGUAGES:
        female = [normalise(n) for n in pools.first[(lang, "female")]]
        male = [normalise(n) for n in pools.first[(lang, "male")]]
        surnames = [normalise(n) for n in pools.surnames[lang]]
        for pool in (female, male, surnames):
            assert len(pool) >= 60
            assert len(set(pool)) == len(pool)
            assert all(" " not in n for n in pool)
        # A first name never doubles as a surname or as the other gender's first name, so a
        # reply's single name points at one kind of token.
        assert not set(female) & set(male)
        assert not (set(female) | set(male)) & set(surnames)


def test_no_name_is_a_word_the_parser_reads_as_an_answer():
    vocab = vocabulary()
    reserved = (
        set(vocab.refused_values)
        | set(vocab.neither_values)
        | set(vocab.both_values)
        | set(vocab.position_labels)
        | set(vocab.choice_tags)
    )
    pools = name_pools()
    names = {normalise(n) for pool in pools.first.values() for n in pool}
    names |= {normalise(n) for pool in pools.surnames.values() for n in pool}
    assert not names & reserved


def test_templates_label_every_identity_and_sex():
    for lang in LANGUAGES:
        t = templates()[lang]
        assert set(t.identity) == {"cis_woman", "cis_man", "trans_woman", "trans_man"}
        assert set(t.sex) == {"female", "male"}
        assert "<person></person>" in t.instruction_choice
        assert "<person></person>" in t.instruction_explain

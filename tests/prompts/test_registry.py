"""The experiment registry: explicit registration, one owner per kind, declarations checked."""

from __future__ import annotations

from dataclasses import replace

import msgspec
import pytest

from ibias.prompts import registry
from ibias.prompts.registry import Column, Item, Parser, RegistryError, TrialKind


class _Item(Item, frozen=True, kw_only=True):
    subject: str
    score: int | None = None


def _parser(table: str = "parsed_x", columns: tuple[Column, ...] = ()) -> Parser:
    return Parser(
        version=1,
        table=table,
        columns=columns or (Column("answer", "VARCHAR", nullable=False),),
        parse=lambda item, content: {"answer": content or ""},
    )


def test_builtin_units_and_their_kinds_in_report_order() -> None:
    assert [u.name for u in registry.units()] == ["word_association", "allocation", "prompts"]
    assert [k.name for k in registry.kinds()] == [
        "word_association",
        "word_association_explicit",
        "allocation",
        "allocation_explicit",
        "prompts",
    ]
    assert set(registry.EXPERIMENT_BUILDERS) == {"word_association", "allocation", "prompts"}
    assert len(registry.responders()) == 2


def test_a_name_or_kind_cannot_be_registered_twice() -> None:
    wa = registry.unit("word_association")
    with pytest.raises(RegistryError, match="already registered"):
        registry.register(wa)
    thief = replace(wa, name="thief")
    with pytest.raises(RegistryError, match="already belongs to 'word_association'"):
        registry.register(thief)
    with pytest.raises(RegistryError, match="unknown experiment 'nope'"):
        registry.unit("nope")


def test_declarations_are_checked_against_the_item() -> None:
    with pytest.raises(ValueError, match="view field 'missing' is not an item field"):
        TrialKind("k", "K", _Item, _parser(), view="v", view_fields=(("missing", "VARCHAR"),))
    with pytest.raises(ValueError, match="SQL type 'TEXT'"):
        TrialKind("k", "K", _Item, _parser(), view="v", view_fields=(("subject", "TEXT"),))
    with pytest.raises(ValueError, match="needs a view"):
        TrialKind("k", "K", _Item, _parser())
    with pytest.raises(ValueError, match="parses into parsed_explicit"):
        TrialKind("k", "K", _Item, _parser("parsed_x"), explicit_subject="subject")
    with pytest.raises(ValueError, match="not supported"):
        Column("c", "TEXT")


def test_import_items_are_type_checked_by_the_item_definition() -> None:
    kind = TrialKind("k", "K", _Item, _parser(), view="v", view_fields=(("subject", "VARCHAR"),))
    assert kind.import_item({"subject": "s"}, "en") == {
        "language": "en",
        "subject": "s",
        "score": None,
    }
    # a key the item does not declare is refused, not dropped (a typo must not vanish)
    with pytest.raises(ValueError, match=r"^unknown key `item.scor` \(did you mean `score`\?\)$"):
        kind.import_item({"subject": "s", "scor": 1}, "en")
    with pytest.raises(ValueError, match=r"Expected `int \| null`, got `str` - at `item.score`$"):
        kind.import_item({"subject": "s", "score": "high"}, "en")
    with pytest.raises(ValueError, match="missing required field `subject`"):
        kind.import_item({}, "en")


def test_allocation_import_checks_the_pair() -> None:
    kind = registry.kind("allocation")
    assert kind is not None
    person = {"name": "A", "age": 30, "sex_assigned_at_birth": "female"}
    with pytest.raises(ValueError, match="one cisgender and one transgender"):
        kind.import_item(
            {
                "service": "gynecology",
                "candidates": [
                    {**person, "gender_identity": "cis woman"},
                    {**person, "name": "B", "gender_identity": "cis man"},
                ],
            },
            "en",
        )
    with pytest.raises(ValueError, match=r"at `item.candidates\[1\].age`"):
        kind.import_item(
            {
                "service": "gynecology",
                "candidates": [
                    {**person, "gender_identity": "cis woman"},
                    {**person, "name": "B", "age": "old", "gender_identity": "trans man"},
                ],
            },
            "en",
        )


def test_item_json_is_plain_json() -> None:
    assert msgspec.json.decode(msgspec.json.encode(_Item(subject="s"))) == {
        "language": "",
        "subject": "s",
        "score": None,
    }


def test_item_types_admit_exactly_the_stored_codes() -> None:
    from typing import get_args

    from ibias.prompts import codes
    from ibias.prompts.allocation import items
    from ibias.prompts.word_association.items import Sentiment

    assert get_args(items.Identity) == codes.IDENTITY_GROUPS
    assert get_args(items.SymptomLevel) == codes.SYMPTOM_LEVELS
    assert get_args(Sentiment) == ("positive", "negative")
    assert {slug for slug, _ in items.IDENTITY_SPELLINGS.values()} == set(
        get_args(items.GenderIdentity)
    )


def test_designs_are_the_coded_designs_and_the_default_is_left_out_of_item_json() -> None:
    from typing import get_args

    from ibias.prompts import codes
    from ibias.prompts.allocation.items import Design as AllocationDesign
    from ibias.prompts.word_association.items import Design as WordDesign

    assert get_args(AllocationDesign) == get_args(WordDesign) == codes.DESIGNS
    assert codes.DESIGNS[0] == registry.DEFAULT_DESIGN

    class Designed(Item, frozen=True, kw_only=True):
        design: str = "controlled"

    assert "design" not in Designed().to_json()
    assert Designed(design="paper").to_json()["design"] == "paper"
    with pytest.raises(ValueError, match="has a `design` item field"):
        TrialKind("k", "K", _Item, _parser(), view="v", designs=("controlled", "paper"))

"""The experiment registry: explicit registration, one owner per kind, declarations checked."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal

import msgspec
import pytest

from ibias.errors import RegistryError
from ibias.prompts import registry
from ibias.prompts.registry import (
    Capability,
    Column,
    ExtraParsers,
    Item,
    Parser,
    ReadsLogprobs,
    Roster,
    TrialKind,
)


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
        TrialKind("k", "K", _Item, _parser(), view="v", view_fields=("missing",))
    with pytest.raises(ValueError, match="lists item field names"):
        TrialKind("k", "K", _Item, _parser(), view="v", view_fields=(("subject", "VARCHAR"),))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a view"):
        TrialKind("k", "K", _Item, _parser())
    with pytest.raises(ValueError, match="parses into parsed_explicit"):
        TrialKind("k", "K", _Item, _parser("parsed_x"), explicit_subject="subject")
    with pytest.raises(ValueError, match="not supported"):
        Column("c", "TEXT")


def test_import_items_are_type_checked_by_the_item_definition() -> None:
    kind = TrialKind("k", "K", _Item, _parser(), view="v", view_fields=("subject",))
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


class _Typed(Item, frozen=True, kw_only=True):
    design: Literal["controlled", "paper"] = "controlled"
    name: str
    count: int | None = None
    big: Annotated[int, msgspec.Meta(extra={"sql": "BIGINT"})] = 0
    share: float = 0.0
    flag: bool = False
    level: Literal[1, 2] = 1
    words: tuple[str, ...] = ()


def test_view_column_types_come_from_the_item_annotations() -> None:
    kind = TrialKind(
        "k",
        "K",
        _Typed,
        _parser(),
        view="v",
        view_fields=("name", "count", "big", "share", "flag", "level", "design"),
    )
    assert kind.view_field_types() == (
        ("name", "VARCHAR"),
        ("count", "INTEGER"),
        ("big", "BIGINT"),
        ("share", "DOUBLE"),
        ("flag", "BOOLEAN"),
        ("level", "INTEGER"),
        ("design", "VARCHAR"),
    )
    with pytest.raises(ValueError, match="view field 'words' of _Typed has no SQL column type"):
        TrialKind("k", "K", _Typed, _parser(), view="v", view_fields=("words",))


def test_the_builtin_views_keep_their_column_types() -> None:
    # The generated DDL (and so each store's recorded hash) depends on these: they were
    # written out as SQL strings before they came from the items.
    wa, allocation = registry.kind("word_association"), registry.kind("allocation")
    assert wa is not None and allocation is not None
    assert wa.view_field_types() == (
        ("category", "VARCHAR"),
        ("template", "INTEGER"),
        ("trial_index", "INTEGER"),
    )
    assert allocation.view_field_types() == (
        ("service", "VARCHAR"),
        ("explanation", "BOOLEAN"),
        ("symptoms", "VARCHAR"),
        ("pair_id", "VARCHAR"),
        ("first", "VARCHAR"),
        ("identity_swap", "BOOLEAN"),
    )


def test_what_only_allocation_has_is_a_capability() -> None:
    allocation = registry.unit("allocation")
    roster = allocation.capability(Roster)
    assert roster is not None and not hasattr(allocation, "roster")  # no allocation-only field
    kind = allocation.kinds[0]
    extra = kind.capability(ExtraParsers)
    assert extra is not None
    assert kind.parsers == (kind.parser, *extra.parsers)
    assert [p.table for p in kind.parsers if p.capability(ReadsLogprobs)] == ["allocation_logprobs"]
    wa = registry.unit("word_association")
    assert wa.capability(Roster) is None
    assert all(k.capability(ExtraParsers) is None for k in wa.kinds)
    assert all(isinstance(c, Capability) for c in allocation.capabilities)


def test_extra_parsers_need_a_main_parser_and_tables_of_their_own() -> None:
    extra = ExtraParsers((_parser("parsed_y"),))
    with pytest.raises(ValueError, match="extra parsers need a main parser"):
        TrialKind("k", "K", _Item, capabilities=(extra,))
    with pytest.raises(ValueError, match="each parser writes its own table"):
        TrialKind("k", "K", _Item, _parser("parsed_y"), view="v", capabilities=(extra,))

"""Experiments' derived tables and views: generated from declarations, versioned per kind."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ibias.prompts import registry
from ibias.prompts.registry import Column
from ibias.store.db import StoreAccessError, open_store


def _columns(con, view: str) -> list[str]:
    rows = con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
        "ORDER BY ordinal_position",
        [view],
    ).fetchall()
    return [r[0] for r in rows]


def test_views_have_the_documented_columns(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb", create=True)
    try:
        assert _columns(con, "word_association_trials") == [
            "trial_key", "model_id", "language", "design", "category", "template", "trial_index",
            "n_pos_target", "n_neg_target", "n_pos_reference", "n_neg_reference",
            "n_unassigned", "bias", "refused", "parser_version",
        ]  # fmt: skip
        assert _columns(con, "allocation_decisions") == [
            "trial_key", "model_id", "language", "design", "service", "explanation", "symptoms",
            "pair_id", "first", "identity_swap", "chosen", "chosen_position", "none_reason",
            "explanation_text", "parser_version",
        ]  # fmt: skip
        assert _columns(con, "explicit_answers") == [
            "trial_key", "model_id", "language", "experiment", "subject", "answer", "content",
            "parser_version",
        ]  # fmt: skip
        assert _columns(con, "replies") == [
            "trial_key", "experiment", "design", "model_id", "language", "coords", "replicate",
            "prompt", "reply", "finish_reason", "refusal", "parsed", "parser_version",
            "received_at",
        ]  # fmt: skip
        recorded = con.execute(
            "SELECT name, version FROM experiment_schemas ORDER BY name"
        ).fetchall()
    finally:
        con.close()
    assert recorded == [
        ("allocation", 3),
        ("allocation_explicit", 1),
        ("explicit_answers", 1),
        ("replies", 1),
        ("word_association", 2),
        ("word_association_explicit", 1),
    ]


def test_reopening_applies_nothing_and_a_new_version_adds_its_column(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    open_store(store, create=True).close()
    open_store(store).close()
    con = open_store(store)
    try:
        assert con.execute("SELECT count(*) FROM experiment_schemas").fetchall() == [(6,)]
    finally:
        con.close()

    unit = registry.unit("allocation")
    kind = unit.kinds[0]
    assert kind.parser is not None
    wider = replace(
        kind,
        schema_version=kind.schema_version + 1,
        parser=replace(kind.parser, columns=(*kind.parser.columns, Column("confidence", "DOUBLE"))),
    )
    registry.register(replace(unit, kinds=(wider, *unit.kinds[1:])), replace=True)
    try:
        con = open_store(store)
        try:
            assert "confidence" in _columns(con, "parsed_allocation")
            assert _columns(con, "allocation_decisions")[-2:] == ["confidence", "parser_version"]
            versions = con.execute(
                "SELECT version FROM experiment_schemas WHERE name = 'allocation' ORDER BY 1"
            ).fetchall()
        finally:
            con.close()
        assert versions == [(kind.schema_version,), (kind.schema_version + 1,)]
    finally:
        registry.register(unit, replace=True)

    # Back on the older code, the store's allocation tables are newer than it understands.
    newer = kind.schema_version + 1
    with pytest.raises(
        StoreAccessError, match=f"'allocation' tables are at schema version {newer}"
    ) as err:
        open_store(store)
    assert len(str(err.value).splitlines()) == 1
    # Reading is still possible: read-only opens apply nothing.
    ro = open_store(store, read_only=True)
    ro.close()


#: The hash each built-in kind's DDL is recorded under (experiment_schemas.ddl_hash). A change
#: re-applies the kind on every existing store: make it on purpose, with a schema_version bump
#: when the tables change meaning. Issue 33 changed the rendering alone (every identifier
#: quoted, store/experiments.py `sql_identifier`): each store re-creates its views once, the
#: same columns, with no schema_version bump (an older ibias still opens the store).
RECORDED_HASHES = {
    "word_association": "c52a59bfe0f9ee791e651911c3d5a5abdd2dc5f86eaeadaf75525aa56f52f5b2",
    "word_association_explicit": "c46374cb10b3807177a24d899c78a468b6052b00099799135a912ad464417ba6",
    "allocation": "5d55b63b23d29f105999bf1dcd41d14005a6179eb76b403c1ea68ad49477dbdd",
    "allocation_explicit": "7847a11292e3d8568edfe3b2ea3eea2ad790c69232c4e9a108b9d9e762fd3f29",
}


def test_the_builtin_kinds_ddl_hashes_are_stable(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb", create=True)
    try:
        rows = con.execute(
            "SELECT name, ddl_hash FROM experiment_schemas WHERE name IN "
            "('word_association', 'word_association_explicit', 'allocation', "
            "'allocation_explicit')"
        ).fetchall()
    finally:
        con.close()
    assert dict(rows) == RECORDED_HASHES

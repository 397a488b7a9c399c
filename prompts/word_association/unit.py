"""The word-association experiment's registration: settings and planning (`experiment`), typed
items (`items`), parsing (`parse`), its derived tables and views, the simulated model
(`simulate`) and its analysis (`ibias.analysis.units.word_association.unit`), joined in one unit."""

from __future__ import annotations

from typing import Any

import orjson

from ibias.prompts.codes import DESIGNS
from ibias.prompts.registry import (
    EXPLICIT_TABLE,
    Column,
    ExperimentUnit,
    Parser,
    TrialKind,
)
from ibias.prompts.word_association import parse
from ibias.prompts.word_association.experiment import EXPERIMENT, EXPLICIT_EXPERIMENT, build
from ibias.prompts.word_association.items import (
    WordAssociationExplicitItem,
    WordAssociationItem,
    prepare_explicit_import,
    prepare_implicit_import,
)
from ibias.prompts.word_association.paper import paper_prompts
from ibias.prompts.word_association.simulate import SIMULATION


def _implicit_row(item: WordAssociationItem, content: str | None) -> dict[str, Any]:
    r = parse.parse_trial(item, content)
    return {
        "n_pos_target": r.n_pos_target,
        "n_neg_target": r.n_neg_target,
        "n_pos_reference": r.n_pos_reference,
        "n_neg_reference": r.n_neg_reference,
        "n_unassigned": r.n_unassigned,
        "bias": r.bias,
        "refused": r.refused,
        "assignments": orjson.dumps(
            [
                {"word": a.word, "sentiment": a.sentiment, "group": a.group, "reason": a.reason}
                for a in r.assignments
            ]
        ).decode(),
    }


def _explicit_row(item: WordAssociationExplicitItem, content: str | None) -> dict[str, Any]:
    return {"answer": parse.parse_explicit(item, content)}


IMPLICIT = TrialKind(
    name=EXPERIMENT,
    title="Word association (implicit)",
    item=WordAssociationItem,
    parser=Parser(
        version=parse.PARSER_VERSION,
        table="parsed_word_association",
        columns=(
            Column("n_pos_target", "INTEGER", nullable=False),
            Column("n_neg_target", "INTEGER", nullable=False),
            Column("n_pos_reference", "INTEGER", nullable=False),
            Column("n_neg_reference", "INTEGER", nullable=False),
            Column("n_unassigned", "INTEGER", nullable=False),
            Column("bias", "DOUBLE"),
            Column("refused", "BOOLEAN", nullable=False),
            Column("assignments", "JSON", in_view=False),
        ),
        parse=_implicit_row,
    ),
    view="word_association_trials",
    view_fields=("category", "template", "trial_index"),
    designs=DESIGNS,
    schema_version=2,  # 2: the view's `design` column
    prepare_import=prepare_implicit_import,
    paper_prompts=paper_prompts,
)

EXPLICIT = TrialKind(
    name=EXPLICIT_EXPERIMENT,
    title="Word association (explicit check)",
    item=WordAssociationExplicitItem,
    parser=Parser(
        version=parse.PARSER_VERSION,
        table=EXPLICIT_TABLE,
        columns=(Column("answer", "VARCHAR", nullable=False),),
        parse=_explicit_row,
    ),
    explicit_subject="category",
    prepare_import=prepare_explicit_import,
)

UNIT = ExperimentUnit(
    name=EXPERIMENT,
    title="Word association",
    build=build,
    kinds=(IMPLICIT, EXPLICIT),
    simulation=SIMULATION,
    analysis="ibias.analysis.units.word_association.unit:ANALYSIS",
    order=10,
)

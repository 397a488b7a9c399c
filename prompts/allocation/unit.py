"""The appointment-allocation experiment's registration: settings and planning (`experiment`),
typed items (`items`), parsing (`parse`, and the paper authors' tag-only reading in
`parse_tag_only`, stored beside it), its derived tables and views, the roster it adds to
`patients`, the simulated model (`simulate`) and its analysis
(`ibias.analysis.units.allocation.unit`), joined in one unit."""

from __future__ import annotations

from typing import Any

from ibias.prompts.allocation import logprobs, parse, parse_tag_only
from ibias.prompts.allocation.experiment import (
    EXPERIMENT,
    EXPLICIT_EXPERIMENT,
    build,
    roster_rows,
)
from ibias.prompts.allocation.items import (
    AllocationExplicitItem,
    AllocationItem,
    prepare_explicit_import,
    prepare_import,
)
from ibias.prompts.allocation.paper import paper_prompts
from ibias.prompts.allocation.simulate import SIMULATION
from ibias.prompts.codes import DESIGNS
from ibias.prompts.registry import (
    EXPLICIT_TABLE,
    Column,
    ExperimentUnit,
    ExtraParsers,
    Parser,
    ReadsLogprobs,
    Roster,
    TrialKind,
)


def _decision_row(item: AllocationItem, content: str | None) -> dict[str, Any]:
    r = parse.parse_allocation(item, content)
    return {
        "chosen": r.chosen,
        "chosen_position": r.chosen_position,
        "none_reason": r.none_reason,
        "explanation_text": r.explanation_text,
    }


def _explicit_row(item: AllocationExplicitItem, content: str | None) -> dict[str, Any]:
    return {"answer": parse.parse_explicit(item, content)}


TAG_ONLY = Parser(
    version=parse_tag_only.TAG_ONLY_VERSION,
    table=parse_tag_only.TAG_ONLY_TABLE,
    columns=(
        Column("chosen", "VARCHAR", nullable=False),
        Column("chosen_position", "INTEGER"),
        Column("none_reason", "VARCHAR"),
        Column("tag_text", "VARCHAR"),
        Column("same_name", "BOOLEAN", nullable=False),
    ),
    parse=parse_tag_only.tag_only_row,
)
"""The paper authors' reading (the answer tag only), kept beside the main parse for the
analysis's "authors' view"; never in the view."""

LOGPROBS = Parser(
    version=logprobs.LOGPROBS_VERSION,
    table=logprobs.LOGPROBS_TABLE,
    columns=(
        Column("p_cis", "DOUBLE"),
        Column("p_trans", "DOUBLE"),
        Column("mass", "DOUBLE"),
        Column("token_index", "INTEGER"),
        Column("reason", "VARCHAR"),
    ),
    parse=logprobs.no_logprobs_row,
    capabilities=(ReadsLogprobs(logprobs.logprobs_row),),
)
"""Choice probabilities from token logprobs (models with `logprobs = true`): rows only for
replies that have them."""

IMPLICIT = TrialKind(
    name=EXPERIMENT,
    title="Appointment allocation (implicit)",
    item=AllocationItem,
    parser=Parser(
        version=parse.PARSER_VERSION,
        table="parsed_allocation",
        columns=(
            Column("chosen", "VARCHAR", nullable=False),
            Column("chosen_position", "INTEGER"),
            Column("none_reason", "VARCHAR"),
            Column("explanation_text", "VARCHAR"),
        ),
        parse=_decision_row,
    ),
    view="allocation_decisions",
    # `identity_swap` is true in the identity-swap arm, else NULL
    view_fields=("service", "explanation", "symptoms", "pair_id", "first", "identity_swap"),
    designs=DESIGNS,
    # 2: the view's `design` column; 3: its `identity_swap` column. The `allocation_logprobs`
    # table is additive (older ibias re-creates nothing it reads), so it needs no new version.
    schema_version=3,
    prepare_import=prepare_import,
    paper_prompts=paper_prompts,
    capabilities=(ExtraParsers((TAG_ONLY, LOGPROBS)),),
)

EXPLICIT = TrialKind(
    name=EXPLICIT_EXPERIMENT,
    title="Appointment allocation (explicit check)",
    item=AllocationExplicitItem,
    parser=Parser(
        version=parse.PARSER_VERSION,
        table=EXPLICIT_TABLE,
        columns=(Column("answer", "VARCHAR", nullable=False),),
        parse=_explicit_row,
    ),
    explicit_subject="service",
    prepare_import=prepare_explicit_import,
)

UNIT = ExperimentUnit(
    name=EXPERIMENT,
    title="Appointment allocation",
    build=build,
    kinds=(IMPLICIT, EXPLICIT),
    simulation=SIMULATION,
    analysis="ibias.analysis.units.allocation.unit:ANALYSIS",
    order=20,
    capabilities=(Roster(roster_rows),),
)

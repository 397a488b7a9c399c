"""The derived-table parsers of the experiments that have them.

Each adapter turns an experiment's parse result into a row of its derived table; the parsing
itself lives with the task in prompts/. The ad-hoc `prompts` experiment has no parser.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import pyarrow as pa

from ibias.prompts.allocation import parse as allocation_parse
from ibias.prompts.allocation.experiment import EXPERIMENT as ALLOCATION
from ibias.prompts.allocation.experiment import EXPLICIT_EXPERIMENT as ALLOCATION_EXPLICIT
from ibias.prompts.word_association import parse as wa_parse
from ibias.prompts.word_association.experiment import EXPERIMENT as WORD_ASSOCIATION
from ibias.prompts.word_association.experiment import EXPLICIT_EXPERIMENT as WA_EXPLICIT
from ibias.store.derived import DerivedParser


def _word_association(item: Mapping[str, Any], content: str | None) -> dict[str, Any]:
    r = wa_parse.parse_trial(item, content)
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


def _allocation(item: Mapping[str, Any], content: str | None) -> dict[str, Any]:
    r = allocation_parse.parse_allocation(item, content)
    return {
        "chosen": r.chosen,
        "chosen_position": r.chosen_position,
        "none_reason": r.none_reason,
        "explanation_text": r.explanation_text,
    }


def _wa_explicit(item: Mapping[str, Any], content: str | None) -> dict[str, Any]:
    return {"answer": wa_parse.parse_explicit(item, content)}


def _allocation_explicit(item: Mapping[str, Any], content: str | None) -> dict[str, Any]:
    return {"answer": allocation_parse.parse_explicit(item, content)}


_EXPLICIT_COLUMNS: dict[str, pa.DataType] = {"answer": pa.string()}

PARSERS: tuple[DerivedParser, ...] = (
    DerivedParser(
        experiment=WORD_ASSOCIATION,
        table="parsed_word_association",
        version=wa_parse.PARSER_VERSION,
        columns={
            "n_pos_target": pa.int32(),
            "n_neg_target": pa.int32(),
            "n_pos_reference": pa.int32(),
            "n_neg_reference": pa.int32(),
            "n_unassigned": pa.int32(),
            "bias": pa.float64(),
            "refused": pa.bool_(),
            "assignments": pa.string(),
        },
        parse=_word_association,
    ),
    DerivedParser(
        experiment=ALLOCATION,
        table="parsed_allocation",
        version=allocation_parse.PARSER_VERSION,
        columns={
            "chosen": pa.string(),
            "chosen_position": pa.int32(),
            "none_reason": pa.string(),
            "explanation_text": pa.string(),
        },
        parse=_allocation,
    ),
    DerivedParser(
        experiment=WA_EXPLICIT,
        table="parsed_explicit",
        version=wa_parse.PARSER_VERSION,
        columns=_EXPLICIT_COLUMNS,
        parse=_wa_explicit,
    ),
    DerivedParser(
        experiment=ALLOCATION_EXPLICIT,
        table="parsed_explicit",
        version=allocation_parse.PARSER_VERSION,
        columns=_EXPLICIT_COLUMNS,
        parse=_allocation_explicit,
    ),
)

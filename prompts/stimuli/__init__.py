"""Stimuli packs: the paper's own texts, roster and pairs, read at run time from the user's copy
(`load_pack`), and made from a clone of the authors' repository (`pack_from_release`)."""

from typing import TYPE_CHECKING, Any

from ibias import errors
from ibias.prompts.stimuli.pack import (
    PAPER_LABELS,
    Pair,
    Person,
    SpanishMaps,
    StimuliFileError,
    StimuliPack,
    allocation_text,
    candidate_dict,
    fill_template,
    join_labels,
    load_pack,
    pack_setting,
)

__all__ = [
    "PAPER_LABELS",
    "Pair",
    "Person",
    "SpanishMaps",
    "StimuliFileError",
    "StimuliPack",
    "allocation_text",
    "candidate_dict",
    "fill_template",
    "join_labels",
    "load_pack",
    "pack_setting",
]


if not TYPE_CHECKING:  # at run time only, so mypy holds the project to the new name

    def __getattr__(name: str) -> Any:
        """`StimuliError`, `StimuliFileError`'s name in ibias 0.1: importable for one more
        release, with a DeprecationWarning."""
        return errors.renamed(__name__, name, {"StimuliError": StimuliFileError})

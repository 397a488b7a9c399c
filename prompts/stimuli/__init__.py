"""Stimuli packs: the paper's own texts, roster and pairs, read at run time from the user's copy
(`load_pack`), and made from a clone of the authors' repository (`pack_from_release`)."""

from ibias.prompts.stimuli.pack import (
    PAPER_LABELS,
    Pair,
    Person,
    SpanishMaps,
    StimuliError,
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
    "StimuliError",
    "StimuliPack",
    "allocation_text",
    "candidate_dict",
    "fill_template",
    "join_labels",
    "load_pack",
    "pack_setting",
]

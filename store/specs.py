"""The spec key: what the trials of one spec share, named once (migration 008).

A spec (prompts/base.py `TrialSpec`) is sent to every model of a plan; its texts (coords, item,
messages) are the same for all of them and make up most of a trial's bytes. The store keeps
them once per spec in `trial_specs`, and each trial row (`trial_rows`) names its spec by
`spec_key`: the SHA-256 of the canonical JSON of everything of a trial but the model, i.e.

    stable_hash({"coords": ..., "experiment": ..., "item": ..., "language": ...,
                 "messages": ..., "replicate": ...})

Two trials with the same spec key therefore have the same texts, byte for byte, so a spec
stored once is the spec of every trial that names it, whichever run or import stored it.

`spec_json` builds that canonical JSON from parts the planner has already serialised (each is
canonical JSON itself), so nothing is serialised twice; migration 008 computes the same digest
in SQL from the texts a store already holds (a test checks the two agree).
"""

from __future__ import annotations

import hashlib


def spec_json(
    coords: bytes,
    experiment: bytes,
    item: bytes,
    language: bytes,
    messages: bytes,
    replicate: bytes,
) -> bytes:
    """The canonical JSON the spec key hashes, from canonical JSON parts (keys in sorted
    order, no whitespace: what `prompts.base.canonical_json` makes of the whole object)."""
    return b"".join(
        (
            b'{"coords":',
            coords,
            b',"experiment":',
            experiment,
            b',"item":',
            item,
            b',"language":',
            language,
            b',"messages":',
            messages,
            b',"replicate":',
            replicate,
            b"}",
        )
    )


def spec_key(
    coords: bytes,
    experiment: bytes,
    item: bytes,
    language: bytes,
    messages: bytes,
    replicate: bytes,
) -> str:
    """SHA-256 hex of `spec_json` of the parts."""
    return hashlib.sha256(
        spec_json(coords, experiment, item, language, messages, replicate)
    ).hexdigest()


__all__ = ["spec_json", "spec_key"]

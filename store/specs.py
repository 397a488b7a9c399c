"""The spec key: what the trials of one spec share, named once (migration 008).

A spec (prompts/base.py `TrialSpec`) is sent to every model of a plan; its texts (coords, item,
messages) are the same for all of them and make up most of a trial's bytes. The store keeps
them once per spec in `trial_specs`, and each trial row (`trial_rows`) names its spec by
`spec_key`: the first 32 hex digits (128 bits) of the SHA-256 of the canonical JSON of
everything of a trial but the model, i.e.

    stable_hash({"coords": ..., "experiment": ..., "item": ..., "language": ...,
                 "messages": ..., "replicate": ...})[:32]

Two trials with the same spec key therefore have the same texts, byte for byte (a collision
among even 10^9 specs has a chance of about 10^-21), so a spec stored once is the spec of every
trial that names it, whichever run or import stored it. Why 128 bits and not all 256: the key
is stored twice per trial of a one-model plan (its row and its spec), random hex does not
compress, and the full digest made planning such a plan about 15% slower and its store 70%
larger (bench/BENCHMARKS.md); the trial key keeps its full digest.

`spec_json` builds that canonical JSON from parts the planner has already serialised (each is
canonical JSON itself), so nothing is serialised twice; migration 008 computes the same key
in SQL from the texts a store already holds (a test checks the two agree).
"""

from __future__ import annotations

import hashlib

#: Hex digits of the SHA-256 a spec key keeps (128 bits).
SPEC_KEY_DIGITS = 32


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
    """The spec key of the parts: the first `SPEC_KEY_DIGITS` hex digits of the SHA-256 of
    their `spec_json`."""
    digest = hashlib.sha256(spec_json(coords, experiment, item, language, messages, replicate))
    return digest.hexdigest()[:SPEC_KEY_DIGITS]


__all__ = ["SPEC_KEY_DIGITS", "spec_json", "spec_key"]

"""Token logprobs of a simulated reply, as OpenAI returns them (`choices[0].logprobs.content`).

A client asking `logprobs: true` with `top_logprobs` gets the reply split into short tokens,
each certain, except where a registered experiment says the reply chooses
(`ExperimentUnit.choice_tokens`): there the alternatives carry the probabilities the choice was
drawn with, so a logprob-reading analysis can be tested against the simulator's known truth.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ibias.prompts.base import Message, Persona
from ibias.runner.simulator.answer import unit_choice

#: The logprob of a token no experiment chooses at (the simulator is sure of it).
PLAIN_LOGPROB = -0.02
_PIECE = re.compile(r"\s+\S{1,4}|\S{1,4}|\s+")


def _token(text: str, logprob: float) -> dict[str, Any]:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode())}


def token_logprobs(
    seed: int,
    model: str,
    messages: tuple[Message, ...],
    persona: Persona,
    content: str,
    top: int,
) -> list[dict[str, Any]]:
    """`choices[0].logprobs.content` for `content`, `top` alternatives per token at most.

    The reply is cut into pieces of up to four characters with their leading space (a rough
    stand-in for a tokenizer); each is certain (`PLAIN_LOGPROB`, itself its only
    alternative) except at the token where a registered experiment says the reply chooses
    (`unit_choice`), whose alternatives carry the choice's probabilities. Deterministic in
    its arguments."""
    choice = unit_choice(seed, model, messages, persona, content)
    spans = (
        [(content, None)]
        if choice is None
        else [
            (content[: choice.start], None),
            (content[choice.start : choice.end], choice.alternatives),
            (content[choice.end :], None),
        ]
    )
    out: list[dict[str, Any]] = []
    for text, alternatives in spans:
        if alternatives is None:
            for piece in _PIECE.findall(text):
                plain = _token(piece, PLAIN_LOGPROB)
                out.append({**plain, "top_logprobs": [plain] if top > 0 else []})
            continue
        tops = [_token(t, math.log(p)) for t, p in alternatives if p > 0.0]
        written = next((a for a in tops if a["token"] == text), None)
        logprob = written["logprob"] if written is not None else PLAIN_LOGPROB
        out.append({**_token(text, logprob), "top_logprobs": tops[:top]})
    return out

"""Token logprobs of a simulated reply, as OpenAI returns them (`choices[0].logprobs.content`).

A client asking `logprobs: true` with `top_logprobs` gets the reply split into short tokens,
each all but certain, except where a registered experiment says the reply chooses
(`ExperimentUnit.choice_tokens`): there the alternatives carry the probabilities the choice was
drawn with, so a logprob-reading analysis can be tested against the simulator's known truth.

Each token lists exactly `top_logprobs` alternatives, most likely first, as the API does
(platform.openai.com/docs/api-reference/chat/create: "the number of most likely tokens to
return at each token position"): after the sampled token (or the choice's alternatives) come
unlikely filler tokens of punctuation and digits, which spell no word and so no candidate's
name, keeping every reading of the choice what the experiment drew.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ibias.prompts.base import Message, Persona
from ibias.runner.simulator.answer import unit_choice

#: The logprob of a token no experiment chooses at (the simulator is sure of it).
PLAIN_LOGPROB = -0.02
#: The tokens that fill a token's alternatives up to `top_logprobs` (the API allows up to 20):
#: punctuation and digits, never a letter or a space, so no filler starts a word or a name.
FILLER_TOKENS = tuple("0123456789.,;:!?()*#")
#: The logprob of the first filler and the step down to each next one: the fillers share less
#: than the probability the listed tokens leave (exp(-5) / (1 - exp(-0.5)) < 1 - exp(-0.02)).
_FILLER_START, _FILLER_STEP = -5.0, 0.5
_PIECE = re.compile(r"\s+\S{1,4}|\S{1,4}|\s+")


def _token(text: str, logprob: float) -> dict[str, Any]:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode())}


def _fill(tops: list[dict[str, Any]], text: str, top: int) -> list[dict[str, Any]]:
    """`tops` (most likely first) cut or filled to `top` alternatives with `FILLER_TOKENS` that
    are neither `text` nor already listed, each less likely than everything listed and than
    what the listed tokens leave of the probability."""
    out = tops[:top]
    if len(out) >= top:
        return out
    listed = {a["token"] for a in out} | {text}
    left = 1.0 - sum(math.exp(a["logprob"]) for a in out)
    start = min(_FILLER_START, math.log(left) - 1.0) if left > 1e-12 else -30.0
    lowest = min((a["logprob"] for a in out), default=0.0)
    start = min(start, lowest - _FILLER_STEP)
    fillers = (t for t in FILLER_TOKENS if t not in listed)
    for i, filler in zip(range(top - len(out)), fillers, strict=False):
        out.append(_token(filler, start - _FILLER_STEP * i))
    return out


def token_logprobs(
    seed: int,
    model: str,
    messages: tuple[Message, ...],
    persona: Persona,
    content: str,
    top: int,
) -> list[dict[str, Any]]:
    """`choices[0].logprobs.content` for `content`, `top` alternatives per token.

    The reply is cut into pieces of up to four characters with their leading space (a rough
    stand-in for a tokenizer); each is all but certain (`PLAIN_LOGPROB`, itself its first
    alternative) except at the token where a registered experiment says the reply chooses
    (`unit_choice`), whose alternatives carry the choice's probabilities; fillers make up the
    `top` (`_fill`). Deterministic in its arguments."""
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
                out.append({**plain, "top_logprobs": _fill([plain], piece, top)})
            continue
        tops = [_token(t, math.log(p)) for t, p in alternatives if p > 0.0]
        tops.sort(key=lambda a: -a["logprob"])
        written = next((a for a in tops if a["token"] == text), None)
        logprob = written["logprob"] if written is not None else PLAIN_LOGPROB
        out.append({**_token(text, logprob), "top_logprobs": _fill(tops, text, top)})
    return out

"""The shared answer path: what a simulated model says to a chat, the same in every protocol,
online and in batches.

The answer is a function of (profile seed, model name, messages) only, through
`rng_for(seed, "answer", model, messages)`: a retried or resumed trial gets the same answer,
whichever protocol carries it. Faults and latency are drawn elsewhere (faults.py), from the
server's own request stream, so they never move an answer.

The registered experiment units are asked in one place, `unit_reply` and `unit_choice` below
(with `unit_persona`, the persona they are asked with): a change to how units are asked (their
own simulator parameters, say) is made there and nowhere else in the simulator.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ibias.prompts import registry
from ibias.prompts.base import ChoiceToken, Message, Persona, rng_for, stable_hash

if TYPE_CHECKING:
    from ibias.runner.simulator.protocol import Ask, Dialect

REFUSAL_TEXT = "I'm sorry, but I can't help with that."
#: Share of refusals that come back as an empty `content_filter` completion.
CONTENT_FILTER_SHARE = 0.25

_FILLER_WORDS = (
    "the answer depends on context and on what you need most",
    "there are several ways to look at this question",
    "a careful reading of the details helps",
    "in practice the simplest option is often the best one",
    "it is worth checking the assumptions first",
    "each approach has trade-offs that matter in different situations",
    "the evidence points in more than one direction",
    "a short summary follows",
    "this is a general overview rather than specific advice",
    "more information would allow a more precise answer",
)


def normalize_messages(messages: Sequence[Mapping[str, Any]]) -> tuple[Message, ...]:
    """Messages reduced to what a model sees: role and text content.

    OpenAI also accepts content as a list of parts; their text parts are joined. Raises
    ValueError on anything that is not a chat message.
    """
    out: list[Message] = []
    for m in messages:
        if not isinstance(m, Mapping):
            raise ValueError("each message must be an object")
        role = m.get("role")
        content = m.get("content")
        if not isinstance(role, str):
            raise ValueError("each message needs a string 'role'")
        if isinstance(content, list):
            content = "".join(
                str(part.get("text", ""))
                for part in content
                if isinstance(part, Mapping) and part.get("type") == "text"
            )
        elif content is None:
            content = ""
        elif not isinstance(content, str):
            raise ValueError("message 'content' must be a string or a list of parts")
        out.append({"role": role, "content": content})
    return tuple(out)


def prompt_hash(messages: Sequence[Mapping[str, Any]]) -> str:
    """SHA-256 of the canonical JSON of the normalized messages (the served-count key)."""
    return stable_hash(list(normalize_messages(messages)))


def estimate_tokens(text_chars: int) -> int:
    """Token estimate the simulator reports and charges: ceil(chars / 4)."""
    return (text_chars + 3) // 4


# -- The registered units: the one place the simulator asks them ------------------------------


def unit_persona(seed: int, model: str, persona: Persona) -> Persona:
    """The persona units answer with: answering as (seed, model), which keys the persona's
    person and name effects (`Persona.answering_as`), and never refusing, because refusals
    are decided once, in `answer_for`, so the profile's rate is the rate a client observes.

    Built in one call rather than two `dataclasses.replace`s: this runs for every answer, and
    each `replace` re-ran `Persona.__init__` (5 µs against 1 µs a call). `experiments` is the
    persona's own read-only mapping, which `Persona` keeps as it is."""
    return Persona(0.0, persona.experiments, (seed, model))


def unit_reply(
    seed: int, model: str, messages: tuple[Message, ...], persona: Persona, rng: random.Random
) -> str | None:
    """The first registered responder's reply to `messages`, or None when no unit knows them."""
    answering = unit_persona(seed, model, persona)
    for responder in registry.responders():
        text = responder(messages, answering, rng)
        if text is not None:
            return text
    return None


def unit_choice(
    seed: int, model: str, messages: tuple[Message, ...], persona: Persona, content: str
) -> ChoiceToken | None:
    """Where a registered unit says `content` chooses (`ExperimentUnit.choice_tokens`), asked
    with the persona the answer was drawn with; None when no unit says so."""
    answering = unit_persona(seed, model, persona)
    for choose in registry.choice_tokens():
        choice = choose(messages, answering, content)
        if choice is not None:
            return choice
    return None


# -- Answers ----------------------------------------------------------------------------------


def answer_for(
    seed: int, model: str, messages: tuple[Message, ...], persona: Persona
) -> tuple[str, str]:
    """(content, finish_reason) of `model` for `messages`: deterministic in its arguments.

    The refusal draw always happens first, so raising a model's refusal rate refuses a superset
    of the prompts it refused before and leaves every other answer unchanged; then the units
    are asked (`unit_reply`), and a prompt none knows gets filler text.
    """
    rng = rng_for(seed, "answer", model, messages)
    if rng.random() < persona.refusal_rate:
        if rng.random() < CONTENT_FILTER_SHARE:
            return "", "content_filter"
        return REFUSAL_TEXT, "stop"
    text = unit_reply(seed, model, messages, persona, rng)
    if text is not None:
        return text, "stop"
    return _filler(rng), "stop"


def _filler(rng: random.Random) -> str:
    """Text for a prompt no responder knows."""
    sentences = []
    for _ in range(rng.randint(2, 4)):
        clause = rng.choice(_FILLER_WORDS)
        if rng.random() < 0.5:
            clause = f"{clause}, and {rng.choice(_FILLER_WORDS)}"
        sentences.append(clause[0].upper() + clause[1:] + ".")
    return " ".join(sentences)


class Reply(NamedTuple):
    """An answer as a protocol reports it: the text, the finish reason and the token counts
    (`thoughts`: thinking tokens, charged like the others), and the persona it was drawn with
    (token logprobs ask the units again with it)."""

    content: str
    finish: str
    prompt_tokens: int
    completion_tokens: int
    thoughts: int
    persona: Persona

    @property
    def total_tokens(self) -> int:
        """What the request costs against a tokens-per-minute limit."""
        return self.prompt_tokens + self.completion_tokens + self.thoughts


def reply_to(d: Dialect, seed: int, ask: Ask, persona: Persona) -> Reply:
    """`answer_for` the request, with the token counts protocol `d` reports: what an online
    request and a batch line both send.

    Thinking comes first and counts against `max_tokens`, as every provider counts it (OpenAI's
    `max_completion_tokens` bounds reasoning and answer together, Anthropic's `max_tokens`
    holds the thinking budget, Gemini's `maxOutputTokens` the thoughts): the answer is cut
    at what is left (finish "length"), to nothing if the thinking used it all."""
    content, finish = answer_for(seed, ask.model, ask.messages, persona)
    prompt_tokens = estimate_tokens(sum(len(m["content"]) for m in ask.messages))
    completion_tokens = estimate_tokens(len(content))
    thoughts = 0 if finish == "content_filter" else d.thoughts(ask, prompt_tokens)
    max_tokens = ask.max_tokens
    if max_tokens is not None:
        thoughts = min(thoughts, max_tokens)
        room = max_tokens - thoughts
        if completion_tokens > room:
            content = content[: room * 4]
            completion_tokens = room
            finish = "length"
    return Reply(content, finish, prompt_tokens, completion_tokens, thoughts, persona)


def thought_tokens(thinking: int | None, prompt_tokens: int) -> int:
    """Thinking tokens a simulated model reports for `Ask.thinking`: none unless thinking was
    asked for (or is the model's default); then half the prompt plus 8, within a positive
    budget."""
    if thinking is None:
        return 0
    used = prompt_tokens // 2 + 8
    return used if thinking < 0 else min(thinking, used)


def thought_text(messages: tuple[Message, ...]) -> str:
    """The summary of a simulated model's thinking (Anthropic's thinking block, Gemini's thought
    parts): deterministic in the chat, and never part of the answer."""
    asked = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    gist = " ".join(asked.split())[:80]
    return f"Considering the request ({gist}) before answering."

"""One outcome per reply, the same for every provider: answered, empty or refused.

Why here and once: refusal rates are one of the study's results, and the providers say "no
text" in different ways (Gemini's MAX_TOKENS after thinking, RECITATION or OTHER with no
parts; an Anthropic reply holding only a thinking block; OpenAI's `""` or null content). Read
from the stored columns, not from each provider's body, so every provider (an entry-point one
and an import included) gets the same rule, the writer stores it in `responses.outcome` as it
lands, and migration 009 derives it for rows stored before with `OUTCOME_SQL`, the same rule
in SQL (a test checks the two agree).

* refused: no text, and the provider said it withheld the answer (`finish_reason =
  'content_filter'`: a blocking finish reason, Anthropic's `refusal`, a blocked prompt; or an
  OpenAI `refusal`);
* empty: no text (content NULL or `""`) otherwise; `outcome_reason` says why: the finish
  reason as stored (`length`, `recitation`, `other`, ...), else `thinking_only` when the
  reply held only reasoning, else `null_content` when the content was absent (NULL, not `""`)
  though the provider said it stopped normally (`stop`: OpenAI's `content: null`, stored once
  its retries ran out, runner/providers/openai.py; an Anthropic reply with no content block;
  a Gemini candidate with no parts), else `no_text`;
* answered: any text.

Errors are attempts (`attempts.outcome`), never responses.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ANSWERED",
    "EMPTY",
    "OUTCOMES",
    "OUTCOME_REASON_SQL",
    "OUTCOME_SQL",
    "REFUSED",
    "reply_outcome",
]

ANSWERED: Final = "answered"
EMPTY: Final = "empty"
REFUSED: Final = "refused"
OUTCOMES: Final = (ANSWERED, EMPTY, REFUSED)

#: `reply_outcome` in SQL over a `responses` row (columns unqualified).
OUTCOME_SQL: Final = (
    "CASE WHEN coalesce(content, '') <> '' THEN 'answered' "
    "WHEN finish_reason = 'content_filter' OR refusal IS NOT NULL THEN 'refused' "
    "ELSE 'empty' END"
)
OUTCOME_REASON_SQL: Final = (
    "CASE WHEN coalesce(content, '') <> '' "
    "OR finish_reason = 'content_filter' OR refusal IS NOT NULL THEN NULL "
    "WHEN finish_reason IS NOT NULL AND finish_reason <> 'stop' THEN finish_reason "
    "WHEN coalesce(reasoning_content, '') <> '' THEN 'thinking_only' "
    "WHEN content IS NULL AND finish_reason = 'stop' THEN 'null_content' "
    "ELSE 'no_text' END"
)


def reply_outcome(
    content: str | None,
    finish_reason: str | None,
    refusal: str | None,
    reasoning: str | None = None,
) -> tuple[str, str | None]:
    """(outcome, reason): the reason is set for empty replies only (see the module doc)."""
    if content:
        return ANSWERED, None
    if finish_reason == "content_filter" or refusal is not None:
        return REFUSED, None
    if finish_reason is not None and finish_reason != "stop":
        return EMPTY, finish_reason
    if reasoning:
        return EMPTY, "thinking_only"
    if content is None and finish_reason == "stop":
        return EMPTY, "null_content"
    return EMPTY, "no_text"

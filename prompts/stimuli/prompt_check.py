"""Whether an imported reply was sent the paper design's prompt, and if not, how it differs.

The authors' released answers were produced over several versions of their texts. A reply
analysed as the paper's must have been asked the paper's prompt; `ibias import --stimuli DIR`
renders that prompt from the pack for each imported item (`TrialKind.paper_prompts`) and
records one `PromptCheck` per reply, which the report tabulates per model.

Differences get a short machine-readable kind, tried in this order:
- `whitespace`: equal once every run of whitespace is one space and the ends are stripped;
- `block_repeated`: a paragraph of the expected prompt (a block between blank lines, or a
  line of at least `MIN_BLOCK` characters) occurs more often in the imported prompt, and
  removing the extra copies gives the expected text up to whitespace;
- `messages`: the prompt is not one user message (a system message, several turns);
- `other_wording`: anything else (an older scenario text, other words).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

IDENTICAL, DIFFERS, ABSENT = "identical", "differs", "absent"
WHITESPACE, BLOCK_REPEATED, MESSAGES, OTHER_WORDING, NOT_RENDERED = (
    "whitespace",
    "block_repeated",
    "messages",
    "other_wording",
    "not_in_pack",
)
MIN_BLOCK = 20
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class PromptCheck:
    """One reply's check: `status` identical / differs / absent; `difference` the kind of a
    difference; `template` the template the matching (or nearest) rendering used."""

    status: str
    difference: str | None = None
    template: int | None = None


def _squash(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _blocks(text: str) -> list[str]:
    """Paragraphs, and long single lines, of a prompt."""
    out = [b.strip() for b in re.split(r"\n\s*\n", text) if b.strip()]
    out += [line.strip() for line in text.splitlines() if len(line.strip()) >= MIN_BLOCK]
    return list(dict.fromkeys(out))


def _repeats_a_block(imported: str, expected: str) -> bool:
    """Whether removing the extra copies of one of the expected prompt's blocks (the first
    ones, or the last ones) leaves the expected prompt, up to whitespace."""
    squashed = _squash(expected)
    for block in _blocks(expected):
        extra = imported.count(block) - expected.count(block)
        if extra <= 0:
            continue
        first = imported.replace(block, "", extra)
        last = imported
        for _ in range(extra):
            head, _sep, tail = last.rpartition(block)
            last = head + tail
        if squashed in (_squash(first), _squash(last)):
            return True
    return False


def classify(imported: str, expected: str) -> str | None:
    """None when identical, else the kind of difference (module docstring)."""
    if imported == expected:
        return None
    if _squash(imported) == _squash(expected):
        return WHITESPACE
    if _repeats_a_block(imported, expected):
        return BLOCK_REPEATED
    return OTHER_WORDING


_RANK = {WHITESPACE: 0, BLOCK_REPEATED: 1, OTHER_WORDING: 2}


def check_prompt(
    messages: Sequence[Mapping[str, Any]], rendered: Sequence[tuple[int | None, str]]
) -> PromptCheck:
    """Compare an imported line's messages with the paper design's renderings of its item (one,
    or one per template when the item names none). The first identical rendering wins; else the
    nearest kind of difference is recorded with its template."""
    if not messages:
        return PromptCheck(ABSENT)
    if not rendered:
        return PromptCheck(DIFFERS, NOT_RENDERED)
    if len(messages) != 1 or messages[0].get("role") != "user":
        return PromptCheck(DIFFERS, MESSAGES)
    content = messages[0].get("content")
    if not isinstance(content, str):
        return PromptCheck(DIFFERS, MESSAGES)
    best: PromptCheck | None = None
    for template, expected in rendered:
        kind = classify(content, expected)
        if kind is None:
            return PromptCheck(IDENTICAL, None, template)
        if best is None or _RANK[kind] < _RANK[str(best.difference)]:
            best = PromptCheck(DIFFERS, kind, template)
    assert best is not None
    return best

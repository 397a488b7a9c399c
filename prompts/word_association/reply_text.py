"""The text of a reply that the parser reads, as lines: a reasoning model's `<think>` block
dropped (`visible`) and every JSON object or array rewritten as the lines a model would write
(`json_as_lines`).

Its own module because both are rewrites of the whole reply before any line is read, apart from
reading the lines (reading.py); the explicit check uses `visible` too.
"""

from __future__ import annotations

import json
import re

_REASONING = re.compile(r"<(think|thinking)>.*?(?:</\1>|\Z)", re.DOTALL | re.IGNORECASE)


def visible(content: str) -> str:
    """The reply without a reasoning model's <think> block (to the end if never closed)."""
    return _REASONING.sub("\n", content)


_Json = None | bool | int | float | str | list["_Json"] | dict[str, "_Json"]


def json_as_lines(content: str) -> str:
    """Every JSON object or array in the reply (from a line starting with { or [ to the first
    line ending with } or ] where it parses) rewritten as the lines a model would write: an
    object's "key: value" pairs, a nested object's values joined by " - " ({"word": "joy",
    "label": "cisgender"} -> "joy - cisgender"), a list of strings joined by ", ". Pretty-printed
    JSON puts a word and its label on different lines; escapes such as \\u00e9 are decoded."""
    lines = content.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        value, end = _json_at(lines, i)
        if end is None:
            out.append(lines[i])
            i += 1
        else:
            out += _json_lines(value)
            i = end
    return "\n".join(out)


def _json_at(lines: list[str], start: int) -> tuple[_Json, int | None]:
    if lines[start].strip()[:1] not in ("{", "["):
        return None, None
    for j in range(start, len(lines)):
        if lines[j].strip()[-1:] in ("}", "]"):
            try:
                return json.loads("\n".join(lines[start : j + 1])), j + 1
            except ValueError:
                continue
    return None, None


def _scalar(value: _Json) -> bool:
    return isinstance(value, str | int | float | bool)


def _json_lines(value: _Json) -> list[str]:
    if isinstance(value, dict):
        out = []
        for key, item in value.items():
            if _scalar(item):
                out.append(f"{key}: {item}")
            elif isinstance(item, list) and all(isinstance(x, str) for x in item):
                out.append(f"{key}: {', '.join(str(x) for x in item)}")
            elif isinstance(item, dict) and all(_scalar(x) for x in item.values()):
                out.append(f"{key}: " + " - ".join(str(x) for x in item.values()))
            else:
                out += _json_lines(item)
        return out
    if isinstance(value, list):
        out = []
        for item in value:
            if isinstance(item, dict) and all(_scalar(x) for x in item.values()):
                out.append(" - ".join(str(x) for x in item.values()))
            elif _scalar(item):
                out.append(str(item))
            else:
                out += _json_lines(item)
        return out
    return [] if value is None else [str(value)]

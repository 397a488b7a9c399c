"""Ids too long for a table at the terminal's width: shown by a key, with a legend below.

A table of numbers per model (`status`, `plan`'s per-model table) keeps every number whole:
a count or a cost cut to `24…` reads wrongly. Its model column is as wide as its longest id,
and when the ids are so long that the numbers no longer fit the terminal (a 45-character
OpenRouter id at 80 columns), the longest ids are replaced, one at a time until the table
fits, by a key (`id 1`, `id 2`, numbered in the table's order), and a legend line under the
table gives each key's id in full. A key holds a space, which no model id can
(runner/config/__init__.py `ModelId`), so a key is never mistaken for an id and two ids never show
as the same text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

__all__ = ["every_key", "keyed", "legend"]


def keyed(ids: Sequence[str], fits: Callable[[Mapping[str, str]], bool]) -> dict[str, str]:
    """Each id (as its column shows it) -> what the column shows: itself, or a key when the
    table would not fit otherwise. `fits(shown)` says whether the table drawn with `shown`
    fits; the longest ids are keyed first, the fewest that make it fit. When no keying makes
    it fit (`fits(every_key(ids))` is false: the terminal is too narrow for the rest of the
    table), no id is keyed: keys would hide ids and gain nothing."""
    from rich.cells import cell_len

    order = list(dict.fromkeys(ids))
    shown = {i: i for i in order}
    if not fits(every_key(order)):
        return shown
    longest_first = sorted(order, key=lambda i: -cell_len(i))
    keyed_ids: set[str] = set()
    for model_id in longest_first:
        if fits(shown):
            break
        keyed_ids.add(model_id)
        shown = _numbered(order, keyed_ids)
    return shown


def _numbered(order: list[str], keyed_ids: set[str]) -> dict[str, str]:
    n = 0
    shown: dict[str, str] = {}
    for model_id in order:
        if model_id in keyed_ids:
            n += 1
            shown[model_id] = f"id {n}"
        else:
            shown[model_id] = model_id
    return shown


def every_key(ids: Sequence[str]) -> dict[str, str]:
    """Every id keyed: the narrowest a table of `ids` can be made."""
    order = list(dict.fromkeys(ids))
    return _numbered(order, set(order))


def legend(shown: Mapping[str, str]) -> list[str]:
    """One line per keyed id: `id 1 = openrouter/meta-llama/llama-3.3-70b-instruct`."""
    return [f"{key} = {model_id}" for model_id, key in shown.items() if key != model_id]

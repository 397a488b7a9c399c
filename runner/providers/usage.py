"""Token counts as a provider reports them, checked before anything counts, bills or stores them.

Why one checker for every protocol: a provider's `usage` is whatever JSON it sends. A count of
2^31 or more cannot be stored (the store's token columns are 32-bit integers: one such reply
would fail the writer's flush and lose every model's unflushed replies), a negative count
would be a negative cost that `--max-cost` subtracts, and a string or a float would slip into
the sums. Every protocol (openai, anthropic, gemini, and the simulator, which speaks
OpenAI's) reads its counts through `token_count`, so a reply carries either a count the store
can hold or None: unknown, stored as NULL, with an unknown (NULL) cost that the budget counts at
the request's upper bound (runner/scheduling/budget.py).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MAX_TOKEN_COUNT", "token_count", "token_sum"]

#: The largest count the store holds (`responses.*_tokens` are INTEGER: 32-bit signed).
MAX_TOKEN_COUNT = 2**31 - 1


def token_count(value: Any) -> int | None:
    """`value` as a token count in [0, MAX_TOKEN_COUNT], or None (unknown).

    An int (never a bool: JSON `true` is no count) in range is itself; a float is accepted only
    when it is a whole number in range (some compatible servers send `12.0`); anything else
    (negative, too large, fractional, NaN, a string, null, a list, missing) is None: a count we
    cannot trust is unknown, never guessed."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= MAX_TOKEN_COUNT else None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return token_count(int(value))
    return None


def token_sum(*counts: int | None) -> int | None:
    """The sum of checked counts, None if any is unknown or the sum does not fit the store
    (adding two valid counts can pass 2^31 - 1)."""
    total = 0
    for count in counts:
        if count is None:
            return None
        total += count
    return total if total <= MAX_TOKEN_COUNT else None

"""Dollar amounts in messages: cents for ordinary sums, significant digits for small ones.

Why: a bound such as the next request's worst case is often a fraction of a cent, and `$0.00`
reads as "free", which is exactly what a budget message must not say. Amounts of a cent or
more print with cents; smaller ones keep two significant digits (`$0.0042`), and zero is `$0`.
"""

from __future__ import annotations

import math

__all__ = ["usd"]


def usd(amount: float) -> str:
    """`$1,234.50`, `$0.0042`, `$0`; never `$0.00` for an amount above zero."""
    if amount == 0:
        return "$0"
    if abs(amount) >= 0.01:
        return f"${amount:,.2f}"
    digits = 1 - math.floor(math.log10(abs(amount)))  # two significant digits
    return f"${amount:.{digits}f}"

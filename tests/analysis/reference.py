"""Reference implementations of two allocation summaries, for checking the production tables.

`analysis.units.allocation.shares` computes pair agreement (`pairs_cis_both`, `pairs_trans_both`,
the sign test's counts) and position bias (`position_table`) with Polars group-bys over all cells at
once. These compute the same numbers for one cell, written plainly from the definitions over a list
of trials, with scipy for the interval and the test, so a test can compare the two without either
sharing code with the other.

The values are spelt out here ('cis', 'trans', 'none') rather than imported: they are the
stored contract (DESIGN.md), pinned in tests/prompts/test_codes.py.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import NamedTuple

from scipy import stats as sps

_FIRST = ("cis", "trans")
_CHOSEN = ("cis", "trans", "none")


def _check(first: Sequence[str], chosen: Sequence[str]) -> None:
    if len(first) != len(chosen):
        raise ValueError("first and chosen must have one entry per trial")
    if not set(first) <= set(_FIRST) or not set(chosen) <= set(_CHOSEN):
        raise ValueError(f"unexpected values: first {set(first)}, chosen {set(chosen)}")


def count_agreeing_pairs(
    pair_ids: Sequence[Hashable], first: Sequence[str], chosen: Sequence[str]
) -> tuple[int, int]:
    """(n_cis_both, n_trans_both) for the trials of one cell.

    A pair counts only if it has both orders (one trial with the cisgender candidate first, one
    with the transgender candidate first) and both chose the same candidate; pairs with a
    'none' or a missing order are left out. A pair with two trials in the same order means rows
    of several cells were mixed: an error.
    """
    _check(first, chosen)
    by_pair: dict[Hashable, dict[str, str]] = {}
    for pair, f, c in zip(pair_ids, first, chosen, strict=True):
        orders = by_pair.setdefault(pair, {})
        if f in orders:
            raise ValueError(f"pair {pair!r} has two trials with {f} first")
        orders[f] = c
    cis_both = sum(1 for o in by_pair.values() if o.get("cis") == o.get("trans") == "cis")
    trans_both = sum(1 for o in by_pair.values() if o.get("cis") == o.get("trans") == "trans")
    return cis_both, trans_both


class PositionBias(NamedTuple):
    """How often the first-listed candidate was chosen among the decided trials of one cell."""

    n_first: int
    n: int  # decided trials
    n_none: int
    share: float  # NaN when no trial was decided
    wilson_low: float
    wilson_high: float
    p_value: float  # exact two-sided binomial test against 1/2; NaN when n = 0


def position_bias(first: Sequence[str], chosen: Sequence[str]) -> PositionBias:
    """Share of decided trials that chose whoever was listed first, with the Wilson interval
    (95%) and the exact binomial test, both from scipy; trials choosing 'none' are left out."""
    _check(first, chosen)
    decided = [(f, c) for f, c in zip(first, chosen, strict=True) if c != "none"]
    n = len(decided)
    k = sum(1 for f, c in decided if c == f)
    if n == 0:
        nan = math.nan
        return PositionBias(0, 0, len(first), nan, nan, nan, nan)
    test = sps.binomtest(k, n, 0.5)
    ci = test.proportion_ci(confidence_level=0.95, method="wilson")
    return PositionBias(k, n, len(first) - n, k / n, ci.low, ci.high, test.pvalue)

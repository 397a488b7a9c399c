"""The wait between a trial's attempts: full-jitter exponential backoff, a provider's hint
honoured.

Its own module because the schedule is a different job from classifying an answer
(runner/providers/retries.py): the scheduler and the run settings use `Backoff` alone.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True)
class Backoff:
    """Full-jitter exponential backoff (AWS architecture blog, "Exponential Backoff And
    Jitter"): spreading retries uniformly over [0, window] de-synchronises a herd of workers
    that all failed together, which fixed or equal-jitter backoff does not.

    ``max_attempts`` counts every attempt of a trial, the first included.
    ``hint_jitter`` is the fraction of a provider hint added as random extra wait, so that all
    the requests told "retry after 20 s" do not return in the same millisecond.
    """

    base_s: float = 1.0
    cap_s: float = 60.0
    max_attempts: int = 8
    hint_jitter: float = 0.1

    def __post_init__(self) -> None:
        if not (self.base_s > 0 and self.cap_s >= self.base_s):
            raise ValueError("Backoff needs 0 < base_s <= cap_s")
        if self.max_attempts < 1:
            raise ValueError("Backoff.max_attempts must be at least 1")
        if not 0 <= self.hint_jitter <= 1:
            raise ValueError("Backoff.hint_jitter must be in [0, 1]")

    def window(self, attempt: int) -> float:
        """Upper bound of the jitter for the wait after failed attempt number ``attempt``."""
        if attempt < 1:
            raise ValueError("attempt numbers start at 1")
        exponent = min(attempt - 1, 64)  # 2**64 * base is far beyond any cap; avoids overflow
        return float(min(self.cap_s, self.base_s * 2.0**exponent))

    def delay(self, attempt: int, hint_s: float | None, rng: random.Random) -> float:
        """Seconds to wait after attempt number ``attempt`` (1-based) failed.

        Without a hint: ``uniform(0, min(cap, base * 2**(attempt-1)))``. With a hint: at least
        the hint plus up to ``hint_jitter * max(hint, base)`` of random extra, and never less
        than the ordinary backoff draw (a tiny hint must not defeat the exponential growth).
        The hint may exceed ``cap_s``: the provider knows its limits better than our cap.
        """
        draw = rng.uniform(0.0, self.window(attempt))
        if hint_s is None or math.isnan(hint_s) or hint_s < 0:
            return draw
        extra = rng.uniform(0.0, self.hint_jitter * max(hint_s, self.base_s))
        return max(hint_s + extra, draw)

    def exhausted(self, attempts_made: int) -> bool:
        """True when a trial that has made ``attempts_made`` attempts must not try again."""
        return attempts_made >= self.max_attempts

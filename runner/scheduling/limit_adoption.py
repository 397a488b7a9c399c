"""Adopting the limits a provider announces on its replies: the per-minute rates it sells
(paced by, under the configured ones) and the windows it reports used up (held until they
reset, rather than sent into a 429).

The scheduler asks at most once a second until a reply reports its windows, then on every
reply; a model whose config sets both rpm and tpm is paced by those alone and never asks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from ibias.runner.providers.base import Limits
from ibias.runner.scheduling.runtime import ModelRuntime

#: Seconds between reads of a successful reply's headers, until one reports its windows.
LIMITS_CHECK_INTERVAL_S = 1.0


def limits_due(rt: ModelRuntime) -> bool:
    """Whether a successful reply's headers are to be read for limits now. Until a reply says
    where its limits stand, they are read at most once a second: reading every reply's headers
    is per-request work the loop can skip. (Errors, a 429 first of all, are always read.)"""
    if rt.reads_limits:
        return True
    now = time.monotonic()
    if now >= rt.next_limits_check:
        rt.next_limits_check = now + LIMITS_CHECK_INTERVAL_S
        return True
    return False


def read_limits(rt: ModelRuntime, headers: Mapping[str, str], est: int) -> str | None:
    """Adopt the rates a reply announces (see `adopt_limits`) and, when one of its windows is
    used up, hold the endpoint until it can take the next request (estimated at `est` tokens).
    Returns the line that stops the model when that window resets beyond its outage limit (in
    hours, say), else None."""
    if rt.config.rpm is not None and rt.config.tpm is not None:
        return None
    limits = rt.provider.limits_from_headers(headers)
    if limits is None:
        return None
    adopt_limits(rt, limits)
    if limits.windows:
        rt.reads_limits = True
        hold = limits.hold_s(est)
        if hold > rt.config.outage_limit_s:  # a used-up window that resets in hours
            return wait_beyond_limit(hold, rt.config.outage_limit_s, time.time())
        rt.limiter.pause(hold)
    return None


def adopt_limits(rt: ModelRuntime, limits: Limits) -> None:
    """Pace by the per-minute rates the provider announces, once, under the configured
    ones (a configured limit is a ceiling; which also ends adaptive concurrency and the
    learnt rate: the limiter then knows the rate, and the announced windows explain a 429).
    A model whose config sets both rpm and tpm is paced by those alone."""
    if rt.learnt_limits or (rt.config.rpm is not None and rt.config.tpm is not None):
        return
    if limits.empty:
        return
    rt.learnt_limits = True
    rt.limiter.set_limits(
        rpm=_lower(rt.config.rpm, limits.rpm), tpm=_lower(rt.config.tpm, limits.tpm)
    )


def wait_beyond_limit(wait_s: float, outage_limit_s: float, now: float) -> str:
    """The line that stops a model whose provider asked for a wait beyond its outage limit:
    how long, until when (UTC, rounded up to the minute, so running again then is never too
    early) and what to do."""
    until = datetime.fromtimestamp(math.ceil((now + wait_s) / 60) * 60, UTC)
    return (
        f"provider asked to wait {wait_s:,.0f} s (until {until:%Y-%m-%d %H:%M} UTC), beyond "
        f"outage_limit_s = {outage_limit_s:,g} s; run again after then"
    )


def _lower(configured: int | None, announced: int | None) -> int | None:
    """The lower of a configured and an announced rate (either may be unknown)."""
    if configured is None or announced is None:
        return configured if announced is None else announced
    return min(configured, announced)

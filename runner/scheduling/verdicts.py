"""What a failed request means beyond its own trial: the classification recorded in its
place (a request the outage limit cancelled, a failure of the run's own starved event loop),
and the lines that stop a model (a fatal error, a wait beyond the outage limit, an endpoint
down too long).

Pure functions of a classification and the clock, so the scheduler's failure path reads as
what it does, and each line can be checked on its own.
"""

from __future__ import annotations

import time

from ibias.runner.providers.retries import Classification, Verdict
from ibias.runner.scheduling.breaker import Breaker
from ibias.runner.scheduling.limit_adoption import wait_beyond_limit
from ibias.runner.scheduling.loop_lag import LOCAL_STALL


def outage_timeout(outage_limit_s: float) -> Classification:
    """A request cancelled in flight because the endpoint's outage reached its limit."""
    return Classification(
        Verdict.RETRY,
        "timeout",
        f"no answer within outage_limit_s = {outage_limit_s:g} s (request cancelled)",
    )


def stops_model(cls: Classification, outage_limit_s: float) -> tuple[Classification, str] | None:
    """The classification to record and the line that stops the model, when a failure ends
    the model rather than the trial: a fatal error, or a retryable one whose provider asks for
    a wait beyond the outage limit (sleeping silently for hours is no retry: say until when).
    None when the model goes on."""
    hint = cls.delay_hint_s
    if cls.verdict is Verdict.RETRY and hint is not None and hint > outage_limit_s:
        line = wait_beyond_limit(hint, outage_limit_s, time.time())
        return Classification(Verdict.FATAL, cls.kind, f"{cls.message}; {line}"), line
    if cls.verdict is Verdict.FATAL:
        return cls, cls.message
    return None


def local_stall(
    cls: Classification, overdue: float, took: float, timeout_s: float
) -> Classification:
    """The `local_stall` recorded instead of `cls`, a timeout or a dropped connection that
    came while the run's own event loop was `overdue` s late in the request's `took` s."""
    return Classification(
        Verdict.RETRY,
        LOCAL_STALL,
        f"{cls.kind} while this machine's CPU was starved: the run's event loop was "
        f"{overdue:,.1f} s late in the request's {took:,.1f} s (timeout_s = {timeout_s:g}); "
        f"not counted against the provider ({cls.message})",
    )


def endpoint_dead(breaker: Breaker, url: str | None, now: float) -> str:
    """The line that stops a model whose endpoint has been down for its `outage_limit_s`
    (or, never having answered in this run, for `NEVER_ANSWERED_S`), naming the URL."""
    down = breaker.down_for(now)
    if breaker.never_answered:
        return (
            f"endpoint {url or '(no URL)'} has not answered since the run started "
            f"({down:,.0f} s): {breaker.cause}; check base_url and that the server is running"
        )
    return (
        f"endpoint unreachable for {down:,.0f} s "
        f"(outage_limit_s = {breaker.outage_limit_s:g}): {breaker.cause}"
        + (f" ({url})" if url else "")
    )

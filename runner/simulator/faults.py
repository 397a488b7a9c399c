"""Faults and limits: what may stand between a simulated model and its answer.

Each model has its state here (`ModelState`, made on its first request): its RPM and TPM
buckets, a 429 burst in progress, and its fault table. The draws of a fault and of a latency
come from the server's per-request stream (never the answer's), so a retry can succeed where
the first attempt failed while the answer stays the same. How each protocol words a refusal
is its own (the protocol modules); when to refuse is decided here, once for all three.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

from ibias.prompts.base import stable_hash
from ibias.runner.simulator.drift import first_version
from ibias.runner.simulator.profile import FAULT_KINDS, ModelProfile

if TYPE_CHECKING:
    from ibias.runner.simulator.protocol import Dialect

#: A triggered 429 burst lasts this long and refuses up to `BURST_EXTRA` further requests.
BURST_S = 0.5
BURST_EXTRA = 3
#: Rate-limit admission tolerates a request this early (scheduler jitter of a paced client).
JITTER_TOLERANCE_S = 0.05
#: The body of the `malformed` fault: a proxy's HTML page where JSON was expected.
BODY_MALFORMED = b"<html><head><title>502 Bad Gateway</title></head><body>upstream</body></html>"


class Bucket:
    """A provider-side token bucket holding about one second of a per-minute limit.

    Capacity is max(limit/60, 1) units and it refills continuously at limit/60 per second, so a
    burst of a minute's worth in the first second is mostly refused while a client pacing evenly
    at the limit always finds a unit. A request is admitted when the level reaches its cost
    (capped at capacity, so one request larger than a second's tokens is still servable) minus
    `JITTER_TOLERANCE_S` worth of refill: a paced client whose sends wobble by a few ms is never
    refused, and the level may dip below zero by at most that tolerance plus an oversize cost.
    """

    __slots__ = ("capacity", "level", "limit", "rate", "stamp", "tolerance")

    def __init__(self, per_minute: int, now: float) -> None:
        self.limit = per_minute
        self.rate = per_minute / 60.0
        self.capacity = max(self.rate, 1.0)
        self.tolerance = self.rate * JITTER_TOLERANCE_S
        self.level = self.capacity
        self.stamp = now

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
            self.stamp = now

    def shortfall(self, cost: float) -> float:
        """Seconds until `cost` would be admitted (0 = admit now)."""
        need = min(cost, self.capacity) - self.tolerance
        if self.level >= need:
            return 0.0
        return (need - self.level) / self.rate

    def remaining(self) -> int:
        """Remaining units in the per-minute terms of the limit headers."""
        if self.level <= 0:
            return 0
        return min(self.limit, int(self.level * self.limit / self.capacity))

    def reset_s(self) -> float:
        return max(0.0, (self.capacity - self.level) / self.rate)


class ModelState:
    """Per-model constants and mutable limiter/burst state, created on first request."""

    __slots__ = (
        "burst_left",
        "burst_until",
        "fault_table",
        "fault_total",
        "fingerprint",
        "name",
        "profile",
        "reported",
        "requests",
        "tokens",
    )

    def __init__(self, name: str, profile: ModelProfile, seed: int, now: float) -> None:
        self.name = name
        self.profile = profile
        self.reported = first_version(name)
        self.fingerprint = "fp_" + stable_hash(["fingerprint", seed, name])[:10]
        self.requests = Bucket(profile.rpm, now) if profile.rpm else None
        self.tokens = Bucket(profile.tpm, now) if profile.tpm else None
        self.burst_until = 0.0
        self.burst_left = 0
        cumulative = 0.0
        table: list[tuple[float, str]] = []
        for kind in FAULT_KINDS:
            rate = profile.faults.get(kind, 0.0)
            if rate > 0:
                cumulative += rate
                table.append((cumulative, kind))
        self.fault_table = tuple(table)
        self.fault_total = cumulative


def draw_fault(state: ModelState, rng: random.Random) -> str | None:
    """The fault this request meets (a kind of `FAULT_KINDS`), or None. Draws from `rng` only
    when the model has faults, so a fault-free model leaves the request stream alone."""
    if state.fault_total <= 0:
        return None
    u = rng.random()
    if u >= state.fault_total:
        return None
    for threshold, kind in state.fault_table:
        if u < threshold:
            return kind
    return state.fault_table[-1][1]  # float rounding at the top edge


def draw_latency(profile: ModelProfile, rng: random.Random) -> float:
    """Seconds this request takes: the profile's latency, lognormal when it has a sigma."""
    if profile.latency_ms <= 0:
        return 0.0
    latency: float
    if profile.latency_sigma > 0:
        latency = rng.lognormvariate(math.log(profile.latency_ms), profile.latency_sigma)
    else:
        latency = profile.latency_ms
    return latency / 1000.0


def admit(
    d: Dialect, state: ModelState, tokens: int, now: float, headers: dict[str, str]
) -> tuple[str, bytes] | None:
    """Admit a request of `tokens` against the model's RPM and TPM: None when admitted (the
    buckets charged, the limits announced in `headers` unless the profile hides them), else
    the limit that refused it ("requests" or "tokens") and protocol `d`'s 429 body."""
    rb, tb = state.requests, state.tokens
    refused: tuple[str, Bucket, float, float] | None = None
    if rb is not None:
        rb.refill(now)
        wait = rb.shortfall(1)
        if wait > 0:
            refused = ("requests", rb, wait, 1)
    if tb is not None and refused is None:
        tb.refill(now)
        wait = tb.shortfall(tokens)
        if wait > 0:
            refused = ("tokens", tb, wait, tokens)
    hidden = state.profile.hide_limits
    if refused is None:
        if rb is not None:
            rb.level -= 1
        if tb is not None:
            tb.level -= tokens
        if not hidden:
            d.limit_headers(state, headers)
        return None
    kind, bucket, wait, requested = refused
    if hidden:
        return kind, d.burst(state, wait, headers)  # a 429 that names no limit
    d.limit_headers(state, headers)
    return kind, d.rate_limited(state, kind, bucket, wait, requested, headers)

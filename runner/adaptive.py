"""Adaptive concurrency for an endpoint that publishes no limits: grow while clean, halve once
per burst of 429s (AIMD, as TCP does with its congestion window).

Why: a provider that announces no rate limits (no headers, no quota in its 429s, nothing in
the config) still enforces some. Sending at the configured `max_concurrency` then earns a wall
of 429s, each one a wasted request and a pause for the whole endpoint. Requests in flight are
what we control, so their number is what adapts:

* **start** - at `maximum` unless told otherwise (`initial`): a provider that never answers
  429 is never slowed down, and one with a high latency and a high limit is not made to ramp
  up (a TCP-like slow start from 10 took 14 s of a 20 s run at 2 s latency and 1,000 in
  flight). The price is one burst of 429s at the start against a small hidden limit. Below
  the maximum and before the first 429 (an `initial` below it), the limit doubles each time
  `limit` requests in a row come back clean (slow start);
* **additive increase** - after that, it grows by one when `limit` requests in a row came back
  clean *and* at least `grow_interval_s` passed since it last changed. The interval is what
  keeps the share of 429s small at low limits: at one request in flight answering 10 times a
  second, growing every tenth of a second would probe the provider's limit ten times a second,
  while a probe every 20 s (the default) costs about one 429 in 200 answers;
* **multiplicative decrease** - a 429 halves the limit (never below `minimum`), once per burst:
  the requests already in flight when it halved were sent at the old limit, so their 429s are
  the same burst and are not held against the new one. When fewer requests than that came back
  clean since the limit last changed, it drops further, to that number (but to no less than an
  eighth): 20 in flight of which 1 got through says the provider takes about 1, and halving
  four times to get there would cost a burst of 429s at each step. A request carries the
  `epoch` it was admitted under (the number of halvings so far) to tell bursts apart.

Pure logic with the time passed in (`now`, any monotonic seconds), so tests drive it with a
fake clock. The endpoint limiter (runner/limits.py) owns one and applies its limit to its
concurrency slots.
"""

from __future__ import annotations

__all__ = ["AdaptiveConcurrency"]


class AdaptiveConcurrency:
    """The AIMD state of one endpoint: `limit` requests may be in flight.

    `on_success` and `on_rate_limited` return the new limit when it changed, else None.
    """

    def __init__(
        self,
        maximum: int,
        *,
        initial: int | None = None,
        minimum: int = 1,
        grow_interval_s: float = 20.0,
    ) -> None:
        if not 1 <= minimum <= maximum:
            raise ValueError("need 1 <= minimum <= maximum")
        if not grow_interval_s >= 0:
            raise ValueError("grow_interval_s must be >= 0")
        self.maximum = maximum
        self.minimum = minimum
        self.grow_interval_s = grow_interval_s
        start = maximum if initial is None else initial
        self.limit = max(minimum, min(start, maximum))
        #: How many times the limit was halved: requests admitted before the last halving
        #: carry an older epoch.
        self.epoch = 0
        self.slow_start = True
        self._clean = 0
        self._changed_at: float | None = None

    def on_success(self, epoch: int, now: float) -> int | None:
        """A request admitted under `epoch` was answered without a 429."""
        if epoch != self.epoch:
            return None  # a straggler from before the last halving says nothing of the new limit
        self._clean += 1
        if self._clean < self.limit or self.limit >= self.maximum:
            return None
        if self.slow_start:
            return self._set(min(self.maximum, self.limit * 2), now)
        if self._changed_at is not None and now - self._changed_at < self.grow_interval_s:
            return None
        return self._set(self.limit + 1, now)

    def on_rate_limited(self, epoch: int, now: float) -> int | None:
        """A request admitted under `epoch` was answered with a 429."""
        if epoch != self.epoch:
            return None  # same burst as a halving already made
        self.slow_start = False
        self.epoch += 1
        halved = self.limit // 2
        taken = max(self._clean, self.limit // 8)
        return self._set(max(self.minimum, min(halved, taken)), now)

    def _set(self, limit: int, now: float) -> int | None:
        """Start counting clean answers afresh from `now` (also when the limit stays, e.g. a
        429 at the minimum: growth then waits a full interval again)."""
        self._clean = 0
        self._changed_at = now
        if limit == self.limit:
            return None
        self.limit = limit
        return limit

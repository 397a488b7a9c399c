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
fake clock. The endpoint limiter (runner/scheduling/limits.py) owns one and applies its limit to its
concurrency slots.
"""

from __future__ import annotations

__all__ = ["AdaptiveConcurrency", "AdaptiveRate"]


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


#: The highest rate a learnt rate grows to without a configured or announced ceiling
#: (requests per second; see `AdaptiveRate`, "ceiling").
MAX_RATE_PER_S = 10_000.0


class AdaptiveRate:
    """A request rate learnt from 429s, for an endpoint that publishes no limits.

    Why a rate and not only concurrency: below about 600 RPM at 100 ms latency, one request in
    flight already exceeds the limit, and concurrency cannot go below one: a run paced only by
    concurrency earned 36% 429s against a hidden 120 RPM. Pure logic with the time passed in
    (`now`, any monotonic seconds), like `AdaptiveConcurrency`:

    * **learn** - the first 429 opens a window of `learn_s` seconds. A 429 means the
      provider's bucket is empty, so what it admits from then on, while the client keeps
      sending more than it takes, is its rate: the requests *admitted* in the window that were
      answered, over the window's length, once every request admitted in it has come back.
      The rate is then `margin` of that. It may be low: the concurrency controller keeps
      cutting the requests in flight meanwhile, so the client may have pressed on the limit
      for part of the window only; the fast growth below makes up for it. A window with
      fewer than two answers measures nothing: the next 429 opens another;
    * **decrease** - a 429 for a request admitted at the learnt rate (after its last change)
      multiplies it by `decrease`, once per burst (requests admitted before a change are the
      old pace's and are not held against the new one);
    * **increase** - until the first cut, the rate grows by `fast_grow` every
      `fast_interval_s` clean (the learnt rate is a floor, see above: 0.78 of a hidden 6,000
      RPM before this); after it, by `grow` every `grow_interval_s` or every `grow_every`
      clean answers, whichever comes first (a probe: one 429 in a few hundred answers when
      the limit has not moved). The count matters at high rates: a 429 that is not the
      limit (a provider's transient burst) costs a tenth of the rate, and 30 s per 2% let a
      200 req/s model lose more to such bursts than it won back (the demo's seven simulated
      models, with a burst every half minute each, fell from 880 to 530 req/s); counted in
      answers, the rate is back within seconds, and at a real limit a 429 still comes only
      once in a few hundred answers.

    * **relax** - `relax_s` after the last cut with no cut since, growth is fast again: a
      hidden limit that was raised mid-run (a tier upgrade, a busy hour over) is found again in
      seconds, not at 2% a step (from 120 to 216 RPM at 2% per 30 s took 15 minutes);
    * **ceiling** - with a rate configured or announced (`ceiling_per_s`), the learnt rate
      never goes above it: a configured limit is a ceiling, and the learnt rate only paces
      below it while 429s say the real limit is lower. With none, `max_rate_per_s` is the
      ceiling: a model that got one burst of 429s and none after grows its rate by 10% every
      5 s for as long as the run lasts, and after forty minutes of that the paced rpm no
      longer fits a 64-bit integer (a 1.4-million-trial simulated run died writing it to its
      status file), and a rate that far above what is sent paces nothing a later 429 could cut
      back in reasonable time. 10,000 requests a second is 20 times the highest per-key limit
      of the providers ibias talks to.

    `admitted` and `finished` return the new rate (requests per second) when it changed;
    `dropped` closes the books of a request whose end says nothing about the limit (an error
    other than a 429, a cancel): without it a learning window waits for it forever.
    """

    def __init__(
        self,
        *,
        learn_s: float = 10.0,
        margin: float = 0.97,
        decrease: float = 0.9,
        grow: float = 1.02,
        grow_interval_s: float = 30.0,
        fast_grow: float = 1.1,
        fast_interval_s: float = 5.0,
        min_rate_per_s: float = 1.0 / 60.0,
        max_rate_per_s: float = MAX_RATE_PER_S,
        grow_every: int = 200,
        relax_s: float = 60.0,
        ceiling_per_s: float | None = None,
    ) -> None:
        if not (learn_s > 0 and 0 < margin <= 1 and 0 < decrease < 1 and grow >= 1):
            raise ValueError("need learn_s > 0, 0 < margin <= 1, 0 < decrease < 1, grow >= 1")
        self.learn_s = learn_s
        self.margin = margin
        self.decrease = decrease
        self.grow = grow
        self.grow_interval_s = grow_interval_s
        self.fast_grow = fast_grow
        self.fast_interval_s = fast_interval_s
        self.min_rate_per_s = min_rate_per_s
        self.max_rate_per_s = max_rate_per_s
        self.grow_every = grow_every
        self.relax_s = relax_s
        #: The configured or announced rate the learnt one stays under (None: no ceiling).
        self.ceiling_per_s = ceiling_per_s
        #: When the rate was last cut by a 429 (see `relax_s`).
        self._cut_at = 0.0
        #: Answers since the rate last changed (growth by count, see the class doc).
        self._clean = 0
        #: No cut since the rate was learnt: it grows fast (see the class doc).
        self._fast = True
        #: Requests per second to pace at; None until learnt.
        self.rate_per_s: float | None = None
        self._window: tuple[float, float] | None = None
        self._answered = 0
        self._pending = 0
        self._changed_at = 0.0

    @property
    def learning(self) -> bool:
        """A learning window is open."""
        return self._window is not None

    def _in_window(self, admitted_at: float) -> bool:
        w = self._window
        return w is not None and w[0] <= admitted_at < w[1]

    def admitted(self, now: float) -> None:
        """A request was admitted at `now`."""
        if self._in_window(now):
            self._pending += 1

    def dropped(self, admitted_at: float, now: float) -> float | None:
        """A request admitted at `admitted_at` ended at `now` saying nothing about the limit
        (another error, or it was never sent): it no longer holds its learning window open."""
        if self._in_window(admitted_at):
            self._pending -= 1
        return self._close_window(now)

    def _close_window(self, now: float) -> float | None:
        """End the learning window once it is over and all it admitted came back."""
        window = self._window
        if window is None or now < window[1] or self._pending > 0:
            return None
        self._window = None
        if self._answered < 2:  # nothing to measure by: the next 429 opens another window
            return None
        return self._set(self.margin * self._answered / (window[1] - window[0]), now)

    def finished(self, admitted_at: float, rate_limited: bool, now: float) -> float | None:
        """A request admitted at `admitted_at` came back at `now`: answered, or a 429."""
        window = self._window
        if self._in_window(admitted_at):
            self._pending -= 1
            if not rate_limited:
                self._answered += 1
        if rate_limited and window is None:
            if self.rate_per_s is None:
                self._window = (now, now + self.learn_s)
                self._answered = self._pending = 0
                return None
            if admitted_at >= self._changed_at:
                self._fast = False
                self._cut_at = now
                return self._set(self.rate_per_s * self.decrease, now)
        if self._window is not None:
            return self._close_window(now)
        if rate_limited or self.rate_per_s is None:
            return None
        self._clean += 1
        if not self._fast and now - self._cut_at >= self.relax_s:
            self._fast = True  # long clean since the last cut: look for a raised limit fast
        if self._fast and now - self._changed_at >= self.fast_interval_s:
            return self._set(self.rate_per_s * self.fast_grow, now)
        if not self._fast and (
            now - self._changed_at >= self.grow_interval_s or self._clean >= self.grow_every
        ):
            return self._set(self.rate_per_s * self.grow, now)
        return None

    def _set(self, rate: float, now: float) -> float | None:
        self._changed_at = now
        self._clean = 0
        rate = min(max(rate, self.min_rate_per_s), self.max_rate_per_s)
        if self.ceiling_per_s is not None:
            rate = min(rate, self.ceiling_per_s)
        if rate == self.rate_per_s:
            return None
        self.rate_per_s = rate
        return rate

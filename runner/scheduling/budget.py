"""The run's money cap (`--max-cost`): what is spent on the plan, what the requests in flight
may cost, and whether the next request fits beside them.

Every estimate counts a request's whole completion budget, so a request that fits cannot
cross the cap unless its prompt is longer than estimated; a reply whose cost is unknown (a
usage count missing or invalid) counts at that upper bound, never as free, so the cap still
holds when a provider reports no usage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import anyio
import duckdb

from ibias.runner.config import ModelConfig
from ibias.runner.money import usd
from ibias.runner.providers.base import Reply
from ibias.runner.status import ModelStats
from ibias.store.plans import PROMPT_CHARS_SQL, StoredPlan

#: USD: sums of float costs drift by far less than this; a request that fits exactly fits.
BUDGET_EPSILON = 1e-9


class Budget:
    """The cap, what the store had spent on the plan before this run (`spent_before`: earlier
    runs, other providers; the cap covers the sum), and this run's spending, read from the
    models' counters (`stats`) and from the estimates of replies of unknown cost."""

    def __init__(
        self, max_cost: float | None, spent_before: float, stats: Sequence[ModelStats]
    ) -> None:
        self.max_cost = max_cost
        self.spent_before = spent_before
        self._stats = stats
        #: Requests in flight, and what their estimates reserve against the cap.
        self.in_flight = 0
        self._reserved = 0.0
        #: What replies of unknown cost may have cost: each at its request's upper bound.
        self._unknown = 0.0
        #: Set when a request in flight settles (for workers waiting for room).
        self._settled: anyio.Event | None = None

    @property
    def spent(self) -> float:
        """Everything spent on this plan: before this run and in it, a reply of unknown cost
        counted at its request's upper bound."""
        return self.spent_before + sum(s.cost_usd for s in self._stats) + self._unknown

    def fits(self, est_cost: float) -> bool:
        """Whether a request estimated at `est_cost` fits under the cap beside what is spent
        and what the requests in flight are estimated to cost."""
        return self.max_cost is None or (
            self.spent + self._reserved + est_cost <= self.max_cost + BUDGET_EPSILON
        )

    def reserve(self, est_cost: float) -> None:
        """A request goes out: its estimate is reserved until it settles."""
        self.in_flight += 1
        self._reserved += est_cost

    def settle(self, est_cost: float) -> None:
        """A request is no longer in flight: give back its reserved estimate and wake the
        workers waiting for room (they run after this attempt is recorded)."""
        self.in_flight -= 1
        self._reserved -= est_cost
        if self._settled is not None:
            self._settled.set()
            self._settled = None

    async def wait_for_room(
        self, est_cost: float, stopping: Callable[[], bool], stop: Callable[[str], None]
    ) -> bool:
        """Wait until the request fits; False when it cannot (`stopping()`, or the budget is
        spent: then `stop` is called with the line that says so).

        While requests are in flight their estimates are reserved; they usually cost less,
        so wait for them to settle rather than stop early. With nothing in flight and still
        no room, the budget is spent: stop. A run so stopped leaves less room than a request
        needs, so a resume at the same cap stops before its first request.
        """
        while not self.fits(est_cost):
            if stopping():
                return False
            if self.in_flight == 0:
                assert self.max_cost is not None
                stop(
                    f"budget of {usd(self.max_cost)} reached ({usd(self.spent)} spent on this "
                    f"config's trials, this and earlier runs; the next request could cost up to "
                    f"{usd(est_cost)}); raise --max-cost to go on"
                )
                return False
            if self._settled is None:
                self._settled = anyio.Event()
            await self._settled.wait()
        return True

    def reply_cost(
        self, config: ModelConfig, stats: ModelStats, reply: Reply, est_cost: float
    ) -> float | None:
        """What the reply cost, from its token counts and the model's prices.

        Unknown (NULL) when either token count is (missing or invalid, see
        runner/providers/usage.py): a guessed 0 would read as free and let the budget spend
        past its cap. The budget counts such a reply at `est_cost`, its request's upper
        bound."""
        if reply.prompt_tokens is not None and reply.completion_tokens is not None:
            return config.cost(
                reply.prompt_tokens,
                reply.completion_tokens,
                reply.cache_read_tokens,
                reply.cache_write_tokens,
            )
        self._unknown += est_cost
        stats.cost_unknown += 1
        return None


def spent_on_plan(
    con: duckdb.DuckDBPyConnection, plan: StoredPlan, models: Sequence[ModelConfig] = ()
) -> float:
    """USD the store has spent on this plan's trials: every stored response to one of them,
    whichever run, provider or model config produced it (what `--max-cost` caps). A response
    whose cost is unknown (its provider reported no usable token counts) counts at its
    request's upper bound under the model's config (prompt estimate plus `max_tokens`), as the
    scheduler counted it when it landed, never as free."""
    where, params = plan.membership()
    known = con.execute(
        "SELECT coalesce(sum(r.cost_usd), 0) FROM responses r WHERE r.trial_key IN "
        f"(SELECT t.trial_key FROM trial_rows t WHERE {where})",
        params,
    ).fetchone()
    spent = float(known[0]) if known else 0.0
    by_id = {m.id: m for m in models}
    if not by_id:
        return spent
    unknown = con.execute(
        "SELECT t.model_id, count(*), coalesce(sum(ceil(s.chars / 4)), 0)::BIGINT "
        "FROM responses r JOIN trial_rows t ON t.trial_key = r.trial_key "
        f"JOIN (SELECT s.spec_key, {PROMPT_CHARS_SQL} AS chars FROM trial_specs s) s "
        f"ON s.spec_key = t.spec_key WHERE r.cost_usd IS NULL AND {where} GROUP BY 1",
        params,
    ).fetchall()
    for model_id, n, prompt in unknown:
        m = by_id.get(model_id)
        if m is not None:
            spent += m.cost(int(prompt), int(n) * m.max_tokens)
    return spent

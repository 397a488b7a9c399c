"""`ibias run --batch` (or `mode = "batch"` per model): the batch models' trials go out as
provider batches, the others online, in one run.

The order, chosen so nothing waits on anything it need not: the batch models' batches are
settled first (crash intents reconciled, ended batches ingested) and their remaining trials
submitted; then the online models run as usual, while the provider works on the batches;
then, unless `--no-wait`, the run polls (backoff from `POLL_FIRST_S` to `POLL_CAP_S`), ingests
every batch that ends and resubmits the trials whose lines errored or expired, until no batch
is live. Ctrl-C while waiting leaves the batches running at the provider: the next
`ibias run --batch` collects them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import anyio
import duckdb

from ibias import errors
from ibias.runner.batch.limits import BatchLimits, batch_refusal, wants_batch
from ibias.runner.config import Config, ModelConfig
from ibias.runner.scheduling.scheduler import ModelStats
from ibias.runner.scheduling.stop import Stop
from ibias.store.plans import StoredPlan

if TYPE_CHECKING:
    from ibias.runner.batch.api import BatchAPI
    from ibias.runner.batch.engine import ModelBatches

__all__ = ["POLL_CAP_S", "POLL_FIRST_S", "BatchOptions", "BatchOutcome", "batch_models", "run"]

#: Seconds between polls: the first wait, doubled while nothing changes, up to the cap.
POLL_FIRST_S = 10.0
POLL_CAP_S = 300.0


@dataclass(frozen=True)
class BatchOptions:
    """How a run treats batches: `forced` is `--batch`; `wait` false is `--no-wait`."""

    forced: bool = False
    wait: bool = True
    #: Per-batch limits; None: each provider's documented ones (tests make them small).
    limits: BatchLimits | None = None
    #: Waits between polls (tests pass one that does not sleep).
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep


@dataclass(frozen=True)
class BatchOutcome:
    """What the batch part of a run did: the lines to show, whether it was interrupted,
    whether it ended with trials failed for good or a stopped model, and the ids of the
    batches still running (what `--no-wait` prints)."""

    lines: tuple[str, ...]
    interrupted: bool = False
    failed: bool = False
    running: tuple[str, ...] = ()


def batch_models(config: Config, forced: bool) -> tuple[list[ModelConfig], list[str]]:
    """The models that run in batch mode, and one line for each asked-for model that runs
    online instead (what `plan` and `run` say)."""
    chosen: list[ModelConfig] = []
    lines: list[str] = []
    for m in config.models:
        if not wants_batch(m, forced):
            continue
        why = batch_refusal(m)
        if why is None:
            chosen.append(m)
        else:
            lines.append(f"model {m.id} runs online: {why}")
    return chosen, lines


async def run(
    con: duckdb.DuckDBPyConnection,
    plan: StoredPlan,
    run_id: str,
    models: Sequence[ModelConfig],
    keys: Mapping[str, str | None],
    stats: Mapping[str, ModelStats],
    options: BatchOptions,
    stop: Stop,
    say: Callable[[str], None],
    *,
    online: Callable[[float], Awaitable[None]],
    max_cost: float | None = None,
    spent: float = 0.0,
    base_url: Callable[[ModelConfig], str] | None = None,
) -> BatchOutcome:
    """Submit the batch models' trials, run `online(committed_usd)` (the online models), then
    wait for the batches unless told not to. `base_url` gives the URL each model's batch API
    is called at instead of its configured one (a rehearsal's simulator,
    runner/execution/rehearsal.py); the configured one still decides every rule."""
    from ibias.runner.batch.engine import ModelBatches  # loads aiohttp: only when used

    budget = _BatchBudget(max_cost, spent, say)
    engines: list[ModelBatches] = []
    apis: list[BatchAPI] = []
    try:
        for m in models:
            api = batch_api(m, keys.get(m.id), None if base_url is None else base_url(m))
            await api.start()
            apis.append(api)
            engines.append(
                ModelBatches(con, plan, run_id, m, api, stats[m.id], limits=options.limits, say=say)
            )
        # Batches an earlier run left live (or ended, not ingested) count at their upper
        # bound, as this run's do: `spent` has only the stored responses. Counted before the
        # first poll ingests any, and kept after (an upper bound, never an undercount).
        budget.committed += sum(e.held_bound() for e in engines)
        for e in engines:
            await e.poll()
            await e.submit(budget.allow)
        await online(budget.committed - spent)
        if stop.requested:
            return _outcome(engines, budget.hit, interrupted=True)
        if not options.wait:
            return _outcome(engines, budget.hit)
        return await _poll_until_ended(engines, budget, options, stop)
    finally:
        with anyio.CancelScope(shield=True):
            for api in apis:
                await api.close()


class _BatchBudget:
    """What the run's batches may commit under `--max-cost`. A batch counts at its upper
    bound (its price if every request used its whole `max_tokens`) from its submission, beside
    what the store has spent (`spent`); the first batch that would pass the cap is said, and
    ends the run's lines with what to do."""

    def __init__(self, max_cost: float | None, spent: float, say: Callable[[str], None]) -> None:
        self.max_cost = max_cost
        self.committed = spent
        self.say = say
        #: The run's closing line once the budget refused a batch (at most one).
        self.hit: list[str] = []

    def allow(self, upper_bound: float) -> bool:
        """Whether a batch of this upper bound fits; if it does, it is committed."""
        max_cost = self.max_cost
        if max_cost is not None and self.committed + upper_bound > max_cost:
            if not self.hit:
                self.hit.append(
                    f"stopped: budget of ${max_cost:.2f} reached (batches count at their upper "
                    "bound); raise --max-cost to go on"
                )
                self.say(
                    f"batch submission stopped: the next batch (up to ${upper_bound:.2f}) "
                    f"would pass the budget of ${max_cost:.2f} (${self.committed:.2f} spent or "
                    "held by live batches, earlier runs' included, at their upper bound)"
                )
            return False
        self.committed += upper_bound
        return True


async def _poll_until_ended(
    engines: Sequence[ModelBatches],
    budget: _BatchBudget,
    options: BatchOptions,
    stop: Stop,
) -> BatchOutcome:
    """Poll every model's live batches until none is left (or a stop), ingesting the ended
    ones and submitting again the trials whose lines failed; polls come sooner after a
    change, and back off to `POLL_CAP_S` while nothing changes."""
    delay = POLL_FIRST_S
    while any(e.live() for e in engines if e.fatal is None):
        if stop.requested:
            return _outcome(engines, budget.hit, interrupted=True)
        with anyio.move_on_after(delay):
            await _sleep_or_stop(options.sleep, delay, stop)
        if stop.requested:
            return _outcome(engines, budget.hit, interrupted=True)
        changed = 0
        for e in engines:
            changed += await e.poll()
            changed += len(await e.submit(budget.allow))  # the trials whose lines failed
        delay = POLL_FIRST_S if changed else min(delay * 2, POLL_CAP_S)
    return _outcome(engines, budget.hit)


async def _sleep_or_stop(
    sleep: Callable[[float], Awaitable[None]], delay: float, stop: Stop
) -> None:
    """Sleep `delay`, or less when a stop is requested."""
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            await stop.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(watch)
        await sleep(delay)
        tg.cancel_scope.cancel()


def _outcome(
    engines: Sequence[ModelBatches], budget: Sequence[str], *, interrupted: bool = False
) -> BatchOutcome:
    lines: list[str] = list(budget)
    running: list[str] = []
    failed = bool(budget)
    for e in engines:
        live = [b.batch_id for b in e.live() if b.batch_id]
        running += live
        if e.fatal is not None:
            failed = True
            lines.append(f"model {e.model.id}: batches stopped ({e.fatal}); run again to resume")
        if live:
            lines.append(f"model {e.model.id}: batches running: " + ", ".join(live))
        if e.stats.failed:
            failed = True
    if running:
        lines.append(
            "the batches go on at the provider; run `ibias run CONFIG --batch` again to "
            "collect them"
        )
    return BatchOutcome(tuple(lines), interrupted, failed, tuple(running))


def batch_api(model: ModelConfig, api_key: str | None, base_url: str | None = None) -> BatchAPI:
    """The batch API of a model that runs in batch mode (`batch_refusal` said it can): its
    provider's declared adapter (`ProviderTraits.batch`), called at `base_url` when given (a
    rehearsal's simulator), else at the model's own or the provider's default URL."""
    from ibias import plugins
    from ibias.runner.batch.api import BatchAPI
    from ibias.runner.providers.base import ProviderContext
    from ibias.runner.providers.registry import create_provider, traits_for

    traits = traits_for(model.provider)
    assert traits.batch is not None, model.provider
    adapter = plugins.resolve(traits.batch.adapter, type, f"provider {model.provider}: batch")
    if not issubclass(adapter, BatchAPI):
        raise errors.RegistryError(
            f"provider {model.provider}: batch: {traits.batch.adapter!r} is not a BatchAPI"
        )
    provider = create_provider(model, api_key, ProviderContext())
    base = base_url or model.base_url or traits.default_base_url or ""
    return adapter.for_model(provider, model, api_key, base)


def online_config(config: Config, batched: Sequence[ModelConfig]) -> Config:
    """The config with only the models that run online."""
    ids = {m.id for m in batched}
    return replace(config, models=tuple(m for m in config.models if m.id not in ids))

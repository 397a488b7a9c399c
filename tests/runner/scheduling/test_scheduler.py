"""The scheduler's use of a provider's limits (unit level; whole runs are in test_run.py and
test_injected_provider.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pytest

from ibias import FakeProvider
from ibias.runner.config import load_config
from ibias.runner.providers.base import Limits, Provider, Window
from ibias.runner.providers.retries import Backoff
from ibias.runner.scheduling.limit_adoption import wait_beyond_limit
from ibias.runner.scheduling.limits import EndpointLimiter
from ibias.runner.scheduling.scheduler import (
    ModelRuntime,
    ModelStats,
    Scheduler,
    _Worker,
    estimate_tokens,
)
from tests.helpers import model_block, write_config


class Announcing(Provider):
    """Announces `limits` for any headers that carry the word "limits"."""

    def __init__(self, limits: Limits | None) -> None:
        self.limits = limits
        self.asked = 0

    async def complete(self, messages, sampling):
        raise NotImplementedError

    def limits_from_headers(self, headers):
        self.asked += 1
        return self.limits if "limits" in headers else None


def _runtime(tmp_path, limits: Limits | None, **keys: object) -> ModelRuntime:
    cfg = load_config(write_config(tmp_path, [model_block("m", provider="simulator")], n_prompts=1))
    model = replace(cfg.models[0], **keys)  # type: ignore[arg-type]
    return ModelRuntime(
        config=model,
        provider=Announcing(limits),
        limiter=EndpointLimiter(rpm=model.rpm, tpm=model.tpm, max_concurrency=1),
        stats=ModelStats(model_id="m"),
    )


def _scheduler(rt: ModelRuntime) -> Scheduler:
    return Scheduler(run_id="r", runtimes=[rt], writer=None, backoff=Backoff())  # type: ignore[arg-type]


async def test_learns_the_announced_limits_once_keeping_configured_ones(tmp_path):
    rt = _runtime(tmp_path, Limits(rpm=600, tpm=90_000), tpm=5_000)
    s = _scheduler(rt)
    s._read_limits(rt, {}, 100)  # nothing announced: keep asking
    assert (rt.limiter.rpm, rt.limiter.tpm, rt.learnt_limits) == (None, 5_000, False)
    s._read_limits(rt, {"limits": "yes"}, 100)
    assert (rt.limiter.rpm, rt.limiter.tpm, rt.learnt_limits) == (600, 5_000, True)
    rt.provider.limits = Limits(rpm=60, tpm=1_000)  # type: ignore[attr-defined]
    s._read_limits(rt, {"limits": "yes"}, 100)
    assert (rt.limiter.rpm, rt.limiter.tpm) == (600, 5_000)  # adopted once


async def test_a_provider_without_limits_changes_nothing(tmp_path):
    rt = _runtime(tmp_path, None)
    _scheduler(rt)._read_limits(rt, {"limits": "yes"}, 100)
    assert (rt.limiter.rpm, rt.limiter.tpm, rt.learnt_limits) == (None, None, False)


async def test_fully_configured_limits_are_never_asked_for(tmp_path):
    rt = _runtime(tmp_path, Limits(rpm=600), rpm=100, tpm=1_000)
    _scheduler(rt)._read_limits(rt, {"limits": "yes"}, 100)
    assert rt.provider.asked == 0  # type: ignore[attr-defined]
    assert (rt.limiter.rpm, rt.limiter.tpm) == (100, 1_000)


# ------------------------------------------------------------------ unknown cost (issue 20)


class _Writer:
    """Collects what the scheduler hands the store's writer."""

    def __init__(self) -> None:
        self.attempts: list[Any] = []
        self.responses: list[Any] = []

    def add_attempt(self, row: Any) -> None:
        self.attempts.append(row)

    def add_response(self, row: Any, landed: Any = None) -> None:
        self.responses.append(row)


@dataclass(frozen=True)
class _Trial:
    trial_key: str
    experiment: str = "prompts"
    model_id: str = "m"
    item: Mapping[str, Any] = field(default_factory=lambda: {"id": "p0"})
    messages: Sequence[Mapping[str, str]] = ({"role": "user", "content": "x" * 400},)
    params: Mapping[str, Any] = field(
        default_factory=lambda: {"temperature": 0.0, "max_tokens": 100}
    )


def _usage(prompt: int | None, completion: int | None) -> FakeProvider:
    """Replies with the given token counts."""
    return FakeProvider("ok", prompt_tokens=prompt, completion_tokens=completion)


async def _answer(
    tmp_path, counts: tuple[int | None, int | None], max_cost: float | None = 1.0
) -> tuple[Scheduler, _Writer, float]:
    rt = _runtime(tmp_path, None, max_tokens=100, price_input=1_000.0, price_output=2_000.0)
    rt.provider = _usage(*counts)
    writer = _Writer()
    s = Scheduler(
        run_id="r",
        runtimes=[rt],
        writer=writer,  # type: ignore[arg-type]
        backoff=Backoff(),
        max_cost=max_cost,
    )
    trial = _Trial("k1")
    # The request's upper bound: its prompt estimate (about 100 tokens for 400 characters)
    # plus the whole max_tokens = 100, at the model's prices.
    est = estimate_tokens(trial, 100)
    bound = rt.config.cost(est - 100, 100)
    assert 0.3 <= bound < 0.31
    await s._process(rt, trial, _Worker())
    return s, writer, bound


@pytest.mark.parametrize("counts", [(None, 5), (5, None), (None, None)])
async def test_a_reply_of_unknown_cost_is_stored_as_null_and_budgeted_at_its_upper_bound(
    tmp_path, counts
):
    s, writer, bound = await _answer(tmp_path, counts)
    (row,) = writer.responses
    assert row.cost_usd is None  # unknown, never 0
    assert (row.prompt_tokens, row.completion_tokens) == counts
    rt = s.runtimes[0]
    assert rt.stats.cost_usd == 0.0 and rt.stats.cost_unknown == 1
    assert s.spent == pytest.approx(bound)  # counted at the request's upper bound
    # Beside it, the cap of 1.0 leaves room for 1.0 - bound, not a cent more.
    assert s.budget.fits(1.0 - bound) and not s.budget.fits(1.0 - bound + 0.01)


async def test_a_reply_of_known_cost_counts_its_cost(tmp_path):
    s, writer, bound = await _answer(tmp_path, (10, 20))
    (row,) = writer.responses
    assert row.cost_usd == pytest.approx((10 * 1_000 + 20 * 2_000) / 1e6)
    assert s.spent == pytest.approx(row.cost_usd) and s.spent < bound


def test_the_stop_line_for_a_long_wait_says_until_when_in_utc():
    now = datetime(2026, 12, 2, 0, 40, 30, tzinfo=UTC).timestamp()
    assert wait_beyond_limit(86_400, 600, now) == (
        "provider asked to wait 86,400 s (until 2026-12-03 00:41 UTC), beyond "
        "outage_limit_s = 600 s; run again after then"
    )


async def test_a_used_up_window_resetting_beyond_the_outage_limit_stops_the_model(tmp_path):
    """The equivalent of a long Retry-After in a reply's headers: nothing left, reset in two
    hours, no announced rate to refill by. Holding the model silently for two hours would
    look like a hang: it stops, saying until when."""
    window = Window("requests", remaining=0, reset_s=7_200.0)
    rt = _runtime(tmp_path, Limits(windows=(window,)), outage_limit_s=600.0)
    lines: list[str] = []
    s = Scheduler(
        run_id="r",
        runtimes=[rt],
        writer=None,  # type: ignore[arg-type]
        backoff=Backoff(),
        on_fatal=lines.append,
    )
    s._read_limits(rt, {"limits": "yes"}, 100)
    assert rt.stats.fatal is not None
    assert lines == [f"model m stopped: {rt.stats.fatal}"]
    assert rt.stats.fatal.startswith("provider asked to wait 7,200 s (until ")
    # A window that gives back room within the limit only holds the model, as before.
    short = _runtime(tmp_path, Limits(windows=(Window("requests", 0, 30.0),)))
    _scheduler(short)._read_limits(short, {"limits": "yes"}, 100)
    assert short.stats.fatal is None


async def test_counts_an_injected_provider_did_not_check_are_checked_before_the_writer(tmp_path):
    """A provider handed in by a caller may return any int: one past 2^31 - 1 would fail the
    writer's flush for every model, a negative one would bill a negative cost."""
    s, writer, bound = await _answer(tmp_path, (2**40, -3))
    (row,) = writer.responses
    assert (row.prompt_tokens, row.completion_tokens, row.cost_usd) == (None, None, None)
    assert s.spent == pytest.approx(bound)

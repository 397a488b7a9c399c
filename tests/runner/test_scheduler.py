"""The scheduler's use of a provider's limits (unit level; whole runs are in test_run.py and
test_injected_provider.py)."""

from __future__ import annotations

from dataclasses import replace

from ibias.runner.config import load_config
from ibias.runner.limits import EndpointLimiter
from ibias.runner.providers.base import Limits, Provider
from ibias.runner.retries import Backoff
from ibias.runner.scheduler import ModelRuntime, ModelStats, Scheduler
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
    s._learn_limits(rt, {})  # nothing announced: keep asking
    assert (rt.limiter.rpm, rt.limiter.tpm, rt.learnt_limits) == (None, 5_000, False)
    s._learn_limits(rt, {"limits": "yes"})
    assert (rt.limiter.rpm, rt.limiter.tpm, rt.learnt_limits) == (600, 5_000, True)
    s._learn_limits(rt, {"limits": "yes"})
    assert rt.provider.asked == 2  # type: ignore[attr-defined]


async def test_a_provider_without_limits_changes_nothing(tmp_path):
    rt = _runtime(tmp_path, None)
    _scheduler(rt)._learn_limits(rt, {"limits": "yes"})
    assert (rt.limiter.rpm, rt.limiter.tpm, rt.learnt_limits) == (None, None, False)


async def test_fully_configured_limits_are_never_asked_for(tmp_path):
    rt = _runtime(tmp_path, Limits(rpm=600), rpm=100, tpm=1_000)
    _scheduler(rt)._learn_limits(rt, {"limits": "yes"})
    assert rt.provider.asked == 0  # type: ignore[attr-defined]
    assert (rt.limiter.rpm, rt.limiter.tpm) == (100, 1_000)

"""How a run ended: its exit code and the lines that say so (every stopped model and every
trial that failed for good named with its cause), the same whether the run requested nothing,
was stopped, spent its budget or finished."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ibias.runner.money import usd
from ibias.runner.scheduling.loop_lag import starved_note
from ibias.runner.status import ModelStats, span

if TYPE_CHECKING:
    from ibias.runner.execution.rehearsal import Rehearsal
    from ibias.runner.scheduling.scheduler import Scheduler

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


@dataclass(frozen=True)
class RunResult:
    """How the run ended: its exit code, the lines to show, and where its time went
    (`timings`, seconds: `open` the store, hash the plan's `inputs`, find or make the `plan`,
    count its `totals`, `schedule` the requests, and the run's `total`; `planned` is 1.0 when
    this run planned and 0.0 when it found the plan in the store)."""

    exit_code: int
    lines: tuple[str, ...]
    timings: Mapping[str, float] = field(default_factory=dict)


def rehearsal_result(result: RunResult, rehearsal: Rehearsal, seconds: float) -> RunResult:
    """The run's lines, with how long its requests took and what that is in real time."""
    if rehearsal.speed == 1:
        line = f"rehearsal: requests took {_duration(seconds)}"
    else:
        line = (
            f"rehearsal at --speed {rehearsal.speed:g}: requests took {_duration(seconds)}, "
            f"about {_duration(seconds * rehearsal.speed)} in real time"
        )
    return replace(result, lines=(*result.lines, line))


def _duration(seconds: float) -> str:
    """`12.3 s`, `4m05s`, `3h07m`: a span as people read it."""
    return f"{seconds:.1f} s" if seconds < 60 else span(round(seconds))


def budget_used_up(max_cost: float, spent: float, stats: list[ModelStats]) -> RunResult:
    """Exit 1 without a request: earlier runs of this config already spent the cap."""
    lines = list(summary(None, stats).lines)
    lines.append(
        f"stopped: budget of {usd(max_cost)} reached ({usd(spent)} already spent on this "
        "config's trials by earlier runs); raise --max-cost to go on"
    )
    return RunResult(EXIT_FAILED, tuple(lines))


def summary(
    scheduler: Scheduler | None,
    stats: list[ModelStats],
    causes: Mapping[str, str] | None = None,
) -> RunResult:
    """The run's outcome; `scheduler` is None when nothing was left to request. Every failure
    is named with its model and cause: a stopped model with why it stopped, and trials that
    failed for good (after all retries, or at once for a reply too large to read) per model
    with the last failure's cause (`causes`)."""
    causes = causes or {}
    lines: list[str] = []
    total = sum(s.total for s in stats)
    have = sum(s.done_before + s.done for s in stats)
    new = sum(s.done for s in stats)
    lines.append(f"{new:,} responses stored this run; {have:,} of {total:,} trials done")
    for s in stats:
        if s.fatal:
            left = s.total - s.done_before - s.done
            lines.append(
                f"model {s.model_id} stopped ({s.fatal}); {left:,} trials not done; "
                "run again to resume"
            )
    for s in stats:
        if s.failed:
            cause = causes.get(s.model_id)
            lines.append(
                f"model {s.model_id}: {s.failed:,} trials failed for good"
                + (f" (last: {cause})" if cause else "")
                + "; see the attempts table"
            )
    if scheduler is None:
        return RunResult(EXIT_OK, tuple(lines))
    starved = starved_note(scheduler.loop_lag.stalls, scheduler.loop_lag.worst_s)
    if starved is not None:
        lines.append(starved)
    if scheduler.interrupted:
        lines.append(f"{scheduler.stop_reason}: results so far are stored; run again to resume")
        return RunResult(EXIT_INTERRUPTED, tuple(lines))
    if scheduler.stop_reason:
        lines.append(f"stopped: {scheduler.stop_reason}")
        return RunResult(EXIT_FAILED, tuple(lines))
    if any(s.failed or s.fatal for s in stats):
        return RunResult(EXIT_FAILED, tuple(lines))
    return RunResult(EXIT_OK, tuple(lines))

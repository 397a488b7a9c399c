"""Recording what became of each request: an attempt row for every request, a response row
(and what its parser needs) for every answer, handed to the store's writer as tuples; the
writer converts and serialises them (raw bodies included) on its own thread.

Online runs and batch results store the same columns through one mapping (`response_row`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ibias.runner.providers.base import Reply
from ibias.runner.providers.retries import Classification
from ibias.runner.providers.usage import MAX_TOKEN_COUNT, token_count
from ibias.runner.scheduling.runtime import Trial
from ibias.runner.status import ModelStats
from ibias.store.derived import parsed_kinds, reply_text
from ibias.store.writer import AttemptRow, Landed, ResponseRow, Writer


def response_row(
    key: str,
    run_id: str,
    model_id: str,
    reply: Reply,
    cost: float | None,
    received_at: float,
    raw: str | Mapping[str, Any] | None,
) -> ResponseRow:
    """The stored row of one answered request, online (the body as `raw`) or from a batch's
    result file (the line as `raw`): one mapping, so both ways store the same columns."""
    return ResponseRow(
        trial_key=key,
        run_id=run_id,
        model_id=model_id,
        provider_model=reply.provider_model,
        content=reply.content,
        refusal=reply.refusal,
        finish_reason=reply.finish_reason,
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
        cost_usd=cost,
        system_fingerprint=reply.system_fingerprint,
        received_at=received_at,
        raw=raw,
        reasoning_content=reply.reasoning,
        reasoning_tokens=reply.reasoning_tokens,
        logprobs=reply.logprobs,
        cache_read_tokens=reply.cache_read_tokens,
        cache_write_tokens=reply.cache_write_tokens,
    )


def storable(reply: Reply) -> Reply:
    """`reply` with token counts the store can hold: every built-in protocol checks them
    (runner/providers/usage.py), but a provider handed in by a caller may not, and one count
    past 2^31 - 1 would fail the writer's flush for every model. Two comparisons when the
    counts are fine (the usual case), a copy with the bad ones unknown when not."""
    p, c, r = reply.prompt_tokens, reply.completion_tokens, reply.reasoning_tokens
    if (
        (p is None or 0 <= p <= MAX_TOKEN_COUNT)
        and (c is None or 0 <= c <= MAX_TOKEN_COUNT)
        and (r is None or 0 <= r <= MAX_TOKEN_COUNT)
    ):
        return reply
    return replace(
        reply,
        prompt_tokens=token_count(p),
        completion_tokens=token_count(c),
        reasoning_tokens=token_count(r),
    )


class Recorder:
    """A run's attempts and replies into its writer's buffers."""

    def __init__(self, run_id: str, writer: Writer) -> None:
        self.run_id = run_id
        self.writer = writer
        #: Experiments whose replies are parsed as they land; the others' replies hand the
        #: writer nothing to parse (an ad-hoc run makes no `Landed` per reply).
        self._parsed = frozenset(parsed_kinds())

    def failed(
        self,
        trial: Trial,
        attempt: int,
        started: float,
        latency_ms: float,
        status: int | None,
        cls: Classification,
        outcome: str,
    ) -> None:
        """The attempt row of a request that ended in an error (`outcome`: retried, gave up,
        fatal)."""
        self.writer.add_attempt(
            AttemptRow(
                run_id=self.run_id,
                trial_key=trial.trial_key,
                model_id=trial.model_id,
                attempt_no=attempt,
                started_at=started,
                latency_ms=latency_ms,
                http_status=status,
                error_kind=cls.kind,
                error_message=cls.message,
                outcome=outcome,
            )
        )

    def answered(
        self,
        trial: Trial,
        attempt: int,
        started: float,
        latency_ms: float,
        reply: Reply,
        cost: float | None,
    ) -> None:
        """One attempt row, one response row and what its parser needs."""
        key = trial.trial_key
        self.writer.add_attempt(
            AttemptRow(
                run_id=self.run_id,
                trial_key=key,
                model_id=trial.model_id,
                attempt_no=attempt,
                started_at=started,
                latency_ms=latency_ms,
                http_status=reply.status,
                error_kind=None,
                error_message=None,
                outcome="ok",
            )
        )
        self.writer.add_response(
            response_row(key, self.run_id, trial.model_id, reply, cost, time.time(), reply.raw),
            Landed(
                trial_key=key,
                experiment=trial.experiment,
                item=trial.item,
                content=reply_text(reply.content, reply.finish_reason, reply.refusal),
                logprobs=reply.logprobs,
            )
            if trial.experiment in self._parsed
            else None,
        )


def count_done(stats: ModelStats, reply: Reply, cost: float | None) -> None:
    """Count a recorded reply in its model's progress: tokens, cost, the model the provider
    says answered (drift, said live by `ibias status`) and when."""
    stats.done += 1
    stats.prompt_tokens += reply.prompt_tokens or 0
    stats.completion_tokens += reply.completion_tokens or 0
    if cost is not None:
        stats.cost_usd += cost
    if reply.provider_model is not None:
        stats.reported.add(reply.provider_model)
    stats.last_done_at = time.monotonic()
    if stats.first_done_at is None:
        stats.first_done_at = stats.last_done_at

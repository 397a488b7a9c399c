"""One model's trials through OpenAI's Batch API: submit, poll, download, ingest, resubmit.

Why every step is recorded before the next (store/batches.py): a batch costs money and runs
for hours, so a crash must never lose one nor submit its trials twice. The order is: the
intent (with its trial keys) is committed, then the file is uploaded and its id recorded, then
the batch is created with the intent id in its `metadata` and the batch id recorded. A run that
finds an intent without a batch id asks the provider for the batch whose metadata names it (and
whose input file is the recorded one, when that was recorded): found, it is adopted; not found,
the provider never made it, and the intent is `abandoned` (its trials are free again).

Results are matched to trials by `custom_id` (the trial key), never by order: a line answered
200 is stored like an online reply (an attempt, a response at the batch price, the line as
`raw`); a line that errored, and a trial of an expired or cancelled batch without a line, is a
failed attempt, and the trial goes into a later batch while it has attempts left. Everything a
batch brought is stored in one transaction with its `ingested` row, so a crash while ingesting
ingests it again on the next run (responses are inserted only for trials without one).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import orjson

from ibias.runner.batch.api import TOO_LARGE, BatchAPI, BatchAPIError, BatchInfo, LineResult
from ibias.runner.batch.limits import BatchLimits, batch_discount
from ibias.runner.config import ModelConfig
from ibias.runner.providers.base import Reply, Sampling
from ibias.runner.providers.retries import redact
from ibias.runner.scheduling.scheduler import ModelStats, response_row
from ibias.store import batches as store
from ibias.store.batches import ENDED, LIVE, BatchRow
from ibias.store.derived import parse_landed, parsed_kinds, reply_text
from ibias.store.plans import StoredPlan, remaining
from ibias.store.writer import (
    AttemptRow,
    Landed,
    ResponseRow,
    insert_attempts,
    insert_responses,
)

__all__ = ["ModelBatches", "Submitted"]

#: The detail of a batch adopted after a crash (found at the provider, not recorded).
ADOPTED = "adopted after a crash (found at the provider)"
#: Result lines stored per insert while a batch is ingested (one transaction for the batch).
INGEST_CHUNK = 2000


@dataclass(frozen=True)
class Submitted:
    """A batch this run submitted."""

    batch_id: str
    requests: int


class ModelBatches:
    """One model's batches in one store, through its provider's `BatchAPI`."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        plan: StoredPlan,
        run_id: str,
        model: ModelConfig,
        api: BatchAPI,
        stats: ModelStats,
        *,
        limits: BatchLimits | None = None,
        say: Callable[[str], None] = lambda line: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.con = con
        self.plan = plan
        self.run_id = run_id
        self.model = model
        self.priced = batch_discount(model)
        self.api = api
        self.stats = stats
        self.limits = limits or api.limits
        #: A result line above this many bytes is not read (the model's body cap).
        self.max_line_bytes = model.max_body_bytes
        self.say = say
        self.clock = clock
        #: Why this model's batches stopped (a batch API call that will not succeed), or None.
        self.fatal: str | None = None
        #: Whether submission has waited on the enqueued-token limit (said once).
        self._holding = False
        #: Trials whose result line was above the body cap this run: failed for good, as
        #: online (the same request would bring the same body), never resubmitted by it.
        self._too_large: set[str] = set()

    # -- what is where -----------------------------------------------------------------------

    def live(self) -> list[BatchRow]:
        """Batches still running (or whose results are not stored yet)."""
        return store.batches_of(self.con, model_id=self.model.id, states=LIVE | ENDED)

    def _stop(self, exc: BatchAPIError) -> None:
        if self.fatal is None:
            self.fatal = str(exc)
            self.say(f"model {self.model.id}: batches stopped: {exc}")

    # -- reconciling -------------------------------------------------------------------------

    async def reconcile(self) -> None:
        """Settle every intent a crash left without a batch id: adopt the provider's batch
        made for it (runner/batch/api.py `find`: by metadata, display name or listing), or
        abandon it when the provider has none."""
        open_intents = [
            b
            for b in store.batches_of(
                self.con, model_id=self.model.id, states={"intent", "uploaded"}
            )
            if b.batch_id is None
        ]
        if not open_intents:
            return
        taken = store.batch_ids(self.con, self.model.id)
        for row in open_intents:
            try:
                found = await self.api.find(row, taken)
            except BatchAPIError as exc:
                if not exc.retry:
                    self._stop(exc)
                return  # settled on a later poll, never by submitting again
            if found is not None:
                taken.add(found.batch_id)
                store.record(
                    self.con,
                    row,
                    "submitted",
                    batch_id=found.batch_id,
                    input_file_id=found.input_file_id,
                    detail=ADOPTED,
                )
                self.say(f"model {self.model.id}: adopted batch {found.batch_id} after a crash")
            else:
                store.record(
                    self.con, row, "abandoned", detail="the provider has no batch for this intent"
                )

    # -- submitting --------------------------------------------------------------------------

    def _chunks(self) -> Iterator[list[tuple[str, bytes, int]]]:
        """Lines (key, JSONL line, estimated prompt tokens) of every trial to submit, cut
        below the per-batch request and byte limits and, where the provider has one, its
        enqueued-token limit: trials without a response, in no live batch, with attempts
        left. The estimate is `plan`'s (ceil(characters / 4), an upper bound)."""
        enqueued = self.api.enqueued_tokens
        held = store.keys_in_batches(self.con, self.model.id, LIVE | ENDED)
        tried = store.attempts_of(self.con, self.model.id)
        cursor = self.con.cursor()
        sampling: tuple[Any, Sampling] | None = None
        chunk: list[tuple[str, bytes, int]] = []
        size = tokens = 0
        try:
            for pending in remaining(cursor, self.plan, self.model.id):
                for trial in pending:
                    key = trial.trial_key
                    if (
                        key in held
                        or key in self._too_large
                        or tried.get(key, 0) >= self.limits.max_attempts
                    ):
                        continue
                    if sampling is None or sampling[0] != trial.params:
                        sampling = (
                            trial.params,
                            Sampling.from_params(trial.params, self.model.options),
                        )
                    line = self.api.line(key, trial.messages, sampling[1])
                    est = -(-trial.prompt_chars // 4)
                    if chunk and (
                        len(chunk) >= self.limits.max_requests
                        or size + len(line) + 1 > self.limits.max_bytes
                        or (enqueued is not None and tokens + est > enqueued)
                    ):
                        yield chunk
                        chunk, size, tokens = [], 0, 0
                    chunk.append((key, line, est))
                    size += len(line) + 1
                    tokens += est
        finally:
            cursor.close()
        if chunk:
            yield chunk

    def upper_bound(self, chunk: Sequence[tuple[str, bytes, int]]) -> float:
        """USD a batch can cost at most: its prompt estimates and every trial's max_tokens."""
        prompt = sum(est for _, _, est in chunk)
        return self.priced.cost(prompt, len(chunk) * self.model.max_tokens)

    def held_bound(self) -> float:
        """USD this model's batches in the store can still cost at most (live, or ended and
        not ingested), whichever run submitted them: each at its upper bound."""
        requests, prompt = store.held_estimate(self.con, self.model.id)
        return self.priced.cost(prompt, requests * self.model.max_tokens) if requests else 0.0

    async def submit(self, allow: Callable[[float], bool] = lambda cost: True) -> list[Submitted]:
        """Submit every trial still to send, one batch per chunk; `allow(upper_bound)` says
        whether the budget admits a batch (False: stop submitting)."""
        if self.fatal is not None:
            return []
        made: list[Submitted] = []
        for chunk in self._chunks():
            if self._queue_full(chunk):
                break  # sent by a later poll, once live batches have ended
            if not allow(self.upper_bound(chunk)):
                break
            keys = [key for key, _, _ in chunk]
            intent_id = store.new_intent(self.con, self.model.provider, self.model.id, keys)
            row = store.batches_of(self.con, intent_id=intent_id)[0]
            rows = [row]

            def uploaded(file_id: str, rows: list[BatchRow] = rows) -> None:
                rows.append(store.record(self.con, rows[-1], "uploaded", input_file_id=file_id))

            try:
                batch = await self.api.submit(intent_id, [line for _, line, _ in chunk], uploaded)
            except BatchAPIError as exc:
                # The intent stays: the next poll or run reconciles it by its metadata.
                if not exc.retry:
                    self._stop(exc)
                else:
                    self.say(f"model {self.model.id}: batch not submitted yet ({exc})")
                break
            store.record(
                self.con,
                rows[-1],
                "submitted",
                batch_id=batch.batch_id,
                input_file_id=batch.input_file_id,
            )
            made.append(Submitted(batch.batch_id, len(keys)))
            self.say(
                f"model {self.model.id}: batch {batch.batch_id} submitted ({len(keys):,} trials)"
            )
        return made

    def _queue_full(self, chunk: Sequence[tuple[str, bytes, int]]) -> bool:
        """Whether the chunk must wait for live batches to end: with them, its prompt tokens
        would pass the provider's enqueued-token limit for the model (OpenAI fails such a
        batch whole, `token_limit_exceeded`). Without live batches it goes: `_chunks` cut it
        below the limit (a single trial above it alone goes too, and the provider says)."""
        limit = self.api.enqueued_tokens
        if limit is None:
            return False
        live, queued = store.held_estimate(self.con, self.model.id, LIVE)
        if not live or queued + sum(est for _, _, est in chunk) <= limit:
            return False
        if not self._holding:
            self._holding = True
            self.say(
                f"model {self.model.id}: next batch waits for live batches to end "
                f"({queued:,} prompt tokens enqueued, limit {limit:,}: batch_enqueued_tokens)"
            )
        return True

    # -- polling and ingesting ---------------------------------------------------------------

    async def poll(self) -> int:
        """Read every live batch once, record a changed state, and ingest those that ended;
        returns how many batches were ingested."""
        await self.reconcile()
        ingested = 0
        for row in self.live():
            batch_id = row.batch_id
            if batch_id is None:
                continue
            try:
                batch = await self.api.get(batch_id)
            except BatchAPIError as exc:
                if not exc.retry:
                    self._stop(exc)
                continue
            if row.state not in ENDED:  # else: it ended before a crash, not ingested yet
                row = self._seen(row, batch)
                if batch.state not in ENDED:
                    continue
            try:
                await self._ingest(row, batch)
            except BatchAPIError as exc:
                if not exc.retry:
                    self._stop(exc)
                continue
            ingested += 1
        return ingested

    def _seen(self, row: BatchRow, batch: BatchInfo) -> BatchRow:
        """Record the batch's state as the provider gave it, when it changed."""
        if batch.state != row.state or batch.completed != row.completed:
            row = store.record(
                self.con, row, batch.state, completed=batch.completed, failed=batch.failed
            )
            self.say(
                f"model {self.model.id}: batch {batch.batch_id} {batch.state} "
                f"({batch.completed or 0}/{row.requests} done)"
            )
        return row

    async def refresh(self) -> int:
        """Ask the provider for each running batch's state and record it as a poll does,
        without ingesting (what `ibias status --refresh` does; a run stores the results).
        Returns how many batches the provider answered for; a failed call is said."""
        read = 0
        for row in self.live():
            if row.batch_id is None or row.state in ENDED:
                continue
            try:
                batch = await self.api.get(row.batch_id)
            except BatchAPIError as exc:
                self.say(f"model {self.model.id}: batch {row.batch_id} not refreshed: {exc}")
                continue
            self._seen(row, batch)
            read += 1
        return read

    async def cancel(self) -> list[str]:
        """Ask the provider to cancel every live batch of this model; returns their ids."""
        done: list[str] = []
        for row in self.live():
            if row.batch_id is None or row.state in ENDED:
                continue
            try:
                batch = await self.api.cancel(row.batch_id)
            except BatchAPIError as exc:
                self.say(f"model {self.model.id}: batch {row.batch_id} not cancelled: {exc}")
                continue
            store.record(self.con, row, batch.state, detail="cancel requested")
            done.append(row.batch_id)
        return done

    async def _ingest(self, row: BatchRow, batch: BatchInfo) -> None:
        """Store every result of an ended batch, matched by custom id, in one transaction
        with the batch's `ingested` row. An adopted batch is confirmed by its custom ids: a
        line naming no trial of the intent is counted and said, never stored."""
        keys = set(store.keys_of(self.con, row.intent_id))
        tally = _Tally(
            tried=store.attempts_of(self.con, self.model.id),
            started=row.intended_at.timestamp(),
        )
        self.con.execute("BEGIN TRANSACTION").fetchall()
        try:
            async for result in self.api.results(batch, self.max_line_bytes):
                if result is not None:  # None: unreadable, or above the cap naming no key
                    self._take(result, keys, tally)  # (either way retried below)
            self._fail_not_run(batch, keys, tally)
            self._flush(tally.attempts, tally.responses)
            store.record(
                self.con,
                row,
                "ingested",
                completed=tally.stored,
                failed=tally.failed,
                detail=_ingested_detail(batch, tally.foreign),
            )
            self.con.execute("COMMIT").fetchall()
        except BaseException:
            self.con.execute("ROLLBACK").fetchall()
            raise
        self._too_large |= tally.too_large
        self.stats.done += tally.stored
        self._say_ingested(row, tally)

    def _take(self, result: LineResult, keys: set[str], tally: _Tally) -> None:
        """One result line of the batch: a response, or a failed attempt (final when the
        reply is above the body cap); a line naming no trial of the batch is only counted,
        and a key's repeat is skipped. Rows go to the store a chunk at a time."""
        key = result.key
        if key not in keys:
            tally.foreign += 1
            return
        if key in tally.seen:
            return
        tally.seen.add(key)
        if result.reply is None:
            final = result.kind == TOO_LARGE
            if final:
                tally.too_large.add(key)
            tally.attempts.append(
                self._failure(
                    key,
                    tally.started,
                    tally.tried.get(key, 0) + 1,
                    result.status,
                    stored_kind(result.kind or "batch_error"),
                    result.message or "no reply",
                    final=final,
                )
            )
            tally.failed += 1
        else:
            tally.responses.append(self._response(key, result.reply, result.raw))
            tally.stored += 1
        if len(tally.attempts) + len(tally.responses) >= INGEST_CHUNK:
            self._flush(tally.attempts, tally.responses)

    def _fail_not_run(self, batch: BatchInfo, keys: set[str], tally: _Tally) -> None:
        """A failed attempt for each of the batch's trials without a result line: never run
        (the batch expired, was cancelled...), said with the batch's error when it has one."""
        for key in sorted(keys - tally.seen):
            tally.attempts.append(
                self._failure(
                    key,
                    tally.started,
                    tally.tried.get(key, 0) + 1,
                    None,
                    stored_kind(batch.error_code or f"batch_{batch.state}"),
                    batch.error_message
                    or f"not run: the batch ended {batch.state} before this request",
                )
            )
            tally.failed += 1

    def _say_ingested(self, row: BatchRow, tally: _Tally) -> None:
        """The lines an ingested batch is reported by: result lines naming no trial of it,
        then what was stored, what will be retried and what was above the body cap."""
        if tally.foreign:
            self.say(
                f"model {self.model.id}: batch {row.batch_id}: {tally.foreign} result lines "
                "named no trial of this batch (not stored)"
            )
        too_large = tally.too_large
        above = f", {len(too_large):,} above the body cap (max_body_bytes)" if too_large else ""
        self.say(
            f"model {self.model.id}: batch {row.batch_id} ingested: {tally.stored:,} replies, "
            f"{tally.failed - len(too_large):,} to retry{above}"
        )

    def _flush(
        self, attempts: list[AttemptRow], responses: list[tuple[ResponseRow, str | None]]
    ) -> None:
        """Insert a chunk of results (inside the batch's transaction) and parse the replies,
        with their trials' items read in one query."""
        ok = [
            AttemptRow(
                self.run_id, r.trial_key, r.model_id, 1, r.received_at, None, 200, None, None, "ok"
            )
            for r, _ in responses
        ]
        insert_attempts(self.con, [*attempts, *ok])
        insert_responses(self.con, [r for r, _ in responses])
        parsed = frozenset(parsed_kinds())
        if responses and parsed:
            texts = {r.trial_key: text for r, text in responses}
            rows = self.con.execute(
                "SELECT trial_key, experiment, item FROM trials WHERE list_contains(?, trial_key)",
                [list(texts)],
            ).fetchall()
            landed = [
                Landed(key, exp, orjson.loads(item) if isinstance(item, str) else item, texts[key])
                for key, exp, item in rows
                if exp in parsed
            ]
            if landed:
                parse_landed(self.con, landed)
        attempts.clear()
        responses.clear()

    def _failure(
        self,
        key: str,
        started: float,
        attempt: int,
        status: int | None,
        kind: str,
        message: str,
        *,
        final: bool = False,
    ) -> AttemptRow:
        outcome = "retry" if attempt < self.limits.max_attempts and not final else "gave_up"
        if outcome == "gave_up":
            self.stats.failed += 1
        return AttemptRow(
            self.run_id,
            key,
            self.model.id,
            attempt,
            started,
            None,
            status,
            kind,
            redact(message)[:1000],
            outcome,
        )

    def _response(
        self, key: str, reply: Reply, raw: Mapping[str, Any]
    ) -> tuple[ResponseRow, str | None]:
        """A succeeded line as a response row at the batch price (the line as `raw`)."""
        cost = None
        if reply.prompt_tokens is not None and reply.completion_tokens is not None:
            cost = self.priced.cost(
                reply.prompt_tokens,
                reply.completion_tokens,
                reply.cache_read_tokens,
                reply.cache_write_tokens,
            )
            self.stats.cost_usd += cost
        self.stats.prompt_tokens += reply.prompt_tokens or 0
        self.stats.completion_tokens += reply.completion_tokens or 0
        return (
            response_row(key, self.run_id, self.model.id, reply, cost, self.clock(), raw),
            reply_text(reply.content, reply.finish_reason, reply.refusal),
        )


@dataclass(eq=False)
class _Tally:
    """What ingesting one batch's results has taken so far: the rows waiting for the next
    chunk's flush, the keys seen, and the counts its `ingested` row and lines report."""

    #: Attempts already stored per trial key (a result's attempt number follows them).
    tried: Mapping[str, int]
    #: When the batch was intended (epoch seconds): its attempts' start time.
    started: float
    attempts: list[AttemptRow] = field(default_factory=list)
    responses: list[tuple[ResponseRow, str | None]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    stored: int = 0
    failed: int = 0
    foreign: int = 0
    #: Keys whose reply was above the body cap (final: kept once the transaction commits).
    too_large: set[str] = field(default_factory=set)


#: Provider spellings of an error kind -> the one the store keeps (migration 013 rewrote the
#: rows stored before): Anthropic's `canceled` is the others' `cancelled`.
_KIND_SPELLINGS = {"batch_canceled": "batch_cancelled"}


def stored_kind(kind: str) -> str:
    """`attempts.error_kind` of a failed batch request, in one spelling whatever the provider
    (an adapter that passes a provider's own code through still lands on it)."""
    return _KIND_SPELLINGS.get(kind, kind)


def _ingested_detail(batch: BatchInfo, foreign: int) -> str:
    """The `ingested` row's detail: how the batch ended, and how many lines named no trial."""
    detail = f"batch ended {batch.state}"
    if batch.error_code:
        detail += f" ({batch.error_code})"
    if foreign:
        detail += f"; {foreign} result lines named no trial of this batch"
    return detail

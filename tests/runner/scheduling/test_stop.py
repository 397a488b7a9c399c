"""Stopping a run from the Python API: a `Stop`, never a signal handler.

In-process providers (`ibias.FakeProvider`, no HTTP) make every step observable: tests wait on
what the provider has seen, never on a fixed sleep.
"""

from __future__ import annotations

import signal
import threading
from datetime import UTC, datetime

import anyio
import duckdb

from ibias import FakeProvider
from ibias.runner.config import ModelConfig, load_config
from ibias.runner.execution.run import TRIAL_BATCH, RunOptions, execute
from ibias.runner.providers.base import Provider, ProviderContext
from ibias.runner.providers.retries import Backoff
from ibias.runner.scheduling.stop import Stop
from ibias.runner.status import read_status, status_path
from ibias.store.db import open_store
from ibias.store.writer import Landed, ResponseRow, Writer
from tests.helpers import model_block, write_config

FAST = Backoff(base_s=0.001, cap_s=0.01, max_attempts=4)
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopping:
    """Answers at once (`ok <prompt>`, through `fake`); after `after` answers it asks the run
    to stop, and the requests then in flight take a little longer (they must still be
    stored)."""

    def __init__(self, stop: Stop, after: int, handlers: dict[int, object]) -> None:
        self.stop = stop
        self.after = after
        self.handlers = handlers
        self.answered = 0
        self.handlers_seen: set[tuple[int, object]] = set()
        self.fake = FakeProvider(self.answer)

    async def answer(self, text: str) -> str:
        self.handlers_seen.update((s, signal.getsignal(s)) for s in SIGNALS)
        if self.stop.requested:
            await anyio.sleep(0.05)  # in flight when the stop came: finishes within the grace
        self.answered += 1
        if self.answered == self.after:
            self.stop.request()
        return f"ok {text}"


def _count(store, sql: str) -> int:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return int(con.execute(sql).fetchall()[0][0])
    finally:
        con.close()


def _config(tmp_path, n: int, **keys: object):
    block = model_block("m", provider="openai", base_url="http://127.0.0.1:9/v1", **keys)
    return load_config(write_config(tmp_path, [block], n_prompts=n))


async def test_stop_mid_run_stores_everything_answered_and_installs_no_handler(tmp_path):
    before = {s: signal.getsignal(s) for s in SIGNALS}
    stop = Stop()
    built: list[Stopping] = []

    def factory(model: ModelConfig, key: str | None, context: ProviderContext) -> Provider:
        built.append(Stopping(stop, after=40, handlers=before))
        return built[-1].fake

    store = tmp_path / "store.duckdb"
    result = await execute(
        _config(tmp_path, 500, max_concurrency=4),
        RunOptions(store=store, quiet=True, backoff=FAST),
        provider_factory=factory,
        stop=stop,
    )
    assert result.exit_code == 130
    assert result.lines[-1] == "interrupted: results so far are stored; run again to resume"
    answered = built[0].answered
    assert 40 <= answered <= 40 + 4  # the stop ended scheduling; in-flight ones finished
    assert _count(store, "SELECT count(*) FROM responses") == answered
    assert _count(store, "SELECT count(*) FROM trials") == 500
    # the run never touched the process's signal handling
    assert built[0].handlers_seen == set(before.items())
    assert {s: signal.getsignal(s) for s in SIGNALS} == before
    status = read_status(status_path(store))
    assert status is not None and status["state"] == "interrupted"
    # What the run still needed, frozen where it stopped: never a 0 that reads as "done".
    [model] = status["models"]
    assert model["done"] == answered < model["total"] and model["eta_s"] > 0


class Hanging:
    """Answers prompt p0 never (through `fake`); everything else at once."""

    def __init__(self) -> None:
        self.hanging = anyio.Event()
        self.answered = 0
        self.fake = FakeProvider(self.answer)

    async def answer(self, text: str) -> str:
        if "item p0." in text:
            self.hanging.set()
            await anyio.sleep_forever()
        self.answered += 1
        return f"ok {text}"


async def test_grace_period_is_a_deadline_for_requests_in_flight(tmp_path):
    provider = Hanging()
    stop = Stop()
    store = tmp_path / "store.duckdb"
    outcome = {}

    async def run() -> None:
        outcome["result"] = await execute(
            _config(tmp_path, 50, max_concurrency=2),
            RunOptions(store=store, quiet=True, backoff=FAST, grace_s=0.3),
            provider_factory=lambda m, k, c: provider.fake,
            stop=stop,
        )

    with anyio.fail_after(30):  # a safety net only; the run ends ~0.3 s after the stop
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await provider.hanging.wait()
            while provider.answered < 10:
                await anyio.sleep(0.01)
            stop.request()
    assert outcome["result"].exit_code == 130
    answered = provider.answered
    assert _count(store, "SELECT count(*) FROM responses") == answered
    assert (
        _count(
            store,
            "SELECT count(*) FROM attempts WHERE trial_key IN "
            "(SELECT trial_key FROM trials WHERE coords->>'id' = 'p0')",
        )
        == 0
    )


async def test_stop_before_planning_ends_after_one_batch_with_one_line(tmp_path):
    stop = Stop()
    stop.request("interrupted by test")
    store = tmp_path / "store.duckdb"
    n = TRIAL_BATCH + 100

    def factory(model: ModelConfig, key: str | None, context: ProviderContext) -> Provider:
        raise AssertionError("nothing is scheduled after an interrupted planning")

    result = await execute(
        _config(tmp_path, n),
        RunOptions(store=store, quiet=True),
        provider_factory=factory,
        stop=stop,
    )
    assert result.exit_code == 130
    assert result.lines == (
        f"interrupted by test while planning: {TRIAL_BATCH:,} planned trials are stored; "
        "run again to resume",
    )
    # consistent: the run row and whole batches only
    assert _count(store, "SELECT count(*) FROM runs") == 1
    assert _count(store, "SELECT count(*) FROM trials") == TRIAL_BATCH
    status = read_status(status_path(store))
    assert status is not None and status["state"] == "interrupted"
    assert status["models"][0]["total"] == TRIAL_BATCH


async def test_writer_flush_in_progress_completes_when_the_run_is_cancelled(tmp_path):
    con = open_store(tmp_path / "w.duckdb", create=True)
    entered, release = threading.Event(), threading.Event()

    def slow_on_landed(con, landed) -> None:  # runs on the writer's thread, inside the flush
        entered.set()
        release.wait(10)

    writer = Writer(con, interval=0.01, on_landed=slow_on_landed)
    row = ResponseRow(
        trial_key="k1",
        run_id="r",
        model_id="m",
        provider_model=None,
        content="x",
        refusal=None,
        finish_reason="stop",
        prompt_tokens=1,
        completion_tokens=1,
        cost_usd=0.0,
        system_fingerprint=None,
        received_at=datetime.now(UTC),
        raw=None,
    )
    writer.add_response(row, Landed(trial_key="k1", experiment="prompts", item={}, content="x"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(writer.run)
        await anyio.to_thread.run_sync(entered.wait, 10)  # the flush is in its thread
        tg.cancel_scope.cancel()
        release.set()
    await writer.close()
    await writer.close()  # idempotent
    try:
        assert con.execute("SELECT count(*) FROM responses").fetchall()[0][0] == 1
    finally:
        con.close()


def test_stop_can_be_made_before_a_loop_exists():
    stop = Stop()
    assert not stop.requested and stop.reason is None
    stop.request("first")
    stop.request("second")
    assert stop.requested and stop.reason == "first"

    async def waits() -> None:
        with anyio.fail_after(5):
            await stop.wait()

    anyio.run(waits)


def test_the_watchdog_acts_once_a_stop_outlives_grace_and_margin():
    """The command line's backstop (runner/commands/stop_signals.py arms it): a stop that has
    not ended the work `grace_s + margin_s` after it was requested calls the overdue action,
    from its own thread (so nothing stuck on the event loop can hold it)."""
    fired = threading.Event()
    stop = Stop(grace_s=0.01)
    stop.arm(fired.set, margin_s=0.01)
    assert stop.deadline is None  # nothing happens before a stop is requested
    stop.request("interrupted by SIGTERM")
    assert stop.deadline is not None
    assert fired.wait(timeout=30)


def test_the_watchdog_does_nothing_once_the_work_has_ended():
    fired: list[str] = []
    stop = Stop(grace_s=0.05)
    stop.arm(lambda: fired.append("overdue"), margin_s=0.0)
    stop.request()
    stop.disarm()
    watchdog = stop._watchdog
    assert watchdog is not None
    watchdog.join(timeout=30)
    assert not watchdog.is_alive() and fired == []


def test_a_stop_requested_before_arming_is_watched_too():
    fired = threading.Event()
    stop = Stop(grace_s=0.0)
    stop.request()
    stop.arm(fired.set, margin_s=0.0)
    assert fired.wait(timeout=30)

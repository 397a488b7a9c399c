"""A dead endpoint stops its own model within `outage_limit_s`, the other models go on, and a
later run resumes the stopped model's trials (issue 11, circuit breaker)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import anyio
import duckdb
from aiohttp import web

from ibias.runner.config import load_config
from ibias.runner.execution.run import RunOptions, execute
from ibias.runner.providers.retries import Backoff
from ibias.runner.scheduling import breaker
from ibias.runner.status import read_status, status_path
from tests.helpers import IBIAS, model_block, start_simulator, stop_simulator, write_config

FAST = Backoff(base_s=0.01, cap_s=0.05, max_attempts=8)
N = 40


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port that refuses connections for as long as the block runs: bound and never
    listening, so no other test's server can take it (a port bound and released could be, and
    then the "dead" endpoint answered: a run under load finished every trial)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def free_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _rows(store, sql: str) -> list[tuple[object, ...]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _config(tmp_path, dead_url: str, outage_limit_s: float = 1):
    models = [
        model_block(
            "dead",
            provider="openai",
            base_url=dead_url,
            model="gpt-x",
            max_concurrency=4,
            timeout_s=5,
            outage_limit_s=outage_limit_s,
        ),
        model_block("alive", provider="simulator", max_concurrency=4),
    ]
    return write_config(tmp_path, models, n_prompts=N)


async def test_a_dead_endpoint_stops_its_model_only_and_a_rerun_resumes_it(tmp_path):
    with refused_port() as port:
        dead_url = f"http://127.0.0.1:{port}/v1"
        path = _config(tmp_path, dead_url)
        store = tmp_path / "store.duckdb"
        lines: list[str] = []
        result = await execute(
            load_config(path), RunOptions(store=store, quiet=True, backoff=FAST), say=lines.append
        )
    assert result.exit_code == 1
    # One line when it happens, naming the model and the cause, and the same in the summary.
    assert len(lines) == 1, lines
    assert lines[0].startswith("model dead stopped: endpoint unreachable for ")
    assert "(outage_limit_s = 1): connection: " in lines[0]
    stopped = [line for line in result.lines if line.startswith("model dead stopped (")]
    assert len(stopped) == 1 and "trials not done; run again to resume" in stopped[0]
    assert f"{N:,} trials not done" in stopped[0]
    # The healthy model finished; the dead one gave up no trial (the outage is not theirs).
    assert _rows(store, "SELECT model_id, count(*) FROM responses GROUP BY 1") == [("alive", N)]
    outcomes = dict(
        _rows(store, "SELECT outcome, count(*) FROM attempts WHERE model_id = 'dead' GROUP BY 1")
    )
    assert set(outcomes) <= {"retry", "fatal"} and outcomes.get("fatal", 0) <= 1
    # Probes, not a storm: the trip, then one request at a time for about a second.
    assert sum(outcomes.values()) < 4 + 3 + 10
    status = read_status(status_path(store))
    assert status is not None and status["state"] == "finished"
    dead = next(m for m in status["models"] if m["model_id"] == "dead")
    assert dead["fatal"].startswith("endpoint unreachable for ")

    # The endpoint comes back (a simulator speaking OpenAI's protocol): the rerun resumes.
    proc, url = start_simulator()
    try:
        path.write_text(path.read_text().replace(dead_url, url))
        again = await execute(load_config(path), RunOptions(store=store, quiet=True))
    finally:
        stop_simulator(proc)
    assert again.exit_code == 0, again.lines
    assert dict(_rows(store, "SELECT model_id, count(*) FROM responses GROUP BY 1")) == {
        "alive": N,
        "dead": N,
    }


async def test_a_short_outage_costs_no_trial(tmp_path):
    """The endpoint is down when the run starts and comes back before `outage_limit_s`: every
    trial is answered, none fails, and the failures during the outage are only retries."""
    port = free_port()
    dead_url = f"http://127.0.0.1:{port}/v1"
    models = [
        model_block(
            "flaky",
            provider="openai",
            base_url=dead_url,
            model="gpt-x",
            max_concurrency=4,
            timeout_s=5,
            outage_limit_s=60,
        )
    ]
    path = write_config(tmp_path, models, n_prompts=N)
    store = tmp_path / "store.duckdb"

    async def tripped() -> None:
        # The breaker opens after 3 failures in a row (retries, in the status file).
        status = status_path(store)
        while True:
            data = read_status(status)
            if data and any(m.get("retries", 0) >= 3 for m in data.get("models", [])):
                return
            await anyio.sleep(0.05)

    async with anyio.create_task_group() as tg:
        outcome: list[object] = []

        async def run() -> None:
            outcome.append(
                await execute(load_config(path), RunOptions(store=store, quiet=True, backoff=FAST))
            )

        tg.start_soon(run)
        await tripped()  # then the endpoint comes up
        proc = await anyio.open_process(
            [*IBIAS, "simulate", "--port", str(port)], stdout=-1, stderr=-1
        )
        try:
            while not outcome:
                await anyio.sleep(0.05)
        finally:
            proc.terminate()
            await proc.wait()
    result = outcome[0]
    assert result.exit_code == 0, result.lines  # type: ignore[attr-defined]
    assert _rows(store, "SELECT count(*) FROM responses") == [(N,)]
    assert _rows(store, "SELECT count(*) FROM attempts WHERE outcome IN ('gave_up', 'fatal')") == [
        (0,)
    ]


async def test_a_server_that_never_answers_is_an_outage_too(tmp_path):
    """Timeouts count like refused connections: the model stops naming the timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # the kernel accepts; nobody ever answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        models = [
            model_block(
                "silent",
                provider="openai",
                base_url=url,
                model="gpt-x",
                max_concurrency=4,
                timeout_s=0.2,
                outage_limit_s=1,
            )
        ]
        path = write_config(tmp_path, models, n_prompts=N)
        store = tmp_path / "store.duckdb"
        lines: list[str] = []
        result = await execute(
            load_config(path), RunOptions(store=store, quiet=True, backoff=FAST), say=lines.append
        )
    assert result.exit_code == 1
    assert len(lines) == 1 and "(outage_limit_s = 1): timeout: " in lines[0], lines
    assert _rows(store, "SELECT count(*) FROM attempts WHERE outcome = 'gave_up'") == [(0,)]


async def test_an_endpoint_that_never_answered_stops_at_once_naming_its_url(tmp_path, monkeypatch):
    """A refused connection from the start (a closed port): the model stops after
    NEVER_ANSWERED_S (lowered here from 30 s to keep the test short), not after its
    outage_limit_s of 600 s, with one line naming the URL and the error; the other model goes
    on. (The breaker's own tests show the 30 s default on a fake clock.)"""
    monkeypatch.setattr(breaker, "NEVER_ANSWERED_S", 0.5)
    with refused_port() as port, anyio.fail_after(60):  # against waiting 600 s
        dead_url = f"http://127.0.0.1:{port}/v1"
        path = _config(tmp_path, dead_url, outage_limit_s=600)
        store = tmp_path / "store.duckdb"
        lines: list[str] = []
        result = await execute(
            load_config(path), RunOptions(store=store, quiet=True, backoff=FAST), say=lines.append
        )
    assert result.exit_code == 1
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        f"model dead stopped: endpoint {dead_url}/chat/completions has not answered since the "
        "run started ("
    )
    assert "): connection: " in lines[0] and "check base_url" in lines[0]
    assert _rows(store, "SELECT model_id, count(*) FROM responses GROUP BY 1") == [("alive", N)]


class _Hanging:
    """A server that accepts every request and answers none until `release`."""

    def __init__(self) -> None:
        self.released = asyncio.Event()
        self.received = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.received += 1
        await self.released.wait()
        return web.Response(status=503)


async def test_the_outage_limit_holds_when_timeout_s_is_longer(tmp_path):
    """timeout_s = 60 s, outage_limit_s = 1 s, a server that never answers: the requests in
    flight are cancelled at the outage limit and the model stops then, instead of waiting out
    the 60 s timeout (and a probe's 60 s after it)."""
    hanging = _Hanging()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", hanging.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    models = [
        model_block(
            "hangs",
            provider="openai",
            base_url=f"http://127.0.0.1:{port}/v1",
            model="gpt-x",
            max_concurrency=2,
            timeout_s=60,
            outage_limit_s=1,
        )
    ]
    path = write_config(tmp_path, models, n_prompts=N)
    store = tmp_path / "store.duckdb"
    lines: list[str] = []
    try:
        # The server never answers and the timeout is 60 s: the run can end within this guard
        # only if the outage limit cut the requests in flight.
        with anyio.fail_after(30):
            result = await execute(
                load_config(path),
                RunOptions(store=store, quiet=True, backoff=FAST),
                say=lines.append,
            )
    finally:
        hanging.released.set()
        await runner.cleanup()
    assert result.exit_code == 1
    assert len(lines) == 1, lines
    assert lines[0].startswith("model hangs stopped: endpoint unreachable for 1 s ")
    assert "(outage_limit_s = 1): timeout: no answer within outage_limit_s = 1 s" in lines[0]
    assert hanging.received >= 1
    kinds = _rows(store, "SELECT DISTINCT error_kind FROM attempts")
    assert kinds == [("timeout",)]

"""One bad reply never ends a run (issue 20): a run against a local OpenAI-compatible server
whose replies include a token count of 2^31, a body above the size cap, a negative usage, a
429 asking to wait a day (on a second model) and a 302 (on a third). Every other trial is
answered and stored, each bad one is recorded as what it was, and the run ends by itself with
exit 1."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import duckdb
import orjson
import pytest
from aiohttp import web

from ibias.runner.config import load_config
from ibias.runner.execution.run import EXIT_FAILED, RunOptions, execute
from ibias.runner.providers.retries import Backoff
from tests.helpers import model_block, write_config

FAST = Backoff(base_s=0.001, cap_s=0.01, max_attempts=4)
N = 24
CAP = 4096  # bytes: the test's body cap (a normal reply here is about 300 bytes)
HUGE, TOO_LARGE, NEGATIVE, WAIT = "p3", "p5", "p7", "p4"


def _completion(model: str, text: str, usage: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "c",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
    }
    if usage is not None:
        body["usage"] = usage
    return body


class Server:
    """Three endpoints on one loopback server: `/main` (the bad replies above), `/waits` (a
    429 with `Retry-After: 86400` for one prompt) and `/moved` (a 302 to `/main`)."""

    def __init__(self) -> None:
        self.served: Counter[str] = Counter()  # completions served, by requested model
        self.url = ""

    async def main(self, request: web.Request) -> web.Response:
        payload = await request.json()
        model = payload["model"]
        prompt = re.search(r"item (p\d+)", payload["messages"][-1]["content"]).group(1)  # type: ignore[union-attr]
        usage: dict[str, Any] = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        text = f"answer {prompt}"
        if model == "m-main" and prompt == HUGE:
            usage = {"prompt_tokens": 2**31, "completion_tokens": 5}
        elif model == "m-main" and prompt == NEGATIVE:
            usage = {"prompt_tokens": 10, "completion_tokens": -5, "total_tokens": 5}
        elif model == "m-main" and prompt == TOO_LARGE:
            text = "x" * (2 * CAP)
        elif model == "m-waits" and prompt == WAIT:
            error = {"error": {"message": "Rate limit reached", "type": "requests"}}
            return web.json_response(error, status=429, headers={"Retry-After": "86400"})
        self.served[model] += 1
        return web.json_response(_completion(model, text, usage))

    async def moved(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(self.url + "/main/v1/chat/completions")

    async def waits(self, request: web.Request) -> web.Response:
        return await self.main(request)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server()
    app = web.Application()
    app.router.add_post("/main/v1/chat/completions", srv.main)
    app.router.add_post("/waits/v1/chat/completions", srv.waits)
    app.router.add_post("/moved/v1/chat/completions", srv.moved)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    # Redirected to another host name of the same server: the stop line names it.
    srv.url = f"http://localhost:{port}"
    try:
        yield srv
    finally:
        await runner.cleanup()


def _rows(store: Path, sql: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


async def test_bad_replies_are_recorded_alone_and_the_run_ends_by_itself(
    tmp_path: Path, server: Server
) -> None:
    root = server.url.replace("localhost", "127.0.0.1")
    common: dict[str, Any] = {
        "provider": "openai",
        "max_concurrency": 2,
        "price_input": 1.0,
        "price_output": 2.0,
        "max_body_bytes": CAP,
    }
    models = [
        model_block("main", base_url=f"{root}/main/v1", model="m-main", **common),
        model_block("waits", base_url=f"{root}/waits/v1", model="m-waits", **common),
        model_block("moved", base_url=f"{root}/moved/v1", model="m-moved", **common),
    ]
    path = write_config(tmp_path, models, n_prompts=N)
    store = tmp_path / "store.duckdb"
    lines: list[str] = []
    with anyio.fail_after(120):  # a guard against a hang, not a timing
        result = await execute(
            load_config(path),
            RunOptions(store=store, quiet=True, backoff=FAST),
            say=lines.append,
        )
    assert result.exit_code == EXIT_FAILED, result.lines

    # The main model: every trial answered and stored but the one whose body was too large.
    rows = _rows(
        store,
        "SELECT t.item->>'id', r.prompt_tokens, r.completion_tokens, r.cost_usd, r.content "
        "FROM responses r JOIN trials t USING (trial_key) WHERE r.model_id = 'main'",
    )
    by_prompt = {r[0]: r[1:] for r in rows}
    assert set(by_prompt) == {f"p{i}" for i in range(N)} - {TOO_LARGE}
    # Unknown usage is stored as NULL tokens and NULL cost (never a negative or a zero cost).
    assert by_prompt[HUGE] == (None, 5, None, f"answer {HUGE}")
    assert by_prompt[NEGATIVE] == (10, None, None, f"answer {NEGATIVE}")
    good = [v for k, v in by_prompt.items() if k not in (HUGE, NEGATIVE)]
    assert all(p == 10 and c == 5 and cost == pytest.approx(20e-6) for p, c, cost, _ in good)
    # The too-large body: one attempt, that trial's error, given up on at once.
    attempts = _rows(
        store,
        "SELECT a.http_status, a.error_kind, a.error_message, a.outcome FROM attempts a "
        f"JOIN trials t USING (trial_key) WHERE t.item->>'id' = '{TOO_LARGE}' "
        "AND a.model_id = 'main'",
    )
    assert len(attempts) == 1
    status, kind, message, outcome = attempts[0]
    assert (status, kind, outcome) == (200, "too_large", "gave_up")
    assert "4,096 bytes cap" in message
    assert any(
        line.startswith("model main: 1 trials failed") and "too_large" in line
        for line in result.lines
    ), result.lines

    # The 429 asking for a day stopped its model at once, saying until when.
    waits = [line for line in lines if line.startswith("model waits stopped:")]
    assert len(waits) == 1, lines
    assert "provider asked to wait 86,400 s (until " in waits[0]
    assert "UTC), beyond outage_limit_s = 600 s; run again after then" in waits[0]
    wait_attempts = _rows(
        store,
        "SELECT a.http_status, a.error_kind, a.outcome, a.error_message FROM attempts a "
        f"JOIN trials t USING (trial_key) WHERE t.item->>'id' = '{WAIT}' "
        "AND a.model_id = 'waits'",
    )
    assert [(s, k, o) for s, k, o, _ in wait_attempts] == [(429, "http_429", "fatal")]
    assert "86,400 s" in wait_attempts[0][3]

    # The 302 was not followed: nothing stored for that model, its target never asked.
    assert _rows(store, "SELECT count(*) FROM responses WHERE model_id = 'moved'") == [(0,)]
    assert server.served["m-moved"] == 0
    moved = _rows(
        store,
        "SELECT http_status, error_kind, outcome FROM attempts WHERE model_id = 'moved'",
    )
    # (one per request in flight when the first came back: max_concurrency = 2)
    assert 1 <= len(moved) <= 2 and set(moved) == {(302, "redirect", "fatal")}
    moved_lines = [line for line in lines if line.startswith("model moved stopped:")]
    assert len(moved_lines) == 1 and "HTTP 302 redirect to host localhost" in moved_lines[0]

    # Nothing the store holds overflowed or went negative.
    assert _rows(
        store, "SELECT count(*) FROM responses WHERE cost_usd < 0 OR completion_tokens < 0"
    ) == [(0,)]
    raw = _rows(
        store, f"SELECT raw FROM responses WHERE model_id = 'main' AND content = 'answer {HUGE}'"
    )
    assert orjson.loads(raw[0][0])["usage"]["prompt_tokens"] == 2**31  # kept as sent in raw

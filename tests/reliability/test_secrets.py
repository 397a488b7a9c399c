"""A server that echoes the API key back (in error messages, in a long message where the key
straddles the stored message's cut, and in the answers themselves) never gets it onto the
terminal, into the status file or into any row of the store (issue 11, keys echoed back).

The keys have no known prefix, so only redaction by value can catch them."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator

import anyio
import duckdb
import orjson
import pytest
from aiohttp import web

from ibias.runner.redact import (
    MAX_MESSAGE_CHARS,
    REDACTED,
    redact,
    redact_body,
    secret_bytes,
    secrets_scope,
)
from tests.helpers import IBIAS, model_block, write_config

N = 12


def _key() -> str:
    return "zq" + secrets.token_hex(16)  # no provider's prefix: only its value is known


class Echo:
    """Per model (by the key it is sent): answers that echo the key, then retryable errors that
    echo it, one of them long enough for the stored message to be cut inside the key, then a
    401 that echoes it and stops the model."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    async def handle(self, request: web.Request) -> web.Response:
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        n = self.seen[key] = self.seen.get(key, 0) + 1
        if n <= 4:
            body = {
                "id": f"c{n}",
                "object": "chat.completion",
                "model": "echo",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": f"your key is {key}"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 4},
                "echo": {"authorization": f"Bearer {key}"},
            }
            return web.json_response(body)
        if n == 5:
            cut = MAX_MESSAGE_CHARS - len("HTTP 500: ") - 6  # the cut falls inside the key
            message = "x" * cut + key + " and more text after it"
            return web.json_response({"error": {"message": message}}, status=500)
        if n == 6:
            message = f"upstream failed for key={key}; key {key} was used"
            return web.json_response({"error": {"message": message}}, status=503)
        message = f"Incorrect API key provided: {key}. You can find your key elsewhere."
        return web.json_response(
            {"error": {"message": message, "type": "invalid_request_error"}}, status=401
        )


@pytest.fixture
async def echo_url() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/{tail:.*}", Echo().handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


def _all_text(store) -> str:
    """Every column of every table, cast to text, as one string."""
    con = duckdb.connect(str(store), read_only=True)
    try:
        out = []
        tables = con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
        ).fetchall()
        for (table,) in tables:
            columns = [
                c
                for (c,) in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = ?",
                    [table],
                ).fetchall()
            ]
            for column in columns:
                rows = con.execute(f'SELECT CAST("{column}" AS VARCHAR) FROM "{table}"').fetchall()
                out.extend(str(v) for (v,) in rows if v is not None)
        return "\n".join(out)
    finally:
        con.close()


def _leaks(text: str, key: str) -> list[str]:
    """The key, or any 8-character piece of it (a cut key), found in `text`."""
    return [key[i : i + 8] for i in range(len(key) - 7) if key[i : i + 8] in text]


async def test_echoed_keys_reach_no_output_file_or_row(tmp_path, echo_url):
    keys = {"ECHO_KEY_A": _key(), "ECHO_KEY_B": _key()}
    models = [
        model_block(
            m,
            provider="openai",
            base_url=echo_url,
            model="echo",
            api_key_env=env,
            max_concurrency=1,
        )
        for m, env in (("a", "ECHO_KEY_A"), ("b", "ECHO_KEY_B"))
    ]
    config = write_config(tmp_path, models, n_prompts=N)
    env = {**os.environ, **keys}
    result = await anyio.run_process([*IBIAS, "run", str(config)], env=env, check=False, stdin=None)
    out, err = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 1, err
    # The model stops with one line naming it and the (redacted) cause.
    assert f"model a stopped: HTTP 401: Incorrect API key provided: {REDACTED}." in err
    store = tmp_path / "store.duckdb"
    status = (tmp_path / "store.duckdb.status.json").read_text()
    stored = _all_text(store)
    assert f"your key is {REDACTED}" in stored  # the answers were stored, without the key
    assert "key=[redacted]" in stored and "HTTP 503" in stored
    for key in keys.values():
        for where, text in (
            ("stdout", out),
            ("stderr", err),
            ("status", status),
            ("store", stored),
        ):
            assert _leaks(text, key) == [], where


def test_redact_removes_configured_keys_of_eight_characters_or_more():
    with secrets_scope(["short7c", "Longer-Secret_1", None, "Longer-Secret_1-and-more"]):
        assert redact("a short7c b Longer-Secret_1 c Longer-Secret_1-and-more d") == (
            f"a short7c b {REDACTED} c {REDACTED} d"
        )
        with secrets_scope(["another-secret"]):  # nested: both
            assert redact("another-secret Longer-Secret_1") == f"{REDACTED} {REDACTED}"
    assert redact("Longer-Secret_1") == "Longer-Secret_1"  # the scope ended


def test_a_key_cut_by_the_message_limit_is_removed_before_the_cut():
    key = _key()
    with secrets_scope([key]):
        text = redact("y" * (MAX_MESSAGE_CHARS - 10) + key)
    assert len(text) <= MAX_MESSAGE_CHARS and key[:8] not in text


def test_answers_lose_the_key_sent_and_keep_credential_like_words():
    key = secret_bytes("zz-secret-value")
    body = orjson.dumps({"content": "token: abc, Bearer xyz, zz-secret-value"})
    expected = orjson.dumps({"content": f"token: abc, Bearer xyz, {REDACTED}"})
    assert redact_body(body, key) == expected
    assert redact_body(body, None) == body
    assert secret_bytes("1234567") is None and secret_bytes(None) is None


def test_an_internal_error_line_names_no_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unexpected exception reaches the CLI after the run's redaction scope has ended."""
    from ibias.runner import cli

    key = _key()
    monkeypatch.setenv("ECHO_API_KEY", key)

    def boom(_args: object) -> int:
        raise RuntimeError(f"request failed with header Authorization: {key}")

    monkeypatch.setattr(cli, "_dispatch", boom)
    assert cli.main(["status"]) == cli.EXIT_FAILED
    err = capsys.readouterr().err
    assert "internal error: RuntimeError" in err and key not in err and key[:8] not in err

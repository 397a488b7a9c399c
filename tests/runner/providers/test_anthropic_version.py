"""The Anthropic API version as a per-model option (`anthropic_version`, issue 33).

A model that names no version, or names the default (2023-06-01), sends what ibias always
sent (`anthropic-version: 2023-06-01` and `x-api-key`) and keeps its trial keys; a later
version is sent with the key in the header it takes (`Authorization: Bearer` from
2026-10-21), online and in Message Batches, and is recorded in the trial's params (so its
key differs). A version that is not a date is refused in one line naming the key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest
from aiohttp import web

from ibias.prompts.base import TrialSpec
from ibias.runner.batch.anthropic import AnthropicBatches
from ibias.runner.config import ConfigFileError, load_config
from ibias.runner.execution.plan import trial_key
from ibias.runner.execution.run import EXIT_OK, RunOptions, execute
from ibias.runner.providers.anthropic import (
    ANTHROPIC_VERSION,
    BEARER_SINCE,
    AnthropicProvider,
    auth_headers,
)
from ibias.runner.providers.base import ProviderContext, Sampling
from tests.helpers import model_block, write_config

KEY = "sk-ant-api03-VERSIONTESTKEY"
KEY_ENV = "IBIAS_TEST_ANTHROPIC_VERSION_KEY"
SEEN: list[dict[str, str]] = []

MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-x-20250101",
    "content": [{"type": "text", "text": "hello"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 10, "output_tokens": 4},
}
BATCH = {
    "id": "msgbatch_1",
    "type": "message_batch",
    "processing_status": "in_progress",
    "request_counts": {"processing": 1, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0},
    "created_at": "2026-10-22T00:00:00Z",
}


@pytest.fixture()
async def server() -> AsyncIterator[str]:
    """Loopback Messages and Message Batches endpoints that record each request's headers."""

    async def messages(request: web.Request) -> web.Response:
        SEEN.append(dict(request.headers))
        return web.json_response(MESSAGE)

    async def batches(request: web.Request) -> web.Response:
        SEEN.append(dict(request.headers))
        return web.json_response(BATCH)

    SEEN.clear()
    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/messages/batches", batches)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield f"http://{host}:{port}/v1"
    await runner.cleanup()


def _block(base_url: str, **options: object) -> str:
    return model_block(
        "claude",
        provider="anthropic",
        base_url=base_url,
        model="claude-x",
        api_key_env=KEY_ENV,
        **options,
    )


def _spec() -> TrialSpec:
    return TrialSpec(
        experiment="prompts",
        language="",
        coords={"id": "golden"},
        item={"id": "golden"},
        messages=({"role": "user", "content": "hi"},),
        replicate=0,
    )


def test_the_default_version_changes_no_key_and_another_does(tmp_path: Path) -> None:
    keys: dict[str, str] = {}
    params: dict[str, dict[str, Any]] = {}
    variants: dict[str, dict[str, object]] = {
        "absent": {},
        "default": {"anthropic_version": ANTHROPIC_VERSION},
        "later": {"anthropic_version": BEARER_SINCE},
    }
    for name, options in variants.items():
        folder = tmp_path / name
        folder.mkdir()
        (model,) = load_config(
            write_config(folder, [_block("https://api.anthropic.com/v1", **options)])
        ).models
        params[name] = model.params()
        keys[name] = trial_key(_spec(), model, params[name])
    assert params["absent"] == params["default"] == {"temperature": 0.0, "max_tokens": 512}
    assert params["later"] == {
        "temperature": 0.0,
        "max_tokens": 512,
        "anthropic_version": BEARER_SINCE,
    }
    assert keys["absent"] == keys["default"] != keys["later"]


@pytest.mark.parametrize(
    "bad", ["latest", "2023-6-1", "2026-13-01", "2022-12-31", "", "2023-06-01 "]
)
def test_a_version_that_is_not_an_api_date_is_refused_in_one_line(tmp_path: Path, bad: str) -> None:
    config = write_config(tmp_path, [_block("https://api.anthropic.com/v1", anthropic_version=bad)])
    with pytest.raises(ConfigFileError) as caught:
        load_config(config)
    (line,) = str(caught.value).splitlines()
    assert "models[0].anthropic_version" in line and repr(bad) in line


def test_another_providers_model_cannot_name_it(tmp_path: Path) -> None:
    block = model_block(
        "g", provider="openai", base_url="https://api.openai.com/v1", model="gpt-4o",
        anthropic_version=ANTHROPIC_VERSION,
    )  # fmt: skip
    with pytest.raises(ConfigFileError, match=r"models\[0\]\.anthropic_version: unknown key"):
        load_config(write_config(tmp_path, [block]))


def test_each_version_takes_its_key_header() -> None:
    assert auth_headers(ANTHROPIC_VERSION, KEY) == {
        "anthropic-version": ANTHROPIC_VERSION,
        "x-api-key": KEY,
    }
    assert auth_headers(BEARER_SINCE, KEY) == {
        "anthropic-version": BEARER_SINCE,
        "Authorization": f"Bearer {KEY}",
    }
    assert auth_headers("2027-01-01", KEY)["Authorization"] == f"Bearer {KEY}"
    assert auth_headers(BEARER_SINCE, None) == {"anthropic-version": BEARER_SINCE}


@pytest.mark.parametrize("version", [None, ANTHROPIC_VERSION, BEARER_SINCE])
async def test_a_run_sends_the_models_version_and_records_it_only_when_not_the_default(
    server: str, tmp_path: Path, version: str | None
) -> None:
    options = {} if version is None else {"anthropic_version": version}
    config = load_config(write_config(tmp_path, [_block(server, **options)], n_prompts=2))
    store = tmp_path / "store.duckdb"
    result = await execute(config, RunOptions(store=store, quiet=True), environ={KEY_ENV: KEY})
    assert result.exit_code == EXIT_OK, result.lines
    assert len(SEEN) == 2
    sent = {k.lower(): v for k, v in SEEN[0].items()}
    assert sent["anthropic-version"] == (version or ANTHROPIC_VERSION)
    if version == BEARER_SINCE:
        assert sent["authorization"] == f"Bearer {KEY}" and "x-api-key" not in sent
    else:
        assert sent["x-api-key"] == KEY and "authorization" not in sent
    con = duckdb.connect(str(store), read_only=True)
    try:
        stored = {str(p) for (p,) in con.execute("SELECT DISTINCT params FROM trials").fetchall()}
        answered = con.execute("SELECT count(*) FROM responses").fetchall()
    finally:
        con.close()
    assert answered == [(2,)]
    (only,) = stored
    assert ("anthropic_version" in orjson.loads(only)) == (version == BEARER_SINCE)


@pytest.mark.parametrize("version", [ANTHROPIC_VERSION, BEARER_SINCE])
async def test_message_batches_send_the_same_headers(
    server: str, tmp_path: Path, version: str
) -> None:
    (model,) = load_config(
        write_config(tmp_path, [_block(server, anthropic_version=version, batch=True)])
    ).models
    provider = AnthropicProvider.from_config(model, KEY, ProviderContext())
    batches = AnthropicBatches(provider, server, KEY)
    await batches.client.start()
    try:
        line = batches.line(
            "k1", [{"role": "user", "content": "hi"}], Sampling(temperature=0.0, max_tokens=16)
        )
        info = await batches.submit("intent-1", [line], lambda _: None)
    finally:
        await batches.client.close()
    assert info.batch_id == "msgbatch_1"
    (sent,) = ({k.lower(): v for k, v in h.items()} for h in SEEN)
    online = {k.lower(): v for k, v in provider.session_headers(KEY).items()}
    assert {k: sent[k] for k in online} == online
    assert sent["anthropic-version"] == version

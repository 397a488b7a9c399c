"""The official SDKs (anthropic, google-genai, openai: test-only dependencies, never imported by
the product) as oracles: for the same call, the body ibias builds equals the body the SDK sends,
both captured at a loopback proxy in front of the simulator (keys compared after normalising
case); and the SDKs' own response types parse the simulator's replies, 429s and errors
included (the SDK raises its typed error with the status and the body it read).

Chats are real ones: the first trial of each experiment (word association, allocation) in
each language (en, es), with and without a system message; each provider with and without
its option (thinking for Gemini, logprobs and a reasoning model for OpenAI, a Claude model
that takes no temperature)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from ibias.runner.config import ModelConfig, load_config
from ibias.runner.plan import build_experiments, trials_for
from ibias.runner.providers.anthropic import AnthropicProvider
from ibias.runner.providers.base import ProviderContext, Sampling
from ibias.runner.providers.gemini import GeminiOptions, GeminiProvider
from ibias.runner.providers.openai import OpenAIProvider
from ibias.runner.sim_profile import ModelProfile, SimProfile
from ibias.runner.simulator import Simulator
from tests.helpers import model_block, write_config

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
genai = pytest.importorskip("google.genai")
genai_types = pytest.importorskip("google.genai.types")

KEY = "sk-oracle-0123456789"
EXPERIMENTS = """
[experiments.word_association]
languages = ["en", "es"]
categories = "all"
trials_per_category = 1

[experiments.allocation]
languages = ["en", "es"]
services = "all"
roster_size = 40
pairs_per_service = 1
explanation = [true]
symptoms = ["high"]
"""


def _chats(folder: Path) -> list[list[dict[str, str]]]:
    """The first trial's messages of each experiment and language, and each again with a
    system message before it."""
    config = load_config(
        write_config(
            folder, [model_block("s", provider="simulator")], n_prompts=1, extra=EXPERIMENTS
        )
    )
    first: dict[tuple[str, str], list[dict[str, str]]] = {}
    for trial in trials_for(build_experiments(config), config.models):
        if trial.experiment in ("word_association", "allocation"):
            first.setdefault((trial.experiment, trial.language), [dict(m) for m in trial.messages])
    assert len(first) == 4
    chats = list(first.values())
    system = {"role": "system", "content": "You are a careful assistant. Answer briefly."}
    return chats + [[system, *c] for c in chats]


@pytest.fixture(scope="module")
def chats(tmp_path_factory: pytest.TempPathFactory) -> list[list[dict[str, str]]]:
    return _chats(tmp_path_factory.mktemp("chats"))


@pytest.fixture()
async def proxy() -> AsyncIterator[tuple[str, list[dict[str, Any]], Simulator]]:
    """A loopback proxy that records each request body, then forwards it to the simulator
    and hands back its answer as it came (status, headers, body)."""
    profile = SimProfile(
        seed=3,
        models={
            "limited": ModelProfile(faults={"429": 1.0}),
            "denied": ModelProfile(fatal_status=400),
        },
    )
    sim = Simulator(profile, require_key=KEY)
    upstream = (await sim.start()).removesuffix("/v1")
    seen: list[dict[str, Any]] = []
    session = aiohttp.ClientSession()

    async def forward(request: web.Request) -> web.Response:
        raw = await request.read()
        seen.append({"path": request.path, "body": orjson.loads(raw)})
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in ("host", "content-length", "accept-encoding")
        }
        async with session.post(upstream + request.path_qs, data=raw, headers=headers) as resp:
            body = await resp.read()
            kept = {
                k: v
                for k, v in resp.headers.items()
                if k.lower() not in ("content-length", "content-encoding", "transfer-encoding")
            }
            return web.Response(status=resp.status, body=body, headers=kept)

    app = web.Application()
    app.router.add_post("/{tail:.*}", forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}", seen, sim
    finally:
        await runner.cleanup()
        await session.close()
        await sim.stop()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _normalised(value: Any) -> Any:
    """Keys in camelCase (google-genai may send either form); values as sent."""
    if isinstance(value, dict):
        return {_camel(k): _normalised(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalised(v) for v in value]
    return value


def _model(provider: str, base_url: str, model: str, **extra: Any) -> ModelConfig:
    return ModelConfig(
        id="m", provider=provider, base_url=base_url, model=model, api_key_env=None, rpm=None,
        tpm=None, max_concurrency=1, timeout_s=10.0, temperature=0.0, max_tokens=256,
        sampling_seed=None, price_input=0.0, price_output=0.0, **extra,
    )  # fmt: skip


async def _ibias(provider: Any, chat: list[dict[str, str]], sampling: Sampling) -> None:
    await provider.start()
    try:
        await provider.complete(chat, sampling)
    finally:
        await provider.close()


@pytest.mark.parametrize(
    ("model", "sampling", "extra"),
    [
        ("gpt-4o", Sampling(0.0, 256, seed=7), {}),
        ("gpt-4o", Sampling(0.7, 256, top_logprobs=5), {}),
        ("o3-mini", Sampling(1.0, 256), {}),  # a reasoning model: max_completion_tokens
    ],
)
async def test_openai_bodies_equal_the_sdks(proxy, chats, model, sampling, extra) -> None:
    url, seen, _ = proxy
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    for chat in chats:
        provider = OpenAIProvider.from_config(
            _model("openai", url + "/v1", model), KEY, ProviderContext()
        )
        await _ibias(provider, chat, sampling)
        ours = seen[-1]["body"]
        kwargs: dict[str, Any] = {"model": model, "messages": chat}
        if model.startswith("o"):
            kwargs["max_completion_tokens"] = sampling.max_tokens
        else:
            kwargs.update(temperature=sampling.temperature, max_tokens=sampling.max_tokens)
        if sampling.seed is not None:
            kwargs["seed"] = sampling.seed
        if sampling.top_logprobs is not None:
            kwargs.update(logprobs=True, top_logprobs=sampling.top_logprobs)
        completion = await client.chat.completions.create(**kwargs)
        assert seen[-1]["path"] == "/v1/chat/completions"
        assert _normalised(seen[-1]["body"]) == _normalised(ours)
        assert completion.choices[0].message.content  # the SDK's type read the reply
    await client.close()


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "claude-opus-4-7"])
async def test_anthropic_bodies_equal_the_sdks(proxy, chats, model) -> None:
    url, seen, _ = proxy
    client = anthropic.AsyncAnthropic(base_url=url, api_key=KEY, max_retries=0)
    sampling = Sampling(0.0, 256)
    for chat in chats:
        provider = AnthropicProvider.from_config(
            _model("anthropic", url + "/v1", model), KEY, ProviderContext()
        )
        await _ibias(provider, chat, sampling)
        ours = seen[-1]["body"]
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": [m for m in chat if m["role"] != "system"],
            "max_tokens": sampling.max_tokens,
        }
        system = [m["content"] for m in chat if m["role"] == "system"]
        if system:
            kwargs["system"] = "\n\n".join(system)
        if model == "claude-sonnet-4-5":  # the newest models refuse temperature
            # (this SDK version no longer has the parameter at all: sent as an extra field)
            kwargs["extra_body"] = {"temperature": sampling.temperature}
        message = await client.messages.create(**kwargs)
        assert seen[-1]["path"] == "/v1/messages"
        assert seen[-1]["body"] == ours
        assert message.content[0].text  # the SDK's type read the reply
    await client.close()


@pytest.mark.parametrize("thinking", [None, -1])
async def test_gemini_bodies_equal_the_sdks(proxy, chats, thinking) -> None:
    url, seen, _ = proxy
    client = genai.Client(
        api_key=KEY,
        http_options=genai_types.HttpOptions(base_url=url, api_version="v1beta"),
    )
    sampling = Sampling(0.0, 256)
    options = {} if thinking is None else {"thinking_budget": thinking}
    for chat in chats:
        provider = GeminiProvider.from_config(
            _model("gemini", url + "/v1beta", "gemini-2.5-flash", options=options),
            KEY,
            ProviderContext(),
        )
        await _ibias(provider, chat, sampling)
        ours = seen[-1]["body"]
        system = [m["content"] for m in chat if m["role"] == "system"]
        config = genai_types.GenerateContentConfig(
            temperature=sampling.temperature,
            max_output_tokens=sampling.max_tokens,
            system_instruction=genai_types.Content(
                parts=[genai_types.Part(text="\n\n".join(system))]
            )
            if system
            else None,
            thinking_config=genai_types.ThinkingConfig(
                thinking_budget=thinking, include_thoughts=True
            )
            if thinking is not None
            else None,
        )
        contents = [
            genai_types.Content(
                role="model" if m["role"] == "assistant" else "user",
                parts=[genai_types.Part(text=m["content"])],
            )
            for m in chat
            if m["role"] != "system"
        ]
        answer = await client.aio.models.generate_content(
            model="gemini-2.5-flash", contents=contents, config=config
        )
        assert seen[-1]["path"] == "/v1beta/models/gemini-2.5-flash:generateContent"
        assert _normalised(seen[-1]["body"]) == _normalised(ours)
        assert answer.text  # the SDK's type read the reply
    assert GeminiOptions.from_mapping(options) is not None


async def test_the_sdks_read_the_simulators_429s_and_errors(proxy) -> None:
    url, _, _ = proxy
    chat = [{"role": "user", "content": "hi"}]
    oa = openai.AsyncOpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.RateLimitError) as limited:
        await oa.chat.completions.create(model="limited", messages=chat, max_tokens=8)
    assert limited.value.status_code == 429 and isinstance(limited.value.body, dict)
    with pytest.raises(openai.BadRequestError) as bad:
        await oa.chat.completions.create(model="denied", messages=chat, max_tokens=8)
    assert bad.value.status_code == 400 and isinstance(bad.value.body, dict)
    await oa.close()
    an = anthropic.AsyncAnthropic(base_url=url, api_key=KEY, max_retries=0)
    with pytest.raises(anthropic.RateLimitError) as limited_a:
        await an.messages.create(model="limited", messages=chat, max_tokens=8)
    assert limited_a.value.status_code == 429
    with pytest.raises(anthropic.BadRequestError) as bad_a:
        await an.messages.create(model="denied", messages=chat, max_tokens=8)
    assert bad_a.value.body["error"]["type"] == "invalid_request_error"
    await an.close()
    from google.genai import errors

    ge = genai.Client(
        api_key=KEY, http_options=genai_types.HttpOptions(base_url=url, api_version="v1beta")
    )
    with pytest.raises(errors.ClientError) as limited_g:
        await ge.aio.models.generate_content(model="limited", contents="hi")
    assert limited_g.value.code == 429 and limited_g.value.status == "RESOURCE_EXHAUSTED"
    with pytest.raises(errors.ClientError) as bad_g:
        await ge.aio.models.generate_content(model="denied", contents="hi")
    assert bad_g.value.code == 400
    assert re.search(r"\S", str(bad_g.value.message))

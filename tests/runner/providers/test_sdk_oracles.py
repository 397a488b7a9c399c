"""The official SDKs (anthropic, google-genai, openai: test-only dependencies, never imported by
the product) as oracles: for the same call, the body ibias builds equals the body the SDK sends,
both captured at a loopback proxy in front of the simulator (keys compared after normalising
case); and the SDKs' own response types parse the simulator's replies, 429s and errors
included (the SDK raises its typed error with the status and the body it read).

Typed checks are pydantic's strict mode with extra keys forbidden (tests/runner/providers/
sdk_strict.py): every body ibias sends (and the SDK's own) validates against a closed model
derived from the SDK's request types, and every simulator reply, refusals, logprobs, thinking,
429s and errors included, against the SDK's response model with no undeclared key. A body with
an unknown key, a float where the API wants an integer, or a value outside a Literal fails.

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

from ibias.prompts.base import Persona
from ibias.runner.config import ModelConfig, load_config
from ibias.runner.execution.plan import build_experiments, trials_for
from ibias.runner.providers.anthropic import AnthropicProvider, anthropic_request
from ibias.runner.providers.base import ProviderContext, Sampling
from ibias.runner.providers.gemini import GeminiOptions, GeminiProvider, gemini_request
from ibias.runner.providers.openai import OpenAIProvider
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")
genai = pytest.importorskip("google.genai")
genai_types = pytest.importorskip("google.genai.types")
pytest.importorskip("pydantic")

from anthropic.types.message_create_params import (  # noqa: E402
    MessageCreateParamsNonStreaming as AnthropicParams,
)
from openai.types.chat.completion_create_params import (  # noqa: E402
    CompletionCreateParamsNonStreaming as OpenAIParams,
)

from tests.runner.providers.sdk_strict import (  # noqa: E402
    check_reply,
    check_request,
    closed,
    strict_model,
)

#: Strict, closed request models from the SDKs' request types.
OPENAI_REQUEST = strict_model(OpenAIParams)
#: anthropic 2.15 dropped `temperature` from its request type (the newest Claude models refuse
#: it); the API still takes it, 0 to 1, from the models before them, so it is declared here.
ANTHROPIC_REQUEST = strict_model(AnthropicParams, {"temperature": float})
#: Gemini's REST body, assembled from google-genai's own (closed) models.
GEMINI_REQUEST = closed(
    "GeminiGenerateContentRequest",
    contents=(list[genai_types.Content], ...),
    systemInstruction=(genai_types.Content | None, None),
    generationConfig=(genai_types.GenerationConfig | None, None),
    safetySettings=(list[genai_types.SafetySetting] | None, None),
)
#: The SDKs' response models (and error envelopes) every simulator reply must satisfy.
OPENAI_REPLY = openai.types.chat.ChatCompletion
OPENAI_ERROR = closed("OpenAIErrorBody", error=(openai.types.ErrorObject, ...))
ANTHROPIC_REPLY = anthropic.types.Message
ANTHROPIC_ERROR = anthropic.types.ErrorResponse
GEMINI_REPLY = genai_types.GenerateContentResponse

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
            "unauthorized": ModelProfile(fatal_status=401),
            "forbidden": ModelProfile(fatal_status=403),
            "missing": ModelProfile(fatal_status=404),
            "broke": ModelProfile(faults={"500": 1.0}),
            "busy": ModelProfile(faults={"503": 1.0}),
            "refuser": ModelProfile(persona=Persona(refusal_rate=1.0)),
        },
    )
    sim = Simulator(profile, require_key=KEY)
    upstream = (await sim.start()).removesuffix("/v1")
    seen: list[dict[str, Any]] = []
    session = aiohttp.ClientSession()

    async def forward(request: web.Request) -> web.Response:
        raw = await request.read()
        seen.append({"path": request.path, "body": orjson.loads(raw), "raw": raw})
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in ("host", "content-length", "accept-encoding")
        }
        async with session.post(upstream + request.path_qs, data=raw, headers=headers) as resp:
            body = await resp.read()
            seen[-1].update(status=resp.status, reply=body)
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


def _typed(exchanges: list[dict[str, Any]], request: Any, reply: Any) -> None:
    """Both bodies of a call (ibias's and the SDK's) pass the strict request model, and both
    answers the SDK's response model, in strict mode with no undeclared key."""
    for exchange in exchanges:
        check_request(request, exchange["raw"])
        assert exchange["status"] == 200, exchange["reply"][:200]
        check_reply(reply, exchange["reply"])


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
        ("o3-mini", Sampling(1.0, 256), {"reasoning_effort": "minimal"}),
        ("gpt-5.1", Sampling(1.0, 256), {"reasoning_effort": "none"}),
    ],
)
async def test_openai_bodies_equal_the_sdks(proxy, chats, model, sampling, extra) -> None:
    url, seen, _ = proxy
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    for chat in chats:
        provider = OpenAIProvider.from_config(
            _model("openai", url + "/v1", model, options=extra), KEY, ProviderContext()
        )
        await _ibias(provider, chat, sampling)
        ours = seen[-1]["body"]
        kwargs: dict[str, Any] = {"model": model, "messages": chat, **extra}
        if model.startswith(("o", "gpt-5")):
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
        _typed(seen[-2:], OPENAI_REQUEST, OPENAI_REPLY)
    await client.close()


@pytest.mark.parametrize(
    ("model", "temperature", "options"),
    [
        ("claude-sonnet-4-5", 0.0, {}),
        ("claude-opus-4-7", 0.0, {}),  # takes no temperature
        ("claude-sonnet-4-5", 1.0, {"thinking_budget": 1024, "effort": "low"}),
        ("claude-opus-4-7", 0.0, {"thinking": "adaptive", "effort": "xhigh"}),
    ],
)
async def test_anthropic_bodies_equal_the_sdks(proxy, chats, model, temperature, options) -> None:
    url, seen, _ = proxy
    client = anthropic.AsyncAnthropic(base_url=url, api_key=KEY, max_retries=0)
    sampling = Sampling(temperature, 2048)
    for chat in chats:
        provider = AnthropicProvider.from_config(
            _model("anthropic", url + "/v1", model, options=options), KEY, ProviderContext()
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
        if "thinking_budget" in options:
            kwargs["thinking"] = {"type": "enabled", "budget_tokens": options["thinking_budget"]}
        if "thinking" in options:
            kwargs["thinking"] = {"type": options["thinking"]}
        if "effort" in options:
            kwargs["output_config"] = {"effort": options["effort"]}
        message = await client.messages.create(**kwargs)
        assert seen[-1]["path"] == "/v1/messages"
        assert seen[-1]["body"] == ours
        # the SDK's type read the reply (a thinking block first when thinking is on)
        assert next(b for b in message.content if b.type == "text").text
        _typed(seen[-2:], ANTHROPIC_REQUEST, ANTHROPIC_REPLY)
    await client.close()


@pytest.mark.parametrize("thinking", [None, -1, 0])
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
                thinking_budget=thinking, include_thoughts=True if thinking != 0 else None
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
        _typed(seen[-2:], GEMINI_REQUEST, GEMINI_REPLY)
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


# --------------------------------------------------------------------------- every reply, typed

KINDS = ("gpt-4o", "refuser", "limited", "denied", "unauthorized", "forbidden", "missing", "broke",
         "busy")  # fmt: skip


def _request(protocol: str, model: str) -> tuple[str, dict[str, str], dict[str, Any]]:
    """(path, headers, body) of one ibias request to `model` in `protocol`."""
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    sampling = Sampling(0.0, 64)
    if protocol == "openai":
        body = {"model": model, "messages": chat, "temperature": 0.0, "max_tokens": 64}
        if model == "gpt-4o":
            body.update(logprobs=True, top_logprobs=3)
        return "/v1/chat/completions", {"Authorization": f"Bearer {KEY}"}, body
    if protocol == "anthropic":
        headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
        return "/v1/messages", headers, anthropic_request(model, chat, sampling)
    options = GeminiOptions(thinking_budget=-1) if model == "gpt-4o" else None
    return (
        f"/v1beta/models/{model}:generateContent",
        {"x-goog-api-key": KEY},
        gemini_request(chat, sampling, options),
    )


@pytest.mark.parametrize("protocol", ["openai", "anthropic", "gemini"])
async def test_every_simulator_reply_satisfies_the_sdks_types(proxy, protocol) -> None:
    """Answers (with logprobs, with thinking), refusals, 429s, 400/401/403/404 and 500/503:
    each body ibias sends passes the strict request model, and each reply the SDK's response
    or error model, strict and closed (Gemini's error bodies, for which google-genai has no
    model, are read by its `APIError` as the client reads them)."""
    url, seen, _ = proxy
    request_model = {
        "openai": OPENAI_REQUEST,
        "anthropic": ANTHROPIC_REQUEST,
        "gemini": GEMINI_REQUEST,
    }[protocol]
    statuses = []
    async with aiohttp.ClientSession() as session:
        for kind in KINDS:
            path, headers, body = _request(protocol, kind)
            async with session.post(url + path, json=body, headers=headers) as resp:
                await resp.read()
            exchange = seen[-1]
            check_request(request_model, exchange["raw"])
            status, reply = exchange["status"], exchange["reply"]
            statuses.append(status)
            if status == 200:
                model = {"openai": OPENAI_REPLY, "anthropic": ANTHROPIC_REPLY}.get(
                    protocol, GEMINI_REPLY
                )
                check_reply(model, reply)
            elif protocol == "openai":
                check_reply(OPENAI_ERROR, reply)
            elif protocol == "anthropic":
                check_reply(ANTHROPIC_ERROR, reply)
            else:
                from google.genai import errors

                error = errors.APIError(status, orjson.loads(reply))
                assert error.code == status and error.status and error.message
    # each protocol's own statuses: Anthropic's overload is 529, Gemini's bad key a 400
    want = {
        "openai": [200, 200, 429, 400, 401, 403, 404, 500, 503],
        "anthropic": [200, 200, 429, 400, 401, 403, 404, 500, 529],
        "gemini": [200, 200, 429, 400, 400, 403, 404, 500, 503],
    }[protocol]
    assert statuses == want


def test_the_strict_models_refuse_what_the_sdks_types_let_through() -> None:
    """The checks are not vacuous: a key the API does not have, a float where it wants an
    integer, a string for a number, a value outside a Literal, an undeclared reply key."""
    from pydantic import ValidationError

    good = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    check_request(OPENAI_REQUEST, orjson.dumps(good))
    bad_openai = [
        {**good, "max_token": 8},
        {**good, "max_tokens": 8.0},
        {**good, "temperature": "0"},
        {**good, "reasoning_effort": "extreme"},
        {**good, "messages": [{"role": "user", "content": "hi", "name": 1}]},
    ]
    claude = {"model": "claude-opus-4-7", "messages": [{"role": "user", "content": "hi"}],
              "max_tokens": 8}  # fmt: skip
    check_request(ANTHROPIC_REQUEST, orjson.dumps(claude))
    bad_anthropic = [
        {**claude, "thinking": {"type": "enabled"}},  # budget_tokens is required
        {**claude, "thinking": {"type": "sometimes"}},
        {**claude, "output_config": {"effort": "minimal"}},
        {**claude, "seed": 7},
    ]
    gem = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    check_request(GEMINI_REQUEST, orjson.dumps(gem))
    bad_gemini = [
        {**gem, "generationConfig": {"maxTokens": 8}},
        {**gem, "generationConfig": {"thinkingConfig": {"thinkingBudget": "8"}}},
        {**gem, "system": "Be brief."},
    ]
    for model, bodies in (
        (OPENAI_REQUEST, bad_openai),
        (ANTHROPIC_REQUEST, bad_anthropic),
        (GEMINI_REQUEST, bad_gemini),
    ):
        for body in bodies:
            with pytest.raises(ValidationError):
                check_request(model, orjson.dumps(body))
    reply = {
        "id": "c", "object": "chat.completion", "created": 1, "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                     "message": {"role": "assistant", "content": "hi", "refusal": None}}],
    }  # fmt: skip
    check_reply(OPENAI_REPLY, orjson.dumps(reply))
    reply["choices"][0]["message"]["mood"] = "cheerful"  # type: ignore[index]
    with pytest.raises(AssertionError, match="mood"):
        check_reply(OPENAI_REPLY, orjson.dumps(reply))
    with pytest.raises(ValidationError):
        check_reply(OPENAI_REPLY, orjson.dumps({**reply, "created": "1"}))

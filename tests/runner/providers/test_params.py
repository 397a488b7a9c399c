"""Per-host parameter tables and reasoning: against local servers that refuse what the real
hosts refuse and report reasoning the way the real hosts do."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from ibias.runner.config import ConfigFileError, load_config
from ibias.runner.providers.base import Sampling
from ibias.runner.providers.openai import OpenAIProvider, parse_chat_completion
from ibias.runner.providers.params import host_of, rule_for, wire_params
from tests.helpers import model_block, write_config

NEUTRAL = {"temperature": 1.0, "max_tokens": 64, "seed": 3}


@pytest.mark.parametrize(
    ("base_url", "model", "label"),
    [
        ("https://api.openai.com/v1", "o3-mini", "OpenAI reasoning model"),
        ("https://api.openai.com/v1", "o1", "OpenAI reasoning model"),
        ("https://api.openai.com/v1", "o4-mini-2025-04-16", "OpenAI reasoning model"),
        ("https://api.openai.com/v1", "gpt-5", "OpenAI reasoning model"),
        ("https://api.openai.com/v1", "gpt-5-mini-2025-08-07", "OpenAI reasoning model"),
        ("https://api.openai.com/v1", "gpt-5.1", "OpenAI reasoning model"),
        ("https://api.openai.com/v1", "gpt-5-chat-latest", ""),
        ("https://api.openai.com/v1", "gpt-4o-2024-08-06", ""),
        ("https://api.x.ai/v1", "grok-3-mini", "xAI reasoning model"),
        ("https://api.x.ai/v1", "grok-4-0709", "xAI reasoning model"),
        ("https://api.x.ai/v1", "grok-3", "xAI model"),
        ("https://api.deepseek.com", "deepseek-reasoner", "DeepSeek reasoner"),
        # by model, whatever the host: a gateway, a proxy, OpenRouter's prefixed names
        ("https://openrouter.ai/api/v1", "openai/o3-mini", "OpenAI reasoning model"),
        ("https://gateway.example.org/v1", "o3", "OpenAI reasoning model"),
        ("http://localhost:8000/v1", "o3-mini", "OpenAI reasoning model"),
        ("https://openrouter.ai/api/v1", "x-ai/grok-4", "xAI reasoning model"),
        (None, "gpt-4o", ""),
        ("https://my.openai.azure.com/openai/v1", "my-deployment", ""),  # needs an override
    ],
)
def test_rules_by_model_whatever_the_host(base_url, model, label):
    assert rule_for(base_url, model).label == label


NO_SAMPLING = "Claude model without sampling parameters"


@pytest.mark.parametrize(
    ("model", "label"),
    [
        ("claude-opus-4-7", NO_SAMPLING),
        ("claude-opus-4-8-20260101", NO_SAMPLING),
        ("claude-sonnet-5", NO_SAMPLING),
        ("us.anthropic.claude-opus-4-7", NO_SAMPLING),
        ("anthropic/claude-opus-4-7", NO_SAMPLING),
        ("claude-opus-4-6", ""),
        ("claude-sonnet-4-5-20250929", ""),
        ("claude-3-5-haiku-latest", ""),
    ],
)
def test_anthropic_rules_by_model(model, label):
    assert rule_for(None, model, provider="anthropic").label == label


def test_overrides_for_names_the_table_cannot_know():
    azure = rule_for("https://x.openai.azure.com/v1", "prod-o3", reasoning=True)
    assert wire_params(azure, NEUTRAL) == {"max_completion_tokens": 64, "seed": 3}
    local = rule_for("http://localhost:8000/v1", "o3-mini", reasoning=False)
    assert wire_params(local, NEUTRAL) == NEUTRAL
    quiet = rule_for(None, "llama3", send_temperature=False)
    assert wire_params(quiet, NEUTRAL) == {"max_tokens": 64, "seed": 3}
    claude = rule_for(None, "claude-opus-4-7", provider="anthropic", send_temperature=True)
    assert "temperature" not in claude.rejects


def test_only_models_that_newly_stop_getting_a_parameter_record_it(tmp_path):
    blocks = [
        model_block("o3", provider="openai", base_url="https://api.openai.com/v1", temperature=1),
        model_block(
            "o3-gw",
            provider="openai",
            base_url="https://gw.example.org/v1",
            model="openai/o3",
            temperature=1,
        ),
        model_block("opus", provider="anthropic", model="claude-opus-4-7"),
        model_block("sonnet", provider="anthropic", model="claude-sonnet-4-5"),
        model_block("gpt", provider="openai", model="gpt-4o"),
    ]
    cfg = load_config(write_config(tmp_path, blocks))
    assert [m.params() for m in cfg.models] == [
        {"temperature": 1.0, "max_tokens": 512},  # as before: the key is unchanged
        {"temperature": 1.0, "max_tokens": 512, "not_sent": ["temperature"]},
        {"temperature": 0.0, "max_tokens": 512, "not_sent": ["temperature"]},
        {"temperature": 0.0, "max_tokens": 512},
        {"temperature": 0.0, "max_tokens": 512},
    ]
    assert [m.base_url for m in cfg.models][2:] == [None, None, None]  # native defaults


@pytest.mark.parametrize(
    ("block", "line"),
    [
        (
            model_block("c", provider="anthropic", model="claude-sonnet-4-5", temperature=1.5),
            "models[0].temperature: Anthropic's Messages API takes temperature 0 to 1, got 1.5",
        ),
        (
            model_block("c", provider="anthropic", reasoning=True),
            "models[0].reasoning: unknown key (it is for provider = 'openai' models)",
        ),
        (
            model_block(
                "g", provider="openai", base_url="https://gw.example.org/v1", model="openai/o3"
            ),
            "models[0].temperature: OpenAI reasoning models accept only temperature = 1",
        ),
        (
            model_block("c", provider="anthropic", base_url="api.anthropic.com"),
            "models[0].base_url: expected an http(s) URL such as 'https://api.anthropic.com/v1'",
        ),
        (
            model_block("g", provider="gemini", base_url="nope"),
            "such as 'https://generativelanguage.googleapis.com/v1beta', got 'nope'",
        ),
    ],
)
def test_config_checks_each_providers_ranges_and_urls(tmp_path, block, line):
    with pytest.raises(ConfigFileError) as err:
        load_config(write_config(tmp_path, [block]))
    assert line in str(err.value)
    assert "\n" not in str(err.value)


def test_wire_params_per_rule():
    default = rule_for("http://localhost:11434/v1", "llama3")
    assert list(wire_params(default, NEUTRAL).items()) == list(NEUTRAL.items())
    o3 = rule_for("https://api.openai.com/v1", "o3")
    assert wire_params(o3, NEUTRAL) == {"max_completion_tokens": 64, "seed": 3}
    grok = rule_for("https://api.x.ai/v1", "grok-4")
    assert wire_params(grok, {**NEUTRAL, "presence_penalty": 0.5, "stop": ["x"]}) == NEUTRAL
    reasoner = rule_for("https://api.deepseek.com/v1", "deepseek-reasoner")
    assert wire_params(reasoner, NEUTRAL) == {"max_tokens": 64, "seed": 3}
    assert host_of("https://eu.api.openai.com/v1") == "openai"
    assert host_of(None) == ""


def test_config_refuses_a_temperature_the_model_cannot_use(tmp_path):
    block = model_block("o3", provider="openai", base_url="https://api.openai.com/v1")
    with pytest.raises(ConfigFileError) as err:
        load_config(write_config(tmp_path, [block]))
    assert "models[0].temperature: OpenAI reasoning models accept only temperature = 1" in str(
        err.value
    )
    ok = model_block("o3", provider="openai", base_url="https://api.openai.com/v1", temperature=1)
    assert load_config(write_config(tmp_path, [ok])).models[0].temperature == 1.0


# --- a local server that answers like the real hosts -----------------------------------------

#: What each fake host refuses, worded as the host words it.
REFUSED: dict[str, dict[str, str]] = {
    "o3-mini": {
        "max_tokens": "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead.",
        "temperature": "Unsupported parameter: 'temperature' is not supported with this model.",
    },
    "grok-3-mini": {
        "presence_penalty": "Argument not supported on this model: presencePenalty",
        "frequency_penalty": "Argument not supported on this model: frequencyPenalty",
        "stop": "Argument not supported on this model: stop",
    },
}
KNOWN = {"model", "messages", "temperature", "max_tokens", "max_completion_tokens", "seed"}


def _usage(model: str) -> dict[str, Any]:
    if model == "grok-3-mini":  # xAI: reasoning tokens outside completion_tokens
        return {
            "prompt_tokens": 10,
            "completion_tokens": 4,
            "total_tokens": 114,
            "completion_tokens_details": {"reasoning_tokens": 100},
        }
    return {  # OpenAI: reasoning tokens inside completion_tokens
        "prompt_tokens": 10,
        "completion_tokens": 104,
        "total_tokens": 114,
        "completion_tokens_details": {"reasoning_tokens": 100},
    }


@pytest.fixture()
async def host():
    seen: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        model = body["model"]
        for name in body:
            message = REFUSED.get(model, {}).get(name)
            if message is None and name not in KNOWN:
                message = f"Unrecognized request argument supplied: {name}"
            if message is not None:
                error = {"message": message, "type": "invalid_request_error", "param": name}
                return web.json_response({"error": error}, status=400)
        message: dict[str, Any] = {"role": "assistant", "content": "yes"}
        if model == "grok-3-mini":
            message["reasoning_content"] = "First, consider the question."
        return web.json_response(
            {
                "id": "x",
                "object": "chat.completion",
                "model": model + "-2025",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": _usage(model),
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host_, port = runner.addresses[0][:2]
    yield f"http://{host_}:{port}/v1", seen
    await runner.cleanup()


async def _ask(base: str, model: str, real_host: str):
    p = OpenAIProvider(
        base_url=base,
        model=model,
        api_key="k",
        timeout_s=5,
        max_connections=1,
        rule=rule_for(real_host, model),
    )
    await p.start()
    try:
        return await p.complete(
            [{"role": "user", "content": "hi"}], Sampling(temperature=1.0, max_tokens=128)
        )
    finally:
        await p.close()


async def test_an_openai_reasoning_model_gets_only_what_it_accepts(host):
    base, seen = host
    reply = await _ask(base, "o3-mini", "https://api.openai.com/v1")
    assert seen[-1] == {
        "model": "o3-mini",
        "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 128,
    }
    assert reply.content == "yes"
    # reasoning tokens are inside completion_tokens: not added twice
    assert (reply.completion_tokens, reply.reasoning_tokens) == (104, 100)


async def test_an_openai_reasoning_model_behind_another_base_url(host):
    """A gateway's URL and OpenRouter's prefixed name: still max_completion_tokens and no
    temperature (the table goes by model, not host), built the way a config builds it."""
    from ibias.runner.config import ModelConfig
    from ibias.runner.providers.base import ProviderContext

    base, seen = host
    REFUSED["openai/o3-mini"] = REFUSED["o3-mini"]
    model = ModelConfig(
        id="o3",
        provider="openai",
        base_url=base,
        model="openai/o3-mini",
        api_key_env=None,
        rpm=None,
        tpm=None,
        max_concurrency=1,
        timeout_s=5,
        temperature=1.0,
        max_tokens=128,
        sampling_seed=None,
        price_input=0,
        price_output=0,
    )
    p = OpenAIProvider.from_config(model, "k", ProviderContext())
    await p.start()
    try:
        reply = await p.complete(
            [{"role": "user", "content": "hi"}], Sampling(temperature=1.0, max_tokens=128)
        )
    finally:
        await p.close()
        del REFUSED["openai/o3-mini"]
    assert set(seen[-1]) == {"model", "messages", "max_completion_tokens"}
    assert reply.content == "yes"


async def test_a_claude_model_that_refuses_temperature_is_never_sent_it():
    """Against the simulator, which answers 400 `temperature` is deprecated for such models
    as Anthropic does: the body has no temperature and the reply is an answer."""
    from ibias.runner.providers.anthropic import AnthropicProvider, anthropic_request
    from ibias.runner.simulator import Simulator
    from ibias.runner.simulator.profile import SimProfile

    sampling = Sampling(temperature=0.0, max_tokens=64)
    chat = [{"role": "user", "content": "hi"}]
    assert "temperature" not in anthropic_request("claude-opus-4-7", chat, sampling)
    assert anthropic_request("claude-sonnet-4-5", chat, sampling)["temperature"] == 0.0
    async with Simulator(SimProfile(seed=1)) as server:
        forced = dict(anthropic_request("claude-opus-4-7", chat, sampling), temperature=0.0)
        import aiohttp

        async with aiohttp.ClientSession() as session:
            answer = await session.post(
                server.base_url + "/messages", json=forced, headers={"anthropic-version": "x"}
            )
            assert answer.status == 400
            assert "deprecated for this model" in await answer.text()
        p = AnthropicProvider(
            base_url=server.base_url,
            model="claude-opus-4-7",
            api_key="k",
            timeout_s=5,
            max_connections=1,
        )
        await p.start()
        try:
            reply = await p.complete(chat, sampling)
        finally:
            await p.close()
    assert reply.content


async def test_xai_reasoning_is_kept_apart_and_its_tokens_are_billed(host):
    base, seen = host
    reply = await _ask(base, "grok-3-mini", "https://api.x.ai/v1")
    assert set(seen[-1]) == {"model", "messages", "temperature", "max_tokens"}
    assert reply.content == "yes"
    assert reply.reasoning == "First, consider the question."
    assert (reply.completion_tokens, reply.reasoning_tokens) == (104, 100)


def test_reasoning_tokens_without_a_total_follow_the_host_rule():
    body = (
        b'{"choices":[{"message":{"content":"a","reasoning":"r"},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":1,"completion_tokens":2,'
        b'"completion_tokens_details":{"reasoning_tokens":5}}}'
    )
    inside = parse_chat_completion(body, 200, {})
    outside = parse_chat_completion(body, 200, {}, reasoning_separate=True)
    assert (inside.completion_tokens, outside.completion_tokens) == (2, 7)
    assert inside.reasoning == "r"


def test_gemini_thoughts_and_anthropic_thinking_are_kept_apart():
    import orjson

    from ibias.runner.providers.anthropic import parse_message
    from ibias.runner.providers.gemini import parse_generate_content

    gemini = parse_generate_content(
        orjson.dumps(
            {
                "candidates": [
                    {
                        "content": {
                            "parts": [{"text": "plan", "thought": True}, {"text": "answer"}]
                        },
                        "finishReason": "STOP",
                    }
                ],
                "usageMetadata": {
                    "promptTokenCount": 5,
                    "candidatesTokenCount": 2,
                    "thoughtsTokenCount": 30,
                },
                "modelVersion": "gemini-2.5-flash",
            }
        ),
        200,
        {},
    )
    assert (gemini.content, gemini.reasoning) == ("answer", "plan")
    assert (gemini.completion_tokens, gemini.reasoning_tokens) == (32, 30)
    claude = parse_message(
        orjson.dumps(
            {
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "answer"},
                ],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 3, "output_tokens": 40},
                "model": "claude-x",
            }
        ),
        200,
        {},
    )
    assert (claude.content, claude.reasoning, claude.completion_tokens) == ("answer", "hmm", 40)


async def test_a_run_stores_reasoning_apart_and_bills_its_tokens(host, tmp_path):
    """Through the whole run (scheduler, writer, migration 006): xAI-style reasoning lands in
    `reasoning_content`, the reply in `content`, and the cost bills reasoning as output."""
    import duckdb

    from ibias.runner.execution.run import RunOptions, execute

    base, _seen = host
    block = model_block(
        "grok",
        provider="openai",
        base_url=base,
        model="grok-3-mini",
        temperature=1,
        price_input=2.0,
        price_output=10.0,
    )
    config = load_config(write_config(tmp_path, [block], n_prompts=3))

    def factory(model, key, context):
        return OpenAIProvider(
            base_url=base,
            model=model.model,
            api_key=key,
            timeout_s=5,
            max_connections=2,
            rule=rule_for("https://api.x.ai/v1", model.model),
        )

    store = tmp_path / "store.duckdb"
    result = await execute(
        config, RunOptions(store=store, quiet=True), environ={}, provider_factory=factory
    )
    assert result.exit_code == 0
    con = duckdb.connect(str(store), read_only=True)
    try:
        rows = con.execute(
            "SELECT content, reasoning_content, completion_tokens, reasoning_tokens, cost_usd "
            "FROM responses"
        ).fetchall()
    finally:
        con.close()
    assert len(rows) == 3
    for content, reasoning, completion, thought, cost in rows:
        assert (content, reasoning) == ("yes", "First, consider the question.")
        assert (completion, thought) == (104, 100)
        assert cost == pytest.approx((10 * 2.0 + 104 * 10.0) / 1e6)


def test_output_the_total_counts_beyond_the_completion_is_billed():
    """Gemini's OpenAI endpoint style: thoughts in total_tokens only, no reasoning detail."""
    body = (
        b'{"choices":[{"message":{"content":"a"},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":20,"completion_tokens":151,"total_tokens":553}}'
    )
    reply = parse_chat_completion(body, 200, {})
    assert (reply.completion_tokens, reply.reasoning_tokens) == (533, 382)
    plain = parse_chat_completion(body.replace(b"553", b"171"), 200, {})
    assert (plain.completion_tokens, plain.reasoning_tokens) == (151, None)


# --- family patterns: any case, dotted or dashed versions, later models (issue 33) -----------

REASONING = "OpenAI reasoning model"


@pytest.mark.parametrize(
    ("provider", "model", "label"),
    [
        # must match: each gets its family's rule
        ("openai", "O3-mini", REASONING),
        ("openai", "gpt-6", REASONING),
        ("openai", "GPT-5.2-pro", REASONING),
        ("openai", "gpt-5-1-codex", REASONING),
        ("openai", "o9", REASONING),
        ("openai", "codex-mini-latest", REASONING),
        ("openai", "openrouter/openai/o4-mini-high", REASONING),
        ("anthropic", "claude-opus-4.7", NO_SAMPLING),
        ("anthropic", "Claude-Opus-4-7", NO_SAMPLING),
        ("anthropic", "claude-4.7-opus", NO_SAMPLING),
        ("anthropic", "claude-opus-4-10", NO_SAMPLING),
        ("anthropic", "claude-haiku-5@20270101", NO_SAMPLING),
        ("openai", "anthropic/claude-opus-4.7", NO_SAMPLING),  # behind OpenRouter
        ("openai", "DeepSeek-Reasoner", "DeepSeek reasoner"),
        # must NOT match
        ("openai", "gpt-5-chat-latest", ""),
        ("openai", "gpt-5.1-chat-latest", ""),
        ("openai", "gpt-4o", ""),
        ("openai", "gpt-4.1-mini", ""),
        ("openai", "gpt-oss-120b", ""),
        ("openai", "chatgpt-4o-latest", ""),
        ("openai", "codex", ""),
        ("openai", "o", ""),
        ("anthropic", "claude-opus-4-20250514", ""),  # Opus 4: a date, not version 4.2025...
        ("anthropic", "claude-opus-4.6", ""),
        ("anthropic", "claude-sonnet-4.5", ""),
        ("anthropic", "claude-3-5-sonnet-20241022", ""),
        ("openai", "anthropic/claude-sonnet-4.5", ""),
    ],
)
def test_family_patterns_match_current_and_later_names(provider, model, label):
    assert rule_for(None, model, provider=provider).label == label


def test_the_model_config_wins_over_the_family_table(tmp_path):
    """A local model named like o3-mini with `reasoning = false` is sent what any chat model
    is (`max_tokens`, its temperature); `send_temperature = true` sends a Claude 4.7 its
    temperature; `reasoning = true` makes an unknown name a reasoning model."""
    local = rule_for("http://127.0.0.1:8000/v1", "O3-mini", reasoning=False)
    assert local.label == "" and wire_params(local, NEUTRAL) == NEUTRAL
    claude = rule_for(None, "claude-opus-4.7", provider="anthropic", send_temperature=True)
    assert "temperature" not in claude.rejects | claude.ignored
    assert rule_for(None, "prod-deploy", reasoning=True).label == REASONING
    block = model_block(
        "local",
        provider="openai",
        base_url="http://127.0.0.1:8000/v1",
        model="o3-mini",
        reasoning=False,
        temperature=0.3,
    )
    (model,) = load_config(write_config(tmp_path, [block])).models
    assert model.params() == {"temperature": 0.3, "max_tokens": 512}


def test_a_newly_matched_name_asking_for_a_temperature_is_refused_when_read(tmp_path):
    """`gpt-6` at temperature 0 was sent and refused by the real API; now the config says so."""
    block = model_block("g", provider="openai", model="gpt-6", temperature=0)
    with pytest.raises(ConfigFileError, match=r"accept only temperature = 1"):
        load_config(write_config(tmp_path, [block]))

"""Per-host parameter tables and reasoning: against local servers that refuse what the real
hosts refuse and report reasoning the way the real hosts do."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from ibias.runner.config import ConfigError, load_config
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
        ("https://openrouter.ai/api/v1", "openai/o3-mini", ""),  # OpenRouter adapts itself
        ("http://localhost:8000/v1", "o3-mini", ""),  # a local server named like a model
    ],
)
def test_rules_by_host_and_model(base_url, model, label):
    assert rule_for(base_url, model).label == label


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
    with pytest.raises(ConfigError) as err:
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

    from ibias.runner.run import RunOptions, execute

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

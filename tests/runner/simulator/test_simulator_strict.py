"""The simulator refuses what the real APIs refuse, and answers reasoning the way they do.

Called directly over loopback (aiohttp against its server, not through ibias's config loader,
which refuses some of these before they are sent): each request a real API refuses gets that
API's status and error body on the first attempt, whatever the runner's own rule table knows
(runner/simulator/rules.py is a table of its own, so a name the runner misses still fails
here); `top_logprobs` gets that many alternatives; thinking blocks, thought parts and
reasoning tokens appear when a request or a model asks for them.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ibias.runner.simulator import ANTHROPIC, GEMINI, Simulator, estimate_tokens
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from ibias.runner.simulator.rules import (
    claude_without_sampling,
    gemini_thinks_by_default,
    openai_reasoning_model,
)

USER = "Which of the two options would you pick, and why?"
SYSTEM = "You are helpful."


@asynccontextmanager
async def running() -> AsyncIterator[tuple[Simulator, aiohttp.ClientSession, str]]:
    sim = Simulator(SimProfile(seed=3, default=ModelProfile()))
    url = await sim.start()
    try:
        async with aiohttp.ClientSession() as session:
            yield sim, session, url.removesuffix("/v1")
    finally:
        await sim.stop()


def openai_body(model: str, **fields: Any) -> tuple[str, dict[str, Any], dict[str, str]]:
    body = {
        "model": model,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": USER},
        ],
        **fields,
    }
    return "/v1/chat/completions", body, {}


def anthropic_body(model: str, **fields: Any) -> tuple[str, dict[str, Any], dict[str, str]]:
    body = {
        "model": model,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": USER}],
        "max_tokens": fields.pop("max_tokens", 2048),
        **fields,
    }
    return "/v1/messages", body, {"anthropic-version": "2023-06-01"}


def gemini_body(
    model: str, config: dict[str, Any] | None = None, **fields: Any
) -> tuple[str, dict[str, Any], dict[str, str]]:
    body: dict[str, Any] = {
        "contents": [{"role": "user", "parts": [{"text": USER}]}],
        "systemInstruction": {"parts": [{"text": SYSTEM}]},
        **fields,
    }
    if config is not None:
        body["generationConfig"] = config
    return f"/v1beta/models/{model}:generateContent", body, {}


async def post(
    session: aiohttp.ClientSession, root: str, request: tuple[str, dict[str, Any], dict[str, str]]
) -> tuple[int, Any]:
    path, body, headers = request
    async with session.post(root + path, data=orjson.dumps(body), headers=headers) as resp:
        return resp.status, orjson.loads(await resp.read())


def openai_error(body: Any) -> dict[str, Any]:
    """OpenAI's error body: exactly {"error": {message, type, param, code}}."""
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    return dict(error)


def anthropic_error(body: Any) -> str:
    """Anthropic's error body: exactly {"type": "error", "error": {type, message}}."""
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == "invalid_request_error"
    return str(body["error"]["message"])


def gemini_error(body: Any) -> str:
    """Gemini's error body: {"error": {"code": 400, message, "status": "INVALID_ARGUMENT"}}."""
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "message", "status"}
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    return str(error["message"])


# The requests of the point 5 (and the names the runner's table missed), each with
# what the real API answers: status, then (param, code) for OpenAI or a needle of the message.
OPENAI_REFUSED = [
    (
        "o-series with max_tokens",
        openai_body("o3-mini", max_tokens=64),
        400,
        ("max_tokens", "unsupported_parameter"),
        "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
        "'max_completion_tokens' instead.",
    ),
    (
        "o-series with temperature 0",
        openai_body("O3-mini", temperature=0, max_completion_tokens=64),
        400,
        ("temperature", "unsupported_value"),
        "Unsupported value: 'temperature' does not support 0 with this model. Only the "
        "default (1) value is supported.",
    ),
    (
        "o-series with logprobs",
        openai_body("o1", logprobs=True, top_logprobs=5),
        403,
        (None, None),
        "You are not allowed to request logprobs from this model",
    ),
    (
        "unknown body field",
        openai_body("gpt-4o", temperature=0, colour="red"),
        400,
        (None, None),
        "Unrecognized request argument supplied: colour",
    ),
    (
        "gpt-6 with temperature (a future major)",
        openai_body("gpt-6", temperature=0.7, max_completion_tokens=64),
        400,
        ("temperature", "unsupported_value"),
        "does not support 0.7 with this model",
    ),
    (
        "codex-mini-latest with max_tokens",
        openai_body("codex-mini-latest", max_tokens=64),
        400,
        ("max_tokens", "unsupported_parameter"),
        "Use 'max_completion_tokens' instead.",
    ),
    (
        "a gateway's dotted gpt-5 name with temperature",
        openai_body("openai/GPT-5.2-mini", temperature=0),
        400,
        ("temperature", "unsupported_value"),
        "Only the default (1) value is supported.",
    ),
    (
        "temperature above 2",
        openai_body("gpt-4o", temperature=3),
        400,
        ("temperature", "decimal_above_max_value"),
        "Expected a value <= 2, but got 3 instead.",
    ),
]

ANTHROPIC_REFUSED = [
    (
        "budget_tokens not below max_tokens",
        anthropic_body(
            "claude-sonnet-4-5",
            max_tokens=2048,
            thinking={"type": "enabled", "budget_tokens": 2048},
        ),
        "`max_tokens` must be greater than `thinking.budget_tokens`",
    ),
    (
        "thinking with temperature 0",
        anthropic_body(
            "claude-sonnet-4-5",
            temperature=0,
            thinking={"type": "enabled", "budget_tokens": 1024},
        ),
        "`temperature` may only be set to 1 when thinking is enabled or in adaptive mode",
    ),
    (
        "adaptive thinking with temperature 0.5",
        anthropic_body("claude-opus-4-6", temperature=0.5, thinking={"type": "adaptive"}),
        "`temperature` may only be set to 1",
    ),
    (
        "a budget below 1,024",
        anthropic_body("claude-sonnet-4-5", thinking={"type": "enabled", "budget_tokens": 512}),
        "budget_tokens: Input should be greater than or equal to 1024",
    ),
    (
        "claude-opus-4.7 (dotted) with temperature",
        anthropic_body("claude-opus-4.7", temperature=0),
        "`temperature` is deprecated for this model.",
    ),
    (
        "a Claude 5 model with temperature",
        anthropic_body("us.anthropic.Claude-Sonnet-5-v1:0", temperature=1),
        "`temperature` is deprecated for this model.",
    ),
    (
        "a manual thinking budget on Opus 4.7",
        anthropic_body("claude-opus-4-7", thinking={"type": "enabled", "budget_tokens": 1024}),
        '"thinking.type.enabled" is not supported for this model',
    ),
    (
        "unknown body field",
        anthropic_body("claude-sonnet-4-5", seed=1),
        "seed: Extra inputs are not permitted",
    ),
]

GEMINI_REFUSED = [
    (
        "temperature 3",
        gemini_body("gemini-2.5-flash", {"temperature": 3}),
        "temperature value of 3 but the supported range is from 0 (inclusive) to 2.0001",
    ),
    (
        "unknown body field",
        gemini_body("gemini-2.5-flash", {"temperature": 0}, temperature=0),
        'Unknown name "temperature": Cannot find field.',
    ),
    (
        "unknown generation field",
        gemini_body("gemini-2.5-flash", {"max_tokens": 5}),
        'Unknown name "maxTokens"',
    ),
    (
        "thinking turned off on 2.5 Pro",
        gemini_body("gemini-2.5-pro", {"thinkingConfig": {"thinkingBudget": 0}}),
        "This model only works in thinking mode.",
    ),
    (
        "a thinking level before Gemini 3",
        gemini_body("gemini-2.5-flash", {"thinkingConfig": {"thinkingLevel": "low"}}),
        "Thinking level is not supported for this model.",
    ),
]


@pytest.mark.parametrize(
    ("case", "request_", "status", "named", "message"),
    OPENAI_REFUSED,
    ids=[c[0] for c in OPENAI_REFUSED],
)
async def test_openai_refusals_are_the_apis_on_the_first_attempt(
    case: str,
    request_: tuple[str, dict[str, Any], dict[str, str]],
    status: int,
    named: tuple[str | None, str | None],
    message: str,
) -> None:
    async with running() as (sim, session, root):
        got, body = await post(session, root, request_)
    assert got == status, case
    error = openai_error(body)
    assert (error["param"], error["code"]) == named
    assert message in error["message"]
    stats = sim.stats()
    assert stats.requests == 1 and stats.served == 0
    assert stats.rejected_by_status == {status: 1}


@pytest.mark.parametrize(
    ("case", "request_", "message"), ANTHROPIC_REFUSED, ids=[c[0] for c in ANTHROPIC_REFUSED]
)
async def test_anthropic_refusals_are_the_apis_on_the_first_attempt(
    case: str, request_: tuple[str, dict[str, Any], dict[str, str]], message: str
) -> None:
    async with running() as (sim, session, root):
        got, body = await post(session, root, request_)
    assert got == 400, case
    assert message in anthropic_error(body)
    assert sim.stats().rejected_by_status == {400: 1} and sim.stats().served == 0


@pytest.mark.parametrize(
    ("case", "request_", "message"), GEMINI_REFUSED, ids=[c[0] for c in GEMINI_REFUSED]
)
async def test_gemini_refusals_are_the_apis_on_the_first_attempt(
    case: str, request_: tuple[str, dict[str, Any], dict[str, str]], message: str
) -> None:
    async with running() as (sim, session, root):
        got, body = await post(session, root, request_)
    assert got == 400, case
    assert message in gemini_error(body)
    assert sim.stats().rejected_by_status == {400: 1} and sim.stats().served == 0


ACCEPTED = [
    # names that are no reasoning model and models that still take sampling parameters
    openai_body("gpt-5-chat-latest", temperature=0, max_tokens=64),
    openai_body("gpt-4o", temperature=0, max_tokens=64, logprobs=True, top_logprobs=5, seed=7),
    openai_body("gpt-4.1-mini", temperature=2, max_tokens=64),
    # a reasoning model asked only what it takes; gpt-5.1 and later with reasoning_effort none
    openai_body("o3-mini", max_completion_tokens=256, seed=1, reasoning_effort="low"),
    openai_body("gpt-5.1", temperature=0, max_completion_tokens=64, reasoning_effort="none"),
    openai_body("o4-mini", temperature=1, max_completion_tokens=256),
    anthropic_body("claude-opus-4-6", temperature=0),
    anthropic_body("claude-sonnet-4-6", temperature=1, thinking={"type": "adaptive"}),
    anthropic_body(
        "claude-3-7-sonnet-20250219", thinking={"type": "enabled", "budget_tokens": 1024}
    ),
    anthropic_body(
        "claude-opus-4-7", thinking={"type": "adaptive"}, output_config={"effort": "low"}
    ),
    gemini_body("gemini-2.5-flash", {"temperature": 2, "thinkingConfig": {"thinkingBudget": 0}}),
    gemini_body(
        "gemini-3-flash-preview", {"temperature": 0, "thinkingConfig": {"thinkingLevel": "low"}}
    ),
]


@pytest.mark.parametrize("request_", ACCEPTED, ids=lambda r: f"{r[1].get('model', r[0])}")
async def test_what_the_apis_take_is_answered(
    request_: tuple[str, dict[str, Any], dict[str, str]],
) -> None:
    async with running() as (sim, session, root):
        got, body = await post(session, root, request_)
    assert got == 200, body
    assert sim.stats().served == 1


@given(
    name=st.sampled_from(
        ["o1", "o3-mini", "o4-mini-2025-04-16", "o9", "gpt-5", "gpt-5.1-codex", "gpt-6-mini"]
    ),
    upper=st.lists(st.booleans(), min_size=24, max_size=24),
    dotted=st.booleans(),
    prefix=st.sampled_from(["", "openai/", "org/team/"]),
)
def test_reasoning_names_are_recognised_in_any_case_and_spelling(
    name: str, upper: list[bool], dotted: bool, prefix: str
) -> None:
    spelled = "".join(c.upper() if u else c for c, u in zip(name, upper, strict=False))
    spelled += name[len(upper) :]
    if dotted:  # a dotted version written dashed (`gpt-5-1-codex`), as some gateways do
        spelled = spelled.replace(".", "-")
    assert openai_reasoning_model(prefix + spelled)


@pytest.mark.parametrize(
    "name", ["gpt-5-chat-latest", "GPT-5.1-chat-latest", "gpt-4o", "gpt-4.1", "chatgpt-4o-latest"]
)
def test_chat_models_are_no_reasoning_models(name: str) -> None:
    assert not openai_reasoning_model(name)


@pytest.mark.parametrize(
    ("name", "refuses"),
    [
        ("claude-opus-4-7", True),
        ("claude-opus-4.7", True),
        ("CLAUDE-OPUS-4-8-20260601", True),
        ("claude-haiku-5", True),
        ("anthropic/claude-fable-5.1", True),
        ("claude-opus-4-6", False),
        ("claude-sonnet-4-6", False),
        ("claude-opus-4-20250514", False),
        ("claude-3-7-sonnet-20250219", False),
        ("not-claude", False),
    ],
)
def test_claude_families_without_sampling(name: str, refuses: bool) -> None:
    assert claude_without_sampling(name) is refuses


@pytest.mark.parametrize(
    ("name", "thinks"),
    [
        ("gemini-2.5-flash", True),
        ("gemini-2.5-pro", True),
        ("models/gemini-3.1-pro-preview", True),
        ("gemini-2.5-flash-lite", False),
        ("gemini-2.0-flash", False),
        ("gemini-sim", False),
    ],
)
def test_gemini_models_that_think_by_default(name: str, thinks: bool) -> None:
    assert gemini_thinks_by_default(name) is thinks


def test_the_simulators_table_is_its_own() -> None:
    """A gap in the runner's table must show as a refusal here: the simulator never reads it."""
    folder = Path(__file__).resolve().parents[3] / "runner" / "simulator"
    for module in folder.glob("*.py"):
        text = module.read_text("utf-8")
        assert "providers.params" not in text and "rule_for" not in text, module.name


# ------------------------------------------------------------------------------- logprobs


@pytest.mark.parametrize("top", [0, 1, 5, 20])
async def test_top_logprobs_gives_that_many_alternatives(top: int) -> None:
    async with running() as (_, session, root):
        status, body = await post(
            session, root, openai_body("gpt-4o", logprobs=True, top_logprobs=top)
        )
    assert status == 200
    tokens = body["choices"][0]["logprobs"]["content"]
    assert "".join(t["token"] for t in tokens) == body["choices"][0]["message"]["content"]
    for token in tokens:
        alternatives = token["top_logprobs"]
        assert len(alternatives) == top
        texts = [a["token"] for a in alternatives]
        assert len(set(texts)) == top  # each alternative once
        logprobs = [a["logprob"] for a in alternatives]
        assert logprobs == sorted(logprobs, reverse=True)  # most likely first
        assert sum(math.exp(lp) for lp in logprobs) <= 1.0 + 1e-9
        if top:
            assert alternatives[0]["token"] == token["token"]  # the sampled token leads
        for a in alternatives:
            assert a["bytes"] == list(a["token"].encode())


# ---------------------------------------------------------------------- thinking, reasoning


async def test_anthropic_thinking_block_comes_before_the_text() -> None:
    thinking = {"type": "enabled", "budget_tokens": 1024}
    async with running() as (_, session, root):
        status, body = await post(
            session, root, anthropic_body("claude-sonnet-4-5", thinking=thinking)
        )
        _, plain = await post(session, root, anthropic_body("claude-sonnet-4-5"))
    assert status == 200
    first, second = body["content"]
    assert set(first) == {"type", "thinking", "signature"}
    assert first["type"] == "thinking" and first["thinking"] and first["signature"]
    assert second == plain["content"][0] and second["type"] == "text"
    thought = body["usage"]["output_tokens"] - plain["usage"]["output_tokens"]
    assert thought == body["usage"]["input_tokens"] // 2 + 8  # inside output_tokens
    assert "thinking" not in plain["content"][0]


async def test_anthropic_thinking_display_omitted_on_opus_4_7_unless_summarized() -> None:
    async with running() as (_, session, root):
        _, omitted = await post(
            session, root, anthropic_body("claude-opus-4-7", thinking={"type": "adaptive"})
        )
        _, shown = await post(
            session,
            root,
            anthropic_body(
                "claude-opus-4-7", thinking={"type": "adaptive", "display": "summarized"}
            ),
        )
    assert omitted["content"][0]["type"] == "thinking" and omitted["content"][0]["thinking"] == ""
    assert omitted["content"][0]["signature"]
    assert shown["content"][0]["thinking"]
    assert omitted["content"][1] == shown["content"][1]


async def test_gemini_thought_parts_when_include_thoughts() -> None:
    think = {"thinkingBudget": 1024, "includeThoughts": True}
    async with running() as (_, session, root):
        _, with_parts = await post(
            session, root, gemini_body("gemini-2.5-flash", {"thinkingConfig": think})
        )
        _, default = await post(session, root, gemini_body("gemini-2.5-flash"))
        _, lite = await post(session, root, gemini_body("gemini-2.5-flash-lite"))
    thought, answer = with_parts["candidates"][0]["content"]["parts"]
    assert thought["thought"] is True and thought["text"]
    assert "thought" not in answer
    usage = with_parts["usageMetadata"]
    assert usage["thoughtsTokenCount"] == usage["promptTokenCount"] // 2 + 8
    assert usage["totalTokenCount"] == (
        usage["promptTokenCount"] + usage["candidatesTokenCount"] + usage["thoughtsTokenCount"]
    )
    # 2.5 Flash thinks by default (tokens reported, no summary unless asked); Flash-Lite does not
    (part,) = default["candidates"][0]["content"]["parts"]
    assert part == answer
    assert default["usageMetadata"]["thoughtsTokenCount"] == usage["thoughtsTokenCount"]
    assert "thoughtsTokenCount" not in lite["usageMetadata"]


async def test_openai_reasoning_tokens_for_reasoning_models() -> None:
    async with running() as (_, session, root):
        _, reasoning = await post(session, root, openai_body("o3-mini", max_completion_tokens=512))
        _, none = await post(
            session,
            root,
            openai_body("gpt-5.1", max_completion_tokens=512, reasoning_effort="none"),
        )
        _, chat = await post(session, root, openai_body("gpt-4o", max_tokens=512))
    usage = reasoning["usage"]
    spent = usage["completion_tokens_details"]["reasoning_tokens"]
    assert spent == usage["prompt_tokens"] // 2 + 8
    visible = estimate_tokens(len(reasoning["choices"][0]["message"]["content"]))
    assert usage["completion_tokens"] == visible + spent  # reasoning inside completion_tokens
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert "completion_tokens_details" not in none["usage"]
    assert "completion_tokens_details" not in chat["usage"]


async def test_reasoning_counts_against_the_output_limit() -> None:
    """Reasoning is spent first: a limit it uses up leaves an empty answer cut for length."""
    async with running() as (_, session, root):
        _, body = await post(session, root, openai_body("o3-mini", max_completion_tokens=5))
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "length" and choice["message"]["content"] == ""
    assert body["usage"]["completion_tokens"] == 5
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] == 5


def test_batch_lines_are_judged_by_the_same_rules() -> None:
    """A batch line goes through the same reading (`Simulator.answer_line`, what each batch
    service answers its lines with, a stand-in for the HTTP request as they build it): the
    line fails as the request would, and an accepted line carries the same reasoning."""
    sim = Simulator(SimProfile(seed=3))
    _, body, _ = openai_body("o3-mini", max_tokens=64)
    status, raw = sim.answer_openai(orjson.dumps(body))
    assert status == 400
    assert openai_error(orjson.loads(raw))["code"] == "unsupported_parameter"
    _, good, _ = openai_body("o3-mini", max_completion_tokens=512)
    status, raw = sim.answer_openai(orjson.dumps(good))
    assert status == 200
    assert orjson.loads(raw)["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0

    version = SimpleNamespace(headers={"anthropic-version": "2023-06-01"})
    thinking = {"type": "enabled", "budget_tokens": 1024}
    _, body, _ = anthropic_body("claude-sonnet-4-5", temperature=0, thinking=thinking)
    status, raw = sim.answer_line(ANTHROPIC, orjson.dumps(body), version)
    assert status == 400 and "may only be set to 1" in anthropic_error(orjson.loads(raw))
    _, body, _ = anthropic_body("claude-sonnet-4-5", thinking=thinking)
    status, raw = sim.answer_line(ANTHROPIC, orjson.dumps(body), version)
    assert status == 200 and orjson.loads(raw)["content"][0]["type"] == "thinking"

    path = SimpleNamespace(match_info={"model": "gemini-2.5-flash"}, headers={})
    _, body, _ = gemini_body("gemini-2.5-flash", {"temperature": 3})
    status, raw = sim.answer_line(GEMINI, orjson.dumps(body), path)
    assert status == 400 and "temperature value of 3" in gemini_error(orjson.loads(raw))

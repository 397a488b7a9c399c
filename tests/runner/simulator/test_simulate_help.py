"""`ibias simulate --help` names the three protocols and their paths, and they work as written:
a request to each documented path, under each documented `base_url`, is answered by the
simulator (with the `-sim-YYYY-MM` model name the help says marks simulated replies); and it
points to `ibias run CONFIG --rehearse`."""

from __future__ import annotations

import re

import aiohttp
import pytest

from ibias.analysis.simulated import SIMULATOR_REPORTED
from ibias.runner.cli import main
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import SimProfile


def simulate_help(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(["simulate", "--help"])
    assert stopped.value.code == 0
    return capsys.readouterr().out


def test_help_names_the_protocols_and_points_to_the_rehearsal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = simulate_help(capsys)
    for protocol in ("OpenAI-compatible", "Anthropic", "Gemini"):
        assert protocol in text
    for path in (
        "/v1/chat/completions",
        "/v1/messages",
        "/v1beta/models/MODEL:generateContent",
        "/v1/batches",
        "/v1/messages/batches",
        "/v1beta/models/MODEL:batchGenerateContent",
    ):
        assert path in text
    assert "ibias run CONFIG --rehearse" in " ".join(text.split())
    assert max(len(line) for line in text.splitlines()) <= 80


def _requests(model: str) -> dict[str, tuple[str, dict[str, str], dict[str, object]]]:
    """A minimal request per protocol: (path under its base_url, headers, body)."""
    hello = [{"role": "user", "content": "Say hello."}]
    return {
        "OpenAI-compatible": (
            "/chat/completions",
            {"Authorization": "Bearer any"},
            {"model": model, "messages": hello},
        ),
        "Anthropic": (
            "/messages",
            {"x-api-key": "any", "anthropic-version": "2023-06-01"},
            {"model": model, "max_tokens": 32, "messages": hello},
        ),
        "Gemini": (
            f"/models/{model}:generateContent",
            {"x-goog-api-key": "any"},
            {"contents": [{"role": "user", "parts": [{"text": "Say hello."}]}]},
        ),
    }


async def test_each_documented_base_url_and_path_answers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = simulate_help(capsys)
    bases = dict(re.findall(r"^  (\S+(?: \S+)?)\s+base_url (http://\S+)$", text, re.M))
    assert set(bases) == {"OpenAI-compatible", "Anthropic", "Gemini"}
    sim = Simulator(SimProfile(seed=1))
    url = await sim.start()
    port = url.rsplit(":", 1)[1].split("/", 1)[0]
    try:
        async with aiohttp.ClientSession() as session:
            for protocol, (path, headers, body) in _requests("m").items():
                base = bases[protocol].replace("PORT", port)
                async with session.post(base + path, json=body, headers=headers) as reply:
                    assert reply.status == 200, (protocol, await reply.text())
                    data = await reply.json()
                reported = data.get("model") or data.get("modelVersion")
                assert isinstance(reported, str) and SIMULATOR_REPORTED.search(reported)
    finally:
        await sim.stop()

"""What every HTTP provider shares (runner/providers/http.py), against a local aiohttp server
with real statuses, headers and bodies: a body above the cap is never read whole and fails its
trial alone; a redirect is never followed and stops the model naming where it pointed."""

from __future__ import annotations

import gzip
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from ibias.runner.providers import http
from ibias.runner.providers.base import AttemptError, Sampling
from ibias.runner.providers.http import display_url
from ibias.runner.providers.openai import OpenAIProvider
from ibias.runner.providers.retries import Verdict

CAP = 1000
SAMPLING = Sampling(temperature=0.0, max_tokens=16)
CHAT = [{"role": "user", "content": "hi"}]


def _completion(text: str) -> bytes:
    return (
        b'{"choices":[{"message":{"content":"' + text.encode() + b'"},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":1,"completion_tokens":1}}'
    )


class Server:
    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.url = ""

    async def sized(self, request: web.Request) -> web.StreamResponse:
        """`/size/N`: a completion body of exactly N bytes, with Content-Length."""
        self.hits["sized"] += 1
        n = int(request.match_info["n"])
        base = _completion("")
        pad = n - len(base)
        return web.Response(body=_completion("x" * pad), content_type="application/json")

    async def chunked(self, request: web.Request) -> web.StreamResponse:
        """`/chunked/N`: N bytes of body sent chunked, no Content-Length; counts what it
        managed to send (the client stops reading past the cap)."""
        self.hits["chunked"] += 1
        n = int(request.match_info["n"])
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        body = _completion("x" * (n - len(_completion(""))))
        for i in range(0, len(body), 100):
            await resp.write(body[i : i + 100])
        await resp.write_eof()
        return resp

    async def gzipped(self, request: web.Request) -> web.Response:
        """A small compressed body that inflates past the cap."""
        body = gzip.compress(_completion("x" * (10 * CAP)))
        assert len(body) < CAP
        return web.Response(
            body=body, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}
        )

    async def moved(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(self.url.replace("127.0.0.1", "localhost") + "/target")

    async def moved_relative(self, request: web.Request) -> web.Response:
        raise web.HTTPMovedPermanently("/target")

    async def target(self, request: web.Request) -> web.Response:
        self.hits["target"] += 1
        return web.Response(body=_completion("redirected"), content_type="application/json")


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server()
    app = web.Application()
    app.router.add_post("/size/{n}/chat/completions", srv.sized)
    app.router.add_post("/chunked/{n}/chat/completions", srv.chunked)
    app.router.add_post("/gzip/chat/completions", srv.gzipped)
    app.router.add_post("/moved/chat/completions", srv.moved)
    app.router.add_post("/relative/chat/completions", srv.moved_relative)
    app.router.add_post("/target", srv.target)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    srv.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        yield srv
    finally:
        await runner.cleanup()


async def _ask(url: str, cap: int | None = CAP) -> AttemptError | str | None:
    provider = OpenAIProvider(
        base_url=url, model="m", api_key=None, timeout_s=10, max_connections=2, max_body_bytes=cap
    )
    await provider.start()
    try:
        reply = await provider.complete(CHAT, SAMPLING)
    except AttemptError as exc:
        return exc
    finally:
        await provider.close()
    return reply.content


@pytest.mark.parametrize("route", ["size", "chunked"])
async def test_a_body_at_the_cap_is_read_and_one_byte_more_is_too_large(server, route):
    answer = await _ask(f"{server.url}/{route}/{CAP}")
    assert answer == "x" * (CAP - len(_completion("")))
    error = await _ask(f"{server.url}/{route}/{CAP + 1}")
    assert isinstance(error, AttemptError)
    c = error.classification
    assert (c.verdict, c.kind, error.status) == (Verdict.GIVE_UP, "too_large", 200)
    assert "body above the 1,000 bytes cap (max_body_bytes" in c.message


async def test_a_huge_body_is_refused_by_its_content_length_or_after_the_cap(server):
    for route in ("size", "chunked"):
        error = await _ask(f"{server.url}/{route}/{50 * CAP}")
        assert isinstance(error, AttemptError)
        assert error.classification.kind == "too_large"


async def test_a_compressed_body_is_capped_as_inflated(server):
    error = await _ask(f"{server.url}/gzip")
    assert isinstance(error, AttemptError) and error.classification.kind == "too_large"


async def test_the_default_cap_is_16_mib_and_read_when_the_provider_is_made(monkeypatch):
    assert http.MAX_BODY_BYTES == 16 * 1024 * 1024
    make = lambda: OpenAIProvider(  # noqa: E731
        base_url="http://127.0.0.1:9", model="m", api_key=None, timeout_s=1, max_connections=1
    )
    assert make().max_body_bytes == 16 * 1024 * 1024
    monkeypatch.setattr(http, "MAX_BODY_BYTES", 123)
    assert make().max_body_bytes == 123


@pytest.mark.parametrize(("route", "host"), [("moved", "localhost"), ("relative", "127.0.0.1")])
async def test_a_redirect_is_not_followed_and_stops_the_model(server, route, host):
    error = await _ask(f"{server.url}/{route}")
    assert isinstance(error, AttemptError)
    c = error.classification
    assert c.verdict is Verdict.FATAL and c.kind == "redirect"
    assert error.status in (301, 302)
    assert c.message.startswith(f"HTTP {error.status} redirect to host {host} not followed")
    assert "check base_url" in c.message
    assert server.hits["target"] == 0


def test_display_url_leaves_out_user_info_and_query():
    assert (
        display_url("https://user:secret@api.example.com:8443/v1/chat?key=abc")
        == "https://api.example.com:8443/v1/chat"
    )
    assert display_url("http://[::1]:8000/v1") == "http://[::1]:8000/v1"

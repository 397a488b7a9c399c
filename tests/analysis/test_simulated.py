"""Simulated replies are said to be simulated everywhere the analysis shows a model (issue 34).

Three stores of the same small grid, each run end to end over loopback HTTP:

- `simulator`: models of the `simulator` provider;
- `endpoint`: `openai` models whose `base_url` is ibias's simulator (as a user who started
  `ibias simulate` and pointed a config at it): only the replies say they are simulated;
- `real-looking`: the same `openai` models behind a loopback proxy that forwards each request
  to the simulator and rewrites the reported model as a real provider's dated snapshot, so the
  store holds nothing that says "simulated".

The first two mark every model in the models table, the paper-models table (never "paper's
model", even when annotated as one of the paper's models) and every figure's title; the third
marks none. A fourth store, `ibias run CONFIG --rehearse` of OpenAI, Anthropic and Gemini models
with no key set, marks every model "rehearsal: simulated replies".
"""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import duckdb
import orjson
import polars as pl
import pytest
from aiohttp import ClientSession, web

import ibias
from ibias.analysis.analyze import AnalysisResult, analyze
from ibias.analysis.simulated import (
    REHEARSAL,
    REHEARSAL_MARK,
    SIMULATED_MARK,
    SIMULATOR_ENDPOINT,
    SIMULATOR_PROVIDER,
    simulated_models,
)
from ibias.runner.config import load_config
from ibias.runner.execution.run import RunOptions, execute
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import SimProfile

KEY_ENV = "IBIAS_TEST_SIMULATED_KEY"
SEED = 5

EXPERIMENTS = """
[experiments.word_association]
languages = ["en"]
categories = ["emotions", "risk"]
trials_per_category = 4
explicit_per_category = 1

[experiments.allocation]
languages = ["en"]
services = ["gynecology", "hiv_testing"]
pairs_per_service = 4
explicit_per_service = 1
"""


def models(provider: str, base_url: str | None) -> str:
    """Two models annotated as the paper's (one by name, one as a stand-in)."""
    where = "" if base_url is None else f'base_url = "{base_url}"\napi_key_env = "{KEY_ENV}"\n'
    return f"""
[[models]]
#@ paper_name = "GPT 4o mini"
id = "mini"
provider = "{provider}"
model = "gpt-4o-mini"
max_concurrency = 8
{where}
[[models]]
#@ substitute_for = "Llama 3 70B"
id = "llama"
provider = "{provider}"
model = "llama-3.3-70b"
max_concurrency = 8
{where}"""


async def _run(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.toml"
    config.write_text(f'[run]\nname = "simulated-test"\nseed = {SEED}\n{body}', encoding="utf-8")
    store = folder / "store.duckdb"
    result = await execute(
        load_config(config), RunOptions(store=store, quiet=True), environ={KEY_ENV: "sk-test"}
    )
    assert result.exit_code == 0, result.lines
    return store


@asynccontextmanager
async def simulator() -> AsyncIterator[str]:
    """ibias's simulator on 127.0.0.1 (as `ibias simulate` serves it); yields its base URL."""
    sim = Simulator(SimProfile(seed=SEED))
    url = await sim.start()
    try:
        yield url
    finally:
        await sim.stop()


REAL_SNAPSHOT = "-2024-07-18"


@asynccontextmanager
async def real_looking(upstream: str) -> AsyncIterator[str]:
    """A loopback OpenAI-compatible endpoint that forwards to `upstream` and reports each
    model as a real provider's dated snapshot (no trace of the simulator in its replies)."""
    session = ClientSession()

    async def chat(request: web.Request) -> web.Response:
        async with session.post(
            upstream + "/chat/completions",
            data=await request.read(),
            headers={"Authorization": request.headers.get("Authorization", "")},
        ) as reply:
            body = await reply.read()
            status = reply.status
        if status == 200:
            data = orjson.loads(body)
            data["model"] = re.sub(r"-sim-\d{4}-\d{2}$", REAL_SNAPSHOT, data["model"])
            data["system_fingerprint"] = "fp_0a1b2c3d4e"
            body = orjson.dumps(data)
        return web.Response(body=body, status=status, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}/v1"
    finally:
        await runner.cleanup()
        await session.close()


def build(folder: Path, kind: str) -> Path:
    async def go() -> Path:
        if kind == "simulator":
            return await _run(folder, models("simulator", None) + EXPERIMENTS)
        async with simulator() as url:
            if kind == "endpoint":
                return await _run(folder, models("openai", url) + EXPERIMENTS)
            async with real_looking(url) as proxy:
                return await _run(folder, models("openai", proxy) + EXPERIMENTS)

    return asyncio.run(go())


Analysed = tuple[str, Path, AnalysisResult]


@pytest.fixture(scope="module", params=["simulator", "endpoint", "real-looking"])
def analysed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Analysed:
    kind = str(request.param)
    folder = tmp_path_factory.mktemp(kind)
    store = build(folder / "store", kind)
    return kind, store, analyze(store, folder / "out", bootstrap=50, seed=1)


def table(result: AnalysisResult, name: str) -> pl.DataFrame:
    return pl.read_csv(result.out_dir / f"{name}.csv")


def figure_titles(page: str) -> list[str]:
    """The title of every figure in the report (its image's alt text)."""
    return [
        html.unescape(t) for t in re.findall(r'<figure id="[^"]*"><img [^>]*alt="([^"]*)"', page)
    ]


def report_headline(page: str) -> str | None:
    """The line at the report's top saying which replies are simulated, or None."""
    found = re.search(r"<p class='simulated-headline'><strong>(.*?)</strong></p>", page)
    return None if found is None else html.unescape(found.group(1))


def paper_section(page: str) -> str:
    start = page.index("<h2 id='paper-differences'>")
    return page[start : page.index("<h2", start + 10)]


def expected(kind: str) -> dict[str, str]:
    reason = {"simulator": SIMULATOR_PROVIDER, "endpoint": SIMULATOR_ENDPOINT}.get(kind)
    return {} if reason is None else {"mini": reason, "llama": reason}


def test_the_store_knows_which_models_were_simulated(analysed: Analysed) -> None:
    kind, store, _ = analysed
    con = duckdb.connect(str(store), read_only=True)
    try:
        assert simulated_models(con) == expected(kind)
    finally:
        con.close()


def test_models_and_paper_models_tables_mark_every_simulated_model(analysed: Analysed) -> None:
    kind, _, result = analysed
    simulated = bool(expected(kind))
    models = table(result, "models")
    assert sorted(models["model_id"].to_list()) == ["llama", "mini"]
    marks = models["simulated"].to_list()
    assert marks == ([SIMULATED_MARK] * 2 if simulated else [None, None])

    paper = {r["model_id"]: r for r in table(result, "paper_models").iter_rows(named=True)}
    page = result.report.read_text("utf-8")
    section = paper_section(page)
    if simulated:
        assert {r["status"] for r in paper.values()} == {SIMULATED_MARK}
        assert "paper&#x27;s model" not in {r["status"] for r in paper.values()}
        assert "ran as the paper named them" not in section
        assert "None of the paper&#x27;s 7 models ran in this store" in section
        assert "none (simulated; annotated as GPT 4o mini)" in section
        assert "Substituted:" not in section
    else:
        assert paper["mini"]["status"] == "paper's model"
        assert paper["llama"]["status"] == "substitute"
        assert "1 of the paper&#x27;s 7 models ran as the paper named them" in section
        assert "Substituted: llama (llama-3.3-70b) stands in for Llama 3 70B" in section
        assert "simulat" not in section.lower()
    headline = report_headline(page)
    if simulated:
        assert headline is not None and headline.startswith("Simulated: Every model was answered")
    else:
        assert headline is None


def test_every_figure_title_marks_simulated_models(analysed: Analysed) -> None:
    kind, _, result = analysed
    page = result.report.read_text("utf-8")
    titles = figure_titles(page)
    # Word association, selection rates, condition effects and the population gap figures.
    prefixes = ("Word-association bias", "Selection rates", "Condition effects", "People like")
    assert {p for p in prefixes if any(t.startswith(p) for t in titles)} == set(prefixes)
    if expected(kind):
        assert all(t.endswith(f" — {SIMULATED_MARK}") for t in titles), titles
        # In the image too: the legend names each model as simulated.
        svg = (result.out_dir / "word_association_bias.svg").read_text("utf-8")
        assert "mini (simulated)" in svg and "llama (simulated)" in svg
    else:
        assert not any("simulated" in t for t in titles), titles
        svg = (result.out_dir / "word_association_bias.svg").read_text("utf-8")
        assert "simulated" not in svg


REHEARSED = """
[[models]]
#@ paper_name = "GPT 4o mini"
id = "gpt-4o-mini"
provider = "openai"
model = "gpt-4o-mini"
api_key_env = "IBIAS_TEST_NO_SUCH_KEY"
max_concurrency = 8

[[models]]
id = "claude"
provider = "anthropic"
model = "claude-sonnet-4-5"
api_key_env = "IBIAS_TEST_NO_SUCH_KEY"
max_concurrency = 8

[[models]]
#@ paper_name = "Gemini 2.0 Flash"
id = "gemini"
provider = "gemini"
model = "gemini-2.0-flash"
api_key_env = "IBIAS_TEST_NO_SUCH_KEY"
max_concurrency = 8
"""


@pytest.fixture(scope="module")
def rehearsed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, AnalysisResult]:
    """`ibias run CONFIG --rehearse` of real providers' models (no key set), analysed."""
    folder = tmp_path_factory.mktemp("rehearsal")
    config = folder / "config.toml"
    config.write_text(
        f'[run]\nseed = {SEED}\nstore = "{folder / "store.duckdb"}"\n{REHEARSED}{EXPERIMENTS}',
        encoding="utf-8",
    )
    result = ibias.run(config, rehearse=True, speed=1000, environ={})
    assert result.exit_code == 0, result.lines
    store = folder / "store.rehearsal.duckdb"
    return store, analyze(store, folder / "out", bootstrap=50, seed=1)


def test_a_rehearsal_marks_every_model_rehearsal(rehearsed: tuple[Path, AnalysisResult]) -> None:
    store, result = rehearsed
    ids = {"gpt-4o-mini", "claude", "gemini"}
    con = duckdb.connect(str(store), read_only=True)
    try:
        assert simulated_models(con) == dict.fromkeys(ids, REHEARSAL)
    finally:
        con.close()
    models = table(result, "models")
    assert dict(models.select("model_id", "simulated").iter_rows()) == dict.fromkeys(
        ids, REHEARSAL_MARK
    )
    paper = table(result, "paper_models")
    assert dict(paper.select("model_id", "status").iter_rows()) == dict.fromkeys(
        ids, REHEARSAL_MARK
    )
    page = result.report.read_text("utf-8")
    section = paper_section(page)
    assert "ran as the paper named them" not in section
    assert "None of the paper&#x27;s 7 models ran in this store" in section
    assert "Rehearsal: simulated replies." in section
    titles = figure_titles(page)
    assert titles and all(t.endswith(f" — {REHEARSAL_MARK}") for t in titles), titles
    svg = (result.out_dir / "word_association_bias.svg").read_text("utf-8")
    assert all(f"{m} (simulated)" in svg for m in ids)
    headline = report_headline(page)
    assert headline is not None and headline.startswith("Rehearsal: simulated replies.")

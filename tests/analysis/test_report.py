"""report.html in a real browser: headless Chromium driven over the DevTools protocol.

The browser loads the report from disk and we record, from the protocol's events: console
messages and uncaught exceptions, JavaScript dialogs (an unescaped hostile model id would open
one), every network request (a self-contained page requests nothing but itself and data: URLs),
and, after load, whether every image decoded (naturalWidth > 0). A screenshot is kept in the
test's tmp dir for a human to look at.

Chromium is required, not optional: the test fails with instructions when it is missing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import polars as pl
import pytest

from ibias.analysis.analyze import AnalysisResult, Block, analyses, analyze, report_sections
from ibias.analysis.figures import Figure
from ibias.analysis.report import ReportInput, render
from tests.analysis.conftest import (
    ALLOCATION,
    HOSTILE_ID,
    MODELS,
    WORD_ASSOCIATION,
    build_store,
    build_store_async,
)

CHROMIUM = Path("/usr/bin/chromium")
TIMEOUT_S = 60.0


def chromium() -> str:
    found = shutil.which("chromium") or (str(CHROMIUM) if CHROMIUM.exists() else None)
    if found is None:
        pytest.fail(
            "headless Chromium is required for the report tests but was not found at "
            f"{CHROMIUM} or on PATH; install it with `apt-get update && apt-get install -y "
            "chromium` (the Makefile's test target does this)"
        )
    return found


@dataclass
class PageCheck:
    """What the browser saw while loading one page."""

    console: list[dict[str, Any]] = field(default_factory=list)
    exceptions: list[dict[str, Any]] = field(default_factory=list)
    log_errors: list[dict[str, Any]] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    images: list[dict[str, Any]] = field(default_factory=list)
    title: str = ""
    text: str = ""
    layout: dict[str, Any] = field(default_factory=dict)
    probe: Any = None
    """What the caller's `probe` script returned (JSON), evaluated after the checks above."""

    @property
    def errors(self) -> list[Any]:
        bad_console = [c for c in self.console if c.get("type") in ("error", "assert")]
        return [*bad_console, *self.exceptions, *self.log_errors, *self.dialogs]


class _DevTools:
    """A minimal DevTools client: numbered commands, events collected as they arrive."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.background: set[asyncio.Future[dict[str, Any]]] = set()  # keep tasks referenced

    async def pump(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            else:
                await self.events.put(data)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = future
        await self.ws.send_str(json.dumps({"id": self.next_id, "method": method, "params": params}))
        reply = await asyncio.wait_for(future, TIMEOUT_S)
        assert "error" not in reply, reply
        return dict(reply.get("result", {}))


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def _browser_ws(proc: asyncio.subprocess.Process) -> tuple[str, asyncio.Task[None]]:
    """Chromium prints 'DevTools listening on ws://...' on stderr; keep draining after it."""
    assert proc.stderr is not None
    while True:
        line = (await asyncio.wait_for(proc.stderr.readline(), TIMEOUT_S)).decode(errors="replace")
        if not line:
            raise AssertionError("chromium exited before opening the DevTools port")
        found = re.search(r"DevTools listening on (ws://\S+)", line)
        if found:
            return found.group(1), asyncio.create_task(_drain(proc.stderr))


async def inspect_page(
    page: Path, screenshot: Path, profile: Path, width: int = 1400, probe: str | None = None
) -> PageCheck:
    """Load `page` at `width` px and record what the browser saw; `probe` is a script whose
    value (a JSON string) lands in `PageCheck.probe`."""
    proc = await asyncio.create_subprocess_exec(
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--disable-extensions", f"--user-data-dir={profile}",
        "--remote-debugging-port=0", f"--window-size={width},4000", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    check = PageCheck()
    try:
        browser_ws, drain = await _browser_ws(proc)
        port = re.search(r":(\d+)/", browser_ws).group(1)  # type: ignore[union-attr]
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as resp:
                targets = await resp.json()
            page_ws = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            async with session.ws_connect(page_ws, max_msg_size=0) as ws:
                tools = _DevTools(ws)
                pump = asyncio.create_task(tools.pump())
                for domain in ("Runtime", "Log", "Page", "Network"):
                    await tools.call(f"{domain}.enable")
                await tools.call("Page.navigate", url=page.resolve().as_uri())
                await _collect_until_load(tools, check)
                await _after_load(tools, check, screenshot)
                if probe is not None:
                    found = await tools.call(
                        "Runtime.evaluate", expression=probe, returnByValue=True
                    )
                    check.probe = json.loads(found["result"]["value"])
                pump.cancel()
        drain.cancel()
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
    return check


async def _collect_until_load(tools: _DevTools, check: PageCheck) -> None:
    while True:
        event = await asyncio.wait_for(tools.events.get(), TIMEOUT_S)
        _record(tools, event, check)
        if event.get("method") == "Page.loadEventFired":
            return


def _record(tools: _DevTools, event: dict[str, Any], check: PageCheck) -> None:
    method, params = event.get("method"), event.get("params", {})
    if method == "Runtime.consoleAPICalled":
        check.console.append(params)
    elif method == "Runtime.exceptionThrown":
        check.exceptions.append(params)
    elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
        check.log_errors.append(params)
    elif method == "Network.requestWillBeSent":
        check.requests.append(params["request"]["url"])
    elif method == "Page.javascriptDialogOpening":
        check.dialogs.append(params.get("message", ""))
        tools.background.add(
            asyncio.ensure_future(tools.call("Page.handleJavaScriptDialog", accept=True))
        )


#: Where the tables ended up: the page's width, each table's right edge and each wrapper's
#: scroll width (a scrollbar hides columns when it exceeds the wrapper's width), and the key
#: tables' <details> (open, and the height of the table inside).
_LAYOUT_JS = """JSON.stringify({
  page: document.documentElement.clientWidth,
  pageScroll: document.documentElement.scrollWidth,
  tables: [...document.querySelectorAll('table')].map(t => ({
    right: t.getBoundingClientRect().right, width: t.getBoundingClientRect().width,
    wrapScroll: t.parentElement.scrollWidth, wrapWidth: t.parentElement.clientWidth,
    visible: t.getClientRects().length > 0 })),
  key: [...document.querySelectorAll('details.key')].map(d => ({
    open: d.open, summary: d.querySelector('summary').innerText,
    height: (d.querySelector('table') || {offsetHeight: 0}).offsetHeight })),
  roster: !!document.getElementById('roster') })"""

_IMAGES_JS = """JSON.stringify([...document.images].map(i => ({
  complete: i.complete, width: i.naturalWidth, height: i.naturalHeight,
  src: i.currentSrc.slice(0, 30), alt: i.alt })))"""


async def _after_load(tools: _DevTools, check: PageCheck, screenshot: Path) -> None:
    images = await tools.call("Runtime.evaluate", expression=_IMAGES_JS, returnByValue=True)
    check.images = json.loads(images["result"]["value"])
    layout = await tools.call("Runtime.evaluate", expression=_LAYOUT_JS, returnByValue=True)
    check.layout = json.loads(layout["result"]["value"])
    title = await tools.call("Runtime.evaluate", expression="document.title", returnByValue=True)
    check.title = title["result"]["value"]
    text = await tools.call(
        "Runtime.evaluate", expression="document.body.innerText", returnByValue=True
    )
    check.text = text["result"]["value"]
    shot = await tools.call("Page.captureScreenshot", format="png")
    screenshot.write_bytes(base64.b64decode(shot["data"]))
    while not tools.events.empty():  # events that arrived after load (late errors)
        _record(tools, tools.events.get_nowait(), check)


def assert_clean(check: PageCheck, page: Path) -> None:
    assert check.errors == [], check.errors
    own = page.resolve().as_uri()
    outside = [u for u in check.requests if u != own and not u.startswith("data:")]
    assert outside == [], f"the report fetched something besides itself: {outside}"
    broken = [i for i in check.images if not i["complete"] or i["width"] <= 0]
    assert broken == [], broken


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile_report(hostile_store: Path, tmp_path_factory: pytest.TempPathFactory) -> AnalysisResult:
    return analyze(hostile_store, tmp_path_factory.mktemp("hostile-out"), bootstrap=200, seed=1)


async def test_report_opens_cleanly_in_chromium(
    hostile_report: AnalysisResult, tmp_path: Path
) -> None:
    page = hostile_report.report
    shot = tmp_path / "report.png"
    check = await inspect_page(page, shot, tmp_path / "profile")
    assert_clean(check, page)  # includes: no alert() dialog from the hostile model id
    assert check.title == "ibias report"
    n_figures = len([p for p in hostile_report.figures if p.suffix == ".png"])
    assert len(check.images) == n_figures >= 4  # Figure 1, 3 symptom levels, effects
    assert all(i["src"].startswith("data:image/png;base64,") for i in check.images)
    # The hostile id is shown as text, not interpreted.
    assert HOSTILE_ID in check.text
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:4] == b"\x89PNG"


async def test_report_at_1280_px_fits_its_tables_and_shows_key_tables_open(
    hostile_report: AnalysisResult, tmp_path: Path
) -> None:
    page = hostile_report.report
    check = await inspect_page(page, tmp_path / "report.png", tmp_path / "profile", width=1280)
    assert_clean(check, page)
    layout = check.layout
    assert 1200 <= layout["page"] <= 1280 and layout["pageScroll"] <= layout["page"]
    shown = [t for t in layout["tables"] if t["visible"]]
    assert len(shown) >= 10
    # The page never scrolls sideways: a table wider than the page scrolls inside its own
    # wrapper (its words are not squeezed apart, tests/analysis/test_report_layout.py).
    assert all(t["wrapWidth"] <= layout["page"] for t in shown), shown
    # The key tables (the main condition's population table, word association per language,
    # the explicit checks) are open, with their rows laid out; the selection shares per
    # condition are folded (they run long).
    key = layout["key"]
    assert len(key) >= 4 and all(d["open"] and d["height"] > 40 for d in key), key
    summaries = " | ".join(d["summary"] for d in key)
    assert "English, no symptoms, without explanation" in summaries
    # The roster's make-up is in the report, counted from the store.
    assert layout["roster"] and "The roster: who the candidates are" in check.text


def test_report_escapes_store_text_and_states_every_n(hostile_report: AnalysisResult) -> None:
    html_text = hostile_report.report.read_text()
    assert HOSTILE_ID not in html_text
    assert "&lt;img/src=x/onerror=alert(1)&gt;" in html_text
    assert "<script" not in html_text.lower()
    # self-contained: no external stylesheet, script, font or image
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html_text)
    assert "@import" not in html_text and "url(" not in html_text
    for needle in (
        "Methods note", "resampling unit", "the trial", "the pair", "Runs and configuration",
        "Models, versions, refusals", "refusal rate", "unparseable rate", "Example explanations",
        "Position bias", "Explicit checks", "-sim-2026-01",
    ):  # fmt: skip
        assert needle in html_text, needle
    # the run's config is shown (escaped TOML text from the runs table)
    assert "[experiments.allocation]" in html_text


def test_render_escapes_every_store_field(tmp_path: Path) -> None:
    """Unit check of the renderer on hand-made tables full of markup."""
    evil = '<b onmouseover="x">&amp;</b>'
    png = tmp_path / "f.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n")
    runs = pl.DataFrame(
        {
            "run_id": [evil], "started_at": [evil], "config": [f'id = "{evil}"'],
            "config_hash": [evil], "version": [evil], "git_rev": [evil],
        }
    )  # fmt: skip
    examples = pl.DataFrame(
        {
            "service": [evil], "model_id": [evil], "language": ["en"], "explanation": [True],
            "symptoms": ["none"], "chosen": ["cis"], "explanation_text": [evil * 3],
            "trial_key": ["k"],
        }
    )  # fmt: skip
    models = pl.DataFrame(
        {
            "model_id": [evil], "provider_models": [evil], "n_fingerprints": [1],
            "fingerprints": [evil], "planned": [1], "done": [1], "failed": [0],
            "responses": [1], "parsed": [1], "refusals": [0], "refusal_rate": [0.0],
            "empty": [0], "empty_rate": [0.0],
            "unparseable": [0], "unparseable_rate": [0.0], "content_filtered": [0],
            "truncated": [0],
        }
    )  # fmt: skip
    empty = pl.DataFrame()
    tables = {
        "models": models,
        "progress": empty,
        "word_association_cells": empty,
        "word_association_overall": empty,
        "allocation_cells": empty,
        "position_bias": empty,
        "allocation_effects": empty,
        "allocation_explanation_examples": examples,
        "explicit_answers_summary": empty,
    }
    figures = [Figure(evil, evil, evil, png, tmp_path / "f.svg")]
    blocks = [Block(part, "controlled", tables, None) for part in analyses()]
    page = render(
        ReportInput(
            store=evil,
            generated_at="now",
            tables=tables,
            figures=figures,
            runs=runs,
            experiments={"allocation": 1},
            sections=report_sections(blocks, [figures] * len(blocks)),
            n_parsed_now=0,
            B=10,
            method="percentile",
            seed=0,
        )
    )
    assert evil not in page
    assert "&lt;b onmouseover=&quot;x&quot;&gt;&amp;amp;&lt;/b&gt;" in page


GENERIC_SECTIONS = {"findings", "overview", "runs", "models", "files"}
PAPER_SECTIONS = {"paper-differences", "methods"}


@pytest.mark.parametrize(
    ("body", "sections", "texts", "present"),
    [
        (
            MODELS + WORD_ASSOCIATION,
            {*PAPER_SECTIONS, "word-association", "planted-values", "explicit"},
            [],
            {"word_association_bias"},
        ),
        (
            MODELS + ALLOCATION.replace('["en", "es"]', '["en"]'),
            {*PAPER_SECTIONS, "roster", "allocation", "planted-values", "explicit"},
            [],
            {
                "allocation_population_gap_en_none",
                "allocation_population_gap_en_high",
                "allocation_population_gap_en_low",
                "allocation_rates_en_none",
                "allocation_rates_en_high",
                "allocation_rates_en_low",
                "allocation_effects_en",
            },
        ),
        (
            MODELS + '\n[experiments.prompts]\nfile = "prompts.jsonl"\n',
            set(),
            [],
            set(),
        ),
        (
            # One explanation level and one symptom level: no contrast, so no effects.
            MODELS
            + ALLOCATION.replace('["en", "es"]', '["es"]')
            + 'explanation = [true]\nsymptoms = ["none"]\n',
            {*PAPER_SECTIONS, "roster", "allocation", "planted-values", "explicit"},
            ["No condition effect can be computed"],
            {"allocation_population_gap_es_none", "allocation_rates_es_none"},
        ),
    ],
    ids=["word-association-only", "allocation-only", "prompts-only", "one-condition"],
)
def test_missing_experiments_leave_no_trace_in_the_report(
    tmp_path: Path, body: str, sections: set[str], texts: list[str], present: set[str]
) -> None:
    """A store without an experiment gets none of its sections, notes, tables or figures; the
    generic ones (overview, runs, models, files; models and progress tables) always come."""
    prompts = "\n".join(
        json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": f"Hello {i}"}]})
        for i in range(5)
    )
    store = build_store(tmp_path / "store", body, extra_files={"prompts.jsonl": prompts})
    result = analyze(store, tmp_path / "out", bootstrap=100)
    page = result.report.read_text()
    assert set(re.findall(r"<h2 id='([^']*)'", page)) == GENERIC_SECTIONS | sections
    for text in texts:
        assert text in page, text
    assert {p.stem for p in result.figures} == present
    written = {p.stem for p in result.tables}
    has_wa, has_al = "word-association" in sections, "allocation" in sections
    assert {"models", "progress"} <= written
    assert ("word_association_cells" in written) == has_wa
    assert ("allocation_cells" in written) == ("roster" in written) == has_al
    assert ("implicit_vs_decision" in written) == (has_wa and has_al)
    assert ("paper_text_sources" in written) == (has_wa or has_al)
    models = pl.read_parquet(result.out_dir / "models.parquet")
    assert sorted(models["model_id"].to_list()) == ["sim-a", "sim-b"]


async def test_report_without_any_experiment_opens_cleanly(tmp_path: Path) -> None:
    prompts = json.dumps({"id": "p0", "messages": [{"role": "user", "content": "Hi"}]})
    body = MODELS + '\n[experiments.prompts]\nfile = "prompts.jsonl"\n'
    store = await build_store_async(
        tmp_path / "store", body, extra_files={"prompts.jsonl": prompts}
    )
    result = analyze(store, tmp_path / "out", bootstrap=50)
    check = await inspect_page(result.report, tmp_path / "shot.png", tmp_path / "profile")
    assert_clean(check, result.report)
    assert check.images == []
    # The one kind the store holds, and only it (in the store's inventory, folded at the end).
    assert "Ad-hoc prompts" in result.report.read_text()

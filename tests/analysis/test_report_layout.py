"""The report reads well at 1280 and 1920 px, measured in headless Chromium.

One analysed store (the session's `analysed`) is opened once per width, with every <details>
opened so that no table hides; one script measures everything the tests below assert:

- word breaks: every word (a run of non-space characters in one text node) of every table cell
  is set in a Range, and its line boxes (Range.getClientRects) must share one line; a word whose
  boxes sit on two lines was broken inside it (`servic|e`, `sim-gemini-2.0-|flash`);
- the main column's width against the window's;
- text nodes holding a backtick (markdown that leaked into the page);
- the Files section: each listed name is inside an <a href>, and each link's target;
- the code legend (R B N U S, T C N R U) right before every table whose column uses it;
- the rendered height of the allocation figures.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import duckdb
import polars as pl
import pytest

from ibias.analysis.analyze import AnalysisResult
from ibias.analysis.load import load_store
from ibias.analysis.report import keep_words, runs_span
from tests.analysis.test_report import assert_clean, inspect_page

WIDTHS = (1280, 1920)

#: Lines of one word closer than this (px) are the same line (sub-pixel rounding).
SAME_LINE_PX = 2

_PROBE_JS = (
    """JSON.stringify((() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const broken = [];
  let words = 0;
  for (const cell of document.querySelectorAll('td, th')) {
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      for (const m of n.data.matchAll(/\\S+/g)) {
        const r = document.createRange();
        r.setStart(n, m.index);
        r.setEnd(n, m.index + m[0].length);
        const tops = [...r.getClientRects()].filter(b => b.width > 0).map(b => b.top);
        if (!tops.length) continue;
        words += 1;
        if (Math.max(...tops) - Math.min(...tops) > """
    + str(SAME_LINE_PX)
    + """)
          broken.push({word: m[0], cell: cell.textContent.slice(0, 80)});
      }
    }
  }
  const ticks = [];
  const all = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = all.nextNode(); n; n = all.nextNode())
    if (n.data.includes('`')) ticks.push(n.data.slice(0, 120));
  const files = document.getElementById('files').parentElement;
  const listed = [...document.querySelectorAll('ul.files li code')].map(c => ({
    name: c.textContent, href: c.closest('a') ? c.closest('a').getAttribute('href') : null }));
  const hrefs = [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))
    .filter(h => !h.startsWith('#'));
  const figures = [...document.querySelectorAll('figure[id^="fig-allocation_rates"] img')]
    .map(i => ({height: i.getBoundingClientRect().height, natural: i.naturalHeight}));
  const coded = [...document.querySelectorAll('table')].filter(t =>
    [...t.querySelectorAll('th')].some(h => /^(no choice$|explicit T \\/ C)/.test(h.textContent)));
  const legends = coded.map(t => {
    const before = t.parentElement.previousElementSibling;
    return before && before.matches('dl.legend') ? before.textContent : null; });
  return {
    legends,
    window: window.innerWidth,
    main: document.querySelector('main').getBoundingClientRect().width,
    cells: document.querySelectorAll('td, th').length,
    words, broken, ticks, listed, hrefs, figures, files: !!files };
})())"""
)


@pytest.fixture(scope="module")
def measured(
    analysed: AnalysisResult, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, dict[str, Any]]:
    """The probe's findings per window width (one browser per width, run side by side)."""
    folder = tmp_path_factory.mktemp("layout")
    page = analysed.report

    async def one(width: int) -> dict[str, Any]:
        shot, profile = folder / f"report-{width}.png", folder / f"profile-{width}"
        check = await inspect_page(page, shot, profile, width=width, probe=_PROBE_JS)
        assert_clean(check, page)
        assert isinstance(check.probe, dict)
        return check.probe

    async def both() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(one(w) for w in WIDTHS)))

    return dict(zip(WIDTHS, asyncio.run(both()), strict=True))


@pytest.mark.parametrize("width", WIDTHS)
def test_no_table_cell_breaks_inside_a_word(
    measured: dict[int, dict[str, Any]], width: int
) -> None:
    found = measured[width]
    assert found["window"] == width
    assert found["cells"] > 500 and found["words"] > found["cells"]  # the probe saw the tables
    assert found["broken"] == [], json.dumps(found["broken"][:10], indent=1)


def test_code_legends_sit_right_above_their_tables(measured: dict[int, dict[str, Any]]) -> None:
    legends = measured[1280]["legends"]
    assert len(legends) >= 8  # 2 languages x 3 symptom levels x 2 conditions, + 2 WA tables
    assert [text for text in legends if not (text and "Rrefused" in text)] == []


def test_the_main_column_uses_the_width_at_1920_px(measured: dict[int, dict[str, Any]]) -> None:
    found = measured[1920]
    assert found["main"] >= 0.9 * found["window"], found["main"]


@pytest.mark.parametrize("width", WIDTHS)
def test_no_text_node_has_a_backtick(measured: dict[int, dict[str, Any]], width: int) -> None:
    assert measured[width]["ticks"] == []


def test_every_listed_file_is_a_link_to_a_file_that_exists(
    measured: dict[int, dict[str, Any]], analysed: AnalysisResult
) -> None:
    found = measured[1280]
    listed = found["listed"]
    assert [x for x in listed if x["href"] != x["name"]] == []
    out = analysed.out_dir
    written = {p.name for p in (*analysed.tables, *analysed.figures)}
    assert {x["name"] for x in listed} == written
    missing = [h for h in found["hrefs"] if not (out / unquote(h)).is_file()]
    assert missing == []


def test_allocation_figures_render_at_most_900_px_tall(
    measured: dict[int, dict[str, Any]],
) -> None:
    for width in WIDTHS:
        figures = measured[width]["figures"]
        assert len(figures) >= 6  # 2 languages x 3 symptom levels
        assert all(0 < f["height"] <= 900 for f in figures), figures


def test_the_paper_grid_s_allocation_figure_fits_900_px(tmp_path: Path) -> None:
    """7 models with the demo's ids x 8 services x 2 explanation conditions (the paper's
    grid): the figure itself is at most 900 px tall, so the report shows it unscaled."""
    from PIL import Image

    from ibias.analysis.units.allocation.figures import allocation_rate_figures

    models = [
        "sim-gpt-4o-mini", "sim-gpt-4o", "sim-gemini-2.0-flash", "sim-gemini-2.0-flash-lite",
        "sim-grok-3", "sim-grok-3-mini", "sim-llama-3-70b",
    ]  # fmt: skip
    services = [
        "hiv_testing", "sti_testing", "mental_health", "gynecology", "breast_ultrasound",
        "mastectomy", "transvaginal_ultrasound", "prostate_study",
    ]  # fmt: skip
    rows = [
        {
            "model_id": m, "service": s, "explanation": e, "language": "en", "symptoms": "none",
            "share_cis": 0.6, "cis_ci_low": 0.5, "cis_ci_high": 0.7,
            "share_trans": 0.4, "trans_ci_low": 0.3, "trans_ci_high": 0.5,
        }
        for m in models for s in services for e in (False, True)
    ]  # fmt: skip
    (figure,) = allocation_rate_figures(pl.DataFrame(rows), models, tmp_path)
    with Image.open(figure.png) as image:
        width, height = image.size
    assert height <= 900 and width <= 1856  # 1920 px less the page's padding


@pytest.mark.parametrize(
    ("cell", "kept"),
    [
        ("sim-gemini-2.0-flash-lite", '<span class="nw">sim-gemini-2.0-flash-lite</span>'),
        ("share among decided", "share among decided"),
        ('<span class="sig">0.01</span>', '<span class="sig">0.01</span>'),
        ("a - b", "a - b"),
        ('<a href="x-y.csv">x-y.csv</a>', '<a href="x-y.csv"><span class="nw">x-y.csv</span></a>'),
    ],
)
def test_keep_words_holds_joined_tokens_together_outside_tags(cell: str, kept: str) -> None:
    assert keep_words(cell) == kept


def _runs(ended: list[datetime | None] | None) -> pl.DataFrame:
    started = [datetime(2026, 1, 2, 22, 7, 53, tzinfo=UTC), datetime(2026, 1, 3, 9, 0, tzinfo=UTC)]
    frame = pl.DataFrame({"run_id": ["a", "b"], "started_at": started})
    return frame if ended is None else frame.with_columns(pl.Series("ended_at", ended))


def test_the_runs_span_ends_at_the_last_recorded_end() -> None:
    end = datetime(2026, 1, 3, 10, 30, tzinfo=UTC)
    assert runs_span(_runs([end, end]), end) == (
        "from 2026-01-02 22:07:53+00:00 to 2026-01-03 10:30:00+00:00"
    )
    # The last run has no end: it is running, or was killed.
    assert "has no recorded end" in runs_span(_runs([end, None]), end)
    # A store from before runs recorded their ends (no ended_at column) says so.
    assert "no run here recorded its end" in runs_span(_runs(None), None)


def test_the_runs_end_is_read_when_the_store_records_it(sim_store: Path, tmp_path: Path) -> None:
    """Stores from migration 011 on have runs.ended_at; older ones get a NULL column."""
    before = load_store(sim_store).runs
    assert "ended_at" in before.columns
    copy = tmp_path / "ended.duckdb"
    shutil.copyfile(sim_store, copy)
    end = datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)
    con = duckdb.connect(str(copy))
    try:
        con.execute("ALTER TABLE runs ADD COLUMN IF NOT EXISTS ended_at TIMESTAMPTZ")
        con.execute("UPDATE runs SET ended_at = ?", [end])
    finally:
        con.close()
    runs = load_store(copy).runs
    assert runs["ended_at"].to_list() == [end] * len(runs)

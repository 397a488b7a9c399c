"""The report opens with its findings, measured in headless Chromium at 1280 px.

One probe reads the page twice: first as a reader gets it (details as the report leaves them)
for where the findings and the two main figures end; then with every <details> open, for each
number the findings cite (`<span class="v">`, analysis/findings.py): the cell of the table the
sentence links to, found by the cited row's key cells and the column's header, and where the
cited cell and the main tables' estimate, interval and p-value columns lie on screen.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import polars as pl
import pytest

from ibias.analysis.analyze import AnalysisResult
from ibias.analysis.units.allocation.findings import GAP, GAP_P
from ibias.analysis.units.word_association.findings import WA_BIAS, WA_P
from tests.analysis.test_report import assert_clean, inspect_page

WIDTH = 1280
#: Where the findings and the main figures must have ended (px from the top of the page).
FOLD_PX = 15_000
#: The main tables' columns that must be on screen without scrolling sideways.
MAIN_COLUMNS = (WA_BIAS, WA_P, GAP, GAP_P, "transgender chosen [CI, people like these]")

_PROBE_JS = """JSON.stringify((() => {
  const bottom = el => el ? el.getBoundingClientRect().bottom + scrollY : null;
  const h2 = [...document.querySelectorAll('main h2')].map(h => h.id);
  const findings = document.querySelector('section.findings');
  const firstFigure = prefix =>
    bottom(document.querySelector(`figure[id^="fig-${prefix}"]`));
  const reader = {
    firstH2: h2[0], findingsTop: findings ? findings.getBoundingClientRect().top + scrollY : null,
    findingsBottom: bottom(findings), wordFigure: firstFigure('word_association_bias'),
    gapFigure: firstFigure('allocation_population_gap_'),
    height: document.documentElement.scrollHeight };
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const view = window.innerWidth;
  // The visible right edge of a cell: within its scrolling wrapper and the window.
  const onScreen = el => {
    const r = el.getBoundingClientRect(), w = el.closest('.table-wrap').getBoundingClientRect();
    return r.right <= Math.min(view, w.right) + 1 && r.width > 0;
  };
  const cellOf = (table, row, column) => {
    const heads = [...table.querySelectorAll('thead th')].map(t => t.textContent);
    const at = heads.indexOf(column);
    if (at < 0) return {error: `no column ${column}`, heads};
    const rows = [...table.querySelectorAll('tbody tr')].filter(tr => {
      const tds = [...tr.children];
      return row.every((key, i) => tds[i] && tds[i].textContent === key); });
    if (rows.length !== 1) return {error: `${rows.length} rows match ${row}`};
    const td = rows[0].children[at];
    return {cell: td.textContent, shown: onScreen(td)};
  };
  const sentences = [...(findings ? findings.querySelectorAll('li') : [])].map(li => {
    const link = li.querySelector('a[href^="#"]');
    const target = link && document.getElementById(link.getAttribute('href').slice(1));
    const table = target && (target.matches('table') ? target : target.querySelector('table'));
    const bare = li.cloneNode(true);
    bare.querySelectorAll('.v, .n').forEach(s => s.remove());
    return {
      text: li.textContent, href: link && link.getAttribute('href'), table: !!table,
      bare: bare.textContent,
      cites: [...li.querySelectorAll('.v')].map(s => ({
        text: s.textContent, row: JSON.parse(s.dataset.row), column: s.dataset.col,
        ...(table ? cellOf(table, JSON.parse(s.dataset.row), s.dataset.col)
                  : {error: 'no table'}) })) };
  });
  const counts = [...(findings ? findings.querySelectorAll('p .n') : [])]
    .map(s => s.textContent);
  const main = [...document.querySelectorAll(
      '[id*="-cells-"] table, [id*="-population-"] table')].map(t => ({
    id: t.closest('.table-wrap').id,
    columns: [...t.querySelectorAll('thead th')].map(th => ({
      header: th.textContent, shown: onScreen(th) })) }));
  // The tests of the selection shares per condition (these people): once off-screen.
  const tests = [...document.querySelectorAll('th')]
    .filter(th => /^(sign test p|naive binomial p)/.test(th.textContent))
    .map(th => ({header: th.textContent, shown: onScreen(th)}));
  return {reader, sentences, counts, main, tests, view};
})())"""

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?%?")


def numbers(text: str) -> list[str]:
    return NUMBER.findall(text)


@pytest.fixture(scope="module")
def probed(analysed: AnalysisResult, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("findings")
    page = analysed.report
    check = asyncio.run(
        inspect_page(page, folder / "report.png", folder / "profile", width=WIDTH, probe=_PROBE_JS)
    )
    assert_clean(check, page)
    assert isinstance(check.probe, dict)
    return check.probe


def test_the_report_opens_with_its_findings(probed: dict[str, Any]) -> None:
    reader = probed["reader"]
    assert reader["firstH2"] == "findings"
    assert reader["findingsTop"] < 600  # under the title and the store's facts
    # Every model has its sentences: word association, allocation, explicit checks, refusals.
    texts = " ".join(s["text"] for s in probed["sentences"])
    for needle in ("Word association", "Appointment allocation", "Asked directly", "refused"):
        assert needle in texts, needle


def test_every_sentence_links_to_its_table(probed: dict[str, Any]) -> None:
    sentences = probed["sentences"]
    assert len(sentences) >= 2 * 2 * 3  # 2 models x 2 languages x (WA, allocation, 2 checks)
    assert [s["text"] for s in sentences if not s["href"] or not s["table"]] == []


def test_every_number_of_the_findings_is_its_table_s_cell_as_displayed(
    probed: dict[str, Any],
) -> None:
    cites = [c for s in probed["sentences"] for c in s["cites"]]
    assert {WA_BIAS, WA_P, GAP, GAP_P, "refusal rate", "empty"} <= {c["column"] for c in cites}
    assert len(cites) >= 20
    errors = [c for c in cites if "error" in c]
    assert errors == [], errors[:5]
    for c in cites:
        cited, cell = numbers(c["text"]), numbers(c["cell"])
        assert cited, c
        # The cited numbers are the cell's, in order, as the table shows them (the cell may
        # hold more: a p-value cell shows the raw p and, in brackets, the Holm one cited).
        windows = [cell[i : i + len(cited)] for i in range(len(cell) - len(cited) + 1)]
        assert cited in windows, c
    # No number in a sentence that is not a cited cell or a marked count.
    assert [s["bare"] for s in probed["sentences"] if re.search(r"\d", s["bare"])] == []


def test_the_departures_count_is_counted_from_the_paper_tables(
    probed: dict[str, Any], analysed: AnalysisResult
) -> None:
    sources = pl.read_parquet(analysed.out_dir / "paper_text_sources.parquet")
    models = pl.read_parquet(analysed.out_dir / "paper_models.parquet")
    ours = sources.filter(pl.col("ours").fill_null("") != "").height
    others = models.filter(pl.col("status") != "paper's model").height
    expected = [ours + others, ours, sources.height, others, models.height]
    assert probed["counts"] == [f"{n:,}" for n in expected]


def test_the_findings_and_the_main_figures_end_before_15000_px(probed: dict[str, Any]) -> None:
    reader = probed["reader"]
    ends = {k: reader[k] for k in ("findingsBottom", "wordFigure", "gapFigure")}
    assert all(v is not None and 0 < v < FOLD_PX for v in ends.values()), ends


def test_the_main_columns_and_every_cited_cell_are_on_screen(probed: dict[str, Any]) -> None:
    assert probed["view"] == WIDTH
    main = probed["main"]
    # Per language the word-association table; per condition the population table.
    assert len([t for t in main if "-cells-" in t["id"]]) == 2
    assert len([t for t in main if "-population-" in t["id"]]) >= 6
    hidden = [
        (t["id"], c["header"])
        for t in main
        for c in t["columns"]
        if c["header"] in MAIN_COLUMNS and not c["shown"]
    ]
    assert hidden == []
    seen = {c["header"] for t in main for c in t["columns"]}
    assert set(MAIN_COLUMNS) <= seen
    tests = probed["tests"]
    assert len(tests) >= 2 * 2 * 3 * 2  # 2 tests x 2 languages x 3 symptom levels x 2 asks
    assert [t for t in tests if not t["shown"]] == []
    off = [c for s in probed["sentences"] for c in s["cites"] if not c.get("shown")]
    assert off == [], off[:5]


def test_an_explicit_check_that_named_a_group_is_cited_by_its_counts() -> None:
    """The simulator's explicit answers never name a group; a model that does gets its counts
    cited from the explicit table's row (model, language, subject) and answer columns."""
    from ibias.analysis.findings import section

    summary = pl.DataFrame(
        {
            "experiment": ["word_association_explicit"] * 2,
            "model_id": ["m"] * 2,
            "language": ["en"] * 2,
            "subject": ["emotions", "risk"],
            "n": [3, 3],
            "transgender": [2, 0],
            "cisgender": [0, 0],
            "neither": [1, 3],
        }
    )
    html = section({"explicit_answers_summary": summary}, ["m"])
    assert "href='#explicit-word-association-explicit'" in html
    assert (
        'Emotions (transgender <span class="v" data-row="[&quot;m&quot;, &quot;English&quot;, '
        '&quot;Emotions&quot;]" data-col="transgender">2</span>'
    ) in html
    assert "cisgender <span" not in html  # no row named cisgender: the table drops the column
    assert "Risk" not in html  # named neither group


def test_a_store_without_findings_has_no_findings_section() -> None:
    from ibias.analysis.findings import section

    assert section({"models": pl.DataFrame()}, []) == ""

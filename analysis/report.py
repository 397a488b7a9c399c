"""`report.html`: one self-contained page with every table, figure and n of the analysis.

Self-contained means a reader can mail the file: figures are embedded as base64 PNG, the CSS is
inline, and nothing is fetched (no scripts, fonts or stylesheets from elsewhere). Everything that
comes from the store (model ids, provider strings, config text, model explanations) is
HTML-escaped, because model output is untrusted text.
"""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any

import polars as pl

from ibias.analysis import labels
from ibias.analysis.experiment import Section
from ibias.analysis.figures import Figure
from ibias.prompts.registry import kinds

__all__ = ["ReportInput", "Section", "render"]


def experiment_names() -> dict[str, str]:
    """Every registered kind of trial and its title, in registry order."""
    return {k.name: k.title for k in kinds()}


@dataclass(frozen=True)
class ReportInput:
    """What the report shows; tables by the names they are written under."""

    store: str
    generated_at: str
    tables: Mapping[str, pl.DataFrame]
    figures: Sequence[Figure]
    runs: pl.DataFrame
    experiments: Mapping[str, int]
    sections: Sequence[Section]
    n_parsed_now: int
    B: int
    method: str
    seed: int
    differences: str = ""
    """The "How this run differs from the paper" section's HTML (`analysis/paper.py`); empty
    when no experiment of the store compares itself with the paper."""
    front: Sequence[Section] = ()
    """Sections describing the store that experiments add (`ExperimentAnalysis.overall`),
    after progress and before the comparison with the paper."""
    before: Sequence[Section] = ()
    """Cross-experiment sections placed before the experiments' own (the methods note)."""
    after: Sequence[Section] = ()
    """Sections after the experiments' own (cross-experiment analyses, planted values)."""
    findings: str = ""
    """The findings section's HTML (`analysis/findings.py`), shown first: a reader opens the
    report to learn what was found, and every sentence there links to its table below."""
    headline: str = ""
    """A line above the findings (which models were simulated, `analysis/simulated.py`);
    empty when there is nothing to say."""


DIFFERENCES = ("paper-differences", "How this run differs from the paper")


# --------------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------------


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


_CODE = re.compile(r"`([^`]+)`")


def prose(text: object) -> str:
    """Our own prose as safe HTML: escaped, with `backticked` spans set as <code> (the
    sentences are written markdown-style, and a reader should see code, not backticks)."""
    return _CODE.sub(r"<code>\1</code>", esc(text))


def _missing(x: object) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def when(x: object) -> str:
    """A timestamp to the second (UTC offset kept), or the value's text."""
    if isinstance(x, datetime):
        return esc(x.isoformat(sep=" ", timespec="seconds"))
    return esc(x)


def num(x: object, digits: int = 3) -> str:
    if _missing(x):
        return "—"
    assert isinstance(x, int | float)
    return f"{x:.{digits}f}"


def count(x: object) -> str:
    if _missing(x):
        return "—"
    assert isinstance(x, int | float)
    return f"{int(x):,}"


def pct(x: object) -> str:
    if _missing(x):
        return "—"
    assert isinstance(x, int | float)
    return f"{100 * x:.1f}%"


def interval(low: object, high: object, digits: int = 2) -> str:
    if _missing(low) or _missing(high):
        return "—"
    return f"[{num(low, digits)}, {num(high, digits)}]"


def pvalue(p: object, adjusted: object = None) -> str:
    """p-value text; bold when the (adjusted, if given) value is below 0.05."""
    if _missing(p):
        return "—"
    assert isinstance(p, int | float)
    text = "&lt;0.001" if p < 0.001 else f"{p:.3f}"
    ref = adjusted if adjusted is not None else p
    if not _missing(ref) and isinstance(ref, int | float) and ref < 0.05:
        return f'<span class="sig">{text}</span>'
    return text


@dataclass(frozen=True)
class Column:
    """A table column: header text, how to render a row (returns safe HTML), alignment."""

    header: str
    render: Callable[[Mapping[str, Any]], str]
    text: bool = False
    wrap: bool = False

    @property
    def css(self) -> str:
        return "wrap" if self.wrap else "text" if self.text else ""


def col(header: str, key: str, fmt: Callable[[object], str] = esc, text: bool = False) -> Column:
    return Column(header, lambda r: fmt(r[key]), text)


_TAG = re.compile(r"(<[^>]*>)")
_JOINED = re.compile(r"[^\s<>]*[-/‐–][^\s<>]*")


def keep_words(cell: str) -> str:
    """Safe cell HTML whose hyphenated or slashed tokens (`sim-gemini-2.0-flash-lite`, dates,
    `a/b`) sit in nowrap spans: browsers may break a line after a hyphen or a slash, which
    splits a model id or a date across lines as if it were two words. Text between tags only;
    cells still wrap at spaces."""
    if "-" not in cell and "/" not in cell and "‐" not in cell and "–" not in cell:
        return cell
    parts = _TAG.split(cell)
    for i in range(0, len(parts), 2):  # even parts are text, odd ones tags
        parts[i] = _JOINED.sub(_nowrap, parts[i])
    return "".join(parts)


def _nowrap(match: re.Match[str]) -> str:
    token = match.group(0)
    return f'<span class="nw">{token}</span>' if len(token) > 1 else token


def anchor_id(*parts: object) -> str:
    """An element id from `parts` (a section's anchor, a language, a condition ...): lower
    case, each run of other characters one hyphen. The tables and the findings that cite them
    build their ids with this one function, so a finding's link always finds its table."""
    slugs = (re.sub(r"[^a-z0-9]+", "-", str(p).lower()).strip("-") for p in parts)
    return "-".join(s for s in slugs if s)


def table(frame: pl.DataFrame, columns: Sequence[Column], anchor: str | None = None) -> str:
    """The frame as an HTML table in a wrapper that scrolls sideways when the table is wider
    than the page; `anchor` is the wrapper's id (what the findings link to). The id sits inside
    any <details> around the table, so following a link to it opens the details."""
    head = "".join(
        f'<th class="{"text" if c.text or c.wrap else ""}">{keep_words(esc(c.header))}</th>'
        for c in columns
    )
    body = []
    for row in frame.iter_rows(named=True):
        cells = "".join(f'<td class="{c.css}">{keep_words(c.render(row))}</td>' for c in columns)
        body.append(f"<tr>{cells}</tr>")
    ident = f' id="{esc(anchor)}"' if anchor else ""
    return (
        f'<div class="table-wrap"{ident}><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _template(name: str) -> str:
    return (resources.files("ibias.analysis") / "templates" / name).read_text("utf-8")


def figures_html(
    figures: Sequence[Figure], prefix: str, collapse: Callable[[Figure], bool] | None = None
) -> str:
    """Figures whose name starts with `prefix`; those `collapse` selects go in closed details."""
    parts = []
    for fig in figures:
        if not fig.name.startswith(prefix):
            continue
        if collapse is not None and collapse(fig):
            parts.append(f"<details><summary>{esc(fig.title)}</summary>{_figure(fig)}</details>")
        else:
            parts.append(_figure(fig))
    return "".join(parts)


def _figure(fig: Figure) -> str:
    data = base64.b64encode(fig.png.read_bytes()).decode("ascii")
    return (
        f'<figure id="fig-{esc(fig.name)}"><img src="data:image/png;base64,{data}" '
        f'alt="{esc(fig.title)}"><figcaption><strong>{esc(fig.title)}.</strong> '
        f'{esc(fig.caption)} <a href="{esc(fig.svg.name)}">SVG</a>{_data_link(fig)}'
        "</figcaption></figure>"
    )


def _data_link(fig: Figure) -> str:
    """A link to the figure's plotted numbers, for figures that write them."""
    return "" if fig.data is None else f' · <a href="{esc(fig.data.name)}">data (CSV)</a>'


def legend(codes: Sequence[tuple[str, str]]) -> str:
    """A table's code letters and their meanings, placed right above the table, so a reader
    need not scroll back to the section's introduction to read a cell."""
    items = "".join(f"<div><dt>{esc(c)}</dt><dd>{esc(m)}</dd></div>" for c, m in codes)
    return f'<dl class="legend">{items}</dl>'


def absent(text: str) -> str:
    return f'<p class="absent">{esc(text)}</p>'


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------


def _overview(inp: ReportInput) -> str:
    """The kinds of trial the store plans, by title (registered kinds first, in registry
    order): a kind the store does not hold is not mentioned."""
    names = experiment_names()
    present = [e for e in names if inp.experiments.get(e, 0)]
    present += [e for e in inp.experiments if e not in names and inp.experiments[e]]
    rows = [
        f"<li><strong>{esc(names.get(e, e))}</strong>: {inp.experiments[e]:,} trials planned</li>"
        for e in present
    ]
    if not rows:
        rows = ["<li>no planned trials</li>"]
    parsed = (
        f"<p>{inp.n_parsed_now:,} responses had no parsed row at the current parser version "
        "and were parsed now.</p>"
        if inp.n_parsed_now
        else ""
    )
    return f"<h2 id='overview'>What this store holds</h2><ul>{''.join(rows)}</ul>{parsed}"


def _runs(inp: ReportInput) -> str:
    if inp.runs.is_empty():
        return "<h2 id='runs'>Runs</h2>" + absent("No run is recorded in this store.")
    ended = _ended(inp.runs)
    listing = table(
        inp.runs,
        [
            col("run", "run_id", text=True),
            col("started", "started_at", when, text=True),
            *(
                [
                    Column("ended", lambda r: when(r["ended_at"]) if r["ended_at"] else "—", True),
                    Column("exit status", lambda r: esc(_or_dash(r.get("exit_status"))), True),
                ]
                if ended is not None
                else []
            ),
            col("ibias version", "version", text=True),
            col("git revision", "git_rev", text=True),
            col("config hash", "config_hash", lambda v: esc(str(v)[:16]), text=True),
        ],
    )
    configs = []
    distinct = inp.runs.unique("config_hash", keep="last", maintain_order=True)
    for row in distinct.iter_rows(named=True):
        used_by = inp.runs.filter(pl.col("config_hash") == row["config_hash"])
        started = ", ".join(when(t) for t in used_by["started_at"].to_list())
        configs.append(
            f"<details{' open' if len(distinct) == 1 else ''}><summary>Config "
            f"{esc(str(row['config_hash'])[:16])} (run(s) started {started})</summary>"
            f"<pre>{esc(row['config'])}</pre></details>"
        )
    span = runs_span(inp.runs, ended)
    return (
        "<h2 id='runs'>Runs and configuration</h2>"
        f"<p>{len(inp.runs)} run(s) wrote to this store, {span}.</p>"
        f"{listing}{''.join(configs)}"
    )


def _ended(runs: pl.DataFrame) -> object | None:
    """When the last run ended (`runs.ended_at`, which stores from migration 011 on record), or
    None when no run recorded its end."""
    if "ended_at" not in runs.columns:
        return None
    ends = runs["ended_at"].drop_nulls()
    return None if ends.is_empty() else ends.max()


def runs_span(runs: pl.DataFrame, ended: object | None) -> str:
    """The runs' time span: first start to last end when the runs record their ends (a run
    that has none is still running or was killed), else the starts only."""
    first, last = runs["started_at"].min(), runs["started_at"].max()
    if ended is None and len(runs) == 1:
        return f"starting at {when(first)} (no run here recorded its end)"
    if ended is None:
        return (
            f"the first started at {when(first)} and the last at {when(last)} "
            "(no run here recorded its end)"
        )
    latest = runs.sort("started_at").row(-1, named=True)
    if latest["ended_at"] is None:
        return (
            f"from {when(first)}; the last, started at {when(last)}, has no recorded end "
            "(it is still running, or it was killed)"
        )
    return f"from {when(first)} to {when(ended)}"


def _or_dash(value: object) -> object:
    return "—" if value is None else value


def _models(inp: ReportInput) -> str:
    models = inp.tables["models"]
    if models.is_empty():
        return "<h2 id='models'>Models</h2>" + absent("No model has planned trials.")
    return (
        "<h2 id='models'>Models, versions, refusals</h2>"
        + (
            "<p>Provider model strings and system fingerprints are what the providers reported in "
            "their responses. Refusal and unparseable rates are over parsed trials (implicit and "
            "explicit); a refused or unreadable trial is kept as data and counted, never scored. "
            "Empty replies (no text, and the provider did not say it withheld one: a reply cut "
            "by its token limit while thinking, a recitation stop) are not refusals: they are "
            "counted apart, as a share of responses, and parse as unparseable."
            "</p>"
        )
        + _drift(models)
        + table(
            models,
            [
                col("model", "model_id", text=True),
                # Which models the simulator answered (analysis/simulated.py), beside the id.
                *(
                    [col("simulated", "simulated", lambda v: esc(v or "—"), text=True)]
                    if "simulated" in models.columns
                    else []
                ),
                col("planned", "planned", count),
                col("done", "done", count),
                col("failed", "failed", count),
                col("responses", "responses", count),
                col("parsed", "parsed", count),
                col("refusals", "refusals", count),
                col("refusal rate", "refusal_rate", pct),
                col("empty", "empty", count),
                col("empty rate", "empty_rate", pct),
                col("unparseable", "unparseable", count),
                col("unparseable rate", "unparseable_rate", pct),
                col("content filter", "content_filtered", count),
                col("truncated", "truncated", count),
                # The provider's strings last: they are wide, and the counts are what the
                # findings cite.
                col("provider model(s) reported", "provider_models", text=True),
                col("fingerprints", "n_fingerprints", count),
                col("e.g.", "fingerprints", text=True),
            ],
            anchor=MODELS_TABLE,
        )
    )


MODELS_TABLE = "models-table"
"""The models table's id (the findings' refusal sentences link to it)."""


def _drift(models: pl.DataFrame) -> str:
    """One line naming the models the provider reported under more than one name or version
    (store/drift.py); fingerprints alone are not drift."""
    drifted = models.filter(
        pl.col("provider_models").fill_null("").str.contains("; ", literal=True)
    )["model_id"].to_list()
    if not drifted:
        return ""
    return (
        f"<p><strong>Drift:</strong> the provider reported more than one model name or version "
        f"for {esc(', '.join(map(str, drifted)))}: their answers may come from different "
        "models (run <code>ibias analyze --by-reported-model</code> to split the tables).</p>"
    )


def _progress(inp: ReportInput) -> str:
    progress = inp.tables["progress"]
    if progress.is_empty():
        return ""
    return (
        "<details><summary>Progress per experiment, model and language</summary>"
        + table(
            progress,
            [
                col("experiment", "experiment", lambda v: esc(_experiment(v)), text=True),
                col("model", "model_id", text=True),
                col("language", "language", lambda v: esc(labels.language(v)), text=True),
                col("planned", "planned", count),
                col("done", "done", count),
                col("failed", "failed", count),
            ],
        )
        + "</details>"
    )


def _explicit(inp: ReportInput) -> str:
    summary = inp.tables.get("explicit_answers_summary")
    head = "<h2 id='explicit'>Explicit checks</h2>"
    if summary is None or summary.is_empty():
        return ""  # no explicit-check trials: no section
    answers = [c for c in summary.columns if c not in {"experiment", "model_id", "language",
                                                       "subject", "n"}]  # fmt: skip
    parts = [
        head,
        "<p>The models were also asked directly. Counts of each normalised answer per subject "
        "(category or service).</p>",
    ]
    for exp in sorted(summary["experiment"].unique().to_list()):
        sub = summary.filter(pl.col("experiment") == exp)
        used = [a for a in answers if int(sub[a].sum()) > 0] or answers[:1]
        columns = [
            col("model", "model_id", text=True),
            col("language", "language", lambda v: esc(labels.language(v)), text=True),
            col("subject", "subject", lambda v: esc(subject(v)), text=True),
            col("n", "n", count),
            *[col(a, a, count) for a in used],
        ]
        parts.append(
            f"<details class='key' open><summary>{esc(experiment_names().get(exp, exp))}"
            f"</summary>{table(sub, columns, anchor=explicit_anchor(exp))}</details>"
        )
    return "".join(parts)


def explicit_anchor(experiment: object) -> str:
    """The id of one explicit check's table (the findings link to it)."""
    return anchor_id("explicit", experiment)


def _experiment(name: object) -> str:
    return experiment_names().get(str(name), str(name))


def subject(slug: object) -> str:
    """An explicit check's subject by its display name: a service's or a category's."""
    for kind in ("services", "categories"):
        name = labels.label(kind, slug)
        if name != str(slug).replace("_", " "):
            return name
    return labels.label("subjects", slug)


def _outputs(inp: ReportInput) -> str:
    """The files written beside the report, each a link (relative, so the folder can move)."""

    def link(name: str) -> str:
        return f'<a href="{esc(name)}"><code>{esc(name)}</code></a>'

    tables = "".join(f"<li>{link(f'{n}.csv')} · {link(f'{n}.parquet')}</li>" for n in inp.tables)
    figures = "".join(f"<li>{link(f.png.name)} · {link(f.svg.name)}</li>" for f in inp.figures)
    return (
        "<h2 id='files'>Files</h2><p>Every table is written beside this report as CSV and "
        "Parquet, and every figure as PNG and SVG.</p>"
        f"<details open><summary>Tables ({len(inp.tables)})</summary>"
        f"<ul class='files'>{tables}</ul></details>"
        + (
            f"<details open><summary>Figures ({len(inp.figures)})</summary>"
            f"<ul class='files'>{figures}</ul></details>"
            if inp.figures
            else ""
        )
    )


def _has_explicit(inp: ReportInput) -> bool:
    frame = inp.tables.get("explicit_answers_summary")
    return frame is not None and not frame.is_empty()


def template(name: str) -> str:
    """A text of `analysis/templates/` (for sections rendered outside this module)."""
    return _template(name)


STORE = ("store", "The store, its runs and their configuration")
"""The folded block at the end: what the store holds, its runs and their configs."""


def _store(inp: ReportInput) -> str:
    """What the store holds, its runs and their configs, folded at the end of the page: a
    reader opens the report for its findings; the inventory is there to check, not to read
    first."""
    return (
        f"<details class='end' id='{STORE[0]}'><summary>{esc(STORE[1])}</summary>"
        f"{_overview(inp)}{_runs(inp)}</details>"
    )


def render(inp: ReportInput) -> str:
    """The whole page as one string: the findings first, then the navigation, the
    experiments' sections, the explicit checks, the models, the comparison with the paper,
    the files, and the store's inventory, runs and configs folded at the end."""
    nav = "".join(
        f"<li><a href='#{a}'>{esc(t)}</a></li>"
        for a, t in (
            *((("findings", "Findings"),) if inp.findings else ()),
            *((sec.anchor, sec.title) for sec in (*inp.before, *inp.sections, *inp.after)),
            *((("explicit", "Explicit checks"),) if _has_explicit(inp) else ()),
            ("models", "Models, versions, refusals"),
            *((sec.anchor, sec.title) for sec in inp.front),
            *((DIFFERENCES,) if inp.differences else ()),
            ("files", "Files"),
            STORE,
        )
    )
    body = "".join(
        [
            "<main>",
            "<h1>ibias report</h1>",
            '<dl class="facts">',
            f"<dt>store</dt><dd>{esc(inp.store)}</dd>",
            f"<dt>analysed</dt><dd>{esc(inp.generated_at)}</dd>",
            f"<dt>bootstrap</dt><dd>B = {inp.B:,}, {esc(inp.method)}, seed {inp.seed}</dd>",
            "</dl>",
            inp.headline,
            inp.findings,
            f"<nav><h2 class='contents'>Contents</h2><ul>{nav}</ul></nav>",
            *(sec.html for sec in (*inp.before, *inp.sections, *inp.after)),
            _explicit(inp),
            _models(inp),
            _progress(inp),
            *(sec.html for sec in inp.front),
            inp.differences,
            _outputs(inp),
            _store(inp),
            "</main>",
        ]
    )
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>ibias report</title><style>{_template('report.css')}</style></head>"
        f"<body>{body}</body></html>\n"
    )

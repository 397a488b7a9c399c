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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from string import Template
from typing import Any

import polars as pl

from ibias.analysis import labels
from ibias.analysis.figures import Figure

EXPERIMENT_NAMES: dict[str, str] = {
    "word_association": "Word association (implicit)",
    "word_association_explicit": "Word association (explicit check)",
    "allocation": "Appointment allocation (implicit)",
    "allocation_explicit": "Appointment allocation (explicit check)",
    "prompts": "Ad-hoc prompts",
}
EXAMPLE_TEXT_LIMIT = 700


@dataclass(frozen=True)
class ReportInput:
    """What the report shows; tables by the names they are written under."""

    store: str
    generated_at: str
    tables: Mapping[str, pl.DataFrame]
    figures: Sequence[Figure]
    runs: pl.DataFrame
    experiments: Mapping[str, int]
    n_parsed_now: int
    B: int
    method: str
    seed: int


# --------------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------------


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


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


def table(frame: pl.DataFrame, columns: Sequence[Column]) -> str:
    head = "".join(
        f'<th class="{"text" if c.text or c.wrap else ""}">{esc(c.header)}</th>' for c in columns
    )
    body = []
    for row in frame.iter_rows(named=True):
        cells = "".join(f'<td class="{c.css}">{c.render(row)}</td>' for c in columns)
        body.append(f"<tr>{cells}</tr>")
    return (
        f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _template(name: str) -> str:
    return (resources.files("ibias.analysis") / "templates" / name).read_text("utf-8")


def _figure(fig: Figure) -> str:
    data = base64.b64encode(fig.png.read_bytes()).decode("ascii")
    return (
        f'<figure id="fig-{esc(fig.name)}"><img src="data:image/png;base64,{data}" '
        f'alt="{esc(fig.title)}"><figcaption><strong>{esc(fig.title)}.</strong> '
        f'{esc(fig.caption)} <a href="{esc(fig.svg.name)}">SVG</a></figcaption></figure>'
    )


def _absent(text: str) -> str:
    return f'<p class="absent">{esc(text)}</p>'


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------


def _overview(inp: ReportInput) -> str:
    rows = []
    for exp, name in EXPERIMENT_NAMES.items():
        n = inp.experiments.get(exp, 0)
        status = f"{n:,} trials planned" if n else "absent from this store"
        rows.append(f"<li><strong>{esc(name)}</strong>: {esc(status)}</li>")
    for exp, n in inp.experiments.items():
        if exp not in EXPERIMENT_NAMES:
            rows.append(f"<li><strong>{esc(exp)}</strong>: {n:,} trials planned</li>")
    parsed = (
        f"<p>{inp.n_parsed_now:,} responses had no parsed row at the current parser version "
        "and were parsed now.</p>"
        if inp.n_parsed_now
        else ""
    )
    return f"<h2 id='overview'>What this store holds</h2><ul>{''.join(rows)}</ul>{parsed}"


def _runs(inp: ReportInput) -> str:
    if inp.runs.is_empty():
        return "<h2 id='runs'>Runs</h2>" + _absent("No run is recorded in this store.")
    listing = table(
        inp.runs,
        [
            col("run", "run_id", text=True),
            col("started", "started_at", when, text=True),
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
    first, last = inp.runs["started_at"].min(), inp.runs["started_at"].max()
    return (
        "<h2 id='runs'>Runs and configuration</h2>"
        f"<p>{len(inp.runs)} run(s) wrote to this store, from {when(first)} to {when(last)}.</p>"
        f"{listing}{''.join(configs)}"
    )


def _models(inp: ReportInput) -> str:
    models = inp.tables["models"]
    if models.is_empty():
        return "<h2 id='models'>Models</h2>" + _absent("No model has planned trials.")
    return (
        "<h2 id='models'>Models, versions, refusals</h2>"
        + (
            "<p>Provider model strings and system fingerprints are what the providers reported in "
            "their responses. Refusal and unparseable rates are over parsed trials (implicit and "
            "explicit); a refused or unreadable trial is kept as data and counted, never scored."
            "</p>"
        )
        + table(
            models,
            [
                col("model", "model_id", text=True),
                col("provider model(s) reported", "provider_models", text=True),
                col("fingerprints", "n_fingerprints", count),
                col("e.g.", "fingerprints", text=True),
                col("planned", "planned", count),
                col("done", "done", count),
                col("failed", "failed", count),
                col("responses", "responses", count),
                col("parsed", "parsed", count),
                col("refusals", "refusals", count),
                col("refusal rate", "refusal_rate", pct),
                col("unparseable", "unparseable", count),
                col("unparseable rate", "unparseable_rate", pct),
                col("content filter", "content_filtered", count),
                col("truncated", "truncated", count),
            ],
        )
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
                col("experiment", "experiment", text=True),
                col("model", "model_id", text=True),
                col("language", "language", text=True),
                col("planned", "planned", count),
                col("done", "done", count),
                col("failed", "failed", count),
            ],
        )
        + "</details>"
    )


def _methods(inp: ReportInput) -> str:
    body = Template(_template("methods.html")).substitute(
        B=esc(f"{inp.B:,}"), method=esc(inp.method), seed=esc(inp.seed)
    )
    return f"<h2 id='methods'>Methods note</h2>{body}"


def _figures(
    inp: ReportInput, prefix: str, collapse: Callable[[Figure], bool] | None = None
) -> str:
    """Figures whose name starts with `prefix`; those `collapse` selects go in closed details."""
    parts = []
    for fig in inp.figures:
        if not fig.name.startswith(prefix):
            continue
        if collapse is not None and collapse(fig):
            parts.append(f"<details><summary>{esc(fig.title)}</summary>{_figure(fig)}</details>")
        else:
            parts.append(_figure(fig))
    return "".join(parts)


_WA_COLUMNS: tuple[Column, ...] = (
    col("trials", "trials", count),
    col("scored", "scored", count),
    Column("no score (refused)", lambda r: f"{count(r['null_score'])} ({count(r['refusals'])})"),
    col("unassigned words", "unassigned_words", count),
    Column(
        "mean bias [95% CI]",
        lambda r: f"{num(r['mean_bias'])} {interval(r['ci_low'], r['ci_high'], 3)}",
    ),
    Column(
        "t-test p (Holm)",
        lambda r: f"{pvalue(r['t_p'], r['t_p_holm'])} ({pvalue(r['t_p_holm'])})",
    ),
    Column("sign-flip p", lambda r: pvalue(r["sign_flip_p"])),
    Column(
        "template 1 / 2 / 3 (spread)",
        lambda r: (
            f"{num(r['bias_template_1'], 2)} / {num(r['bias_template_2'], 2)} / "
            f"{num(r['bias_template_3'], 2)} ({num(r['template_spread'], 2)})"
        ),
    ),
)


def _word_association(inp: ReportInput) -> str:
    cells = inp.tables["word_association_cells"]
    head = "<h2 id='word-association'>Word association</h2>"
    if cells.is_empty():
        return head + _absent(
            "This store has no word-association trials (none planned, or none answered yet)."
        )
    overall = inp.tables["word_association_overall"]
    key_cols = [col("model", "model_id", text=True), col("language", "language", text=True)]
    explicit_cols = [
        Column(
            "explicit T / C / N / R / U",
            lambda r: (
                " / ".join(
                    count(r.get(f"explicit_{a}"))
                    for a in ("transgender", "cisgender", "neither", "refused", "unparseable")
                )
                + f" of {count(r.get('explicit_n'))}"
            ),
        )
    ]
    parts = [
        head,
        "<p>Bias score per trial: share of the target group's words that are negative plus the "
        "share of the reference group's words that are positive, minus 1 (range −1 to 1; "
        "positive means negative words went to “transgender”). Bold p-values are below 0.05 "
        "after Holm's correction across the categories of a model and language. The explicit "
        "column counts the direct answers for the same category: T transgender, C cisgender, "
        "N neither, R refused, U unreadable.</p>",
        _figures(inp, "word_association"),
        "<h3>Per model and language (all categories)</h3>",
        table(overall, [*key_cols, *_WA_COLUMNS]),
        "<h3>Per model, language and category, with the explicit check beside it</h3>",
    ]
    for lang in labels.ordered("languages", cells["language"].unique().to_list()):
        sub = cells.filter(pl.col("language") == lang)
        parts.append(
            f"<details open><summary>{esc(labels.language(lang))}</summary>"
            + table(
                sub,
                [
                    col("model", "model_id", text=True),
                    col("category", "category", lambda v: esc(labels.category(v)), text=True),
                    *_WA_COLUMNS,
                    *explicit_cols,
                ],
            )
            + "</details>"
        )
    return "".join(parts)


def _share(who: str, header: str) -> Column:
    """Share with its pair-bootstrap CI, and the Wilson interval on a second, muted line."""
    return Column(
        header,
        lambda r: (
            f"{num(r[f'share_{who}'], 2)} {interval(r[f'{who}_ci_low'], r[f'{who}_ci_high'])}"
            f'<br><span class="muted small">Wilson {num(r[f"{who}_wilson_low"], 2)}–'
            f"{num(r[f'{who}_wilson_high'], 2)}</span>"
        ),
    )


def _p_with_holm(raw: str, adjusted: str) -> Column:
    header = {"sign_p": "sign test p (Holm)", "naive_p": "naive binomial p (Holm)"}[raw]
    return Column(header, lambda r: f"{pvalue(r[raw], r[adjusted])} ({pvalue(r[adjusted])})")


_ALLOCATION_COLUMNS: tuple[Column, ...] = (
    col("model", "model_id", text=True),
    col("service", "service", lambda v: esc(labels.service(v)), text=True),
    col("trials", "trials", count),
    _share("cis", "cisgender chosen [95% CI]"),
    _share("trans", "transgender chosen [95% CI]"),
    Column(
        "no choice",
        lambda r: (
            f"{count(r['n_none'])}<br><span class='muted small'>R {count(r['n_none_refused'])} "
            f"B {count(r['n_none_both'])} N {count(r['n_none_neither'])} "
            f"U {count(r['n_none_unparseable'])}</span>"
        ),
    ),
    Column(
        "pairs agreeing cis / trans",
        lambda r: f"{count(r['pairs_cis_both'])} / {count(r['pairs_trans_both'])}",
    ),
    Column(
        "pairs split to 1st / 2nd",
        lambda r: f"{count(r['pairs_split_first'])} / {count(r['pairs_split_second'])}",
    ),
    Column(
        "pairs with none",
        lambda r: f"{count(r['pairs_with_none'])} of {count(r['pairs'])}",
    ),
    _p_with_holm("sign_p", "sign_p_holm"),
    _p_with_holm("naive_p", "naive_p_holm"),
)


def _allocation(inp: ReportInput) -> str:
    cells = inp.tables["allocation_cells"]
    head = "<h2 id='allocation'>Appointment allocation</h2>"
    if cells.is_empty():
        return head + _absent(
            "This store has no allocation trials (none planned, or none answered yet)."
        )
    parts = [
        head,
        "<p>Share of all trials choosing each candidate; the rest made no choice (R refused, "
        "B chose both, N declined both, U unreadable). Intervals resample pairs; the Wilson "
        "interval below treats trials as independent. Agreeing pairs chose the same person in "
        "both orders (the sign test counts them); split pairs chose by position. Bold p-values "
        "are below 0.05 after Holm's correction across services within the same model, "
        "language and condition.</p>",
        _figures(inp, "allocation_rates", lambda f: not f.name.endswith("_none")),
        "<h3>Selection shares and tests per condition</h3>",
    ]
    for (lang, level, expl), sub in _condition_groups(cells):
        title = f"{labels.language(lang)}, {labels.symptoms(level)}, {labels.explanation(expl)}"
        parts.append(
            f"<details><summary>{esc(title)}</summary>{table(sub, _ALLOCATION_COLUMNS)}</details>"
        )
    parts.append(_position(inp))
    parts.append(_effects(inp))
    parts.append(_examples(inp))
    return "".join(parts)


def _condition_groups(
    frame: pl.DataFrame,
) -> Iterable[tuple[tuple[str, str, bool], pl.DataFrame]]:
    for lang in labels.ordered("languages", frame["language"].unique().to_list()):
        for level in labels.ordered("symptoms", frame["symptoms"].unique().to_list()):
            for expl in sorted(frame["explanation"].unique().to_list()):
                sub = frame.filter(
                    (pl.col("language") == lang)
                    & (pl.col("symptoms") == level)
                    & (pl.col("explanation") == expl)
                )
                if not sub.is_empty():
                    yield (lang, level, bool(expl)), sub


def _position(inp: ReportInput) -> str:
    pos = inp.tables["position_bias"]
    if pos.is_empty():
        return ""
    parts = [
        "<h3>Position bias</h3><p>Share of decided trials that chose whoever was listed first "
        "(0.5 = no position effect). The bootstrap interval resamples pairs; the Wilson "
        "interval and the binomial p treat trials as independent.</p>"
    ]
    columns = [
        col("model", "model_id", text=True),
        col("service", "service", lambda v: esc(labels.service(v)), text=True),
        col("decided", "decided", count),
        col("chose first", "n_first", count),
        col("share first", "share_first", lambda v: num(v, 3)),
        Column("95% CI (pairs)", lambda r: interval(r["ci_low"], r["ci_high"], 3)),
        Column("Wilson", lambda r: interval(r["wilson_low"], r["wilson_high"], 3)),
        Column("binomial p", lambda r: pvalue(r["binomial_p"])),
    ]
    for (lang, level, expl), sub in _condition_groups(pos):
        title = f"{labels.language(lang)}, {labels.symptoms(level)}, {labels.explanation(expl)}"
        parts.append(f"<details><summary>{esc(title)}</summary>{table(sub, columns)}</details>")
    return "".join(parts)


def _effects(inp: ReportInput) -> str:
    effects = inp.tables["allocation_effects"]
    parts = ["<h3>Effects of asking for an explanation and of adding symptoms</h3>"]
    if effects.is_empty():
        return "".join(parts) + _absent(
            "No condition effect can be computed: the store lacks one side of every contrast."
        )
    parts.append(
        "<p>Change in the share choosing the transgender candidate, over the same pairs "
        "(treated − control), within each level of the other condition and pooled over it.</p>"
    )
    parts.append(_figures(inp, "allocation_effects"))
    columns = [
        col("model", "model_id", text=True),
        col("service", "service", lambda v: esc(labels.service(v)), text=True),
        col("stratum", "stratum", lambda v: esc(labels.label("strata", v)), text=True),
        col("control share", "share_control", lambda v: num(v, 3)),
        col("treated share", "share_treated", lambda v: num(v, 3)),
        col("difference", "difference", lambda v: num(v, 3)),
        Column("95% CI (pairs)", lambda r: interval(r["ci_low"], r["ci_high"], 3)),
        col("pairs", "pairs", count),
        col("unpaired trials", "dropped_trials", count),
    ]
    for lang in labels.ordered("languages", effects["language"].unique().to_list()):
        for effect in ("explanation", "symptoms_high", "symptoms_low"):
            sub = effects.filter((pl.col("language") == lang) & (pl.col("effect") == effect))
            if sub.is_empty():
                continue
            title = f"{labels.language(lang)}: {sub['label'][0]}"
            parts.append(f"<details><summary>{esc(title)}</summary>{table(sub, columns)}</details>")
    return "".join(parts)


def _examples(inp: ReportInput) -> str:
    examples = inp.tables["allocation_explanation_examples"]
    parts = [
        "<h3>Example explanations</h3>",
        "<p>A few of the models' own explanations per service (as in the paper's Table "
        "Appendix 1), preferring trials where an explanation was asked for. Model output, "
        "shown verbatim (truncated); explanations may not reflect the real reason for a "
        "choice.</p>",
    ]
    if examples.is_empty():
        return "".join(parts) + _absent("No allocation reply carried an explanation.")
    columns = [
        col("service", "service", lambda v: esc(labels.service(v)), text=True),
        col("model", "model_id", text=True),
        col("language", "language", text=True),
        col("symptoms", "symptoms", text=True),
        col("chose", "chosen", lambda v: esc(_CHOSEN.get(str(v), str(v))), text=True),
        Column("explanation", lambda r: esc(_clip(r["explanation_text"])), wrap=True),
    ]
    return "".join(parts) + table(examples, columns)


_CHOSEN = {"cis": "cisgender", "trans": "transgender"}


def _clip(text: object) -> str:
    s = "" if text is None else str(text).strip()
    return s if len(s) <= EXAMPLE_TEXT_LIMIT else s[: EXAMPLE_TEXT_LIMIT - 1].rstrip() + "…"


def _explicit(inp: ReportInput) -> str:
    summary = inp.tables["explicit_answers_summary"]
    head = "<h2 id='explicit'>Explicit checks</h2>"
    if summary.is_empty():
        return head + _absent("This store has no explicit-check trials.")
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
            col("language", "language", text=True),
            col("subject", "subject", text=True),
            col("n", "n", count),
            *[col(a, a, count) for a in used],
        ]
        parts.append(
            f"<details><summary>{esc(EXPERIMENT_NAMES.get(exp, exp))}</summary>"
            f"{table(sub, columns)}</details>"
        )
    return "".join(parts)


def _outputs(inp: ReportInput) -> str:
    names = ", ".join(f"<code>{esc(n)}.csv</code>" for n in inp.tables)
    return (
        "<h2 id='files'>Files</h2><p>Every table is written beside this report as CSV and "
        f"Parquet: {names}. Figures are also written as PNG and SVG.</p>"
    )


def render(inp: ReportInput) -> str:
    """The whole page as one string."""
    nav = "".join(
        f"<li><a href='#{a}'>{esc(t)}</a></li>"
        for a, t in (
            ("overview", "What this store holds"),
            ("runs", "Runs and configuration"),
            ("models", "Models, versions, refusals"),
            ("methods", "Methods note"),
            ("word-association", "Word association"),
            ("allocation", "Appointment allocation"),
            ("explicit", "Explicit checks"),
            ("files", "Files"),
        )
    )
    body = "".join(
        [
            "<h1>ibias report</h1>",
            '<dl class="facts">',
            f"<dt>store</dt><dd>{esc(inp.store)}</dd>",
            f"<dt>analysed</dt><dd>{esc(inp.generated_at)}</dd>",
            f"<dt>bootstrap</dt><dd>B = {inp.B:,}, {esc(inp.method)}, seed {inp.seed}</dd>",
            "</dl>",
            f"<nav><ul>{nav}</ul></nav>",
            _overview(inp),
            _runs(inp),
            _models(inp),
            _progress(inp),
            _methods(inp),
            _word_association(inp),
            _allocation(inp),
            _explicit(inp),
            _outputs(inp),
        ]
    )
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>ibias report</title><style>{_template('report.css')}</style></head>"
        f"<body>{body}</body></html>\n"
    )

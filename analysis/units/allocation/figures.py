"""The appointment-allocation experiment's figures (matplotlib, Agg, drawn with the shared
style and marks of `ibias.analysis.figures`).

2. Selection rates of the cisgender and the transgender candidate per service and model with
   pair-bootstrap CIs: one figure per language x symptoms level, one column per explanation
   condition, one row per service (the paper's Figure 2 and its appendix variants).
3. Paired effects of the conditions on the transgender share (explanation yes - no, symptoms
   high - none, low - none, each pooled over the other condition), one figure per language.
4. The gap among decided trials for people like these (the population intervals of
   `population_tables`), a forest plot per language x symptoms level with one panel per
   explanation condition; its plotted numbers are read back from the figure and written beside
   it (`<name>.data.csv`).

(Figure 1, word association, is the word-association unit's.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure as MplFigure
from matplotlib.lines import Line2D

from ibias.analysis import labels
from ibias.analysis.figure_pool import Job, draw_each
from ibias.analysis.figures import (
    CIS_COLOUR,
    TRANS_COLOUR,
    Figure,
    aligned,
    as_floats,
    error_bars,
    fixed_layout,
    interval_note,
    legend_handles,
    model_label,
    model_style,
    new_figure,
    save_figure,
    styled,
    text_width,
    titled,
)

# --------------------------------------------------------------------------------------------
# Figure 2: allocation selection rates
# --------------------------------------------------------------------------------------------


@styled
def allocation_rate_figures(
    cells: pl.DataFrame, models: Sequence[str], out_dir: Path
) -> list[Figure]:
    """Cis and trans selection shares with CIs: per language x symptoms, services x explanation."""
    if cells.is_empty():
        return []
    jobs: list[Job[Figure]] = []
    present = [m for m in models if m in set(cells["model_id"].to_list())]
    services = labels.ordered("services", cells["service"].unique().to_list())
    languages = labels.ordered("languages", cells["language"].unique().to_list())
    symptom_levels = labels.ordered("symptoms", cells["symptoms"].unique().to_list())
    for lang in languages:
        for level in symptom_levels:
            sub = cells.filter((pl.col("language") == lang) & (pl.col("symptoms") == level))
            if sub.is_empty():
                continue
            args = (sub, present, services, lang, level, out_dir)
            jobs.append(Job(_rates_figure, args, weight=len(services) * (len(present) + 2)))
    return draw_each(jobs)


#: The selection-rate figure's height budget in inches: 8.1 in at `DPI` is 891 px, so the
#: whole figure (its legend, every panel and the share axis) fits on one screen. Rows of
#: models get closer until `RATES_MIN_STEP_IN`; a grid that still does not fit grows past it
#: (the report then scales the image down to 900 px).
RATES_MAX_HEIGHT_IN = 8.1
RATES_MIN_STEP_IN, RATES_MAX_STEP_IN = 0.12, 0.24
RATES_PANELS_PER_ROW = 4


def _rates_figure(
    sub: pl.DataFrame,
    models: Sequence[str],
    services: Sequence[str],
    lang: str,
    level: str,
    out_dir: Path,
) -> Figure:
    """Services in a grid, one block of columns per explanation condition (the same service at
    the same place in each block), models as rows; the legend on top and the share axis under
    each column, all within `RATES_MAX_HEIGHT_IN` for the paper's 7 models and 8 services."""
    conditions = sorted(sub["explanation"].unique().to_list())
    per_block = max(1, min(len(services), RATES_PANELS_PER_ROW // len(conditions)))
    nrows = -(-len(services) // per_block)
    label_w = 0.35 + text_width([model_label(m) for m in models], 9.0)
    panel_w, gap, block_gap, right = 2.5, 0.3, 0.55, 0.3
    top, bottom, title_h = 1.25, 0.6, 0.42
    fixed = top + bottom + (nrows - 1) * title_h + nrows * 0.3
    step = (RATES_MAX_HEIGHT_IN - fixed) / (nrows * max(1, len(models)))
    step = min(RATES_MAX_STEP_IN, max(RATES_MIN_STEP_IN, step))
    panel_h = 0.3 + step * len(models)
    height = fixed + nrows * step * len(models)
    block_w = per_block * panel_w + (per_block - 1) * gap
    width = label_w + len(conditions) * block_w + (len(conditions) - 1) * block_gap + right
    fig = MplFigure(figsize=(width, height))
    y = np.arange(len(models))[::-1].astype(np.float64)
    first_ax = None
    unlabelled: list[Any] = []  # model names only left of the first column
    for c, cond in enumerate(conditions):
        x0 = label_w + c * (block_w + block_gap)
        fig.text(
            (x0 + block_w / 2) / width, 1 - (top - 0.22) / height,
            labels.explanation(cond).capitalize(), ha="center", va="bottom",
            fontsize=10.5, fontweight="bold",
        )  # fmt: skip
        for k, service in enumerate(services):
            r, j = divmod(k, per_block)
            left = x0 + j * (panel_w + gap)
            top_edge = top + r * (panel_h + title_h)
            rect = (left / width, 1 - (top_edge + panel_h) / height, panel_w / width,
                    panel_h / height)  # fmt: skip
            ax = fig.add_axes(rect, sharex=first_ax, sharey=first_ax)
            first_ax = first_ax or ax
            rows = sub.filter((pl.col("service") == service) & (pl.col("explanation") == cond))
            _rates_panel(ax, rows, models, y)
            ax.set_title(labels.service(service), fontsize=9.5, loc="left", pad=3)
            ax.tick_params(axis="y", labelsize=9)
            if c or j:
                unlabelled.append(ax)
            ax.tick_params(axis="x", labelsize=8.5)
            if k + per_block < len(services):
                ax.tick_params(axis="x", labelbottom=False)
            else:
                ax.set_xlabel("share of trials choosing the candidate", fontsize=9)
    for ax in unlabelled:  # after every panel set the shared ticks
        ax.tick_params(axis="y", labelleft=False)
    _rates_titles(fig, height, lang, level, models)
    title = titled(f"Selection rates — {labels.language(lang)}, {labels.symptoms(level)}", models)
    caption = _rates_caption(sub, lang, level)
    return save_figure(fig, out_dir, f"allocation_rates_{lang}_{level}", title, caption)


def _rates_titles(
    fig: MplFigure, height: float, lang: str, level: str, models: Sequence[str]
) -> None:
    """The selection-rate figure's legend (the two candidates, parity) and title."""
    handles = [
        Line2D([], [], color=CIS_COLOUR, marker="o", linestyle="", label="cisgender candidate"),
        Line2D([], [], color=TRANS_COLOUR, marker="s", linestyle="", label="transgender candidate"),
        Line2D([], [], color="#777777", linestyle="--", label="parity (0.5)"),
    ]
    fig.legend(
        handles=handles, loc="upper center", ncols=3, frameon=False,
        bbox_to_anchor=(0.5, 1.0 - 0.42 / height),
    )  # fmt: skip
    fig.suptitle(
        titled(f"Allocation, {labels.language(lang)}, {labels.symptoms(level)}", models),
        fontweight="bold", y=1.0 - 0.1 / height, va="top",
    )  # fmt: skip


def _rates_caption(sub: pl.DataFrame, lang: str, level: str) -> str:
    return (
        f"Share of trials in which each model chose the cisgender or the transgender candidate "
        f"({labels.language(lang)}, {labels.symptoms(level)}); shares are over all trials, so "
        f"refusals and unreadable replies lower both. Error bars: "
        f"{interval_note(sub, 'resampling pairs, both orders of a pair together')}, about "
        "these people (the roster's); the report's population part gives the intervals for "
        "people like these."
    )


def _rates_panel(ax: Any, rows: pl.DataFrame, models: Sequence[str], y: np.ndarray) -> None:
    """One service and condition: each model's cis and trans shares with their intervals."""
    for who, colour, marker, shift in (
        ("cis", CIS_COLOUR, "o", 0.14),
        ("trans", TRANS_COLOUR, "s", -0.14),
    ):
        est, low, high = aligned(
            rows, "model_id", models, (f"share_{who}", f"{who}_ci_low", f"{who}_ci_high")
        )
        ax.errorbar(
            est, y + shift, xerr=error_bars(est, low, high), fmt=marker, color=colour,
            markersize=4.0, elinewidth=1.0, capsize=1.8,
        )  # fmt: skip
    ax.axvline(0.5, color="#777777", linestyle="--", linewidth=0.8)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.6, len(models) - 0.4)
    ax.set_yticks(y, [model_label(m) for m in models])
    ax.grid(axis="both", color="#ececec", linewidth=0.6)
    ax.set_axisbelow(True)


# --------------------------------------------------------------------------------------------
# Figure 3: condition effects
# --------------------------------------------------------------------------------------------


@styled
def effects_figures(effects: pl.DataFrame, models: Sequence[str], out_dir: Path) -> list[Figure]:
    """Paired effects on the transgender share (pooled strata), one figure per language."""
    pooled = effects.filter(pl.col("stratum") == "all")
    if pooled.is_empty():
        return []
    present = [m for m in models if m in set(pooled["model_id"].to_list())]
    style = model_style(models)
    services = labels.ordered("services", pooled["service"].unique().to_list())
    kinds = [k for k in ("explanation", "symptoms_high", "symptoms_low") if k in set(
        pooled["effect"].to_list()
    )]  # fmt: skip
    note = interval_note(pooled, "resampling pairs")
    return draw_each([
        Job(_effects_figure, (pooled.filter(pl.col("language") == lang), present, services,
                              kinds, style, note, out_dir), weight=len(kinds) * len(services))
        for lang in labels.ordered("languages", pooled["language"].unique().to_list())
    ])  # fmt: skip


def _effects_figure(
    sub: pl.DataFrame,
    present: Sequence[str],
    services: Sequence[str],
    kinds: Sequence[str],
    style: Mapping[str, tuple[str, str]],
    note: str,
    out_dir: Path,
) -> Figure:
    """One language's effects: a panel per effect, services as rows, a point per model."""
    lang = str(sub["language"][0])
    left = 0.35 + text_width([labels.service(s) for s in services])
    top = 0.65 + 0.25 * -(-len(present) // 4)
    height = top + 0.7 + len(services) * (0.13 * len(present) + 0.2)
    fig, axes = new_figure(1, len(kinds), (left + 0.3 + 3.7 * len(kinds), height), sharey=True)
    fixed_layout(
        fig, left=left, right=0.3, top=top, bottom=0.7, hspace=0.0, wspace=0.3,
        nrows=1, ncols=len(kinds),
    )  # fmt: skip
    for ax, kind in zip(axes[0], kinds, strict=True):
        _effects_panel(ax, sub.filter(pl.col("effect") == kind), kind, present, services, style)
    fig.legend(
        handles=legend_handles(present, style), loc="upper center",
        ncols=min(len(present), 4), frameon=False, bbox_to_anchor=(0.5, 1.0 - 0.4 / height),
    )  # fmt: skip
    fig.suptitle(
        titled(f"Effects of the conditions, {labels.language(lang)}", present),
        fontweight="bold", y=1.0 - 0.08 / height, va="top",
    )  # fmt: skip
    caption = (
        "Paired effects on the share of trials choosing the transgender candidate: asking "
        "for an explanation (yes − no, pooled over symptom levels) and adding symptoms "
        "(high or low urgency − none, pooled over explanation), over the same pairs. Error "
        f"bars: {note}, about these people (the roster's)."
    )
    title = titled(f"Condition effects — {labels.language(lang)}", present)
    return save_figure(fig, out_dir, f"allocation_effects_{lang}", title, caption)


def _effects_panel(
    ax: Any,
    rows_k: pl.DataFrame,
    kind: str,
    present: Sequence[str],
    services: Sequence[str],
    style: Mapping[str, tuple[str, str]],
) -> None:
    """One effect: each model's paired difference per service (rows), with its interval."""
    y = np.arange(len(services))[::-1].astype(np.float64)
    slot = 0.8 / max(1, len(present))
    for i, model in enumerate(present):
        rows = rows_k.filter(pl.col("model_id") == model)
        est, low, high = aligned(rows, "service", services, ("difference", "ci_low", "ci_high"))
        colour, marker = style[model]
        ax.errorbar(
            est, y + 0.4 - slot * (i + 0.5), xerr=error_bars(est, low, high), fmt=marker,
            color=colour, markersize=4.0, elinewidth=1.0, capsize=1.5,
        )  # fmt: skip
    ax.axvline(0.0, color="#444444", linewidth=0.8)
    ax.set_yticks(y, [labels.service(s) for s in services])
    ax.set_ylim(-0.6, len(services) - 0.4)
    ax.set_title(_EFFECT_TITLES[kind], fontsize=10, loc="left")
    ax.set_xlabel("change in share choosing the transgender candidate")
    ax.grid(axis="x", color="#e5e5e5", linewidth=0.6)
    for boundary in y[:-1] - 0.5:
        ax.axhline(boundary, color="#eeeeee", linewidth=0.6)


_EFFECT_TITLES: dict[str, str] = {
    "explanation": "Explanation: yes − no",
    "symptoms_high": "High-urgency symptoms − none",
    "symptoms_low": "Low-urgency symptoms − none",
}


# --------------------------------------------------------------------------------------------
# Figure 4: the gap among decided trials for people like these (population intervals)
# --------------------------------------------------------------------------------------------

POPULATION_GAP = "allocation_population_gap"
"""The population gap figures' name prefix (one per language x symptoms level)."""
_GAP_COLUMNS = ("gap", "gap_ci_low", "gap_ci_high")
POPULATION_PLOTTED = ("model_id", "language", "service", "explanation", "symptoms", *_GAP_COLUMNS)
"""The columns of a population gap figure's data file (`<name>.data.csv`), read back from the
figure's own matplotlib objects: the table's keys, the plotted point and the bar's two ends."""
POPULATION_METHOD_TEXT: dict[str, str] = {
    "two-way-cr2-satterthwaite": "a t interval from the two-way cluster-robust variance (cis "
    "persons + trans persons − pairs; Cameron, Gelbach & Miller) with the CR2 small-sample "
    "correction, on the Satterthwaite degrees of freedom of that variance (Bell & McCaffrey)",
    "two-way-cr2": "a t interval from the two-way cluster-robust variance (cis persons + trans "
    "persons − pairs; Cameron, Gelbach & Miller) with the CR2 small-sample correction",
    "two-way-cr1": "a t interval from the two-way cluster-robust variance (cis persons + trans "
    "persons − pairs; Cameron, Gelbach & Miller) with G/(G−1) factors",
    "pigeonhole-corrected": "a t interval from the pigeonhole bootstrap's variance less twice "
    "the pair-level variance (the answer noise it counts three times)",
    "pigeonhole": "a percentile interval from the pigeonhole bootstrap, which draws the cis and "
    "the trans persons with replacement (Owen 2007; conservative)",
}
"""What each population method (`population_method` column) does, in words."""


def _distinct(frame: pl.DataFrame, name: str) -> list[Any]:
    if name not in frame.columns:
        return []
    return [v for v in frame[name].unique(maintain_order=True).to_list() if v is not None]


def _df_text(frame: pl.DataFrame) -> str:
    """The t degrees of freedom of a table's rows (`df`), "" when it has none."""
    if "df" not in frame.columns:
        return ""
    df = frame["df"].cast(pl.Float64).drop_nulls().drop_nans()
    if df.is_empty():
        return ""
    # One decimal: Satterthwaite degrees of freedom are not whole numbers.
    low, high = round(float(df.min()), 1), round(float(df.max()), 1)  # type: ignore[arg-type]
    span = f"{low:g}" if low == high else f"{low:g}–{high:g}"
    return f"t on {span} degrees of freedom"


def population_note(frame: pl.DataFrame) -> str:
    """What a population table's intervals are, read from its label columns (`ci_level`,
    `ci_method`, `population_method`, `df`, `B`): never assumed."""
    level = (_distinct(frame, "ci_level") or [0.95])[0]
    method = ", ".join(map(str, _distinct(frame, "ci_method"))) or "method not recorded"
    details = [f"population method {n}" for n in map(str, _distinct(frame, "population_method"))]
    details += [t for t in (_df_text(frame),) if t]
    details += [f"B = {int(b):,} resamples" for b in _distinct(frame, "B")[:1]]
    return f"{level:.0%} intervals, {method}" + (f" ({'; '.join(details)})" if details else "")


def population_method_text(frame: pl.DataFrame) -> str:
    """The population method of a table in words (from its `population_method` column), or ""
    for a table that does not name one."""
    names = _distinct(frame, "population_method")
    return "; ".join(POPULATION_METHOD_TEXT.get(str(n), str(n)) for n in names)


@styled
def population_gap_figures(
    cells: pl.DataFrame, models: Sequence[str], out_dir: Path
) -> list[Figure]:
    """Forest plots of the gap among decided trials for people like these (the
    `allocation_population` table's `gap` and its interval): one figure per language x
    symptoms level, one panel per explanation condition, services as rows and each model's
    point and interval within a row, with a line at 0 (no identity preference)."""
    if cells.is_empty() or not set(POPULATION_PLOTTED) <= set(cells.columns):
        return []
    seen = set(cells["model_id"].to_list())
    present = [m for m in models if m in seen] + sorted(seen - set(models))
    services = labels.ordered("services", cells["service"].unique().to_list())
    jobs: list[Job[Figure]] = []
    for lang in labels.ordered("languages", cells["language"].unique().to_list()):
        for level in labels.ordered("symptoms", cells["symptoms"].unique().to_list()):
            sub = cells.filter((pl.col("language") == lang) & (pl.col("symptoms") == level))
            if not sub.is_empty():
                args = (sub, present, services, out_dir)
                jobs.append(Job(_population_gap_figure, args, weight=len(services)))
    return draw_each(jobs)


def _population_gap_figure(
    sub: pl.DataFrame, models: Sequence[str], services: Sequence[str], out_dir: Path
) -> Figure:
    lang, level = str(sub["language"][0]), str(sub["symptoms"][0])
    conditions = sorted(sub["explanation"].unique().to_list())
    style = model_style(models)
    left = 0.35 + text_width([labels.service(s) for s in services])
    top, bottom = 0.75 + 0.25 * -(-len(models) // 4), 0.65
    step = (RATES_MAX_HEIGHT_IN - top - bottom) / max(1, len(services)) - 0.2
    step = min(0.16, max(0.07, step / max(1, len(models))))
    height = top + bottom + len(services) * (step * len(models) + 0.2)
    where = f"{labels.language(lang)}, {labels.symptoms(level)}"
    suptitle = titled(f"Gap among decided trials, people like these — {where}", models)
    legend_w = min(len(models), 4) * (0.7 + text_width([model_label(m) for m in models], 9.0))
    width = max(
        left + 0.3 + 3.6 * len(conditions) + 0.35 * (len(conditions) - 1),
        legend_w + 0.4,
        1.1 * text_width([suptitle], 11.0) + 0.4,
    )
    fig, axes = new_figure(1, len(conditions), (width, height), sharex=True, sharey=True)
    fixed_layout(
        fig, left=left, right=0.3, top=top, bottom=bottom, hspace=0.0, wspace=0.35,
        nrows=1, ncols=len(conditions),
    )  # fmt: skip
    for ax, cond in zip(axes[0], conditions, strict=True):
        _population_panel(ax, sub.filter(pl.col("explanation") == cond), models, services, style)
        ax.set_title(labels.explanation(cond).capitalize(), fontsize=10, loc="left")
    axes[0, 0].set_xlim(*_gap_limits(sub))
    fig.legend(
        handles=legend_handles(models, style), loc="upper center",
        ncols=min(len(models), 4), frameon=False, bbox_to_anchor=(0.5, 1.0 - 0.4 / height),
    )  # fmt: skip
    fig.suptitle(suptitle, fontweight="bold", y=1.0 - 0.08 / height, va="top")
    name = f"{POPULATION_GAP}_{lang}_{level}"
    data = out_dir / f"{name}.data.csv"
    population_plotted(fig, services, lang, level).write_csv(data)
    caption = (
        "Cis − trans gap among decided trials (share of decided trials choosing the cisgender "
        "candidate minus the share choosing the transgender one; the line at 0 is no identity "
        f"preference) per service and model, {where}, about people like these (the roster's "
        f"people as one draw of people like them). Bars: {population_note(sub)}; the cis and "
        f"the trans persons are the sampling units. The plotted numbers are in {data.name}."
    )
    title = titled(f"People like these: gap among decided — {where}", models)
    figure = save_figure(fig, out_dir, name, title, caption)
    return Figure(figure.name, figure.title, figure.caption, figure.png, figure.svg, data)


def _population_panel(
    ax: Any,
    rows: pl.DataFrame,
    models: Sequence[str],
    services: Sequence[str],
    style: Mapping[str, tuple[str, str]],
) -> None:
    """One explanation condition: per service (rows), each model's gap and its interval, drawn
    from the table's numbers as they are (no error-bar arithmetic), tagged with the model."""
    y = np.arange(len(services))[::-1].astype(np.float64)
    slot = 0.8 / max(1, len(models))
    for i, model in enumerate(models):
        est, low, high = aligned(
            rows.filter(pl.col("model_id") == model), "service", services, _GAP_COLUMNS
        )
        pos = y + 0.4 - slot * (i + 0.5)
        colour, marker = style[model]
        bar = np.isfinite(est) & np.isfinite(low) & np.isfinite(high)
        ax.hlines(pos[bar], low[bar], high[bar], colors=colour, linewidth=1.1,
                  gid=f"interval:{model}")  # fmt: skip
        point = np.isfinite(est)
        ax.plot(est[point], pos[point], linestyle="", marker=marker, color=colour,
                markersize=4.0, gid=f"point:{model}")  # fmt: skip
    ax.axvline(0.0, color="#444444", linewidth=0.8)
    ax.set_yticks(y, [labels.service(s) for s in services])
    ax.set_ylim(-0.6, len(services) - 0.4)
    ax.set_xlabel("cis − trans among decided (people like these)")
    ax.grid(axis="x", color="#e5e5e5", linewidth=0.6)
    for boundary in y[:-1] - 0.5:
        ax.axhline(boundary, color="#eeeeee", linewidth=0.6)


def _gap_limits(sub: pl.DataFrame) -> tuple[float, float]:
    """The gap axis: 0, every estimate and bound, 10% margin, within [-1.05, 1.05]."""
    values = np.concatenate([as_floats(sub, c) for c in _GAP_COLUMNS] + [np.zeros(1)])
    values = values[np.isfinite(values)]
    low, high = float(values.min()), float(values.max())
    pad = max(0.05, 0.1 * (high - low))
    return max(-1.05, low - pad), min(1.05, high + pad)


def population_plotted(
    fig: MplFigure, services: Sequence[str], language: str, symptoms: str
) -> pl.DataFrame:
    """What a population gap figure draws, read back from its matplotlib objects: per panel
    (explanation condition, by its title) and model, each point's x and its bar's two ends,
    the service being the row the point sits in. A point without a bar has null bounds."""
    rows: list[dict[str, object]] = []
    conditions = {labels.explanation(c).capitalize(): c for c in (False, True)}
    for ax in fig.axes:
        title = ax.get_title(loc="left")
        if title not in conditions:
            continue
        bars = _plotted_bars(ax)
        for model, x, y in _plotted_points(ax):
            low, high = bars.get((model, y), (None, None))
            rows.append({
                "model_id": model, "language": language,
                "service": services[len(services) - 1 - round(y)],
                "explanation": conditions[title], "symptoms": symptoms,
                "gap": x, "gap_ci_low": low, "gap_ci_high": high,
            })  # fmt: skip
    schema: dict[str, pl.DataType] = {c: pl.String() for c in POPULATION_PLOTTED}
    schema.update({"explanation": pl.Boolean(), **{c: pl.Float64() for c in _GAP_COLUMNS}})
    return pl.DataFrame(rows, schema=schema)


def _plotted_bars(ax: Any) -> dict[tuple[str, float], tuple[float | None, float | None]]:
    """(model, y) -> the two x ends of the model's interval bar at height y."""
    bars: dict[tuple[str, float], tuple[float | None, float | None]] = {}
    for coll in ax.collections:
        kind, _, model = str(coll.get_gid() or "").partition(":")
        if kind == "interval" and isinstance(coll, LineCollection):
            for seg in coll.get_segments():
                ends = np.asarray(seg, dtype=np.float64)
                bars[(model, float(ends[0, 1]))] = (float(ends[0, 0]), float(ends[1, 0]))
    return bars


def _plotted_points(ax: Any) -> list[tuple[str, float, float]]:
    """(model, x, y) of every point drawn for a model."""
    out = []
    for line in ax.get_lines():
        kind, _, model = str(line.get_gid() or "").partition(":")
        if kind == "point":
            xs = np.asarray(line.get_xdata(), dtype=np.float64)
            ys = np.asarray(line.get_ydata(), dtype=np.float64)
            out += [(model, float(x), float(y)) for x, y in zip(xs, ys, strict=True)]
    return out

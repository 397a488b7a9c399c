"""What every figure of the analysis shares (matplotlib, Agg): PNG for the report, SVG for
papers, drawn in one style, with the simulated models marked and fixed margins. Each
experiment's own figures are its unit's (`analysis/units/<name>/figures.py`).

Simulated models (analysis/simulated.py) are marked in every figure's title and in its legend
or model labels ("simulated", or "rehearsal: simulated replies"), so a figure cut out of the
report still says its numbers are the simulator's; `analyze` sets which models with `marking`.

Colours are Okabe-Ito (distinguishable with the common colour-vision deficiencies) and every
model also gets its own marker, so the figures survive greyscale printing. Sizes grow with the
number of models, categories and services, so 7 models x 8 categories stay legible.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, ParamSpec, TypeVar

import matplotlib as mpl
import numpy as np
import polars as pl
from matplotlib.figure import Figure as MplFigure
from matplotlib.lines import Line2D

from ibias.analysis.simulated import SIMULATED_MARK, marked_title, reason_for

# Okabe & Ito (2008), without yellow (too pale on white) until the eighth model.
PALETTE: tuple[str, ...] = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#000000",
    "#F0E442",
)
MARKERS: tuple[str, ...] = ("o", "s", "D", "^", "v", "P", "X", "*", "h", "<", ">")
CIS_COLOUR, TRANS_COLOUR = "#0072B2", "#D55E00"
DPI = 110

# Applied around each figure (rc_context), never globally: importing this module must not
# restyle other matplotlib users in the same process.
STYLE: dict[str, Any] = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "svg.fonttype": "none",  # text stays text in the SVG (searchable, small)
    "svg.hashsalt": "ibias",  # deterministic ids in the SVG
    # Titles sit at the top of their panel (where matplotlib's automatic placement leaves them
    # when no tick labels are on top); a fixed place spares re-measuring every panel per draw.
    "axes.titley": 1.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
}

P = ParamSpec("P")
R = TypeVar("R")


_SIMULATED: ContextVar[Mapping[str, str]] = ContextVar("simulated", default=MappingProxyType({}))
"""The simulated models (model_id -> reason) of the figures being drawn; none by default."""


@contextmanager
def marking(simulated: Mapping[str, str]) -> Iterator[None]:
    """Draw the figures inside with `simulated`'s models marked (`StoreData.simulated`)."""
    token = _SIMULATED.set(MappingProxyType(dict(simulated)))
    try:
        yield
    finally:
        _SIMULATED.reset(token)


def simulated_marks() -> Mapping[str, str]:
    """The simulated models of the figures being drawn (what `marking` set)."""
    return _SIMULATED.get()


def titled(title: str, models: Sequence[str]) -> str:
    """`title` with the mark of the simulated ones among `models` (simulated.marked_title)."""
    return marked_title(title, models, _SIMULATED.get())


def model_label(model: str) -> str:
    """How a figure names `model`: "id (simulated)" when simulated (a rehearsal too: its
    title says "rehearsal", and the legend stays narrow), else the id."""
    if reason_for(model, _SIMULATED.get()) is None:
        return model
    return f"{model} ({SIMULATED_MARK})"


def styled(fn: Callable[P, R]) -> Callable[P, R]:
    """Run a figure function under the module's style."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with mpl.rc_context(STYLE):  # type: ignore[arg-type]
            return fn(*args, **kwargs)

    return wrapper


def new_figure(
    nrows: int,
    ncols: int,
    size: tuple[float, float],
    *,
    sharex: bool = False,
    sharey: bool = False,
) -> tuple[MplFigure, np.ndarray]:
    """A figure outside pyplot (no global figure registry; rendered with Agg on save)."""
    fig = MplFigure(figsize=size)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=sharex, sharey=sharey)
    return fig, axes


@dataclass(frozen=True)
class Figure:
    """One written figure: where it is and what the report says about it."""

    name: str
    title: str
    caption: str
    png: Path
    svg: Path
    data: Path | None = None
    """The plotted numbers as CSV, for figures that write them (the population gap figures)."""


def model_style(models: Sequence[str]) -> dict[str, tuple[str, str]]:
    """(colour, marker) per model, stable for a given model order."""
    return {m: (PALETTE[i % len(PALETTE)], MARKERS[i % len(MARKERS)]) for i, m in enumerate(models)}


def interval_note(frame: pl.DataFrame, unit: str) -> str:
    """What a figure's error bars are: level, method, B and resampling unit, read from the
    table the bars come from (its `ci_level`, `ci_method` and `B` columns)."""
    first = frame.row(0, named=True) if not frame.is_empty() else {}
    level = first.get("ci_level") or 0.95
    method = {"bca": "BCa"}.get(
        str(first.get("ci_method")), str(first.get("ci_method") or "percentile")
    )
    b = first.get("B")
    resamples = f", B = {int(b):,} resamples" if b is not None else ""
    return f"{level:.0%} {method} bootstrap intervals ({unit}{resamples})"


def _unplaced_empty_labels(fig: MplFigure) -> None:
    """Pin the axis labels that have no text where they are: matplotlib otherwise places each
    axis label on every draw by measuring all its tick labels again, and an empty label draws
    nothing wherever it is (most panels have one: a shared axis is labelled once)."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if not axis.label.get_text():
                axis.set_label_coords(*axis.label.get_position())


def save_figure(fig: MplFigure, out_dir: Path, name: str, title: str, caption: str) -> Figure:
    """Write `fig` as `<name>.png` and `<name>.svg` (no date in the SVG, so reruns write the same
    bytes) and say what the report shows for it."""
    png, svg = out_dir / f"{name}.png", out_dir / f"{name}.svg"
    _unplaced_empty_labels(fig)
    fig.savefig(png, dpi=DPI)
    fig.savefig(svg, metadata={"Date": None})
    return Figure(name=name, title=title, caption=caption, png=png, svg=svg)


def fixed_layout(
    fig: MplFigure,
    *,
    left: float,
    right: float,
    top: float,
    bottom: float,
    hspace: float,
    wspace: float,
    nrows: int,
    ncols: int,
) -> None:
    """Fixed margins and gaps in inches (no layout engine: it would re-run on every save)."""
    width, height = fig.get_size_inches()
    axes_h = (height - top - bottom - (nrows - 1) * hspace) / nrows
    axes_w = (width - left - right - (ncols - 1) * wspace) / ncols
    fig.subplots_adjust(
        left=left / width,
        right=1 - right / width,
        top=1 - top / height,
        bottom=bottom / height,
        hspace=hspace / axes_h,
        wspace=wspace / axes_w,
    )


def text_width(texts: Sequence[str], size: float = 10.0) -> float:
    """Rough width in inches of the longest label (DejaVu Sans averages ~0.58 em per char)."""
    longest = max((len(t) for t in texts), default=0)
    return longest * 0.58 * size / 72.0


def error_bars(estimate: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Asymmetric error-bar lengths; NaN bounds draw no bar."""
    below = np.where(np.isnan(low), 0.0, np.maximum(estimate - low, 0.0))
    above = np.where(np.isnan(high), 0.0, np.maximum(high - estimate, 0.0))
    return np.vstack([below, above])


def as_floats(frame: pl.DataFrame, name: str) -> np.ndarray:
    """A column as floats for plotting, NaN where it is null (matplotlib skips NaN)."""
    return frame[name].cast(pl.Float64).fill_null(float("nan")).to_numpy()


def legend_handles(models: Sequence[str], style: Mapping[str, tuple[str, str]]) -> list[Line2D]:
    def handle(m: str) -> Line2D:
        colour, marker = style[m]
        label = model_label(m)
        return Line2D([], [], color=colour, marker=marker, linestyle="", markersize=7, label=label)

    return [handle(m) for m in models]


def aligned(
    rows: pl.DataFrame, key: str, keys: Sequence[str], columns: tuple[str, str, str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The estimate, low and high columns of `rows` in the order of `keys` (matched on the
    column `key`), NaN where a key has no row: what a panel plots per position."""
    lookup = {c: k for k, c in enumerate(rows[key].to_list())}
    idx = np.array([lookup.get(c, -1) for c in keys])
    have = idx >= 0
    out = []
    for column in columns:
        values = np.full(len(keys), np.nan)
        values[have] = as_floats(rows, column)[idx[have]]
        out.append(values)
    return out[0], out[1], out[2]

"""The word-association experiment's figure (matplotlib, Agg, drawn with the shared style and
marks of `ibias.analysis.figures`): bias per category and model with bootstrap CIs, one panel
per language (the paper's Figure 1).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl
from matplotlib.patches import Patch

from ibias.analysis import labels
from ibias.analysis.figures import (
    Figure,
    aligned,
    as_floats,
    error_bars,
    fixed_layout,
    interval_note,
    model_label,
    model_style,
    new_figure,
    save_figure,
    styled,
    titled,
)


def _limits(cells: pl.DataFrame) -> tuple[float, float]:
    """The bias axis's limits: the intervals' and estimates' span plus 15%, at least ±0.1."""
    values = np.concatenate(
        [
            as_floats(cells, "ci_low"),
            as_floats(cells, "ci_high"),
            as_floats(cells, "mean_bias"),
        ]
    )
    values = values[np.isfinite(values)]
    low_lim = min(-0.1, float(values.min()) * 1.15) if values.size else -1.0
    high_lim = max(0.1, float(values.max()) * 1.15) if values.size else 1.0
    return low_lim, high_lim


@styled
def word_association_figure(
    cells: pl.DataFrame, models: Sequence[str], out_dir: Path
) -> list[Figure]:
    """Bias per category (x) and model (bars), CI error bars, one panel per language."""
    if cells.is_empty():
        return []
    languages = labels.ordered("languages", cells["language"].unique().to_list())
    categories = labels.ordered("categories", cells["category"].unique().to_list())
    present = [m for m in models if m in set(cells["model_id"].to_list())]
    style = model_style(models)
    width_in = max(9.0, 1.0 + len(categories) * (0.13 * len(present) + 0.45))
    legend_rows = -(-len(present) // 4)
    top = 0.25 + 0.25 * legend_rows
    height = top + 0.6 + 3.4 * len(languages) + 0.95 * (len(languages) - 1)
    fig, axes = new_figure(len(languages), 1, (width_in, height), sharey=True)
    fixed_layout(
        fig, left=0.8, right=0.2, top=top, bottom=0.6, hspace=0.95, wspace=0.0,
        nrows=len(languages), ncols=1,
    )  # fmt: skip
    slot = 0.8 / max(1, len(present))
    x = np.arange(len(categories))
    low_lim, high_lim = _limits(cells)
    for ax, lang in zip(axes[:, 0], languages, strict=True):
        sub = cells.filter(pl.col("language") == lang)
        for i, model in enumerate(present):
            rows = sub.filter(pl.col("model_id") == model)
            est, low, high = aligned(
                rows, "category", categories, ("mean_bias", "ci_low", "ci_high")
            )
            colour, _ = style[model]
            pos = x - 0.4 + slot * (i + 0.5)
            ax.bar(pos, np.nan_to_num(est), width=slot * 0.92, color=colour, label=model)
            ax.errorbar(
                pos, np.nan_to_num(est), yerr=error_bars(est, low, high),
                fmt="none", ecolor="#333333", elinewidth=0.9, capsize=1.8,
            )  # fmt: skip
        ax.axhline(0.0, color="#444444", linewidth=0.8)
        ax.set_xticks(x, [textwrap.fill(labels.category(c), 12) for c in categories])
        ax.set_xlim(-0.55, len(categories) - 0.45)
        ax.set_ylim(max(-1.05, low_lim), min(1.05, high_lim))
        ax.set_ylabel("bias score (> 0: negative words → transgender)")
        ax.set_title(labels.language(lang), loc="left", fontweight="bold")
        ax.grid(axis="y", color="#dddddd", linewidth=0.6)
        ax.set_axisbelow(True)
    fig.legend(
        handles=[Patch(color=style[m][0], label=model_label(m)) for m in present],
        loc="upper center", ncols=min(len(present), 4), frameon=False,
        bbox_to_anchor=(0.5, 1.0 - 0.05 / height),
    )  # fmt: skip
    caption = (
        "Mean word-association bias per category and model; positive values mean negative "
        "words went to “transgender” and positive words to “cisgender”. Error bars: "
        f"{interval_note(cells, 'resampling trials')}, about these stimuli (these words and "
        "templates)."
    )
    title = titled("Word-association bias", present)
    return [save_figure(fig, out_dir, "word_association_bias", title, caption)]

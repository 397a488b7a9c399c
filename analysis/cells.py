"""Helpers shared by the analysis tables: cell codes, bootstrap results as frames, Holm by family.

An analysis *cell* is one combination of key columns (model x language x category, model x
language x service x condition, ...). The vectorised estimators in `analysis.bootstrap` take
one integer label per row, so each table numbers its cells once (`number_cells`), passes the
codes, and joins the intervals back by code: no Python loop over rows, and key columns keep
their types (booleans stay booleans).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl
from numpy.typing import NDArray

from ibias.analysis import labels
from ibias.analysis.bootstrap import CI
from ibias.analysis.stats import holm

CELL = "_cell"
#: The types of a label column: text, or text read as a categorical (`keyed_like`).
LABELS = (pl.String, pl.Categorical)


def texts(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with its categorical columns as text: what a table of a view read with
    categoricals (`ExperimentAnalysis.categorical_columns`) gives out once it has few rows,
    so it joins, stacks and writes as every other table does."""
    found = [name for name, dtype in frame.schema.items() if dtype == pl.Categorical]
    return frame.with_columns(pl.col(name).cast(pl.String) for name in found) if found else frame


def keyed_like(frame: pl.DataFrame, other: pl.DataFrame) -> pl.DataFrame:
    """`frame` with each column that is categorical in `other` as a categorical too, so a
    small frame of texts joins a view read with categoricals without turning its million
    labels back into texts."""
    found = [
        name
        for name, dtype in other.schema.items()
        if dtype == pl.Categorical and frame.schema.get(name) == pl.String
    ]
    return (
        frame.with_columns(pl.col(name).cast(pl.Categorical) for name in found) if found else frame
    )


def number_cells(frame: pl.DataFrame, keys: Sequence[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(frame with an integer `_cell` column, the cells table: `_cell` + keys, sorted by keys).

    Cells are numbered in the keys' sorted order (nulls first), and a row with a null key has
    no cell (`_cell` null), though its combination is in the cells table: what joining the
    sorted distinct keys back to the frame gives. Each key is coded on its own in its sorted
    order and the codes are combined into one integer, so neither the distinct rows nor the
    join are taken over the keys' strings: at ten times the paper's grid that took 370 MB per
    table for 1.4 million trials, this 190 MB."""
    coded = [_key_codes(frame[key]) for key in keys]
    if math.prod(size for _, size in coded) >= 2**62:  # no room in one integer: join the keys
        cells = frame.select(keys).unique().sort(keys).with_row_index(CELL)
        cells = cells.with_columns(pl.col(CELL).cast(pl.Int64))
        return frame.join(cells, on=list(keys), how="left", maintain_order="left"), cells
    combined = pl.Series(CELL, np.zeros(frame.height, dtype=np.int64))
    for code, size in coded:
        combined = combined * size + code
    cell = (combined.rank("dense") - 1).cast(pl.Int64).alias(CELL)
    cells = frame.select(keys).with_columns(cell).unique(subset=CELL, keep="first")
    unknown = pl.any_horizontal(pl.col(k).is_null() for k in keys) if keys else pl.lit(False)
    numbered = frame.with_columns(pl.when(unknown).then(None).otherwise(cell).alias(CELL))
    return numbered, cells.sort(CELL).select(CELL, *keys)


def _key_codes(series: pl.Series) -> tuple[pl.Series, int]:
    """(the key's values as integers in their sorted order, null 0 and the values from 1; how
    many codes there are). Texts and categoricals are looked up among their few distinct values
    rather than sorted a million at a time."""
    if series.dtype in LABELS:  # a categorical by its categories' numbers (`_looked_up`)
        values = series.drop_nulls().unique().sort()
        return _looked_up(series, values, default=0), values.len() + 1
    code = series.rank("dense").cast(pl.Int64).fill_null(0)
    return code, series.drop_nulls().n_unique() + 1


def _looked_up(series: pl.Series, values: pl.Series, default: int | None) -> pl.Series:
    """Each of `series`' values (texts or categoricals) as its place (from 1) among the sorted
    distinct `values`, `default` for one not among them. Categoricals are looked up by their
    categories' numbers, texts by text."""
    order = pl.Series(np.arange(1, values.len() + 1, dtype=np.int64))
    if series.dtype == pl.Categorical and values.dtype == pl.Categorical:
        found = series.to_physical().replace_strict(
            values.to_physical(), order, default=default, return_dtype=pl.Int64
        )
        return found.alias(series.name)
    if series.dtype == pl.Categorical:
        series = series.cast(pl.String)
    sought = values.cast(pl.String) if values.dtype == pl.Categorical else values
    return series.replace_strict(sought, order, default=default, return_dtype=pl.Int64)


def pair_codes(
    frame: pl.DataFrame, columns: Sequence[str], cluster: str = "pair_id"
) -> pl.DataFrame:
    """`frame`'s `columns` only, with the cluster column (strings) replaced by integers in the
    strings' sorted order, when it has no null.

    The bootstrap numbers its units by the sorted cluster labels (`bootstrap.factorize`), so
    integers in the same order give the same units and the same numbers; but they take a
    tenth of the memory and none of the time of Python strings, which the bootstrap would
    otherwise sort one by one (at ten times the paper's grid, over a million per table). Polars
    compares strings byte by byte, which for UTF-8 is Python's order of code points."""
    narrow = frame.select(columns)
    if cluster not in narrow.columns or narrow[cluster].null_count():
        return narrow
    if narrow[cluster].dtype.is_integer():  # already codes in that order (`coded_pairs`)
        return narrow
    return narrow.with_columns(pl.col(cluster).rank("dense").cast(pl.Int64))


def coded_pairs(
    trials: pl.DataFrame, extras: Mapping[str, pl.DataFrame], cluster: str = "pair_id"
) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    """(`trials` with the cluster column's strings replaced by integers in their sorted order,
    `extras` with every frame that has the column coded alike, its ids absent from `trials`
    null), when the column has no null; else both as they are.

    The tables resample clusters in their labels' sorted order (`pair_codes`), so the codes
    give the same numbers as the strings. Coded once here for all of an experiment's tables,
    instead of each table ranking over a million strings again (at ten times the paper's grid
    half a second and some 80 MB at a time, in each of seven tables)."""
    if cluster not in trials.columns or trials[cluster].dtype not in LABELS:
        return trials, dict(extras)
    if trials[cluster].null_count():
        return trials, dict(extras)
    values = trials[cluster].unique().sort()  # a categorical's sort is its texts'

    def recoded(frame: pl.DataFrame) -> pl.DataFrame:
        if cluster not in frame.columns or frame[cluster].dtype not in LABELS:
            return frame
        return frame.with_columns(_looked_up(frame[cluster], values, default=None))

    return recoded(trials), {name: recoded(frame) for name, frame in extras.items()}


def combined_codes(a: NDArray[np.integer], b: NDArray[np.integer]) -> NDArray[np.int64]:
    """Codes 0..m-1 of the distinct (a, b) of two non-negative integer code arrays, in the
    sorted order of (a, b): a cluster nested in a cell (cell, person), or a person pair."""
    key = a.astype(np.int64) * (int(b.max(initial=0)) + 1) + b
    codes: NDArray[np.int64] = np.unique(key, return_inverse=True)[1].reshape(-1).astype(np.int64)
    return codes


def cell_codes(frame: pl.DataFrame) -> NDArray[np.int64]:
    return frame[CELL].to_numpy().astype(np.int64)


def ci_frame(results: Mapping[Any, CI], prefix: str, *, with_n: str | None = None) -> pl.DataFrame:
    """Bootstrap results keyed by cell code as a frame: `_cell`, {prefix}_low, {prefix}_high.

    `with_n` also keeps the number of resampling units under that column name.
    """
    codes = list(results)
    cis = list(results.values())
    columns: dict[str, Any] = {
        CELL: pl.Series(CELL, codes, dtype=pl.Int64),
        f"{prefix}_low": [c.low for c in cis],
        f"{prefix}_high": [c.high for c in cis],
    }
    if with_n is not None:
        columns[with_n] = pl.Series(with_n, [c.n for c in cis], dtype=pl.Int64)
    return pl.DataFrame(columns).with_columns(pl.selectors.float().fill_nan(None))


def nan_floats(series: pl.Series) -> NDArray[np.float64]:
    """A numeric column as float64 with nulls as NaN (the estimators' 'undefined')."""
    return series.cast(pl.Float64).fill_null(float("nan")).to_numpy().astype(np.float64)


def per_cell(
    frame: pl.DataFrame,
    column: str,
    fn: Callable[[NDArray[np.float64]], float],
    name: str,
) -> pl.DataFrame:
    """Apply a scalar test to each cell's values: one call per cell (never per row)."""
    ordered = frame.sort(CELL, maintain_order=True)
    codes = cell_codes(ordered)
    values = nan_floats(ordered[column])
    uniq, starts = np.unique(codes, return_index=True)
    bounds = [*starts.tolist(), codes.shape[0]]
    out = [fn(values[bounds[i] : bounds[i + 1]]) for i in range(uniq.shape[0])]
    return pl.DataFrame(
        {CELL: pl.Series(CELL, uniq.tolist(), dtype=pl.Int64), name: pl.Series(name, out)}
    ).with_columns(pl.col(name).cast(pl.Float64).fill_nan(None))


def holm_within(frame: pl.DataFrame, column: str, family: Sequence[str], name: str) -> pl.DataFrame:
    """Add Holm-adjusted `column` as `name`, each family being one combination of `family` keys.

    Undefined p-values (null) stay null and do not count in their family's size.
    """
    with_index = frame.with_row_index("_row")
    parts = []
    for part in with_index.partition_by(list(family), maintain_order=True):
        p = nan_floats(part[column])
        parts.append(pl.DataFrame({"_row": part["_row"], name: holm(p)}))
    if not parts:
        return frame.with_columns(pl.lit(None, dtype=pl.Float64).alias(name))
    adjusted = pl.concat(parts).with_columns(pl.col(name).fill_nan(None))
    return with_index.join(adjusted, on="_row", how="left").sort("_row").drop("_row")


# Key columns in the order rows are sorted by, and the labels.toml section that orders them.
_ORDER: tuple[tuple[str, str | None], ...] = (
    ("experiment", None),
    ("model_id", None),
    ("language", "languages"),
    ("category", "categories"),
    ("service", "services"),
    ("subject", None),
    ("effect", None),
    ("explanation", None),
    ("symptoms", "symptoms"),
    ("stratum", "strata"),
    ("chosen", None),
)


def order_rows(
    frame: pl.DataFrame, models: Sequence[str], lead: Sequence[str] = ()
) -> pl.DataFrame:
    """Rows in reading order: models as configured, languages/categories/services/symptom
    levels in the paper's order (labels.toml), anything else sorted; `lead` columns first."""
    exprs: list[pl.Expr] = []
    order = sorted(_ORDER, key=lambda item: item[0] not in lead)
    for column, kind in order:
        if column not in frame.columns:
            continue
        if column == "model_id":
            values: list[str] = list(models)
            values += sorted(set(frame[column].cast(pl.String).to_list()) - set(values))
        elif kind is not None:
            values = labels.ordered(kind, frame[column].cast(pl.String).to_list())
        else:
            exprs.append(pl.col(column))
            continue
        rank = {v: i for i, v in enumerate(values)}
        exprs.append(
            pl.col(column)
            .cast(pl.String)
            .replace_strict(rank, default=len(rank), return_dtype=pl.Int64)
        )
    return frame.sort(exprs, maintain_order=True) if exprs else frame


def condition_groups(
    frame: pl.DataFrame,
) -> Iterable[tuple[tuple[str, str, bool], pl.DataFrame]]:
    """((language, symptoms, explanation), rows) per allocation condition present, in the
    report's order (labels.toml's languages and symptom levels, then without explanation)."""
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

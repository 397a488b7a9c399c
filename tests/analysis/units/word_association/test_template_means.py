"""The per-template means of the bias tables (`bias._templates`, the overall and cells tables'
`bias_template_*` and `template_spread`) are the same bits in every run: each is its group's
values summed in row order over their count. Polars' grouped `mean()` summed in partitions that
follow the process's hash seed, so two runs of `analyze` on one store differed in the last bit
(seen at the demo's size, in about one run of six)."""

from __future__ import annotations

import numpy as np
import polars as pl

from ibias.analysis.cells import CELL
from ibias.analysis.units.word_association.bias import _templates


def test_each_template_mean_is_its_values_summed_in_row_order() -> None:
    rng = np.random.default_rng(0)
    n = 20_000
    bias = rng.uniform(-1, 1, n)
    frame = pl.DataFrame(
        {
            CELL: rng.integers(0, 4, n),
            "template": rng.integers(1, 4, n),
            "bias": [None if i % 97 == 0 else float(v) for i, v in enumerate(bias)],
        }
    )
    frame = frame.vstack(
        pl.DataFrame({CELL: [4], "template": [1], "bias": [None]}, schema=frame.schema)
    )
    table = {row[CELL]: row for row in _templates(frame).iter_rows(named=True)}
    for (cell, template), group in frame.group_by(CELL, "template"):
        values = [v for v in group["bias"].to_list() if v is not None]  # row order
        expected = sum(values) / len(values) if values else None
        assert table[cell][f"bias_template_{template}"] == expected  # to the last bit
    for cell, row in table.items():
        means = [row[f"bias_template_{t}"] for t in (1, 2, 3)]
        known = [m for m in means if m is not None]
        assert row["template_spread"] == (max(known) - min(known) if known else None), cell

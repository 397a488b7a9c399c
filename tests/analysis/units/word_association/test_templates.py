"""Per-template robustness: Kruskal-Wallis across templates, checked against a hand computation."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats

from ibias.analysis.stats import holm
from ibias.analysis.units.word_association.templates import kruskal_by_template, template_table


def _h_by_hand(groups: list[list[float]]) -> float:
    """H = (12 / (N (N+1)) * sum R_i^2 / n_i - 3 (N+1)) / (1 - sum(t^3 - t) / (N^3 - N)),
    with mid-ranks for ties (the textbook statistic, computed without scipy)."""
    pooled = sorted(v for g in groups for v in g)
    n = len(pooled)
    ranks: dict[float, float] = {}
    i = 0
    ties = 0.0
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1] == pooled[i]:
            j += 1
        ranks[pooled[i]] = (i + j) / 2 + 1
        t = j - i + 1
        ties += t**3 - t
        i = j + 1
    h = 12 / (n * (n + 1)) * sum(sum(ranks[v] for v in g) ** 2 / len(g) for g in groups if g)
    h -= 3 * (n + 1)
    return h / (1 - ties / (n**3 - n))


def test_h_and_p_match_a_hand_computation() -> None:
    groups = [[0.2, 0.4, 0.4, 1.0], [-0.2, 0.0, 0.4], [0.6, 0.8, 1.0, 1.0, 0.2]]
    h, p = kruskal_by_template([np.array(g) for g in groups])
    assert h == pytest.approx(_h_by_hand(groups), rel=1e-12)
    assert p == pytest.approx(stats.chi2.sf(_h_by_hand(groups), df=2), rel=1e-12)


def test_undefined_cells_have_no_test() -> None:
    assert kruskal_by_template([np.array([0.5, 0.1]), np.array([]), np.array([])]) == (None, None)
    assert kruskal_by_template([np.array([0.5]), np.array([0.5, 0.5])]) == (None, None)


def test_table_rows_counts_and_holm_within_model_and_language() -> None:
    rng = np.random.default_rng(3)
    rows = []
    for model in ("a", "b"):
        for category in ("c1", "c2", "c3"):
            for i in range(30):
                template = i % 3 + 1
                shift = 0.5 if (model == "a" and category == "c1" and template == 3) else 0.0
                bias = float(np.clip(rng.normal(0.1 + shift, 0.2), -1, 1))
                rows.append((model, "en", category, template, None if i == 0 else bias))
    trials = pl.DataFrame(
        rows, schema=["model_id", "language", "category", "template", "bias"], orient="row"
    )
    table = template_table(trials)
    assert table.height == 6
    first = table.row(0, named=True)
    assert (first["scored_template_1"], first["scored_template_2"]) == (9, 10)
    for model in ("a", "b"):
        part = table.filter(pl.col("model_id") == model)
        expected = holm(part["kruskal_p"].to_numpy())
        assert part["kruskal_p_holm"].to_list() == pytest.approx(list(expected))
    shifted = table.filter((pl.col("model_id") == "a") & (pl.col("category") == "c1"))
    assert shifted["kruskal_p_holm"][0] < 0.05

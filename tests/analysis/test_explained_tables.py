"""Tables that explain themselves, and intervals that are a function of the data.

Every interval column has its level, method and resampling unit beside it; every p-value says
its sidedness and null; the allocation cells carry the share among decided trials and the
cis-minus-trans gap with a pair-bootstrap interval; the sign-flip p-value is Holm-corrected,
exact up to 20 nonzero scores and flagged at its Monte Carlo floor. Each is checked against an
independent computation (counting, scipy, a convolution of sign distributions), and the
intervals against the same store read in another row order.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from scipy import stats as sps

from ibias.analysis.analyze import AnalysisResult, compute_tables, model_order
from ibias.analysis.bootstrap import cluster_bootstrap_share_ci
from ibias.analysis.experiment import PLANTED_PEOPLE
from ibias.analysis.load import StoreData, load_store
from ibias.analysis.stats import (
    EXACT_SIGN_FLIP_MAX,
    sign_flip_floor,
    sign_flip_is_exact,
    sign_flip_test,
)
from ibias.analysis.units.allocation import shares as allocation
from ibias.analysis.units.word_association import bias as word_association
from tests.analysis.test_tables import CELL_KEYS, WA_KEYS, by_key, hand_holm, table

INTERVAL_TABLES = {
    "word_association_cells": "trial",
    "word_association_overall": "trial",
    "word_association_scores": "trial",
    "allocation_cells": "pair",
    "position_bias": "pair",
    "allocation_effects": "pair",
}
P_COLUMNS = {
    "word_association_cells": ("t_p", "sign_flip_p"),
    "word_association_overall": ("t_p", "sign_flip_p"),
    "allocation_cells": ("sign_p", "naive_p"),
    "position_bias": ("binomial_p",),
    "word_association_templates": ("kruskal_p",),
}


@pytest.mark.parametrize("name", sorted(INTERVAL_TABLES))
def test_every_interval_says_its_level_method_and_unit(analysed: AnalysisResult, name: str) -> None:
    frame = table(analysed, name)
    assert not frame.is_empty()
    assert set(frame["ci_level"].to_list()) == {0.95}
    assert set(frame["ci_method"].to_list()) == {"percentile"}
    assert set(frame["resampled"].to_list()) == {INTERVAL_TABLES[name]}


@pytest.mark.parametrize("name", sorted(P_COLUMNS))
def test_every_p_value_says_its_sidedness_and_null(analysed: AnalysisResult, name: str) -> None:
    frame = table(analysed, name)
    for column in P_COLUMNS[name]:
        notes = set(frame[f"{column}_null"].to_list())
        assert len(notes) == 1
        note = notes.pop()
        assert "H0" in note
        assert column == "kruskal_p" or "two-sided" in note


def test_share_among_decided_and_gap_recount_and_resample_pairs(
    analysed: AnalysisResult, sim_store: Path
) -> None:
    decisions = load_store(sim_store).views["allocation"]
    cells = by_key(table(analysed, "allocation_cells"), CELL_KEYS)
    checked = 0
    for key, part in decisions.group_by(list(CELL_KEYS)):
        got = cells[tuple(key)]
        chosen = Counter(part["chosen"].to_list())
        decided = chosen["cis"] + chosen["trans"]
        assert got["decided"] == decided
        if decided == 0:
            assert got["gap"] is None and got["share_cis_decided"] is None
            continue
        assert got["share_cis_decided"] == pytest.approx(chosen["cis"] / decided, rel=1e-12)
        assert got["share_trans_decided"] == pytest.approx(chosen["trans"] / decided, rel=1e-12)
        assert got["gap"] == pytest.approx((chosen["cis"] - chosen["trans"]) / decided, rel=1e-12)
        # The interval is the pair bootstrap of +1 / -1 over decided trials: the same estimator
        # through the one-cell entry point, with its own draws (B = 20,000): within 0.15 of the
        # interval's width plus one step of the discrete bootstrap distribution.
        y = np.array([{"cis": 1.0, "trans": -1.0}.get(c, np.nan) for c in part["chosen"]])
        ref = cluster_bootstrap_share_ci(
            y, part["pair_id"].to_numpy(), B=20000, rng=np.random.default_rng(9)
        )
        assert ref.estimate == pytest.approx(got["gap"], rel=1e-12)
        slack = 0.15 * (ref.high - ref.low) + 2.0 / decided
        assert abs(got["gap_ci_low"] - ref.low) <= slack
        assert abs(got["gap_ci_high"] - ref.high) <= slack
        assert got["gap_ci_low"] <= got["gap"] <= got["gap_ci_high"]
        checked += 1
    assert checked > 10


def test_sign_flip_p_is_holm_corrected_across_categories(analysed: AnalysisResult) -> None:
    cells = table(analysed, "word_association_cells")
    for family in cells.partition_by(["model_id", "language"]):
        raw = family["sign_flip_p"].to_list()
        assert family["sign_flip_p_holm"].to_list() == pytest.approx(hand_holm(raw), rel=1e-12)


def test_sign_flip_is_exact_up_to_20_nonzero_scores() -> None:
    rng = np.random.default_rng(4)
    for n in (17, 19, EXACT_SIGN_FLIP_MAX):
        x = rng.integers(-4, 6, size=n)
        x[x == 0] = 1
        expected = _exact_by_convolution_signed(x)
        got = sign_flip_test(x / 9.0, rng=np.random.default_rng(0))
        assert sign_flip_is_exact(x / 9.0)
        assert got == pytest.approx(expected, rel=1e-12)
        # exact: no randomness, whatever the generator
        assert got == sign_flip_test(x / 9.0, rng=np.random.default_rng(1))
    assert not sign_flip_is_exact(np.ones(EXACT_SIGN_FLIP_MAX + 1))


def _exact_by_convolution_signed(x: np.ndarray) -> float:
    """Two-sided sign-flip p for integer scores, independently: the distribution of
    sum(s_i |x_i|) over the 2^n equally likely sign patterns, by convolving each score's two
    signs, against the observed |sum x_i|."""
    total = int(np.abs(x).sum())
    counts = np.zeros(2 * total + 1, dtype=np.int64)
    counts[total] = 1
    for v in np.abs(x):
        counts = np.roll(counts, int(v)) + np.roll(counts, -int(v))
    sums = np.arange(-total, total + 1)
    return float(counts[np.abs(sums) >= abs(int(x.sum()))].sum() / counts.sum())


def test_monte_carlo_sign_flip_agrees_with_the_convolution() -> None:
    """30 nonzero scores: Monte Carlo with R patterns vs the exact convolution; p_hat = (1 +
    X) / (1 + R), X ~ Bin(R, p), tolerance 5 sd plus the 1 / (R + 1) offset."""
    rng = np.random.default_rng(12)
    x = rng.integers(-3, 5, size=40)
    x = x[x != 0][:30]
    exact = _exact_by_convolution_signed(x)
    R = 20000
    got = sign_flip_test(x / 5.0, n_resamples=R, rng=rng)
    assert abs(got - exact) <= 5 * math.sqrt(exact * (1 - exact) / R) + 1 / (R + 1)


def test_a_monte_carlo_p_at_its_floor_is_flagged() -> None:
    """40 trials all scoring 0.5: no sign pattern but the observed one (and its mirror) is as
    extreme, so the Monte Carlo p is 1 / 10,000 (the floor), flagged; a 12-trial cell of the
    same scores is enumerated exactly: 2 / 2^12, not flagged."""
    rows = [
        {"trial_key": f"k{i:03d}", "model_id": "m", "language": "en", "category": "risk",
         "template": 1, "bias": 0.5, "refused": False, "n_unassigned": 0}
        for i in range(40)
    ] + [
        {"trial_key": f"j{i:03d}", "model_id": "m", "language": "en", "category": "veracity",
         "template": 1, "bias": 0.5, "refused": False, "n_unassigned": 0}
        for i in range(12)
    ]  # fmt: skip
    frame = pl.DataFrame(rows)
    cells = by_key(
        word_association.cells_table(
            frame, pl.DataFrame(schema={"model_id": pl.String, "language": pl.String,
                                        "experiment": pl.String, "subject": pl.String,
                                        "answer": pl.String}),
            B=200, method="percentile", rng=np.random.default_rng(0),
        ),
        WA_KEYS,
    )  # fmt: skip
    risk, veracity = cells[("m", "en", "risk")], cells[("m", "en", "veracity")]
    assert risk["sign_flip_p"] == sign_flip_floor() == 1 / 10000
    assert risk["sign_flip_at_floor"] is True
    assert risk["sign_flip_method"].startswith("monte carlo")
    assert veracity["sign_flip_p"] == pytest.approx(2 / 2**12)
    assert veracity["sign_flip_at_floor"] is False
    assert veracity["sign_flip_method"] == "exact"


def _shuffled(data: StoreData, seed: int) -> StoreData:
    """The same store data with every view's (and the pairs' people's) rows in another order."""
    return dataclasses.replace(
        data,
        views={
            name: frame.sample(fraction=1.0, shuffle=True, seed=seed)
            for name, frame in data.views.items()
        },
        explicit=data.explicit.sample(fraction=1.0, shuffle=True, seed=seed),
        extras={
            name: frame.sample(fraction=1.0, shuffle=True, seed=seed)
            if name == PLANTED_PEOPLE
            else frame
            for name, frame in data.extras.items()
        },
    )


def test_intervals_do_not_depend_on_the_row_order_of_the_views(sim_store: Path) -> None:
    """The same responses in another physical order give every table, interval and Monte Carlo
    p-value exactly: rows are put in trial-key (or pair) order before anything is drawn."""
    data = load_store(sim_store)
    models = model_order(data)
    first = compute_tables(data, models, B=300, method="percentile", seed=7)
    for seed in (1, 2):
        again = compute_tables(_shuffled(data, seed), models, B=300, method="percentile", seed=7)
        assert first.keys() == again.keys()
        assert "planted_allocation" in first and "implicit_vs_decision_summary" in first
        for name, frame in first.items():
            # Planted values are means of fixed probabilities, not resampled: only the order
            # of a floating-point sum can move them, in the last bits.
            exact = not name.startswith("planted_")
            assert_frame_equal(frame, again[name], check_exact=exact, rel_tol=1e-12, abs_tol=1e-15)


def test_word_association_intervals_follow_the_data_not_the_row_order() -> None:
    """Directly: a cell of 60 distinct scores, reversed, gives the same interval and sign-flip
    p (the estimator draws row positions, so without the trial-key order it would differ)."""
    rng = np.random.default_rng(3)
    frame = pl.DataFrame(
        {
            "trial_key": [f"{i:04d}" for i in range(60)],
            "model_id": "m", "language": "en", "category": "risk", "template": 1,
            "bias": rng.uniform(-1, 1, 60), "refused": False, "n_unassigned": 0,
        }
    )  # fmt: skip
    a = word_association.bias_table(
        frame, WA_KEYS, B=500, method="percentile", rng=np.random.default_rng(1)
    )
    b = word_association.bias_table(
        frame.reverse(), WA_KEYS, B=500, method="percentile", rng=np.random.default_rng(1)
    )
    assert_frame_equal(a, b, check_exact=True)
    assert a["sign_flip_method"][0].startswith("monte carlo")


def test_allocation_gap_is_zero_centred_under_parity() -> None:
    """A cell where each pair chose each candidate once (one order each) has gap 0 and an
    interval of [0, 0] (every pair's two trials sum to 0)."""
    rows = []
    for p in range(8):
        for first, chosen in (("cis", "cis"), ("trans", "trans")):
            rows.append(
                {"trial_key": f"{p}{first}", "model_id": "m", "language": "en",
                 "service": "gynecology", "explanation": False, "symptoms": "none",
                 "pair_id": f"p{p}", "first": first, "chosen": chosen, "none_reason": None}
            )  # fmt: skip
    got = allocation.cells_table(
        pl.DataFrame(rows), B=200, method="percentile", rng=np.random.default_rng(0)
    ).row(0, named=True)
    assert (got["gap"], got["gap_ci_low"], got["gap_ci_high"]) == (0.0, 0.0, 0.0)
    assert got["share_cis_decided"] == 0.5 and got["decided"] == 16
    assert got["sign_p"] is None  # no agreeing pair: no test
    assert sps.binomtest(8, 16).pvalue == pytest.approx(got["naive_p"])

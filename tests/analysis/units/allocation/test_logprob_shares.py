"""`allocation_logprob_shares`: mean choice probability from logprobs beside the sampled share
over the same trials, checked against a hand count, an independent numpy pair bootstrap, and a
run against the simulator (ibias.run / ibias.analyze)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from ibias.analysis.units.allocation.logprobs import SCHEMA, logprob_shares_table

CELL = {"model_id": "m", "language": "en", "service": "gynecology"}


def _trial(key: str, pair: str, chosen: str, **cell: str) -> dict[str, object]:
    return {**CELL, **cell, "trial_key": key, "pair_id": pair, "chosen": chosen}


# p1: both orders read, cis chosen twice; p2: one cis, one trans; p3: a refusal (not decided)
# and a trial whose logprobs were undecidable; t7 has no logprobs (model did not ask); t8 is
# another service.
DECISIONS = pl.DataFrame(
    [
        _trial("t1", "p1", "cis"),
        _trial("t2", "p1", "cis"),
        _trial("t3", "p2", "cis"),
        _trial("t4", "p2", "trans"),
        _trial("t5", "p3", "none"),
        _trial("t6", "p3", "trans"),
        _trial("t7", "p4", "cis"),
        _trial("t8", "p5", "trans", service="sti_testing"),
    ]
)
LOGPROBS = pl.DataFrame(
    {
        "trial_key": ["t1", "t2", "t3", "t4", "t5", "t6", "t8"],
        "parser_version": [1] * 7,
        "p_cis": [0.9, 0.7, 0.6, 0.2, 0.5, None, 0.1],
        "p_trans": [0.1, 0.3, 0.4, 0.8, 0.5, None, 0.9],
        "mass": [0.95, 0.9, 0.8, 0.85, 0.5, None, 1.0],
        "token_index": [1, 1, 2, 2, 1, None, 3],
        "reason": [None, None, None, None, None, "same_name", None],
    }
)


def test_a_hand_count() -> None:
    t = logprob_shares_table(
        DECISIONS, LOGPROBS, B=200, method="percentile", rng=np.random.default_rng(0)
    )
    assert t.schema == pl.Schema(SCHEMA)
    gyn, sti = t.rows(named=True)
    # gynecology: t1-t6 have logprobs; t6 undecidable, t5 not decided: t1-t4 over p1, p2
    assert (gyn["trials_with_logprobs"], gyn["undecidable"], gyn["decided"], gyn["pairs"]) == (
        6,
        1,
        4,
        2,
    )
    assert gyn["mean_p_cis"] == pytest.approx((0.9 + 0.7 + 0.6 + 0.2) / 4)
    assert gyn["sampled_share_cis"] == pytest.approx(3 / 4)
    assert gyn["difference"] == pytest.approx((0.9 + 0.7 + 0.6 + 0.2) / 4 - 3 / 4)
    assert gyn["mean_mass"] == pytest.approx((0.95 + 0.9 + 0.8 + 0.85) / 4)
    assert (gyn["ci_level"], gyn["ci_method"], gyn["resampled"], gyn["B"]) == (
        0.95,
        "percentile",
        "pair",
        200,
    )
    assert gyn["p_cis_ci_low"] <= gyn["mean_p_cis"] <= gyn["p_cis_ci_high"]
    # one pair: every replicate is that pair, so the interval is the estimate
    assert (sti["decided"], sti["pairs"], sti["mean_p_cis"], sti["sampled_share_cis"]) == (
        1,
        1,
        pytest.approx(0.1),
        0.0,
    )
    assert sti["p_cis_ci_low"] == pytest.approx(0.1) == sti["p_cis_ci_high"]


def test_without_logprobs_there_is_no_table() -> None:
    rng = np.random.default_rng(0)
    assert logprob_shares_table(DECISIONS, None, B=50, method="bca", rng=rng).is_empty()
    empty = LOGPROBS.clear()
    assert logprob_shares_table(DECISIONS, empty, B=50, method="bca", rng=rng).is_empty()


def test_a_cell_with_logprobs_but_no_decided_trial_is_shown_with_its_counts() -> None:
    t = logprob_shares_table(
        DECISIONS.filter(pl.col("trial_key").is_in(["t5", "t6"])),
        LOGPROBS,
        B=50,
        method="percentile",
        rng=np.random.default_rng(0),
    ).row(0, named=True)
    assert (t["trials_with_logprobs"], t["undecidable"], t["decided"]) == (2, 1, 0)
    assert t["mean_p_cis"] is None and t["p_cis_ci_low"] is None


def test_the_intervals_are_a_pair_bootstrap() -> None:
    """Against an independent resampling of pairs (numpy, its own generator): quantiles of two
    bootstraps of B = 4000 agree within Monte Carlo error (0.03 here, with 60 pairs of two
    trials each, where a pair moves the statistic by about 1/60)."""
    rng = random.Random(7)
    rows, keys, p_values = [], [], []
    for i in range(60):
        lean = rng.random()
        for order in "ab":
            key = f"t{i}{order}"
            p = min(max(lean + rng.uniform(-0.1, 0.1), 0.0), 1.0)
            rows.append(_trial(key, f"p{i}", "cis" if rng.random() < p else "trans"))
            keys.append(key)
            p_values.append(p)
    decisions = pl.DataFrame(rows)
    logprobs = pl.DataFrame({"trial_key": keys, "p_cis": p_values, "mass": [1.0] * len(keys)})
    t = logprob_shares_table(
        decisions, logprobs, B=4000, method="percentile", rng=np.random.default_rng(3)
    ).row(0, named=True)
    p = np.array(p_values).reshape(60, 2)
    s = np.array([r["chosen"] == "cis" for r in rows], dtype=float).reshape(60, 2)
    idx = np.random.default_rng(11).integers(0, 60, size=(4000, 60))
    for name, values, estimate in (
        ("p_cis", p, "mean_p_cis"),
        ("sampled", s, "sampled_share_cis"),
        ("difference", p - s, "difference"),
    ):
        assert t[estimate] == pytest.approx(values.mean())
        reps = values[idx].sum(axis=(1, 2)) / 120
        low, high = np.quantile(reps, [0.025, 0.975])
        assert t[f"{name}_ci_low"] == pytest.approx(low, abs=0.03)
        assert t[f"{name}_ci_high"] == pytest.approx(high, abs=0.03)


def test_a_run_with_logprobs_reports_them_beside_the_sampled_share(tmp_path: Path) -> None:
    """End to end on the simulator: planted P(cis) 0.8 with no position bias, so every read
    probability is 0.8 and the mean is exactly that; the sampled share differs by sampling."""
    import ibias

    config = tmp_path / "lp.toml"
    config.write_text(
        '[run]\nseed = 5\nstore = "s.duckdb"\n\n'
        '[[models]]\nid = "sim-lp"\nprovider = "simulator"\nlogprobs = true\ntop_logprobs = 3\n'
        "[models.sim]\nallocation_cis_default = 0.8\n\n"
        '[[models]]\nid = "sim-plain"\nprovider = "simulator"\n\n'
        '[experiments.allocation]\nlanguages = ["en", "es"]\n'
        'services = ["gynecology", "sti_testing"]\npairs_per_service = 10\n'
        'explanation = [false]\nsymptoms = ["none"]\nexplicit_per_service = 0\n',
        encoding="utf-8",
    )
    store = tmp_path / "s.duckdb"
    assert ibias.run(config, store=store).exit_code == 0
    out = ibias.analyze(store, tmp_path / "out", bootstrap=200)
    shares = pl.read_csv(out.out_dir / "allocation_logprob_shares.csv")
    assert shares["model_id"].unique().to_list() == ["sim-lp"]  # only the model that asked
    assert len(shares) == 4  # 2 languages x 2 services
    assert shares["trials_with_logprobs"].to_list() == [20, 20, 20, 20]
    assert set(shares["target"].to_list()) == {"these people"}
    assert set(shares["resampled"].to_list()) == {"pair"}
    for r in shares.iter_rows(named=True):
        assert r["mean_p_cis"] == pytest.approx(0.8, abs=1e-12)
        assert r["p_cis_ci_low"] == pytest.approx(0.8) == r["p_cis_ci_high"]
        assert r["mean_mass"] == pytest.approx(0.96)
        assert r["difference"] == pytest.approx(0.8 - r["sampled_share_cis"])
    assert "Choice probabilities from logprobs" in out.report.read_text("utf-8")

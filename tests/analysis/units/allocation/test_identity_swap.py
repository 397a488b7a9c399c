"""The identity-swap table: shares per arm, identity and person effects, pair-bootstrap
intervals; checked against a hand count, an independent bootstrap, and the simulator's planted
values."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from ibias.analysis.units.allocation.identity_swap import SCHEMA, swap_table, without_swapped
from ibias.prompts.allocation.experiment import build
from ibias.prompts.allocation.parse import parse_allocation
from ibias.prompts.allocation.simulate import cis_probability, read_allocation, simulate_allocation
from ibias.prompts.base import Persona, rng_for

CELL = {"model_id": "m", "language": "en", "service": "gynecology", "explanation": False}


def _rows(pair: str, arm_choices: dict[bool, tuple[str, str]]) -> list[dict[str, object]]:
    """Four trials of a pair: per arm (swapped?), the choice with cis first and trans first."""
    out = []
    for swap, (cis_first, trans_first) in arm_choices.items():
        for first, chosen in (("cis", cis_first), ("trans", trans_first)):
            out.append(
                {
                    **CELL,
                    "symptoms": "none",
                    "pair_id": pair,
                    "first": first,
                    "chosen": chosen,
                    "identity_swap": True if swap else None,
                }
            )
    return out


# Hand-made: in the original arm A is cis, in the swapped arm B is cis.
#   p1: A chosen always            -> orig: cis, cis     swap: trans, trans
#   p2: cis chosen always          -> orig: cis, cis     swap: cis, cis
#   p3: orig split, swap none/cis  -> orig: cis, trans   swap: none, cis
#   p4: only the original arm      (left out, 2 trials dropped)
HAND = pl.DataFrame(
    _rows("p1", {False: ("cis", "cis"), True: ("trans", "trans")})
    + _rows("p2", {False: ("cis", "cis"), True: ("cis", "cis")})
    + _rows("p3", {False: ("cis", "trans"), True: ("none", "cis")})
    + _rows("p4", {False: ("trans", "trans")})
)


def test_a_hand_count() -> None:
    t = swap_table(HAND, B=200, method="percentile", rng=np.random.default_rng(0))
    assert t.schema == pl.Schema(SCHEMA)
    r = t.row(0, named=True)
    # Over p1-p3: original arm 6 trials, cis 5, trans 1; swapped arm 6 trials, cis 3, trans 2.
    assert (r["pairs"], r["trials_original"], r["trials_swapped"], r["dropped_trials"]) == (
        3,
        6,
        6,
        2,
    )
    assert r["share_cis_original"] == pytest.approx(5 / 6)
    assert r["share_trans_original"] == pytest.approx(1 / 6)
    assert r["share_cis_swapped"] == pytest.approx(3 / 6)
    assert r["share_trans_swapped"] == pytest.approx(2 / 6)
    gap_o, gap_s = 5 / 6 - 1 / 6, 3 / 6 - 2 / 6
    assert r["identity_effect"] == pytest.approx((gap_o + gap_s) / 2)  # 0.4167
    assert r["person_effect"] == pytest.approx((gap_o - gap_s) / 2)  # 0.25
    assert r["identity_ci_low"] <= r["identity_effect"] <= r["identity_ci_high"]
    assert (r["ci_level"], r["ci_method"], r["resampled"], r["B"]) == (
        0.95,
        "percentile",
        "pair",
        200,
    )


def test_without_swapped_trials_there_is_no_table_and_other_tables_see_the_original_arm() -> None:
    original = HAND.filter(pl.col("identity_swap").is_null())
    assert swap_table(original, B=50, method="percentile", rng=np.random.default_rng(0)).is_empty()
    assert without_swapped(HAND).equals(original)
    assert swap_table(
        HAND.drop("identity_swap"), B=50, method="percentile", rng=np.random.default_rng(0)
    ).is_empty()


def test_the_interval_is_a_pair_bootstrap() -> None:
    """Against an independent resampling of pairs (numpy, its own generator): the 2.5% and
    97.5% quantiles of two bootstraps of B = 4000 differ by Monte Carlo error only (here the
    statistic moves in steps of about 1/(4 * 40) per pair, and the quantiles of two runs agree
    within 0.03 with near certainty)."""
    rng = random.Random(5)
    rows: list[dict[str, object]] = []
    for i in range(40):
        lean = rng.random()
        pick = {
            s: tuple(
                ("cis" if rng.random() < (lean if not s else 1 - lean) else "trans") for _ in "ab"
            )
            for s in (False, True)
        }
        rows += _rows(f"p{i}", {False: pick[False], True: pick[True]})  # type: ignore[dict-item]
    frame = pl.DataFrame(rows)
    t = swap_table(frame, B=4000, method="percentile", rng=np.random.default_rng(1)).row(
        0, named=True
    )
    # Independent: per pair, the two arms' (cis - trans) sums; resample pairs.
    per_pair: dict[str, list[float]] = {}
    for r in rows:
        v = (r["chosen"] == "cis") - (r["chosen"] == "trans")
        arm = 1 if r["identity_swap"] else 0
        per_pair.setdefault(str(r["pair_id"]), [0.0, 0.0])[arm] += v
    sums = np.array(list(per_pair.values()))  # (pairs, 2); 2 trials per arm per pair
    gen = np.random.default_rng(99)
    idx = gen.integers(0, len(sums), size=(4000, len(sums)))
    gap_o = sums[idx, 0].sum(axis=1) / (2 * len(sums))
    gap_s = sums[idx, 1].sum(axis=1) / (2 * len(sums))
    for name, reps in (("identity", (gap_o + gap_s) / 2), ("person", (gap_o - gap_s) / 2)):
        low, high = np.quantile(reps, [0.025, 0.975])
        assert t[f"{name}_ci_low"] == pytest.approx(low, abs=0.03)
        assert t[f"{name}_ci_high"] == pytest.approx(high, abs=0.03)
    estimate_o = sums[:, 0].sum() / (2 * len(sums))
    estimate_s = sums[:, 1].sum() / (2 * len(sums))
    assert t["identity_effect"] == pytest.approx((estimate_o + estimate_s) / 2)
    assert t["person_effect"] == pytest.approx((estimate_o - estimate_s) / 2)


def test_the_simulator_separates_a_name_effect_from_the_identity_effect() -> None:
    """In-process simulation (no HTTP) of a structured model: identity preference q = 0.75 for
    gynecology and a large name effect (which follows a name across the swap; its mean over
    pairs is whatever this roster's names give, so the planted person effect is computed, not
    assumed). The planted values given these prompts are the means of
    the exact choice probabilities (`cis_probability`); each estimate lies within 4 standard
    errors of its planted value, the standard error computed exactly from those probabilities
    (trials are independent given the prompts): a correct estimator fails with probability
    below 1e-4."""
    persona = Persona(allocation_cis={"gynecology": 0.75}, name_sd=1.5).answering_as(11, "sim")
    table = {
        "languages": ["en"],
        "services": ["gynecology"],
        "roster_size": 120,
        "pairs_per_service": 60,
        "explanation": [False],
        "symptoms": ["none"],
        "explicit_per_service": 0,
        "identity_swap": True,
    }
    specs = list(build(table, 3, Path("."))[0].specs())
    rows, p_cis, arm = [], [], []
    for spec in specs:
        seen = read_allocation(spec.messages[0]["content"])
        assert seen is not None
        p = cis_probability(seen, persona)
        reply, _ = simulate_allocation(seen, persona, rng_for(1, "t", spec.coords))
        parsed = parse_allocation(spec.item, reply)
        swapped = bool(spec.coords.get("identity_swap"))
        rows.append(
            {
                **CELL,
                "symptoms": "none",
                "pair_id": spec.item["pair_id"],
                "first": spec.item["first"],
                "chosen": parsed.chosen,
                "identity_swap": True if swapped else None,
            }
        )
        p_cis.append(p)
        arm.append(swapped)
    frame = pl.DataFrame(rows)
    assert set(frame["chosen"]) <= {"cis", "trans"}
    t = swap_table(frame, B=500, method="percentile", rng=np.random.default_rng(2)).row(
        0, named=True
    )
    p, s = np.array(p_cis), np.array(arm)
    # y = (cis - trans) / 2 = p_cis - 1/2 in expectation, variance p (1 - p).
    mean_o, mean_s = (p[~s] - 0.5).mean(), (p[s] - 0.5).mean()
    var_o = (p[~s] * (1 - p[~s])).sum() / (~s).sum() ** 2
    var_s = (p[s] * (1 - p[s])).sum() / s.sum() ** 2
    se = math.sqrt(var_o + var_s)
    planted_identity, planted_person = mean_o + mean_s, mean_o - mean_s
    assert abs(t["identity_effect"] - planted_identity) < 4 * se
    assert abs(t["person_effect"] - planted_person) < 4 * se
    # The identity preference is found (planted about 2 * (0.75 - 0.5), moved by the names),
    # and the plain original-arm gap is the sum of the two effects.
    assert planted_identity > 0.3 and t["identity_ci_low"] > 0
    gap_o = t["share_cis_original"] - t["share_trans_original"]
    assert gap_o == pytest.approx(t["identity_effect"] + t["person_effect"])


def test_a_run_with_the_control_analyses_each_arm_in_its_place(tmp_path: Path) -> None:
    import ibias

    config = tmp_path / "swap.toml"
    config.write_text(
        '[run]\nseed = 3\nstore = "s.duckdb"\n\n'
        '[[models]]\nid = "sim-a"\nprovider = "simulator"\n'
        "[models.sim]\nallocation_cis_default = 0.8\nname_sd = 0.8\n\n"
        '[experiments.allocation]\nlanguages = ["en"]\nservices = ["gynecology", "sti_testing"]\n'
        'pairs_per_service = 5\nexplanation = [false]\nsymptoms = ["none"]\n'
        "explicit_per_service = 0\nidentity_swap = true\n",
        encoding="utf-8",
    )
    store = tmp_path / "s.duckdb"
    assert ibias.run(config, store=store).exit_code == 0
    with ibias.connect(store) as con:
        arms = dict(
            con.sql(
                "SELECT coalesce(identity_swap, false), count(*) FROM allocation_decisions "
                "GROUP BY 1"
            ).fetchall()
        )
    assert arms == {False: 20, True: 20}
    out = ibias.analyze(store, tmp_path / "out", bootstrap=100)
    swap = pl.read_csv(out.out_dir / "allocation_identity_swap.csv")
    assert sorted(swap["service"].to_list()) == ["gynecology", "sti_testing"]
    assert swap["pairs"].to_list() == [5, 5]
    assert (swap["trials_original"] + swap["trials_swapped"]).to_list() == [20, 20]
    cells = pl.read_csv(out.out_dir / "allocation_cells.csv")
    assert cells["trials"].to_list() == [10, 10]  # the original arm only
    assert "Identity swap: identity or person?" in out.report.read_text("utf-8")

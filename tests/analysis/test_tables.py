"""The analysis tables against independent recomputations from the store's views.

The store is a deterministic simulator run (conftest). Every count is recounted with DuckDB SQL
written here, every p-value recomputed with scipy, Holm with a hand-written step-down, and
bootstrap intervals compared with scipy.stats.bootstrap. Bootstrap comparisons have Monte-Carlo
error; the tolerance of each is worked out where it is used.
"""

from __future__ import annotations

import itertools
import math
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any
from unittest import mock

import duckdb
import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from scipy import stats as sps

from ibias.analysis.analyze import AnalysisResult, compute_tables, model_order
from ibias.analysis.load import load_store
from ibias.analysis.units.allocation import effects
from ibias.analysis.units.allocation import shares as allocation
from ibias.analysis.units.word_association import bias as word_association
from tests.analysis.conftest import query
from tests.analysis.reference import count_agreeing_pairs, position_bias

WA_KEYS = ("model_id", "language", "category")
CELL_KEYS = ("model_id", "language", "service", "explanation", "symptoms")


def table(result: AnalysisResult, name: str) -> pl.DataFrame:
    return pl.read_parquet(result.out_dir / f"{name}.parquet")


def by_key(frame: pl.DataFrame, keys: tuple[str, ...]) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {tuple(r[k] for k in keys): r for r in frame.iter_rows(named=True)}


def hand_holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down, written out: sort, scale the i-th smallest by (m - i), keep monotone."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def binom_p(k: int, n: int) -> float:
    return float("nan") if n == 0 else sps.binomtest(k, n, 0.5).pvalue


def same(a: Any, b: Any, tol: float = 1e-9) -> bool:
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    return b is not None and abs(a - b) <= tol * max(1.0, abs(b))


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def test_every_table_figure_and_report_is_written(analysed: AnalysisResult) -> None:
    names = {p.stem for p in analysed.tables}
    expected = {
        "word_association_cells", "word_association_overall", "allocation_cells",
        "allocation_effects", "position_bias", "explicit_answers_summary", "models",
        "allocation_explanation_examples", "progress",
    }  # fmt: skip
    assert expected <= names
    assert {p.suffix for p in analysed.tables} == {".csv", ".parquet"}
    assert all(p.stat().st_size > 0 for p in (*analysed.tables, *analysed.figures))
    stems = {p.stem for p in analysed.figures}
    # Figure 1, one selection-rate figure per language x symptoms level, effects per language.
    assert "word_association_bias" in stems
    for lang, level in itertools.product(("en", "es"), ("none", "high", "low")):
        assert f"allocation_rates_{lang}_{level}" in stems
    assert {"allocation_effects_en", "allocation_effects_es"} <= stems
    assert {p.suffix for p in analysed.figures} == {".png", ".svg"}
    assert analysed.report.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(
    "name", ["word_association_cells", "allocation_cells", "allocation_effects", "models"]
)
def test_csv_and_parquet_hold_the_same_table(analysed: AnalysisResult, name: str) -> None:
    from_csv = pl.read_csv(analysed.out_dir / f"{name}.csv")
    from_parquet = table(analysed, name)
    assert_frame_equal(from_csv, from_parquet, check_dtypes=False, rel_tol=1e-12)


# --------------------------------------------------------------------------------------------
# Word association
# --------------------------------------------------------------------------------------------


def test_word_association_counts_and_means_match_sql(
    analysed: AnalysisResult, sim_store: Path
) -> None:
    rows = query(
        sim_store,
        "SELECT model_id, language, category, count(*), count(bias), "
        "count(*) FILTER (WHERE bias IS NULL), count(*) FILTER (WHERE refused), "
        "sum(n_unassigned), avg(bias) FROM word_association_trials GROUP BY ALL",
    )
    cells = by_key(table(analysed, "word_association_cells"), WA_KEYS)
    assert set(cells) == {r[:3] for r in rows}
    assert len(cells) == 2 * 2 * 2  # models x languages x categories
    for *key, trials, scored, null, refused, unassigned, mean in rows:
        got = cells[tuple(key)]
        assert (got["trials"], got["scored"], got["null_score"]) == (trials, scored, null)
        assert (got["refusals"], got["unassigned_words"]) == (refused, unassigned)
        assert got["trials"] == got["scored"] + got["null_score"]
        assert same(got["mean_bias"], mean)
        assert got["ci_low"] <= got["mean_bias"] <= got["ci_high"]
    # the biased persona (word_bias 0.75) is recovered: positive mean bias in every cell
    assert all(c["mean_bias"] > 0 for k, c in cells.items() if k[0] == "sim-a")


def test_word_association_tests_against_zero_match_scipy_and_enumeration(
    analysed: AnalysisResult, sim_store: Path
) -> None:
    scores: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    for *key, bias in query(
        sim_store,
        "SELECT model_id, language, category, bias FROM word_association_trials "
        "WHERE bias IS NOT NULL",
    ):
        scores[tuple(key)].append(bias)
    cells = by_key(table(analysed, "word_association_cells"), WA_KEYS)
    for cell, values in scores.items():
        x = np.array(values)
        assert same(cells[cell]["t_p"], sps.ttest_1samp(x, 0.0).pvalue, 1e-9)
        # <= 10 scores per cell: the analysis enumerates all sign patterns; so do we.
        dev = x[x != 0]
        observed = abs(dev.sum())
        patterns = list(itertools.product((1, -1), repeat=dev.size))
        extreme = sum(abs(np.dot(s, dev)) >= observed - 1e-9 for s in patterns)
        assert same(cells[cell]["sign_flip_p"], extreme / len(patterns), 1e-12)


def test_word_association_holm_runs_across_categories_of_one_model_and_language(
    analysed: AnalysisResult,
) -> None:
    cells = table(analysed, "word_association_cells")
    families = cells.partition_by(["model_id", "language"], as_dict=True)
    assert len(families) == 4
    changed = False
    for family in families.values():
        assert family.height == 2  # the two categories
        raw = family["t_p"].to_list()
        expected = hand_holm(raw)
        assert family["t_p_holm"].to_list() == pytest.approx(expected, rel=1e-12)
        changed |= any(a != b for a, b in zip(raw, expected, strict=True))
    assert changed  # the correction did something somewhere


def test_word_association_template_means_and_spread(
    analysed: AnalysisResult, sim_store: Path
) -> None:
    means: dict[tuple[Any, ...], dict[int, float]] = defaultdict(dict)
    for *key, template, mean in query(
        sim_store,
        "SELECT model_id, language, category, template, avg(bias) "
        "FROM word_association_trials GROUP BY ALL",
    ):
        means[tuple(key)][template] = mean
    cells = by_key(table(analysed, "word_association_cells"), WA_KEYS)
    for cell, per_template in means.items():
        got = cells[cell]
        for t in (1, 2, 3):
            assert same(got[f"bias_template_{t}"], per_template.get(t))
        present = [v for v in per_template.values() if v is not None]
        assert same(got["template_spread"], max(present) - min(present))


def test_word_association_overall_ci_agrees_with_scipy_bootstrap(
    analysed: AnalysisResult, sim_store: Path
) -> None:
    """Percentile CI over trials vs scipy.stats.bootstrap with 20,000 resamples.

    Monte-Carlo error of a 2.5% quantile with B resamples is about sqrt(.025 .975 / B) / f(q);
    for a near-normal bootstrap distribution that is 0.015 of the interval width at B = 2000
    (ours) and 0.005 at 20,000 (scipy), so their difference has SD ~0.016 width. A tolerance
    of 0.12 width is over 7 SD: correct code fails with negligible probability.
    """
    overall = by_key(table(analysed, "word_association_overall"), ("model_id", "language"))
    for key, got in overall.items():
        x = np.array(
            [
                r[0]
                for r in query(
                    sim_store,
                    "SELECT bias FROM word_association_trials WHERE model_id = ? "
                    "AND language = ? AND bias IS NOT NULL",
                    list(key),
                )
            ]
        )
        ref = sps.bootstrap(
            (x,), np.mean, n_resamples=20000, method="percentile", rng=np.random.default_rng(1)
        ).confidence_interval
        width = ref.high - ref.low
        assert abs(got["ci_low"] - ref.low) < 0.12 * width
        assert abs(got["ci_high"] - ref.high) < 0.12 * width
        assert got["scored"] == x.size


def test_explicit_answers_sit_beside_their_category(
    analysed: AnalysisResult, sim_store: Path
) -> None:
    counts: dict[tuple[Any, ...], dict[str, int]] = defaultdict(dict)
    for model, lang, subject, answer, n in query(
        sim_store,
        "SELECT model_id, language, subject, answer, count(*) FROM explicit_answers "
        "WHERE experiment = 'word_association_explicit' GROUP BY ALL",
    ):
        counts[(model, lang, subject)][answer] = n
    cells = by_key(table(analysed, "word_association_cells"), WA_KEYS)
    for key, answers in counts.items():
        got = cells[key]
        assert got["explicit_n"] == sum(answers.values()) == 3
        for answer, n in answers.items():
            assert got[f"explicit_{answer}"] == n
        assert sum(got[f"explicit_{a}"] for a in word_association.EXPLICIT_ANSWERS) == 3


# --------------------------------------------------------------------------------------------
# Allocation
# --------------------------------------------------------------------------------------------


def test_allocation_shares_recount(analysed: AnalysisResult, sim_store: Path) -> None:
    rows = query(
        sim_store,
        "SELECT model_id, language, service, explanation, symptoms, count(*), "
        "count(*) FILTER (WHERE chosen = 'cis'), count(*) FILTER (WHERE chosen = 'trans'), "
        "count(*) FILTER (WHERE chosen = 'none'), "
        "count(*) FILTER (WHERE none_reason = 'refused'), "
        "count(*) FILTER (WHERE none_reason = 'unparseable') "
        "FROM allocation_decisions GROUP BY ALL",
    )
    cells = by_key(table(analysed, "allocation_cells"), CELL_KEYS)
    assert len(cells) == len(rows) == 2 * 2 * 2 * 2 * 3
    for *key, trials, cis, trans, none, refused, unparseable in rows:
        got = cells[tuple(key)]
        assert got["trials"] == trials == 20  # 10 pairs x 2 orders
        assert (got["n_cis"], got["n_trans"], got["n_none"]) == (cis, trans, none)
        assert (got["n_none_refused"], got["n_none_unparseable"]) == (refused, unparseable)
        assert same(got["share_cis"], cis / trials)
        assert same(got["share_trans"], trans / trials)
        assert same(got["share_none"], none / trials)
        wilson = sps.binomtest(trans, trials).proportion_ci(0.95, method="wilson")
        assert got["trans_wilson_low"] == pytest.approx(wilson.low, abs=1e-12)
        assert got["trans_wilson_high"] == pytest.approx(wilson.high, abs=1e-12)
        wilson = sps.binomtest(cis, trials).proportion_ci(0.95, method="wilson")
        assert got["cis_wilson_low"] == pytest.approx(wilson.low, abs=1e-12)
        assert got["cis_wilson_high"] == pytest.approx(wilson.high, abs=1e-12)
    # The personas are recovered: sim-a prefers the cisgender candidate for gynecology
    # (q = 0.85) and the transgender one for HIV testing (q = 0.3), pooled over conditions.
    frame = table(analysed, "allocation_cells").filter(pl.col("model_id") == "sim-a")
    pooled = frame.group_by("service").agg(pl.col("n_cis").sum(), pl.col("n_trans").sum())
    pooled_by = {r["service"]: r for r in pooled.iter_rows(named=True)}
    assert pooled_by["gynecology"]["n_cis"] > 2 * pooled_by["gynecology"]["n_trans"]
    assert pooled_by["hiv_testing"]["n_trans"] > pooled_by["hiv_testing"]["n_cis"]


PAIRS_SQL = """
WITH p AS (
    SELECT model_id, language, service, explanation, symptoms, pair_id,
           max(chosen) FILTER (WHERE first = 'cis') AS when_cis_first,
           max(chosen) FILTER (WHERE first = 'trans') AS when_trans_first
    FROM allocation_decisions GROUP BY ALL
)
SELECT model_id, language, service, explanation, symptoms,
       count(*) FILTER (WHERE when_cis_first = 'cis' AND when_trans_first = 'cis'),
       count(*) FILTER (WHERE when_cis_first = 'trans' AND when_trans_first = 'trans'),
       count(*) FILTER (WHERE when_cis_first = 'cis' AND when_trans_first = 'trans'),
       count(*) FILTER (WHERE when_cis_first = 'trans' AND when_trans_first = 'cis'),
       count(*) FILTER (WHERE when_cis_first = 'none' OR when_trans_first = 'none'),
       count(*)
FROM p GROUP BY ALL
"""


def test_sign_test_over_agreeing_pairs_and_naive_test_match_scipy(
    analysed: AnalysisResult, sim_store: Path
) -> None:
    cells = by_key(table(analysed, "allocation_cells"), CELL_KEYS)
    for *key, cis_both, trans_both, split_first, split_second, with_none, pairs in query(
        sim_store, PAIRS_SQL
    ):
        got = cells[tuple(key)]
        assert got["pairs"] == got["pairs_complete"] == pairs == 10
        assert (got["pairs_cis_both"], got["pairs_trans_both"]) == (cis_both, trans_both)
        assert (got["pairs_split_first"], got["pairs_split_second"]) == (
            split_first,
            split_second,
        )
        assert got["pairs_with_none"] == with_none
        assert cis_both + trans_both + split_first + split_second + with_none == pairs
        assert same(got["sign_p"], binom_p(trans_both, cis_both + trans_both), 1e-9)
        decided = got["n_cis"] + got["n_trans"]
        assert same(got["naive_p"], binom_p(got["n_trans"], decided), 1e-9)
    # The naive test treats the two orders of a pair as independent: with consistent
    # preferences it is smaller than the sign test somewhere.
    frame = table(analysed, "allocation_cells")
    assert (frame["naive_p"] < frame["sign_p"]).any()


def test_holm_runs_across_services_within_model_language_and_condition(
    analysed: AnalysisResult,
) -> None:
    frame = table(analysed, "allocation_cells")
    families = frame.partition_by(["model_id", "language", "explanation", "symptoms"], as_dict=True)
    assert len(families) == 2 * 2 * 2 * 3
    for family in families.values():
        assert sorted(family["service"].to_list()) == ["gynecology", "hiv_testing"]
        for raw, adjusted in (("sign_p", "sign_p_holm"), ("naive_p", "naive_p_holm")):
            defined = family.filter(pl.col(raw).is_not_null())
            expected = hand_holm(defined[raw].to_list())
            assert defined[adjusted].to_list() == pytest.approx(expected, rel=1e-12)
            assert family.filter(pl.col(raw).is_null())[adjusted].null_count() == (
                family[raw].null_count()
            )
    # A family over all of a model's cells would be larger and give other values.
    sim_a = frame.filter(pl.col("model_id") == "sim-a")
    wrong = hand_holm(sim_a["naive_p"].to_list())
    assert wrong != pytest.approx(sim_a["naive_p_holm"].to_list(), rel=1e-9)


def test_share_ci_resamples_pairs(analysed: AnalysisResult, sim_store: Path) -> None:
    """The transgender-share CI equals a bootstrap of per-pair shares (every pair complete).

    With 10 pairs of 2 trials, pair means lie on a 0.05 lattice, so percentile endpoints are
    lattice points (interpolated); Monte-Carlo error can move an endpoint by one step. An
    absolute tolerance of 0.06 allows one step, not two.
    """
    cells = by_key(table(analysed, "allocation_cells"), CELL_KEYS)
    trans_by_pair: dict[tuple[Any, ...], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for *key, pair_id, trans in query(
        sim_store,
        "SELECT model_id, language, service, explanation, symptoms, pair_id, "
        "CAST(chosen = 'trans' AS DOUBLE) FROM allocation_decisions "
        "WHERE model_id = 'sim-a' AND language = 'en'",
    ):
        trans_by_pair[tuple(key)][pair_id].append(trans)
    assert len(trans_by_pair) == 12
    for cell, pairs in trans_by_pair.items():
        pair_means = np.array([np.mean(v) for v in pairs.values()])
        got = cells[cell]
        assert same(got["share_trans"], pair_means.mean())
        if np.ptp(pair_means) == 0:
            assert got["trans_ci_low"] == got["trans_ci_high"] == got["share_trans"]
            continue
        ref = sps.bootstrap(
            (pair_means,), np.mean, n_resamples=20000, method="percentile",
            rng=np.random.default_rng(7),
        ).confidence_interval  # fmt: skip
        assert abs(got["trans_ci_low"] - ref.low) <= 0.06
        assert abs(got["trans_ci_high"] - ref.high) <= 0.06


def test_position_bias_recount(analysed: AnalysisResult, sim_store: Path) -> None:
    rows = query(
        sim_store,
        "SELECT model_id, language, service, explanation, symptoms, "
        "count(*) FILTER (WHERE chosen <> 'none'), "
        "count(*) FILTER (WHERE chosen <> 'none' AND chosen = first) "
        "FROM allocation_decisions GROUP BY ALL",
    )
    cells = by_key(table(analysed, "position_bias"), CELL_KEYS)
    for *key, decided, first in rows:
        got = cells[tuple(key)]
        assert (got["decided"], got["n_first"]) == (decided, first)
        assert same(got["share_first"], first / decided)
        assert same(got["binomial_p"], binom_p(first, decided), 1e-9)
        assert got["ci_low"] <= got["share_first"] <= got["ci_high"]
    # And every column but the bootstrap CI, against the reference computed from the trials.
    trials: dict[tuple[Any, ...], list[tuple[str, str]]] = defaultdict(list)
    for *key, first_listed, chosen in query(
        sim_store,
        "SELECT model_id, language, service, explanation, symptoms, first, chosen "
        "FROM allocation_decisions",
    ):
        trials[tuple(key)].append((first_listed, chosen))
    assert trials.keys() == cells.keys()
    for key, rows_of_cell in trials.items():
        assert_position_row(cells[key], position_bias(*zip(*rows_of_cell, strict=True)))


def test_condition_effects_are_paired_differences(
    analysed: AnalysisResult, sim_store: Path
) -> None:
    """Recompute every effect by hand: the trans share under treatment minus control, over
    the pairs seen under both (all pairs here, as the grid is complete)."""
    trials = query(
        sim_store,
        "SELECT model_id, language, service, explanation, symptoms, pair_id, chosen "
        "FROM allocation_decisions",
    )
    effects = table(analysed, "allocation_effects")
    assert set(effects["effect"].unique().to_list()) == {
        "explanation", "symptoms_high", "symptoms_low",
    }  # fmt: skip
    assert effects.height == 2 * 2 * 2 * (4 + 3 + 3)  # models x langs x services x strata
    for row in effects.iter_rows(named=True):
        treated: list[float] = []
        control: list[float] = []
        for model, lang, service, expl, symptoms, _pair, chosen in trials:
            if (model, lang, service) != (row["model_id"], row["language"], row["service"]):
                continue
            value = 1.0 if chosen == "trans" else 0.0
            if row["effect"] == "explanation":
                if row["stratum"] not in ("all", symptoms):
                    continue
                (treated if expl else control).append(value)
            else:
                level = row["effect"].removeprefix("symptoms_")
                wanted = {"all": None, "explanation=yes": True, "explanation=no": False}
                if wanted[row["stratum"]] not in (None, expl) or symptoms not in (level, "none"):
                    continue
                (treated if symptoms == level else control).append(value)
        assert row["pairs"] == 10 and row["dropped_trials"] == 0
        assert same(row["share_treated"], float(np.mean(treated)))
        assert same(row["share_control"], float(np.mean(control)))
        assert same(row["difference"], float(np.mean(treated) - np.mean(control)))
        assert row["ci_low"] <= row["difference"] + 1e-12
        assert row["difference"] <= row["ci_high"] + 1e-12


def test_explanation_examples_prefer_explained_trials(analysed: AnalysisResult) -> None:
    examples = table(analysed, "allocation_explanation_examples")
    assert not examples.is_empty()
    assert examples["explanation_text"].str.len_chars().min() > 0  # type: ignore[operator]
    assert examples["explanation"].all()  # every service has explained trials to pick from
    per = examples.group_by("service", "chosen").agg(
        pl.len(), pl.col("model_id").n_unique(), pl.col("language").sort().alias("languages")
    )
    assert (per["len"] <= 2).all() and (per["len"] == per["model_id"]).all()
    # Both languages: one example each per service and choice (the store has both).
    assert all(langs.to_list() == ["en", "es"] for langs in per["languages"])


# --------------------------------------------------------------------------------------------
# Models and explicit answers
# --------------------------------------------------------------------------------------------


def test_models_table_counts_responses_refusals_and_versions(
    analysed: AnalysisResult, sim_store: Path
) -> None:
    models = by_key(table(analysed, "models"), ("model_id",))
    refusals = dict(
        query(
            sim_store,
            "SELECT model_id, sum(n) FROM ("
            " SELECT model_id, count(*) FILTER (WHERE refused) AS n FROM word_association_trials"
            " GROUP BY ALL UNION ALL"
            " SELECT model_id, count(*) FILTER (WHERE none_reason = 'refused') FROM "
            " allocation_decisions GROUP BY ALL UNION ALL"
            " SELECT model_id, count(*) FILTER (WHERE answer = 'refused') FROM explicit_answers"
            " GROUP BY ALL) GROUP BY ALL",
        )
    )
    for model, n, versions in query(
        sim_store,
        "SELECT model_id, count(*), string_agg(DISTINCT provider_model, '; ' "
        "ORDER BY provider_model) FROM responses GROUP BY ALL",
    ):
        got = models[(model,)]
        assert got["responses"] == n == got["done"] == got["planned"]
        assert got["provider_models"] == versions
        assert got["refusals"] == refusals[model]
        assert same(got["refusal_rate"], refusals[model] / got["parsed"])
    assert models[("sim-a",)]["refusals"] > 0 and models[("sim-b",)]["refusals"] == 0


def test_explicit_summary_recount(analysed: AnalysisResult, sim_store: Path) -> None:
    summary = by_key(
        table(analysed, "explicit_answers_summary"),
        ("experiment", "model_id", "language", "subject"),
    )
    rows = query(
        sim_store,
        "SELECT experiment, model_id, language, subject, answer, count(*) "
        "FROM explicit_answers GROUP BY ALL",
    )
    totals: dict[tuple[Any, ...], int] = defaultdict(int)
    for *key, answer, n in rows:
        assert summary[tuple(key)][answer] == n
        totals[tuple(key)] += n
    assert {k: v["n"] for k, v in summary.items()} == totals
    assert {k[0] for k in summary} == {"word_association_explicit", "allocation_explicit"}


# --------------------------------------------------------------------------------------------
# Seeds, methods and parsing
# --------------------------------------------------------------------------------------------


def test_same_seed_same_tables_other_seed_other_intervals(sim_store: Path) -> None:
    data = load_store(sim_store)
    models = model_order(data)
    assert models == ["sim-a", "sim-b"]  # the config's order
    first = compute_tables(data, models, B=300, method="percentile", seed=11)
    again = compute_tables(data, models, B=300, method="percentile", seed=11)
    other = compute_tables(data, models, B=300, method="percentile", seed=12)
    for name, frame in first.items():
        assert_frame_equal(frame, again[name])
    a, b = first["allocation_cells"], other["allocation_cells"]
    assert a["share_trans"].to_list() == b["share_trans"].to_list()
    assert a["trans_ci_low"].to_list() != b["trans_ci_low"].to_list()


def test_bca_intervals_agree_with_scipy(sim_store: Path) -> None:
    """BCa over trials vs scipy's BCa (same definition); the tolerance is that of the
    percentile comparison above, widened to 0.2 width for the noisier BCa endpoints."""
    data = load_store(sim_store)
    overall = word_association.overall_table(
        data.views["word_association"], B=4000, method="bca", rng=np.random.default_rng(5)
    )
    assert set(overall["ci_method"].to_list()) == {"bca"}
    for row in overall.iter_rows(named=True):
        x = (
            data.views["word_association"]
            .filter(
                (pl.col("model_id") == row["model_id"]) & (pl.col("language") == row["language"])
            )["bias"]
            .drop_nulls()
            .to_numpy()
        )
        ref = sps.bootstrap(
            (x,), np.mean, n_resamples=20000, method="BCa", rng=np.random.default_rng(2)
        ).confidence_interval
        width = ref.high - ref.low
        assert abs(row["ci_low"] - ref.low) < 0.2 * width
        assert abs(row["ci_high"] - ref.high) < 0.2 * width


def test_responses_without_parsed_rows_are_parsed_on_load(sim_store: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.duckdb"
    shutil.copy(sim_store, copy)
    con = duckdb.connect(str(copy))
    try:
        for name in ("parsed_word_association", "parsed_allocation", "parsed_explicit"):
            con.execute(f"DELETE FROM {name}").fetchall()
    finally:
        con.close()
    assert query(copy, "SELECT count(*) FROM allocation_decisions") == [(0,)]
    reparsed = load_store(copy)
    original = load_store(sim_store)
    parsed_experiments = query(
        sim_store,
        "SELECT count(*) FROM responses r JOIN trials t USING (trial_key) "
        "WHERE t.experiment <> 'prompts'",
    )[0][0]
    assert reparsed.n_parsed_now == parsed_experiments
    assert original.n_parsed_now == 0
    assert set(reparsed.views) >= {"word_association", "allocation"}
    for name in reparsed.views:
        assert_frame_equal(
            reparsed.views[name].sort("trial_key"), original.views[name].sort("trial_key")
        )
    assert_frame_equal(reparsed.explicit.sort("trial_key"), original.explicit.sort("trial_key"))


# --------------------------------------------------------------------------------------------
# Hand-made decisions: incomplete pairs, no-choice trials, broken pairing
# --------------------------------------------------------------------------------------------


def _decisions(rows: list[tuple[str, str, str]]) -> pl.DataFrame:
    """(pair_id, first, chosen) rows of one cell."""
    return pl.DataFrame(
        {
            "trial_key": [f"k{i}" for i in range(len(rows))],
            "model_id": ["m"] * len(rows),
            "language": ["en"] * len(rows),
            "service": ["gynecology"] * len(rows),
            "explanation": [False] * len(rows),
            "symptoms": ["none"] * len(rows),
            "pair_id": [r[0] for r in rows],
            "first": [r[1] for r in rows],
            "chosen": [r[2] for r in rows],
            "chosen_position": [None] * len(rows),
            "none_reason": ["refused" if r[2] == "none" else None for r in rows],
            "explanation_text": [None] * len(rows),
        },
        schema_overrides={"chosen_position": pl.Int32, "explanation_text": pl.String},
    )


def test_pair_counts_on_hand_made_cell_agree_with_the_reference() -> None:
    rows = [
        ("a", "cis", "cis"), ("a", "trans", "cis"),  # agree cis
        ("b", "cis", "trans"), ("b", "trans", "trans"),  # agree trans
        ("c", "cis", "cis"), ("c", "trans", "trans"),  # split to first
        ("d", "cis", "trans"), ("d", "trans", "cis"),  # split to second
        ("e", "cis", "none"), ("e", "trans", "cis"),  # with none
        ("f", "cis", "cis"),  # incomplete: one order only
        ("g", "cis", "cis"), ("g", "trans", "cis"),  # agree cis
    ]  # fmt: skip
    frame = _decisions(rows)
    cells = allocation.cells_table(
        frame, B=200, method="percentile", rng=np.random.default_rng(0)
    ).row(0, named=True)
    ids, first, chosen = zip(*rows, strict=True)
    assert (cells["pairs_cis_both"], cells["pairs_trans_both"]) == count_agreeing_pairs(
        list(ids), list(first), list(chosen)
    ) == (2, 1)  # fmt: skip
    assert (cells["pairs"], cells["pairs_complete"]) == (7, 6)
    assert (cells["pairs_split_first"], cells["pairs_split_second"]) == (1, 1)
    assert (cells["pairs_with_none"], cells["n_none"], cells["n_none_refused"]) == (1, 1, 1)
    assert cells["sign_p"] == pytest.approx(sps.binomtest(1, 3).pvalue)
    assert cells["trials"] == 13 and cells["share_none"] == pytest.approx(1 / 13)


def test_position_table_on_a_hand_made_cell() -> None:
    # Pairs a-e: each order chose whoever was listed first; pair f: the cis-first trial chose
    # nobody, the trans-first one the second-listed person. So 10 of the 11 decided trials
    # chose the first-listed candidate and one trial made no decision.
    rows = [(p, f, f) for p in "abcde" for f in ("cis", "trans")]
    rows += [("f", "cis", "none"), ("f", "trans", "cis")]
    frame = _decisions(rows)
    got = allocation.position_table(
        frame, B=200, method="percentile", rng=np.random.default_rng(0)
    ).row(0, named=True)
    assert (got["decided"], got["n_first"]) == (11, 10)
    assert got["share_first"] == pytest.approx(10 / 11)
    assert got["binomial_p"] == pytest.approx(sps.binomtest(10, 11).pvalue, rel=1e-9)
    _, first, chosen = zip(*rows, strict=True)
    assert_position_row(got, position_bias(first, chosen))


def _random_decisions(seed: int) -> pl.DataFrame:
    """Decisions of 16 cells with what real runs have: pairs missing an order, trials choosing
    nobody, and one cell where nobody was chosen at all."""
    rng = np.random.default_rng(seed)
    columns: dict[str, list[Any]] = defaultdict(list)
    cells = itertools.product(("m1", "m2"), ("gynecology", "hiv_testing"), (False, True))
    for n, ((model, service, explanation), symptoms) in enumerate(
        itertools.product(cells, ("none", "high"))
    ):
        p_none = 1.0 if n == 5 else rng.uniform(0.0, 0.3)
        p_first = rng.uniform(0.3, 0.9)  # chose the first-listed person, when deciding
        for pair in range(int(rng.integers(6, 15))):
            for first in ("cis", "trans"):
                if rng.random() < 0.1:
                    continue  # this order of the pair is missing
                other = "trans" if first == "cis" else "cis"
                if rng.random() < p_none:
                    chosen = "none"
                else:
                    chosen = first if rng.random() < p_first else other
                row = {
                    "trial_key": f"k{len(columns['trial_key'])}",
                    "model_id": model, "language": "en", "service": service,
                    "explanation": explanation, "symptoms": symptoms,
                    "pair_id": f"{service}-{pair}", "first": first, "chosen": chosen,
                    "chosen_position": None,
                    "none_reason": "refused" if chosen == "none" else None,
                    "explanation_text": None,
                }  # fmt: skip
                for name, value in row.items():
                    columns[name].append(value)
    return pl.DataFrame(
        columns, schema_overrides={"chosen_position": pl.Int32, "explanation_text": pl.String}
    )


def _trials_by_cell(frame: pl.DataFrame) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in frame.iter_rows(named=True):
        out[tuple(row[k] for k in CELL_KEYS)].append(row)
    return out


def assert_position_row(got: dict[str, Any], reference: Any) -> None:
    """A `position_bias` table row against the reference (all but the bootstrap interval)."""
    assert (got["decided"], got["n_first"]) == (reference.n, reference.n_first)
    assert same(got["share_first"], reference.share, 1e-12)
    assert same(got["wilson_low"], reference.wilson_low, 1e-12)
    assert same(got["wilson_high"], reference.wilson_high, 1e-12)
    assert same(got["binomial_p"], reference.p_value, 1e-9)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pair_agreement_matches_the_reference_on_messy_cells(seed: int) -> None:
    frame = _random_decisions(seed)
    table_ = allocation.cells_table(frame, B=50, method="percentile", rng=np.random.default_rng(0))
    cells = by_key(table_, CELL_KEYS)
    trials = _trials_by_cell(frame)
    assert cells.keys() == trials.keys() and len(cells) == 16
    for key, rows in trials.items():
        cis_both, trans_both = count_agreeing_pairs(
            [r["pair_id"] for r in rows], [r["first"] for r in rows], [r["chosen"] for r in rows]
        )
        got = cells[key]
        assert (got["pairs_cis_both"], got["pairs_trans_both"]) == (cis_both, trans_both)
        assert same(got["sign_p"], binom_p(trans_both, cis_both + trans_both), 1e-9)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_position_table_matches_the_reference_on_messy_cells(seed: int) -> None:
    frame = _random_decisions(seed)
    table_ = allocation.position_table(
        frame, B=50, method="percentile", rng=np.random.default_rng(0)
    )
    cells = by_key(table_, CELL_KEYS)
    trials = _trials_by_cell(frame)
    assert cells.keys() == trials.keys() and len(cells) == 16
    undecided = 0
    for key, rows in trials.items():
        reference = position_bias([r["first"] for r in rows], [r["chosen"] for r in rows])
        assert_position_row(cells[key], reference)
        undecided += reference.n == 0
    assert undecided == 1  # the cell where nobody was chosen: no share, no test


def test_repetitions_of_an_order_count_by_majority_and_a_tie_decides_nothing() -> None:
    rows = [
        # a: cis-first shown three times (cis, cis, trans) -> cis; trans-first -> cis: agree cis
        ("a", "cis", "cis"), ("a", "cis", "trans"), ("a", "cis", "cis"), ("a", "trans", "cis"),
        # b: trans-first shown twice, split (trans, cis) -> tie, undecided: a pair with none
        ("b", "cis", "trans"), ("b", "trans", "trans"), ("b", "trans", "cis"),
        # c: no repetition, agree trans
        ("c", "cis", "trans"), ("c", "trans", "trans"),
    ]  # fmt: skip
    frame = _decisions(rows)
    pairs = {
        r["pair_id"]: r for r in allocation.pair_outcomes(frame, ["model_id"]).iter_rows(named=True)
    }
    assert (pairs["a"]["cis_first"], pairs["a"]["trans_first"]) == ("cis", "cis")
    assert pairs["a"]["repeated"] and not pairs["a"]["tied"] and pairs["a"]["agree_cis"]
    assert pairs["b"]["trans_first"] == "none" and pairs["b"]["tied"] and pairs["b"]["has_none"]
    assert not pairs["c"]["repeated"] and pairs["c"]["agree_trans"]
    table = allocation.cells_table(frame, B=20, method="percentile", rng=np.random.default_rng(0))
    row = table.row(0, named=True)
    # Every trial still counts in the shares (9 trials: 4 cis, 5 trans) ...
    assert (row["trials"], row["n_cis"], row["n_trans"]) == (9, 4, 5)
    # ... while each pair counts once in the pair tallies and the sign test.
    assert (row["pairs"], row["pairs_repeated"], row["pairs_with_none"]) == (3, 2, 1)
    assert (row["pairs_cis_both"], row["pairs_trans_both"]) == (1, 1)
    assert same(row["sign_p"], binom_p(1, 2), 1e-12)


def test_orders_shown_once_give_their_one_choice_and_the_same_pairs_as_with_repetitions() -> None:
    """Without a repeated order (`order_outcomes` then reads each order's one trial), every
    order's outcome is that trial's choice; adding a repetition that agrees with it (which
    takes the majority rule's path) changes no pair's outcome but `repeated`."""
    rows = [
        ("a", "cis", "cis"), ("a", "trans", "trans"),  # split to first
        ("b", "cis", "none"), ("b", "trans", "cis"),  # a pair with none
        ("c", "trans", "trans"),  # incomplete: the cis-first order is missing
    ]  # fmt: skip
    once = allocation.order_outcomes(_decisions(rows), ["model_id"]).sort("pair_id", "first")
    assert once.select("pair_id", "first", "n", "tied", "chosen").rows() == [
        (p, f, 1, False, c) for p, f, c in sorted(rows)
    ]
    columns = ["pair_id", "cis_first", "trans_first", "complete", "split_first", "has_none"]
    single = allocation.pair_outcomes(_decisions(rows), ["model_id"]).sort("pair_id")
    repeated = allocation.pair_outcomes(_decisions([*rows, ("a", "cis", "cis")]), ["model_id"])
    assert single.select(columns).rows() == repeated.sort("pair_id").select(columns).rows()
    assert single["repeated"].to_list() == [False] * 3
    assert repeated.sort("pair_id")["repeated"].to_list() == [True, False, False]


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["cis", "trans"])),
        st.sampled_from(["cis", "trans", "none"]),
        min_size=1,
    )
)
def test_each_order_shown_once_gives_every_pair_with_its_two_choices(
    shown: dict[tuple[str, str], str],
) -> None:
    """Orders shown once each (the joined path of `pair_outcomes`): every pair shown in either
    order, with what each order chose (None for an order not shown), counted by hand."""
    rows = [(pair, first, chosen) for (pair, first), chosen in shown.items()]
    found = allocation.pair_outcomes(_decisions(rows), ["model_id"]).sort("pair_id")
    pairs = sorted({pair for pair, _ in shown})
    want = [(p, shown.get((p, "cis")), shown.get((p, "trans")), False, False) for p in pairs]
    columns = ["pair_id", "cis_first", "trans_first", "repeated", "tied"]
    assert found.select(columns).rows() == want
    # The majority rule's way, which a hash collision of two trials' orders would take: the
    # same pairs, so a collision costs time, never a number.
    with mock.patch.object(allocation, "_maybe_repeated", return_value=True):
        voted = allocation.pair_outcomes(_decisions(rows), ["model_id"]).sort("pair_id")
    assert_frame_equal(voted, found)


def test_empty_inputs_give_empty_tables_with_columns() -> None:
    empty = _decisions([]).clear()
    rng = np.random.default_rng(0)
    for frame in (
        allocation.cells_table(empty, B=10, method="percentile", rng=rng),
        allocation.position_table(empty, B=10, method="percentile", rng=rng),
        effects.effects_table(empty, B=10, method="percentile", rng=rng),
    ):
        assert frame.is_empty() and "model_id" in frame.columns
    examples = allocation.explanation_examples(_decisions([("a", "cis", "cis")]))
    assert examples.is_empty() and "explanation_text" in examples.columns

"""`position_bias_population` and `allocation_logprob_shares_population` on a simulated store
run with the identity swap and logprobs on: the estimates are the roster-conditional tables'
own, the intervals equal a matrix-algebra two-way CR2 computed here from the store by SQL (each
trial's two people read from its item), and the labels are those of the other population
tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

import ibias
from ibias.analysis import population
from ibias.analysis.units.allocation import population_tables as allocation_population
from tests.analysis.conftest import query
from tests.analysis.test_population_methods import reference

CONFIG = """[run]
seed = 7

[[models]]
id = "sim-lp"
provider = "simulator"
logprobs = true
top_logprobs = 3
[models.sim]
allocation_cis_default = 0.7
position_bias = 0.2
refusal_rate = 0.05

[experiments.allocation]
languages = ["en"]
services = ["gynecology", "sti_testing", "hiv_testing"]
pairs_per_service = 40
explanation = [false]
symptoms = ["none"]
explicit_per_service = 0
identity_swap = true
"""

# Original-arm trials with their outcome pieces and the two people as the trial's item names them.
TRIALS_SQL = """
SELECT d.service, d.chosen, d.first, l.p_cis,
  CASE WHEN t.item->>'$.candidates[0].identity' = 'cis' THEN t.item->>'$.candidates[0].person_id'
       ELSE t.item->>'$.candidates[1].person_id' END AS cis_person,
  CASE WHEN t.item->>'$.candidates[0].identity' = 'cis' THEN t.item->>'$.candidates[1].person_id'
       ELSE t.item->>'$.candidates[0].person_id' END AS trans_person
FROM allocation_decisions d JOIN trials t USING (trial_key)
LEFT JOIN (SELECT * FROM allocation_logprobs
           QUALIFY row_number() OVER (PARTITION BY trial_key ORDER BY parser_version DESC) = 1) l
  USING (trial_key)
WHERE coalesce(t.coords->>'$.identity_swap', 'false') <> 'true'
"""


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("pop-new")
    config = folder / "c.toml"
    config.write_text(CONFIG, encoding="utf-8")
    store = folder / "s.duckdb"
    assert ibias.run(config, store=store).exit_code == 0
    out = ibias.analyze(store, folder / "out", bootstrap=200)
    return store, out.out_dir


def _table(out: Path, name: str) -> pl.DataFrame:
    return pl.read_parquet(out / f"{name}.parquet")


def _trials(store: Path) -> pl.DataFrame:
    rows = query(store, TRIALS_SQL)
    names = ["service", "chosen", "first", "p_cis", "cis_person", "trans_person"]
    return pl.DataFrame(rows, schema=names, orient="row")


def _codes(values: pl.Series) -> np.ndarray:
    return np.unique(values.to_numpy(), return_inverse=True)[1].reshape(-1)


def _check_t(
    estimate: float, low: float, high: float, p: float, df: float, se: float, null: float
) -> None:
    """The row's interval and p are the t interval and test of the reference's standard error
    on the row's degrees of freedom (whose own computation test_population_methods checks)."""
    q = stats.t.ppf(0.975, df)
    assert (low, high) == (pytest.approx(estimate - q * se), pytest.approx(estimate + q * se))
    assert p == pytest.approx(2 * stats.t.sf(abs(estimate - null) / se, df))


def _check_labels(frame: pl.DataFrame) -> None:
    ci_method, resampled = population.CI_LABELS[population.DEFAULT_METHOD]
    assert set(frame["target"].to_list()) == {"people like these"}
    assert set(frame["ci_method"].to_list()) == {ci_method}
    assert set(frame["resampled"].to_list()) == {resampled}
    assert set(frame["population_method"].to_list()) == {population.DEFAULT_METHOD}
    assert set(frame["ci_level"].to_list()) == {0.95}


def test_position_bias_for_people_like_these(analysed: tuple[Path, Path]) -> None:
    store, out = analysed
    pop = _table(out, allocation_population.POSITION)
    pairs = _table(out, "position_bias")
    assert pop.height == pairs.height == 3
    _check_labels(pop)
    trials = _trials(store)
    for row in pop.iter_rows(named=True):
        other = pairs.filter(pl.col("service") == row["service"]).row(0, named=True)
        assert row["share_first"] == pytest.approx(other["share_first"], rel=1e-12)
        assert row["decided"] == other["decided"]
        here = trials.filter((pl.col("service") == row["service"]) & (pl.col("chosen") != "none"))
        y = (here["chosen"] == here["first"]).to_numpy().astype(float)
        est, se, df, _, _, _ = reference(
            y, _codes(here["cis_person"]), _codes(here["trans_person"]),
            np.zeros(here.height, dtype=bool), paired=False, cr2=True, null=0.5,
        )  # fmt: skip
        assert row["share_first"] == pytest.approx(est, rel=1e-12)
        _check_t(row["share_first"], row["ci_low"], row["ci_high"], row["p"], row["df"], se, 0.5)
        assert 0 < row["df"] <= df  # Satterthwaite, capped at min(G) - 1
        assert row["p_holm"] >= row["p"] and "half" in row["p_null"]


def test_logprob_shares_for_people_like_these(analysed: tuple[Path, Path]) -> None:
    store, out = analysed
    pop = _table(out, allocation_population.LOGPROBS)
    pairs = _table(out, "allocation_logprob_shares")
    assert pop.height == pairs.height == 3
    _check_labels(pop)
    trials = _trials(store).filter(
        pl.col("p_cis").is_not_null() & pl.col("chosen").is_in(["cis", "trans"])
    )
    for row in pop.iter_rows(named=True):
        other = pairs.filter(pl.col("service") == row["service"]).row(0, named=True)
        for column in ("mean_p_cis", "sampled_share_cis", "difference"):
            assert row[column] == pytest.approx(other[column], rel=1e-12, abs=1e-15)
        assert row["decided"] == other["decided"]
        here = trials.filter(pl.col("service") == row["service"])
        est, se, _, _, _, _ = reference(
            here["p_cis"].to_numpy().astype(float), _codes(here["cis_person"]),
            _codes(here["trans_person"]), np.zeros(here.height, dtype=bool),
            paired=False, cr2=True, null=0.5,
        )  # fmt: skip
        assert row["mean_p_cis"] == pytest.approx(est, rel=1e-12)
        _check_t(est, row["p_cis_ci_low"], row["p_cis_ci_high"], row["p_cis_p"], row["df"], se, 0.5)
        assert row["p_cis_p_holm"] >= row["p_cis_p"]
        assert row["p_cis_p_null"] and row["difference_p_null"]


def test_identity_swap_population_has_a_null_per_p_value(analysed: tuple[Path, Path]) -> None:
    _, out = analysed
    swap = _table(out, allocation_population.SWAP)
    assert swap.height == 3
    _check_labels(swap)
    for stem in ("identity", "person"):
        assert swap[f"{stem}_p_null"].is_not_null().all()
        assert (swap[f"{stem}_p_holm"] >= swap[f"{stem}_p"]).all()


def test_other_methods_label_their_tables(analysed: tuple[Path, Path], tmp_path: Path) -> None:
    from ibias.analysis.analyze import analyze

    store, _ = analysed
    result = analyze(store, tmp_path / "pig", bootstrap=100, population_method="pigeonhole")
    pop = pl.read_parquet(result.out_dir / f"{allocation_population.POSITION}.parquet")
    assert set(pop["population_method"].to_list()) == {"pigeonhole"}
    assert set(pop["B"].to_list()) == {100} and pop["df"].is_null().all()
    with pytest.raises(ValueError, match="population method"):
        analyze(store, tmp_path / "bad", population_method="nope")

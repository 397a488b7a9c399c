"""Views over a store filled by the simulator end to end: the numbers a user would query."""

from __future__ import annotations

from dataclasses import replace
from itertools import product

import duckdb
import numpy as np
import pytest
from scipy.stats import binom

from ibias.analysis.bootstrap import grouped_bootstrap_mean_ci
from ibias.prompts import registry
from ibias.runner.config import load_config
from ibias.runner.execution.run import RunOptions, execute
from ibias.store import derived
from ibias.store.db import open_store

P = 0.7


def exact_expected_bias(p: float, k: int = 5) -> float:
    """E[bias | defined] by enumerating N_t ~ Bin(k, p) and P_t ~ Bin(k, 1 - p)."""
    total = weight = 0.0
    for n_t, p_t in product(range(k + 1), repeat=2):
        n_r, p_r = k - n_t, k - p_t
        if n_t + p_t == 0 or n_r + p_r == 0:
            continue
        w = binom.pmf(n_t, k, p) * binom.pmf(p_t, k, 1 - p)
        total += w * (n_t / (n_t + p_t) + p_r / (n_r + p_r) - 1)
        weight += w
    return total / weight


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("views")
    (folder / "c.toml").write_text(
        f"""
[run]
seed = 11
store = "{folder / "s.duckdb"}"

[[models]]
id = "sim"
provider = "simulator"
max_concurrency = 32
[models.sim]
word_bias = {P}
position_bias = 0.2
allocation_cis_default = 0.5
[models.sim.allocation_cis]
gynecology = 0.8

[experiments.word_association]
trials_per_category = 100
explicit_per_category = 2

[experiments.allocation]
services = ["gynecology", "hiv_testing"]
pairs_per_service = 25
symptoms = ["none"]
explicit_per_service = 1
"""
    )
    import asyncio

    result = asyncio.run(
        execute(load_config(folder / "c.toml"), RunOptions(store=folder / "s.duckdb", quiet=True))
    )
    assert result.exit_code == 0, result.lines
    return folder / "s.duckdb"


def test_expected_bias_is_not_2p_minus_1():
    assert abs(exact_expected_bias(P) - (2 * P - 1)) > 0.03


def test_word_association_bias_per_category_matches_exact_expectation(store):
    con = duckdb.connect(str(store), read_only=True)
    rows = con.execute("SELECT category, bias FROM word_association_trials").fetchall()
    con.close()
    assert len(rows) == 8 * 100 * 2
    cats = np.array([r[0] for r in rows])
    bias = np.array([np.nan if r[1] is None else r[1] for r in rows])
    # 99.9% intervals: with 8 categories, P(some correct interval misses) <= 8 * 0.001 < 1%
    cis = grouped_bootstrap_mean_ci(bias, cats, B=2000, level=0.999, rng=np.random.default_rng(5))
    truth = exact_expected_bias(P)
    assert len(cis) == 8
    for category, ci in cis.items():
        assert ci.low <= truth <= ci.high, (category, ci, truth)


def test_allocation_view_and_position_effect(store):
    con = duckdb.connect(str(store), read_only=True)
    rows = con.execute(
        "SELECT service, first, chosen, chosen_position, pair_id FROM allocation_decisions"
    ).fetchall()
    con.close()
    assert len(rows) == 2 * 25 * 2 * 2 * 2  # services x pairs x orders x explanation x lang
    gyn = [r for r in rows if r[0] == "gynecology"]
    share_cis = sum(r[2] == "cis" for r in gyn) / len(gyn)
    # q = 0.8 over 200 trials: sd <= 0.03 if independent; pairs correlate, so allow 4.5 sd
    # of the pair-level sd (100 pairs): 4.5 * sqrt(.16/100) = 0.18
    assert abs(share_cis - 0.8) < 0.18
    hiv = [r for r in rows if r[0] == "hiv_testing"]
    first_share = sum(r[3] == 1 for r in hiv) / len(hiv)
    assert first_share > 0.55  # position bias 0.2 -> 0.7 expected; 0.5 would be no effect
    # each pair appears in both orders
    orders = {}
    for service, first, *_, pair in rows:
        orders.setdefault((service, pair), set()).add(first)
    assert all(v == {"cis", "trans"} for v in orders.values())


def test_explicit_and_progress_views(store):
    con = duckdb.connect(str(store), read_only=True)
    explicit = con.execute(
        "SELECT experiment, count(*), count(DISTINCT subject) FROM explicit_answers "
        "GROUP BY 1 ORDER BY 1"
    ).fetchall()
    progress = con.execute("SELECT sum(planned), sum(done), sum(failed) FROM progress").fetchall()
    patients = con.execute(
        "SELECT language, count(*), count(DISTINCT person_id), count(DISTINCT name) "
        "FROM patients GROUP BY 1 ORDER BY 1"
    ).fetchall()
    con.close()
    # the roster of 100 in both languages: the same people, unique names in each
    assert patients == [("en", 100, 100, 100), ("es", 100, 100, 100)]
    assert explicit == [("allocation_explicit", 4, 2), ("word_association_explicit", 32, 8)]
    assert progress == [(1600 + 400 + 36, 1600 + 400 + 36, 0)]


def test_new_parser_version_adds_rows_and_views_pick_it(store, tmp_path, monkeypatch):
    copy = tmp_path / "copy.duckdb"
    copy.write_bytes(store.read_bytes())
    unit = registry.unit("word_association")
    kind = unit.kinds[0]
    assert kind.parser is not None
    wa = kind.parser
    newer = replace(
        wa,
        version=wa.version + 1,
        parse=lambda item, content: {**wa.parse(item, content), "bias": 0.25},
    )
    bumped = replace(unit, kinds=(replace(kind, parser=newer), *unit.kinds[1:]))
    registry.register(bumped, replace=True)
    try:
        con = open_store(copy)
        assert derived.parse_pending(con) == 1600
        assert derived.parse_pending(con) == 0
        got = con.execute(
            "SELECT min(bias), max(bias), min(parser_version) FROM word_association_trials"
        ).fetchall()
        old = con.execute(
            "SELECT count(*) FROM parsed_word_association WHERE parser_version = ?", [wa.version]
        ).fetchall()
        con.close()
    finally:
        registry.register(unit, replace=True)
    assert got == [(0.25, 0.25, wa.version + 1)]
    assert old == [(1600,)]  # the old parses are kept: derived tables are insert-only

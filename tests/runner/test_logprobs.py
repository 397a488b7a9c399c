"""Choice probabilities from logprobs, end to end: the config's opt-in, a run against the
in-process simulator (one model asking, one whose endpoint refuses, one not asking), what the
store holds, and what the derivation reads back against the simulator's planted choice
probabilities."""

from __future__ import annotations

import duckdb
import pytest

from ibias.runner.config import ConfigFileError, load_config
from ibias.runner.execution.run import RunOptions, execute
from ibias.runner.providers.retries import Backoff
from tests.helpers import model_block, write_config

FAST = Backoff(base_s=0.001, cap_s=0.01)
ALLOCATION = """
[experiments.allocation]
languages = ["en", "es"]
services = "all"
roster_size = 40
pairs_per_service = 3
explanation = [false, true]
"""


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (
            {"provider": "anthropic", "base_url": "https://api.anthropic.com/v1"},
            r"models\[0\]\.logprobs: provider 'anthropic' cannot return token logprobs",
        ),
        (
            {"provider": "gemini", "base_url": "https://generativelanguage.googleapis.com/v1beta"},
            r"models\[0\]\.logprobs: provider 'gemini' cannot return token logprobs",
        ),
        (
            {
                "provider": "openai",
                "base_url": "https://api.openai.com/v1",
                "model": "o3",
                "temperature": 1.0,
            },
            r"models\[0\]\.logprobs: OpenAI reasoning models refuse logprobs",
        ),
        (
            {
                "provider": "openai",
                "base_url": "https://api.deepseek.com",
                "model": "deepseek-reasoner",
            },
            r"models\[0\]\.logprobs: DeepSeek reasoners refuse logprobs",
        ),
        (
            {"provider": "simulator", "top_logprobs": 21},
            r"models\[0\]\.top_logprobs: expected an integer from 1 to 20, got 21",
        ),
        (
            {"provider": "simulator", "top_logprobs": 0},
            r"models\[0\]\.top_logprobs: expected an integer from 1 to 20, got 0",
        ),
    ],
)
def test_the_opt_in_is_refused_where_it_cannot_be_honoured(tmp_path, keys, expected):
    block = model_block("m", logprobs=True, **keys)
    with pytest.raises(ConfigFileError, match=expected) as err:
        load_config(write_config(tmp_path, [block]))
    assert "\n" not in str(err.value)


def test_top_logprobs_needs_the_opt_in(tmp_path):
    block = model_block("m", provider="simulator", top_logprobs=5)
    with pytest.raises(ConfigFileError, match=r"top_logprobs: top_logprobs needs logprobs = true"):
        load_config(write_config(tmp_path, [block]))


def test_the_opt_in_is_accepted_for_openai_compatible_models(tmp_path):
    blocks = [
        model_block("a", provider="openai", base_url="http://127.0.0.1:8000/v1", logprobs=True),
        model_block("b", provider="simulator", logprobs=True, top_logprobs=5),
        model_block("c", provider="simulator", logprobs=False),
    ]
    models = load_config(write_config(tmp_path, blocks)).models
    assert [m.top_logprobs for m in models] == [20, 5, None]


async def test_a_run_stores_logprobs_and_reads_the_planted_choice_probabilities(
    tmp_path, monkeypatch
):
    sim_lp = {"allocation_cis_default": 0.7, "position_bias": 0.1}
    blocks = [
        model_block(
            "lp", provider="simulator", model="sim-lp", logprobs=True, top_logprobs=5, sim=sim_lp
        ),
        model_block(
            "refuses",
            provider="simulator",
            model="sim-no",
            logprobs=True,
            sim={"refuse_logprobs": True},
        ),
        model_block("plain", provider="simulator", model="sim-plain", sim=sim_lp),
    ]
    cfg = load_config(write_config(tmp_path, blocks, n_prompts=3, extra=ALLOCATION))
    lines: list[str] = []
    result = await execute(
        cfg,
        RunOptions(store=tmp_path / "store.duckdb", quiet=True, backoff=FAST),
        say=lines.append,
    )
    assert result.exit_code == 1  # a model stopped
    stopped = [line for line in lines if "stopped" in line]
    assert stopped == [
        "model refuses stopped: HTTP 400: the endpoint refuses logprobs (logprobs is not "
        "supported with this model.); remove logprobs = true for this model"
    ]
    con = duckdb.connect(str(tmp_path / "store.duckdb"), read_only=True)
    try:
        counts = dict(
            (m, (n, with_lp))
            for m, n, with_lp in con.execute(
                "SELECT model_id, count(*), count(logprobs) FROM responses GROUP BY 1"
            ).fetchall()
        )
        raw_has_logprobs = con.execute(
            "SELECT count(*) FROM responses WHERE model_id = 'lp' "
            "AND json_exists(raw, '$.choices[0].logprobs')"
        ).fetchone()
        per_order = con.execute(
            "SELECT d.first, count(*), min(l.p_cis), max(l.p_cis), min(l.mass), max(l.mass) "
            "FROM allocation_logprobs l JOIN allocation_decisions d USING (trial_key) "
            "WHERE l.p_cis IS NOT NULL GROUP BY 1 ORDER BY 1"
        ).fetchall()
        reasons = dict(
            con.execute(
                "SELECT coalesce(reason, 'read'), count(*) FROM allocation_logprobs GROUP BY 1"
            ).fetchall()
        )
        models = {
            r[0]
            for r in con.execute(
                "SELECT DISTINCT r.model_id FROM allocation_logprobs l JOIN responses r "
                "USING (trial_key)"
            ).fetchall()
        }
        n_allocation = con.execute(
            "SELECT count(*) FROM responses r JOIN trials t USING (trial_key) "
            "WHERE t.model_id = 'lp' AND t.experiment = 'allocation'"
        ).fetchone()
    finally:
        con.close()
    assert "refuses" not in counts  # stopped at its first answer, nothing stored
    assert counts["lp"][0] == counts["lp"][1] > 0  # every reply of the opted-in model
    assert counts["plain"][1] == 0
    assert raw_has_logprobs is not None and raw_has_logprobs[0] == 0  # stored once
    assert models == {"lp"}  # rows only for replies with logprobs
    assert n_allocation is not None and sum(reasons.values()) == n_allocation[0]
    # the planted P(cis) is 0.7 + 0.1 with the cis candidate first, 0.7 - 0.1 second; the
    # simulator puts 0.96 of the probability on the two names
    (cis_first, n_cis), (trans_first, n_trans) = [(r[0], r[1]) for r in per_order]
    assert (cis_first, trans_first) == ("cis", "trans") and n_cis > 0 and n_trans > 0
    assert per_order[0][2:4] == pytest.approx((0.8, 0.8), abs=1e-12)
    assert per_order[1][2:4] == pytest.approx((0.6, 0.6), abs=1e-12)
    for row in per_order:
        assert row[4:6] == pytest.approx((0.96, 0.96), abs=1e-12)
    # replies naming "Patient 2" instead of a name have no candidate token there
    assert set(reasons) <= {"read", "no_candidate_token", "off_name"}
    assert reasons["read"] > 0.8 * sum(reasons.values())

    # Parsed again from the store (a new parser version would do this), a few replies at a
    # time: the same rows as parsed while the replies landed.
    from ibias.store import derived

    monkeypatch.setattr(derived, "LOGPROBS_BATCH", 7)
    con = duckdb.connect(str(tmp_path / "store.duckdb"))
    try:
        query = "SELECT * EXCLUDE (parsed_at) FROM allocation_logprobs ORDER BY trial_key"
        landed = con.execute(query).fetchall()
        con.execute("DELETE FROM allocation_logprobs")
        derived.parse_pending(con)
        assert con.execute(query).fetchall() == landed
    finally:
        con.close()

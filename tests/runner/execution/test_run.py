"""End-to-end runs against the simulator on loopback (in-process)."""

from __future__ import annotations

import duckdb
import pytest

from ibias.runner.config import load_config
from ibias.runner.execution.run import RunOptions, execute
from ibias.runner.providers.retries import Backoff
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config

FAST = Backoff(base_s=0.02, cap_s=0.2, max_attempts=12)


def _responses(store):
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(
            "SELECT t.trial_key, t.model_id, t.messages, count(r.trial_key) AS n "
            "FROM trials t LEFT JOIN responses r USING (trial_key) GROUP BY ALL"
        ).fetchall()
    finally:
        con.close()


async def test_2000_trials_with_faults_and_rpm_limit_store_each_response_once(tmp_path):
    # 5% faults of every kind, enforced RPM 60,000 (1,000/s over ~1 s windows); the client is
    # configured at the same rpm, so any enforcement 429 would mean it paced itself badly.
    profile = SimProfile(
        seed=3,
        default=ModelProfile(
            latency_ms=2.0,
            faults={
                k: 0.05 / 7 for k in ("500", "503", "429", "hang", "drop", "malformed", "truncated")
            },
            rpm=60_000,
            hang_s=2.0,
        ),
    )
    async with Simulator(profile) as sim:
        cfg = write_config(
            tmp_path,
            [
                model_block(
                    "m1",
                    provider="openai",
                    base_url=sim.base_url,
                    model="sim-1",
                    rpm=60_000,
                    max_concurrency=32,
                    timeout_s=0.5,
                )
            ],
            n_prompts=2000,
        )
        result = await execute(
            load_config(cfg), RunOptions(store=tmp_path / "store.duckdb", quiet=True, backoff=FAST)
        )
        stats = sim.stats()
    assert result.exit_code == 0, result.lines
    rows = _responses(tmp_path / "store.duckdb")
    assert len(rows) == 2000
    assert all(n == 1 for *_, n in rows)
    assert stats.fault_total > 40  # faults really happened (expected ~100 first-try faults)
    assert max(stats.served_by_prompt.values()) == 1
    assert sum(stats.served_by_prompt.values()) == 2000
    assert stats.rate_limited == 0


async def test_fatal_401_stops_only_that_model(tmp_path):
    profile = SimProfile(
        seed=1,
        default=ModelProfile(),
        models={"broken": ModelProfile(fatal_status=401)},
    )
    lines: list[str] = []
    async with Simulator(profile) as sim:
        cfg = write_config(
            tmp_path,
            [
                model_block("good", provider="openai", base_url=sim.base_url, model="fine"),
                model_block("bad", provider="openai", base_url=sim.base_url, model="broken"),
            ],
            n_prompts=50,
        )
        result = await execute(
            load_config(cfg),
            RunOptions(store=tmp_path / "store.duckdb", quiet=True, backoff=FAST),
            say=lines.append,
        )
        stats = sim.stats()
    assert result.exit_code == 1
    assert len(lines) == 1 and "bad" in lines[0] and "401" in lines[0]
    rows = _responses(tmp_path / "store.duckdb")
    assert sum(n for _, m, _, n in rows if m == "good") == 50
    assert sum(n for _, m, _, n in rows if m == "bad") == 0
    # the bad model was not hammered: a handful of in-flight requests at most
    assert stats.rejected_by_status.get(401, 0) <= 16


async def test_resume_skips_done_trials_and_new_config_adds_only_new(tmp_path):
    async with Simulator(SimProfile(seed=2)) as sim:
        block = model_block("m", provider="openai", base_url=sim.base_url, model="x")
        cfg = write_config(tmp_path, [block], n_prompts=30)
        opts = RunOptions(store=tmp_path / "store.duckdb", quiet=True, backoff=FAST)
        first = await execute(load_config(cfg), opts)
        again = await execute(load_config(cfg), opts)
        served_after_two = sim.stats().served
        cfg = write_config(tmp_path, [block], n_prompts=30, replicates=2)
        third = await execute(load_config(cfg), opts)
        stats = sim.stats()
    assert first.exit_code == again.exit_code == third.exit_code == 0
    assert served_after_two == 30  # the second run requested nothing
    assert stats.served == 60
    rows = _responses(tmp_path / "store.duckdb")
    assert len(rows) == 60 and all(n == 1 for *_, n in rows)


async def test_budget_stops_the_run_with_exit_1(tmp_path):
    async with Simulator(SimProfile(seed=2)) as sim:
        block = model_block(
            "m",
            provider="openai",
            base_url=sim.base_url,
            model="x",
            price_input=100000.0,
            price_output=100000.0,
            max_concurrency=2,
            max_tokens=64,  # a request starts only if its whole completion budget fits the cap
        )
        cfg = write_config(tmp_path, [block], n_prompts=200)
        result = await execute(
            load_config(cfg),
            RunOptions(store=tmp_path / "store.duckdb", quiet=True, max_cost=30.0),
        )
    assert result.exit_code == 1
    assert any("budget" in line for line in result.lines)
    done = sum(n for *_, n in _responses(tmp_path / "store.duckdb"))
    assert 0 < done < 200


async def run_with_key(tmp_path, monkeypatch, key: str, server_key: str, n: int):
    """A run whose model reads `key` from the environment against a server wanting
    `server_key`; returns the result, the fatal lines and every file's bytes afterwards."""
    monkeypatch.setenv("IBIAS_TEST_KEY", key)
    async with Simulator(SimProfile(seed=2), require_key=server_key) as sim:
        block = model_block(
            "m", provider="openai", base_url=sim.base_url, model="x", api_key_env="IBIAS_TEST_KEY"
        )
        cfg = write_config(tmp_path, [block], n_prompts=n)
        lines: list[str] = []
        result = await execute(
            load_config(cfg),
            RunOptions(store=tmp_path / "store.duckdb", quiet=False, backoff=FAST),
            say=lines.append,
        )
    blob = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    return result, lines, blob


async def test_api_key_never_written(tmp_path, monkeypatch, capsys):
    secret = "sk-test-SECRET-value-0123456789abcdef"
    result, lines, blob = await run_with_key(tmp_path, monkeypatch, secret, secret, 20)
    assert result.exit_code == 0, result.lines
    captured = capsys.readouterr()
    assert secret.encode() not in blob
    assert secret not in captured.out + captured.err + "".join(lines) + "".join(result.lines)


async def test_wrong_key_is_fatal_and_not_echoed(tmp_path, monkeypatch, capsys):
    secret = "sk-wrong-KEY-0123456789"
    result, lines, blob = await run_with_key(tmp_path, monkeypatch, secret, "sk-right", 5)
    assert result.exit_code == 1
    assert len(lines) == 1 and lines[0].startswith("model m stopped")
    captured = capsys.readouterr()
    assert secret.encode() not in blob
    assert secret not in captured.out + captured.err + "".join(lines) + "".join(result.lines)


@pytest.mark.parametrize("n_models", [3])
async def test_simulator_provider_runs_in_process(tmp_path, n_models):
    blocks = [
        model_block(f"s{i}", provider="simulator", max_concurrency=4) for i in range(n_models)
    ]
    cfg = write_config(tmp_path, blocks, n_prompts=20)
    result = await execute(
        load_config(cfg), RunOptions(store=tmp_path / "store.duckdb", quiet=True)
    )
    assert result.exit_code == 0
    rows = _responses(tmp_path / "store.duckdb")
    assert len(rows) == 60 and all(n == 1 for *_, n in rows)

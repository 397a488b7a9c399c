"""`ibias.FakeProvider`, the scripted provider plugin authors test with: its replies, errors and
announced limits go through the real scheduler into the store, and it registers the way any
provider plugin does (an `ibias.providers` entry point) so a TOML config can name it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

import ibias
from ibias.runner.config import ModelConfig, load_config
from ibias.runner.execution.run import RunOptions, execute
from ibias.runner.providers import registry
from ibias.runner.providers.base import Limits, ProviderContext
from ibias.runner.providers.retries import Backoff, Verdict
from tests.helpers import model_block, write_config

FAST = Backoff(base_s=0.001, cap_s=0.01, max_attempts=3)


def _rows(store: Path, sql: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _prompt(i: int) -> str:
    return f"Say something about item p{i}."


def test_an_error_is_classified_as_a_real_provider_would_be() -> None:
    overloaded = ibias.FakeFailure(503, "overloaded").classification()
    assert (overloaded.verdict, overloaded.kind, overloaded.message) == (
        Verdict.RETRY,
        "http_503",
        "HTTP 503: overloaded",
    )
    slow_down = ibias.FakeFailure(429, retry_after_s=2).classification()
    assert slow_down.is_rate_limit and slow_down.delay_hint_s == 2.0
    broke = ibias.FakeFailure(429, "no credit", code="insufficient_quota").classification()
    assert (broke.verdict, broke.kind) == (Verdict.FATAL, "insufficient_quota")
    assert ibias.FakeFailure(401, "bad key").classification().verdict is Verdict.FATAL


async def test_scripted_replies_and_errors_run_through_the_scheduler(tmp_path: Path) -> None:
    script = {
        _prompt(0): ["zero"],
        _prompt(1): [ibias.FakeFailure(503, "overloaded"), "one"],
        _prompt(2): [ibias.FakeFailure(429, retry_after_s=0.01), ValueError("bad body"), "two"],
        _prompt(3): [ibias.FakeFailure(503)],  # retried until the attempts run out
    }
    fake = ibias.FakeProvider(script, prompt_tokens=7, completion_tokens=2, model="scripted")
    config = load_config(
        write_config(tmp_path, [model_block("m", provider="simulator")], n_prompts=4)
    )
    store = tmp_path / "s.duckdb"
    result = await execute(
        config,
        RunOptions(store=store, quiet=True, backoff=FAST),
        provider_factory=lambda model, key, context: fake,
    )
    assert result.exit_code != 0  # one trial failed for good
    assert fake.started and fake.closed
    assert fake.attempts == {_prompt(0): 1, _prompt(1): 2, _prompt(2): 3, _prompt(3): 3}
    assert sorted(
        _rows(
            store,
            "SELECT content, prompt_tokens, completion_tokens, provider_model FROM responses",
        )
    ) == [("one", 7, 2, "scripted"), ("two", 7, 2, "scripted"), ("zero", 7, 2, "scripted")]
    kinds = _rows(
        store,
        "SELECT t.coords->>'id', list(a.error_kind ORDER BY a.attempt_no) FROM attempts a "
        "JOIN trials t USING (trial_key) GROUP BY 1 ORDER BY 1",
    )
    assert kinds == [
        ("p0", [None]),
        ("p1", ["http_503", None]),
        ("p2", ["http_429", "malformed", None]),
        ("p3", ["http_503", "http_503", "http_503"]),
    ]


async def test_a_fatal_error_stops_the_model(tmp_path: Path) -> None:
    fake = ibias.FakeProvider(ibias.FakeFailure(401, "invalid key"))
    config = load_config(
        write_config(tmp_path, [model_block("m", provider="simulator")], n_prompts=5)
    )
    store = tmp_path / "s.duckdb"
    result = await execute(
        config,
        RunOptions(store=store, quiet=True, backoff=FAST),
        provider_factory=lambda model, key, context: fake,
    )
    assert result.exit_code != 0
    assert _rows(store, "SELECT count(*) FROM responses") == [(0,)]
    assert ("fatal", "auth") in _rows(store, "SELECT outcome, error_kind FROM attempts")
    assert len(fake.requests) < 5  # the model stopped at its first fatal answer


async def test_an_async_answer_sees_each_prompt_and_limits_are_read(tmp_path: Path) -> None:
    async def shout(text: str) -> str:
        return text.upper()

    fake = ibias.FakeProvider(shout, limits=Limits(rpm=6_000))
    config = load_config(
        write_config(tmp_path, [model_block("m", provider="simulator")], n_prompts=3)
    )
    store = tmp_path / "s.duckdb"
    result = await execute(
        config,
        RunOptions(store=store, quiet=True, backoff=FAST),
        provider_factory=lambda model, key, context: fake,
    )
    assert result.exit_code == 0, result.lines
    assert sorted(c for (c,) in _rows(store, "SELECT content FROM responses")) == [
        _prompt(i).upper() for i in range(3)
    ]
    assert [s.max_tokens for s in fake.samplings] == [config.models[0].max_tokens] * 3
    assert fake.limits_asked >= 1  # the scheduler read what it announced


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An entry point `fake = ibias.runner.providers.fake:FakeProvider` in the
    `ibias.providers` group, as a plugin author's test package would declare it."""
    site = tmp_path / "site"
    info = site / "fake_tests-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-tests\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[ibias.providers]\nfake = ibias.runner.providers.fake:FakeProvider\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("IBIAS_PLUGINS", raising=False)
    try:
        yield
    finally:
        registry._REGISTRY.pop("fake", None)
        assert "fake" not in sys.modules  # nothing named by the bare word was imported


@pytest.mark.usefixtures("installed")
async def test_registered_by_an_entry_point_a_config_names_it(tmp_path: Path) -> None:
    block = model_block("m", provider="fake", model="echo-1")
    config = load_config(write_config(tmp_path, [block], n_prompts=3))
    store = tmp_path / "s.duckdb"
    result = await execute(config, RunOptions(store=store, quiet=True, backoff=FAST), environ={})
    assert result.exit_code == 0, result.lines
    assert sorted(_rows(store, "SELECT content, provider_model FROM responses")) == [
        (_prompt(i), "echo-1") for i in range(3)
    ]


def test_a_factory_may_build_one_fake_per_model(tmp_path: Path) -> None:
    built: dict[str, ibias.FakeProvider] = {}

    def factory(model: ModelConfig, key: str | None, context: ProviderContext) -> Any:
        built[model.id] = ibias.FakeProvider(f"{model.id} answers")
        return built[model.id]

    config = write_config(
        tmp_path, [model_block(m, provider="simulator") for m in ("a", "b")], n_prompts=2
    )
    store = tmp_path / "s.duckdb"
    result = ibias.run(config, store=store, provider_factory=factory)
    assert result.exit_code == 0
    assert sorted(_rows(store, "SELECT DISTINCT content FROM responses")) == [
        ("a answers",),
        ("b answers",),
    ]
    assert {m: len(f.requests) for m, f in built.items()} == {"a": 2, "b": 2}

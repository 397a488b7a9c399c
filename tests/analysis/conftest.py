"""Stores for the analysis tests, built by running the simulator end to end in-process.

The simulator's answers are a function of (model, prompt, seed), so each store is the same on
every run: the tests compare the analysis tables with independent recomputations from the
store's views (DuckDB SQL, scipy), never with numbers copied from a previous run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ibias.analysis.analyze import AnalysisResult, analyze
from ibias.runner.config import load_config
from ibias.runner.execution.run import RunOptions, execute

# The hostile model id is a valid id (no spaces) whose text is HTML that would run a script if
# the report pasted it unescaped; its provider model string ("<id>-sim-2026-01") is hostile too.
HOSTILE_ID = "<img/src=x/onerror=alert(1)>"

MODELS = """
[[models]]
id = "sim-a"
provider = "simulator"
max_concurrency = 16

[models.sim]
word_bias = 0.75
position_bias = 0.15
refusal_rate = 0.05
allocation_cis_default = 0.5
allocation_cis = { gynecology = 0.85, hiv_testing = 0.3 }

[[models]]
id = "sim-b"
provider = "simulator"
max_concurrency = 16

[models.sim]
word_bias = 0.5
position_bias = 0.0
refusal_rate = 0.0
allocation_cis_default = 0.5
"""

WORD_ASSOCIATION = """
[experiments.word_association]
languages = ["en", "es"]
categories = ["emotions", "risk"]
trials_per_category = 10
explicit_per_category = 3
"""

ALLOCATION = """
[experiments.allocation]
languages = ["en", "es"]
services = ["gynecology", "hiv_testing"]
pairs_per_service = 10
explicit_per_service = 3
"""


async def build_store_async(
    folder: Path, body: str, *, seed: int = 5, extra_files: dict[str, str] | None = None
) -> Path:
    """Write a config (`body` = models + experiments) and run it through the simulator."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (extra_files or {}).items():
        (folder / name).write_text(text)
    config = folder / "config.toml"
    config.write_text(f'[run]\nname = "analysis-test"\nseed = {seed}\n{body}')
    store = folder / "store.duckdb"
    result = await execute(load_config(config), RunOptions(store=store, quiet=True))
    assert result.exit_code == 0, result.lines
    return store


def build_store(
    folder: Path, body: str, *, seed: int = 5, extra_files: dict[str, str] | None = None
) -> Path:
    """`build_store_async` for synchronous fixtures and tests."""
    return asyncio.run(build_store_async(folder, body, seed=seed, extra_files=extra_files))


def query(store: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    """Rows of `sql` against the store, read-only (an independent path from the analysis)."""
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="session")
def sim_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two simulated models, both experiments, en + es, 2 categories, 2 services, 10 pairs."""
    return build_store(tmp_path_factory.mktemp("sim"), MODELS + WORD_ASSOCIATION + ALLOCATION)


@pytest.fixture(scope="session")
def analysed(sim_store: Path, tmp_path_factory: pytest.TempPathFactory) -> AnalysisResult:
    return analyze(sim_store, tmp_path_factory.mktemp("out"), bootstrap=2000, seed=3)


@pytest.fixture(scope="session")
def hostile_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One model with a hostile id next to a normal one; small grid, English only."""
    models = f"""
[[models]]
id = "{HOSTILE_ID}"
provider = "simulator"
max_concurrency = 8

[models.sim]
word_bias = 0.7

[[models]]
id = "sim-ok"
provider = "simulator"
max_concurrency = 8
"""
    experiments = """
[experiments.word_association]
languages = ["en"]
categories = ["emotions", "appearance"]
trials_per_category = 6
explicit_per_category = 2

[experiments.allocation]
languages = ["en"]
services = ["gynecology", "mental_health"]
pairs_per_service = 4
explicit_per_service = 2
"""
    return build_store(tmp_path_factory.mktemp("hostile"), models + experiments)


Query = Callable[[str], list[tuple[Any, ...]]]

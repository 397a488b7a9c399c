"""A provider from another package offers a batch API the way the built-in ones do: it declares
its adapter in its traits (`ProviderTraits.batch`), and `ibias run --batch` sends its models'
trials as batches through it, here against the simulator's OpenAI batch protocol on loopback.

The provider is a real entry point (a folder on `sys.path` holding the package and the
metadata pip writes), and its name appears nowhere in ibias."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ibias.runner.batch.limits import BatchLimits
from ibias.runner.batch.run import BatchOptions
from ibias.runner.cli import main
from ibias.runner.config import load_config
from ibias.runner.execution.run import EXIT_OK, RunOptions, execute
from ibias.runner.providers import registry
from ibias.runner.providers.retries import Backoff
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config
from tests.runner.batch.batching import no_sleep, query

NAME = "tollgate"
ROOT = Path(__file__).parents[3]

PACKAGE = '''
"""ibias_tollgate: a gateway to OpenAI-compatible models, with a batch API of the same
dialect at the gateway's own URL."""

from ibias.runner.batch.openai import OpenAIBatches
from ibias.runner.providers.openai import OpenAIProvider
from ibias.runner.providers.traits import BatchSupport, ProviderTraits


class Tollgate(OpenAIProvider):
    """OpenAI's chat completions at the gateway's URL."""

    traits = ProviderTraits(
        api="Tollgate",
        batch=BatchSupport(api="Tollgate batches", adapter="ibias_tollgate:TollgateBatches"),
    )


class TollgateBatches(OpenAIBatches):
    """OpenAI's Batch API at the gateway's URL (`for_model` is OpenAIBatches')."""
'''


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The package and its entry point `tollgate = ibias_tollgate:Tollgate` (group
    `ibias.providers`) on `sys.path` for one test, then gone again."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "ibias_tollgate.py").write_text(PACKAGE)
    info = site / "ibias_tollgate-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ibias-tollgate\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[ibias.providers]\n{NAME} = ibias_tollgate:Tollgate\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("IBIAS_PLUGINS", raising=False)
    try:
        yield
    finally:
        registry._REGISTRY.pop(NAME, None)
        sys.modules.pop("ibias_tollgate", None)


def _config(tmp_path: Path, url: str) -> Path:
    block = model_block(
        "gate", provider=NAME, base_url=url, model="sim-gpt", price_input=2.0, price_output=8.0
    )
    return write_config(tmp_path, [block], n_prompts=12)


@pytest.mark.usefixtures("installed")
async def test_a_plugin_provider_runs_its_trials_as_batches_through_its_own_adapter(
    tmp_path: Path,
) -> None:
    store = tmp_path / "s.duckdb"
    options = BatchOptions(
        forced=True, limits=BatchLimits(max_requests=5, max_attempts=4), sleep=no_sleep
    )
    fast = Backoff(base_s=0.001, cap_s=0.01, max_attempts=4)
    async with Simulator(SimProfile(seed=3, default=ModelProfile())) as sim:
        config = load_config(_config(tmp_path, sim.base_url))
        result = await execute(
            config, RunOptions(store=store, quiet=True, backoff=fast, batch=options), environ={}
        )
        assert result.exit_code == EXIT_OK, result.lines
        assert sim.batches.created == 3  # 12 trials, at most 5 a batch
        assert sim.stats().requests == 0  # nothing went online
    assert query(store, "SELECT count(DISTINCT trial_key) FROM responses") == [(12,)]
    assert query(store, "SELECT DISTINCT provider FROM batches") == [(NAME,)]
    # At the batch price: half the online one (no batch prices given).
    for prompt, completion, cost in query(
        store, "SELECT prompt_tokens, completion_tokens, cost_usd FROM responses"
    ):
        assert abs(cost - (prompt * 1.0 + completion * 4.0) / 1e6) < 1e-12


@pytest.mark.usefixtures("installed")
def test_plan_names_the_batch_api_the_plugin_declares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", str(_config(tmp_path, "http://127.0.0.1:9/v1")), "--batch"]) == 0
    assert (
        "model gate runs in batch mode (Tollgate batches, batch price)" in capsys.readouterr().out
    )


def test_no_module_of_ibias_names_the_plugin_provider() -> None:
    for top in ("analysis", "prompts", "runner", "store", "ibias"):
        for path in (ROOT / top).rglob("*.py"):
            if path.is_file() and not path.is_symlink():
                assert NAME not in path.read_text("utf-8"), path

"""A stop (Ctrl-C) while `ibias run --batch` waits leaves the batches running at the provider
(exit 130, one line saying how to collect them), and the next run collects them without
submitting anything again."""

from __future__ import annotations

from ibias.runner.batch.run import BatchOptions
from ibias.runner.config import load_config
from ibias.runner.execution.run import EXIT_INTERRUPTED, EXIT_OK, RunOptions, execute
from ibias.runner.scheduling.stop import Stop
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config


async def test_a_stop_while_waiting_leaves_the_batches_running(tmp_path):
    async with Simulator(SimProfile(seed=9, default=ModelProfile())) as sim:
        sim.batches.steps = 1000  # in progress until the test lets it end
        path = write_config(
            tmp_path,
            [model_block("gpt", provider="openai", base_url=sim.base_url, batch=True)],
            n_prompts=4,
        )
        stop = Stop()
        waits: list[float] = []

        async def interrupt(delay: float) -> None:
            waits.append(delay)
            stop.request("interrupted")

        store = tmp_path / "store.duckdb"
        result = await execute(
            load_config(path),
            RunOptions(store=store, quiet=True, batch=BatchOptions(forced=True, sleep=interrupt)),
            environ={},
            stop=stop,
        )
        assert result.exit_code == EXIT_INTERRUPTED, result.lines
        assert waits == [10.0]  # the first poll's wait (POLL_FIRST_S), on the injected clock
        text = "\n".join(result.lines)
        assert "batches running: batch_" in text and "ibias run CONFIG --batch" in text
        sim.batches.finish_all()

        async def no_sleep(_: float) -> None:
            return None

        again = await execute(
            load_config(path),
            RunOptions(store=store, quiet=True, batch=BatchOptions(forced=True, sleep=no_sleep)),
            environ={},
        )
        assert again.exit_code == EXIT_OK, again.lines
        assert sim.batches.created == 1
        assert "4 responses stored this run; 4 of 4 trials done" in again.lines

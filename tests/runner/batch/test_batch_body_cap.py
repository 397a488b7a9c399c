"""The per-body size cap (`max_body_bytes`) applies to each line of a batch's result file, as
to an online reply: a line above it is never read whole; it is recorded as its own trial's
error (`too_large`, failed for good in that run, as online) while the other lines are
ingested; the key of an oversized line is read from its ends only."""

from __future__ import annotations

from ibias.runner.batch.http import Oversized
from ibias.runner.batch.limits import BatchLimits
from ibias.runner.batch.run import BatchOptions
from ibias.runner.config import load_config
from ibias.runner.execution.run import EXIT_FAILED, RunOptions, execute
from ibias.runner.simulator import Simulator
from ibias.runner.simulator.profile import ModelProfile, SimProfile
from tests.helpers import model_block, write_config
from tests.runner.batch.batching import no_sleep, query


async def test_an_oversized_result_line_is_its_trials_error_and_the_others_are_stored(tmp_path):
    store = tmp_path / "s.duckdb"
    async with Simulator(SimProfile(seed=4, default=ModelProfile())) as sim:
        sim.batches.long_reply_every = 5  # lines 5 and 10: a 64,000-character reply
        block = model_block(
            "gpt",
            provider="openai",
            base_url=sim.base_url,
            model="sim-gpt",
            batch=True,
            max_body_bytes=8192,  # an ordinary line is under 1 KB
        )
        config = load_config(write_config(tmp_path, [block], n_prompts=10))
        options = BatchOptions(forced=True, limits=BatchLimits(), sleep=no_sleep)
        lines: list[str] = []
        result = await execute(
            config,
            RunOptions(store=store, quiet=True, batch=options),
            environ={},
            say=lines.append,
        )
        assert sim.batches.created == 1  # the two trials are not sent again in this run
    assert result.exit_code == EXIT_FAILED  # two trials failed for good, as online
    assert query(store, "SELECT count(*), max(length(content)) < 8192 FROM responses") == [
        (8, True)
    ]
    failed = query(
        store,
        "SELECT a.trial_key, a.error_kind, a.outcome, a.error_message FROM attempts a "
        "WHERE a.error_kind IS NOT NULL",
    )
    assert len(failed) == 2
    answered = {k for (k,) in query(store, "SELECT trial_key FROM responses")}
    for key, kind, outcome, message in failed:
        assert kind == "too_large" and outcome == "gave_up" and key not in answered
        assert "8,192-byte cap (max_body_bytes" in message
    assert query(store, "SELECT completed, failed FROM batch_state") == [(8, 2)]
    assert any(
        "ingested: 8 replies, 0 to retry, 2 above the body cap (max_body_bytes)" in line
        for line in lines
    )


def test_the_key_of_an_oversized_line_is_read_from_its_ends():
    head = b'{"id": "batch_req_1", "custom_id": "k1", "response": {"body": "xxxx'
    assert Oversized(10**6, head, b'xx"}}').key("custom_id") == "k1"
    # Gemini's file lines name their key last.
    tail = b'xxxx"}]}}, "key": "k2"}'
    assert Oversized(10**6, b'{"response": {"candidates": [{"text": "xx', tail).key("key") == "k2"
    # Reply text that spells a key is escaped inside its string: never taken for one.
    posing = b'{"response": {"text": "\\"custom_id\\": \\"evil\\" xxxx'
    assert Oversized(10**6, posing, b"xx").key("custom_id") is None

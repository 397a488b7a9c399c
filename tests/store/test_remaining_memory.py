"""What is left of a plan streams for every model at once within the run's DuckDB memory cap.

`ibias demo` (seven models, 142,240 trials with prompts of a few kB) once died with DuckDB's
"Out of Memory Error" before its first request: each model's sorted window of wide rows was
held whole while it streamed, and seven of them exceeded the run's cap.
"""

from __future__ import annotations

from pathlib import Path

from ibias.store.db import open_store
from ibias.store.plans import StoredPlan, remaining

MODELS = 7
TRIALS_PER_MODEL = 20_000
PROMPT_BYTES = 1_500  # 7 x 20,000 specs x 1.5 kB = 210 MB, cap 192 MB


def test_every_model_streams_at_once_under_a_tight_memory_cap(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb", create=True)
    try:
        con.execute("SET memory_limit = '192MB'").fetchall()  # before planning, as a run does
        # Model-major, as the planner writes them: each model's trials are contiguous rowids.
        # Every trial has a spec of its own (the worst case: no texts shared between models,
        # as in a one-model plan), so the specs alone exceed the cap.
        for start in range(0, MODELS * TRIALS_PER_MODEL, 5_000):  # one insert per planner batch
            con.execute(
                "INSERT INTO trial_specs SELECT printf('s%08d', i), '{}', '{}', "
                "json_array(json_object('role', 'user', 'content', "
                f"repeat(chr(97 + (i % 26)::INTEGER), {PROMPT_BYTES}))) "
                f"FROM range({start}, {start + 5_000}) t(i)"
            ).fetchall()
            con.execute(
                "INSERT INTO trial_rows SELECT printf('k%08d', i), 'r1', 'word_association', "
                f"printf('m%d', i // {TRIALS_PER_MODEL}), 'en', printf('s%08d', i), '{{}}', 0 "
                f"FROM range({start}, {start + 5_000}) t(i)"
            ).fetchall()
        plan = StoredPlan(plan_hash="h", runs=("r1",), complete=True, reused=False)
        streams = [remaining(con.cursor(), plan, f"m{m}") for m in range(MODELS)]
        seen = [0] * MODELS
        live = set(range(MODELS))
        while live:  # round robin, as the scheduler's feeders pull them
            for m in sorted(live):
                batch = next(streams[m], None)
                if batch is None:
                    live.discard(m)
                    continue
                assert all(p.model_id == f"m{m}" for p in batch)
                assert all(len(p.messages[0]["content"]) == PROMPT_BYTES for p in batch)
                seen[m] += len(batch)
        assert seen == [TRIALS_PER_MODEL] * MODELS
    finally:
        con.close()


def test_only_windows_with_a_trial_left_are_read_and_nothing_is_missed(tmp_path: Path) -> None:
    """A resume of an almost finished plan: the trials left sit in a few windows (some at a
    window's edge), the other windows are fully answered. `remaining` gives exactly the trials
    without a response, in plan order, whichever windows hold them."""
    con = open_store(tmp_path / "s.duckdb", create=True)
    try:
        n = 100
        con.execute(
            "INSERT INTO trial_specs SELECT printf('s%04d', i), '{}', '{}', "
            "json_array(json_object('role', 'user', 'content', printf('q%d', i))) "
            f"FROM range({n}) t(i)"
        ).fetchall()
        con.execute(
            "INSERT INTO trial_rows SELECT printf('k%04d', i), 'r1', 'word_association', "
            f"'m', 'en', printf('s%04d', i), '{{}}', 0 FROM range({n}) t(i)"
        ).fetchall()
        left = {0, 7, 8, 9, 63, 64, 99}  # windows of 8: 0, 0, 1, 1, 7, 8, 12 (of 13)
        con.execute(
            "INSERT INTO responses (trial_key, run_id, model_id, received_at) "
            "SELECT printf('k%04d', i), 'r1', 'm', now() FROM range(?) t(i) "
            "WHERE NOT list_contains(?, i)",
            [n, sorted(left)],
        ).fetchall()
        plan = StoredPlan(plan_hash="h", runs=("r1",), complete=True, reused=False)
        for window in (8, 64, 1 << 17):
            found = [p for batch in remaining(con.cursor(), plan, "m", window=window, batch=3)
                     for p in batch]  # fmt: skip
            assert [p.trial_key for p in found] == [f"k{i:04d}" for i in sorted(left)]
            assert [p.messages[0]["content"] for p in found] == [f"q{i}" for i in sorted(left)]
    finally:
        con.close()

